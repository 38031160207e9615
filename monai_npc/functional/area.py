"""How much a field changes the area (2-D) or volume (3-D) of a label it carries.

Fields are in voxels, MONAI ``Warp`` convention: the carried indicator is ``indicator(x + ddf(x))``. The myocardium
is nearly incompressible: a field that carries it into a larger or smaller region than it had moves the tissue
wrongly, even where the label's boundary lies right.
"""

from __future__ import annotations

import torch

from .warp import identity_grid, sample_at

__all__ = ["carried_area_change"]


def carried_area_change(indicator: torch.Tensor, ddf: torch.Tensor) -> torch.Tensor:
    """Relative change of each channel's area under the field: ``(sum_x indicator(x + ddf(x))) / (sum_x indicator(x)) - 1``.

    Args:
        indicator: ``(B, C, *S)`` label indicators (0-1) of the moving image.
        ddf: ``(B, D, *S)`` voxels, ``D = len(S)``.

    Returns:
        ``(B, C)``; 0 for a channel that is empty (nothing to carry). Differentiable in ``ddf`` (bilinear sampling).
    """
    if indicator.shape[0] != ddf.shape[0] or indicator.shape[2:] != ddf.shape[2:]:
        raise ValueError(f"indicator {tuple(indicator.shape)} and ddf {tuple(ddf.shape)} must share batch and spatial size.")
    points = identity_grid(list(ddf.shape[2:]), ddf.device, ddf.dtype).unsqueeze(0) + ddf
    carried = sample_at(indicator.to(ddf.dtype), points, "bilinear", "zeros").flatten(2).sum(2)
    area = indicator.to(ddf.dtype).flatten(2).sum(2)
    return torch.where(area > 0, carried / area.clamp_min(1.0) - 1.0, torch.zeros_like(area))
