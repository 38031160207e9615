"""Residual reliability map: how well the active filter pairs explain the local transformation."""

from __future__ import annotations

from typing import List, Optional

import torch
import torch.nn.functional as F

__all__ = ["reliability_map"]


def reliability_map(residual: torch.Tensor, mask: torch.Tensor, size: Optional[List[int]] = None, eps: float = 1e-8) -> torch.Tensor:
    """Per-location mean normalised residual of the active pairs: ``sum_k m_k r_k / sum_k m_k``.

    Args:
        residual: ``(B, C, *grid)`` normalised residual ``r_bar^2`` of one ODE step.
        mask: ``(B, C, *grid)`` top-K mask of the same step.
        size: optional full image size; the map is then linearly upsampled to it.
    Returns:
        ``(B, 1, *grid)`` or ``(B, 1, *size)``; low values mean the kept pairs match (reliable).
    """
    rel = (residual * mask).sum(1, keepdim=True) / (mask.sum(1, keepdim=True) + eps)
    if size is not None:
        mode = ("linear", "bilinear", "trilinear")[len(size) - 1]
        rel = F.interpolate(rel, size=size, mode=mode, align_corners=False)
    return rel
