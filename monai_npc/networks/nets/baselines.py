"""Baselines in NPCNet's API: ``(B, 2, *S)`` moving + fixed -> displacement ``(B, D, *S)`` in voxels."""

from __future__ import annotations

from typing import Sequence

import torch
from torch import nn

from monai_npc.functional.phase_correlation import phase_correlation

__all__ = ["VoxelMorphNet", "PhaseCorrelationNet", "DemonsNet"]


class VoxelMorphNet(nn.Module):
    """MONAI's VoxelMorph (``VoxelMorphUNet`` backbone) with NPCNet's input/output convention.

    Args:
        spatial_dims: 2 or 3.
        channels: encoder/decoder widths of the UNet (VoxelMorph's default ``(16, 32, 32, 32, 32, 32)``).
        final_conv_channels: widths of the final convolutions (default ``(16, 16)``).
        integration_steps: scaling-and-squaring steps (VoxelMorph-diff: 7); 0 for a plain displacement.
    """

    def __init__(
        self,
        spatial_dims: int = 2,
        channels: Sequence[int] = (16, 32, 32, 32, 32, 32),
        final_conv_channels: Sequence[int] = (16, 16),
        integration_steps: int = 7,
    ) -> None:
        from monai.networks.nets import VoxelMorph, VoxelMorphUNet  # imported here: MONAI's import costs seconds

        super().__init__()
        backbone = VoxelMorphUNet(
            spatial_dims=spatial_dims,
            in_channels=2,
            unet_out_channels=final_conv_channels[0],
            channels=tuple(channels),
            final_conv_channels=tuple(final_conv_channels),
        )
        self.net = VoxelMorph(backbone=backbone, integration_steps=integration_steps, spatial_dims=spatial_dims)

    def forward(self, image: torch.Tensor) -> torch.Tensor:
        if image.dim() < 4 or image.shape[1] != 2:
            raise ValueError(f"VoxelMorphNet expects (B, 2, *S) moving + fixed, got shape {tuple(image.shape)}.")
        return self.net(image[:, 0:1], image[:, 1:2])[1]


class PhaseCorrelationNet(nn.Module):
    """Classical global phase correlation: a constant (translation) displacement field; no parameters.

    Args:
        upsample_factor: sub-pixel precision ``1 / upsample_factor`` voxel.
        window: Tukey ``alpha`` of the apodisation (mean removed first), or ``None`` for none
            (see :func:`~monai_npc.functional.phase_correlation`).
    """

    def __init__(self, upsample_factor: int = 20, window: float | None = None) -> None:
        super().__init__()
        self.upsample_factor = upsample_factor
        self.window = window

    def forward(self, image: torch.Tensor) -> torch.Tensor:
        if image.dim() < 3 or image.shape[1] != 2:
            raise ValueError(f"PhaseCorrelationNet expects (B, 2, *S) moving + fixed, got shape {tuple(image.shape)}.")
        shift = phase_correlation(image[:, 0:1], image[:, 1:2], self.upsample_factor, window=self.window)  # (B, D)
        spatial = image.shape[2:]
        return shift.view(shift.shape + (1,) * len(spatial)).expand((-1, -1) + tuple(spatial)).contiguous()


class DemonsNet(nn.Module):
    """SimpleITK's fast symmetric-forces demons as a classical baseline in the same API (2-D or 3-D).

    Each pair is registered independently on the voxel grid (spacing 1), so the returned
    displacement is in voxels, MONAI ``Warp`` convention (SimpleITK's field maps fixed points to
    moving points with components in ``x, y[, z]`` order; they are reversed to array-axis order).

    Args:
        iterations: demons iterations.
        smoothing: standard deviation (voxels) of the Gaussian smoothing of the field.
    """

    def __init__(self, iterations: int = 100, smoothing: float = 1.5) -> None:
        super().__init__()
        self.iterations = iterations
        self.smoothing = smoothing

    @torch.no_grad()
    def forward(self, image: torch.Tensor) -> torch.Tensor:
        import SimpleITK as sitk

        if image.dim() < 4 or image.shape[1] != 2:
            raise ValueError(f"DemonsNet expects (B, 2, *S) moving + fixed, got shape {tuple(image.shape)}.")
        out = []
        for pair in image.detach().cpu().double().numpy():
            moving, fixed = sitk.GetImageFromArray(pair[0]), sitk.GetImageFromArray(pair[1])
            demons = sitk.FastSymmetricForcesDemonsRegistrationFilter()
            demons.SetNumberOfIterations(self.iterations)
            demons.SetStandardDeviations(self.smoothing)
            field = sitk.GetArrayFromImage(demons.Execute(fixed, moving))  # (*S, D), components x, y[, z]
            out.append(torch.from_numpy(field[..., ::-1].copy()).movedim(-1, 0))
        return torch.stack(out).to(image.dtype).to(image.device)
