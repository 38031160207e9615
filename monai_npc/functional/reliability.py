"""Reliability map in ``[0, 1]``: how well the kept filter pairs' responses agree between the two images.

For filter pair ``k`` at a location, let ``a = ||psi_k^T x||`` (warped moving image) and
``b = ||phi_k^T y||`` (fixed image). The span is invariant under the local transformation when
``a = b`` (paper Appendix B); the network's normalised residual is ``r_bar^2 = (a - b)^2 / (a b)``.
The per-pair **agreement** is

    ``g_k = 2 a b / (a^2 + b^2) = 2 / (2 + r_bar_k^2)``  in ``[0, 1]``,

1 when both images show the pair's content with the same strength (the phase difference, i.e. the
displacement, is measured), 0.5 when one response is ``2 + sqrt(3) ~ 3.7`` times the other, and 0
when the content is in one image only (change, occlusion, no data). The **reliability** at a
location is the top-K-mask-weighted mean of ``g_k`` over the kept pairs of the last ODE step. It
depends only on the ratio of the two response magnitudes, so it has the same bounded scale for
every NPC model and image pair (the unnormalised mean residual it replaces ranged from 0.1 to 77).
"""

from __future__ import annotations

from typing import List, Optional

import torch
import torch.nn.functional as F

__all__ = ["pair_agreement", "reliability_map"]


def pair_agreement(residual: torch.Tensor) -> torch.Tensor:
    """Per-pair agreement ``2 / (2 + r_bar^2)`` in ``[0, 1]`` of the normalised residual ``r_bar^2 >= 0``."""
    return 2.0 / (2.0 + residual.clamp_min(0.0))


def reliability_map(residual: torch.Tensor, mask: torch.Tensor, size: Optional[List[int]] = None, eps: float = 1e-8) -> torch.Tensor:
    """Per-location reliability in ``[0, 1]``: ``sum_k m_k g_k / sum_k m_k`` with ``g_k = 2 / (2 + r_bar_k^2)``.

    Args:
        residual: ``(B, C, *grid)`` normalised residual ``r_bar^2`` of one ODE step (the last one for
            ``register`` outputs).
        mask: ``(B, C, *grid)`` top-K mask of the same step (soft weights in ``[0, 1]``).
        size: optional full image size; the map is then linearly upsampled to it (stays in ``[0, 1]``).
    Returns:
        ``(B, 1, *grid)`` or ``(B, 1, *size)``; 1 = every kept pair sees the same content in both
        images, 0 = none does (see the module docstring). Locations with no kept pair get 0.
    """
    if residual.shape != mask.shape:
        raise ValueError(f"reliability_map: residual {tuple(residual.shape)} and mask {tuple(mask.shape)} must have the same shape.")
    rel = (pair_agreement(residual) * mask).sum(1, keepdim=True) / (mask.sum(1, keepdim=True) + eps)
    if size is not None:
        mode = ("linear", "bilinear", "trilinear")[len(size) - 1]
        rel = F.interpolate(rel, size=size, mode=mode, align_corners=False)
    return rel.clamp(0.0, 1.0)
