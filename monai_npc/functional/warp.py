"""Pull warp and Jacobian determinant of dense displacement fields (MONAI ``Warp`` convention).

A displacement field ``ddf`` has shape ``(B, D, *S)`` in voxel units; channel ``k`` is the
displacement along spatial axis ``k`` (the axis ``k + 2`` of the image tensor) and
``warp(img, ddf)(x) = img(x + ddf(x))``.
"""

from __future__ import annotations

from typing import List

import torch
import torch.nn.functional as F

__all__ = ["identity_grid", "sample_at", "warp_image", "jacobian_determinant", "determinant_from_gradients", "compose"]


def identity_grid(shape: List[int], device: torch.device, dtype: torch.dtype) -> torch.Tensor:
    """Voxel coordinates of a grid: ``(D, *shape)``, channel ``k`` = index along axis ``k``."""
    axes = [torch.arange(n, device=device, dtype=dtype) for n in shape]
    return torch.stack(torch.meshgrid(axes, indexing="ij"), 0)


def sample_at(image: torch.Tensor, points: torch.Tensor, mode: str = "bilinear", padding_mode: str = "border") -> torch.Tensor:
    """Sample ``image`` ``(B, C, *S)`` at voxel coordinates ``points`` ``(B, D, *P)`` (channel ``k`` = position
    along axis ``k``; any grid shape ``P``, for example a crop of the image's grid) -> ``(B, C, *P)``.

    ``mode`` and ``padding_mode`` as in :func:`warp_image`, which is ``sample_at(image, identity + ddf)``.
    1-D, 2-D and 3-D.
    """
    spatial = image.shape[2:]
    dims = len(spatial)
    if points.shape[1] != dims:
        raise ValueError(f"points must have {dims} channels for {dims} spatial dims, got {points.shape[1]}.")
    squeeze = dims == 1
    if squeeze:  # grid_sample has no 1-D mode: add a unit axis
        image = image.unsqueeze(-1)
        points = torch.cat([points.unsqueeze(-1), torch.zeros_like(points).unsqueeze(-1)], 1)
        spatial = image.shape[2:]
        dims = 2
    # grid_sample wants (B, *P, D) in [-1, 1] with the last spatial axis first (x = width)
    axes = [points[:, i] * (2.0 / max(spatial[i] - 1, 1)) - 1.0 for i in range(dims - 1, -1, -1)]
    out = F.grid_sample(image, torch.stack(axes, -1), mode=mode, padding_mode=padding_mode, align_corners=True)
    return out.squeeze(-1) if squeeze else out


def warp_image(
    image: torch.Tensor, ddf: torch.Tensor, mode: str = "bilinear", padding_mode: str = "border"
) -> torch.Tensor:
    """Resample ``image`` ``(B, C, *S)`` at ``x + ddf(x)``; ``ddf`` is ``(B, D, *S)`` in voxels.

    ``mode``: ``"bilinear"`` (linear in every axis; use for images) or ``"nearest"`` (labels).
    ``padding_mode``: ``"border"``, ``"zeros"`` or ``"reflection"`` as in ``torch.nn.functional.grid_sample``.
    Matches ``monai.networks.blocks.Warp`` (``align_corners=True``) and is TorchScript-compatible.
    """
    spatial = ddf.shape[2:]
    dims = len(spatial)
    if ddf.shape[1] != dims:
        raise ValueError(f"ddf must have {dims} channels for {dims} spatial dims, got {ddf.shape[1]}.")
    if image.shape[2:] != spatial:
        raise ValueError(f"image spatial shape {list(image.shape[2:])} differs from ddf's {list(spatial)}.")
    return sample_at(image, identity_grid(list(spatial), ddf.device, ddf.dtype).unsqueeze(0) + ddf, mode, padding_mode)


def jacobian_determinant(ddf: torch.Tensor) -> torch.Tensor:
    """``det(I + grad ddf)`` of ``x -> x + ddf(x)`` on the full voxel grid of ``ddf`` ``(B, D, *S)``.

    Derivatives are central differences in the interior and one-sided at the border
    (``torch.gradient``), in voxel units. Returns ``(B, *S)``. Supports 2-D and 3-D fields.
    """
    dims = ddf.dim() - 2
    if dims not in (2, 3) or ddf.shape[1] != dims:
        raise ValueError(f"ddf must be (B, D, *S) with D = 2 or 3 channels, got shape {tuple(ddf.shape)}.")
    return determinant_from_gradients(list(torch.gradient(ddf, dim=list(range(2, dims + 2)))))


def determinant_from_gradients(grads: List[torch.Tensor]) -> torch.Tensor:
    """``det(I + G)`` ``(B, *S)`` with ``G[r][c] = grads[c][:, r]``: ``grads[c]`` ``(B, D, *S)`` the derivative of
    every component along axis ``c`` (voxels per voxel), ``D = len(grads)`` 2 or 3."""
    dims = len(grads)
    j = [[grads[c][:, r] + (1.0 if r == c else 0.0) for c in range(dims)] for r in range(dims)]
    if dims == 2:
        return j[0][0] * j[1][1] - j[0][1] * j[1][0]
    return (
        j[0][0] * (j[1][1] * j[2][2] - j[1][2] * j[2][1])
        - j[0][1] * (j[1][0] * j[2][2] - j[1][2] * j[2][0])
        + j[0][2] * (j[1][0] * j[2][1] - j[1][1] * j[2][0])
    )


def compose(first: torch.Tensor, then: torch.Tensor) -> torch.Tensor:
    """The displacement of ``x`` through ``then`` and then ``first``: ``then(x) + first(x + then(x))``.

    Both ``(Z, 2, H, W)`` in-plane voxels (Warp convention: a field maps a point of the fixed
    frame to its point in the moving frame). With ``then`` from registering frame ``t-1`` onto
    ``t`` and ``first`` the field of frame ``t-1`` to the reference, the result is the field of
    frame ``t`` to the reference. Outside the grid ``first`` takes its border values.
    """
    return then + warp_image(first, then, "bilinear", "border")
