"""Residual top-K mask over the filter-pair axis."""

from __future__ import annotations

import torch
from torch import nn

from monai_npc.functional.topk import soft_topk_mask

__all__ = ["ResidualTopKMask"]


class ResidualTopKMask(nn.Module):
    """Keep, at every location, the ``top_k`` pairs with the smallest normalised residual.

    Args:
        top_k: ``K``; ``K >= C`` gives the unmasked model (all ones).
        temperature: width of the soft mask in residual units (SOFT top-k, Xie et al. 2020).
        hard: exact 0/1 mask forward, soft-mask gradient backward (straight-through).
        iterations: safeguarded Newton steps for the threshold.

    ``forward(residual)`` with ``residual`` ``(B, C, *grid)`` returns a mask of the same shape that
    sums to ``min(K, C)`` over the pair axis.
    """

    def __init__(self, top_k: int = 64, temperature: float = 0.1, hard: bool = False, iterations: int = 2) -> None:
        super().__init__()
        if top_k < 1:
            raise ValueError(f"top_k must be >= 1, got {top_k}.")
        if temperature <= 0:
            raise ValueError(f"temperature must be > 0, got {temperature}.")
        self.top_k = top_k
        self.temperature = temperature
        self.hard = hard
        self.iterations = iterations

    def forward(self, residual: torch.Tensor) -> torch.Tensor:
        return soft_topk_mask(residual, self.top_k, 1, self.temperature, self.hard, self.iterations)
