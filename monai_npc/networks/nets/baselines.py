"""Baselines in NPCNet's API: ``(B, 2, *S)`` moving + fixed -> displacement ``(B, D, *S)`` in voxels."""

from __future__ import annotations

from typing import Sequence

import torch
from monai.networks.nets import VoxelMorph, VoxelMorphUNet
from torch import nn

from monai_npc.functional.phase_correlation import phase_correlation

__all__ = ["VoxelMorphNet", "PhaseCorrelationNet"]


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
    """

    def __init__(self, upsample_factor: int = 20) -> None:
        super().__init__()
        self.upsample_factor = upsample_factor

    def forward(self, image: torch.Tensor) -> torch.Tensor:
        if image.dim() < 3 or image.shape[1] != 2:
            raise ValueError(f"PhaseCorrelationNet expects (B, 2, *S) moving + fixed, got shape {tuple(image.shape)}.")
        shift = phase_correlation(image[:, 0:1], image[:, 1:2], self.upsample_factor)  # (B, D)
        spatial = image.shape[2:]
        return shift.view(shift.shape + (1,) * len(spatial)).expand((-1, -1) + tuple(spatial)).contiguous()
