"""Residual top-K mask over the filter-pair axis."""

from __future__ import annotations

import torch
from torch import nn

from typing import Optional, Tuple

from monai_npc.functional.topk import soft_topk_mask_with_threshold

__all__ = ["ResidualTopKMask"]


class ResidualTopKMask(nn.Module):
    """Keep, at every location, the ``top_k`` pairs with the smallest normalised residual.

    Args:
        top_k: ``K``; ``K >= C`` gives the unmasked model (all ones).
        temperature: width of the soft mask in residual units (SOFT top-k, Xie et al. 2020).
        hard: exact 0/1 mask forward, soft-mask gradient backward (straight-through).
        iterations: safeguarded Newton steps for the threshold.

        warm_start: start the threshold search from ``init`` when given (the previous ODE step's
            threshold) instead of ``torch.topk``; the mask is the same to the search's tolerance.
        dim: the filter-pair axis of ``residual`` (``1`` for ``(B, C, *grid)``; ``-1`` for the
            location-major ``(B, *grid, C)`` that :class:`~monai_npc.networks.blocks.NPCStage` uses).

    ``forward(residual, init=None)`` with ``residual`` ``(B, C, *grid)`` returns ``(mask, threshold)``:
    the mask has the shape of ``residual`` and sums to ``min(K, C)`` over the pair axis; the
    threshold ``(B, 1, *grid)`` (size 1 along ``dim``) can be passed back as ``init`` at the next step.
    """

    def __init__(
        self,
        top_k: int = 64,
        temperature: float = 0.1,
        hard: bool = False,
        iterations: int = 2,
        warm_start: bool = True,
        dim: int = 1,
    ) -> None:
        super().__init__()
        if top_k < 1:
            raise ValueError(f"top_k must be >= 1, got {top_k}.")
        if temperature <= 0:
            raise ValueError(f"temperature must be > 0, got {temperature}.")
        self.top_k = top_k
        self.temperature = temperature
        self.hard = hard
        self.iterations = iterations
        self.warm_start = warm_start
        self.dim = dim

    def forward(self, residual: torch.Tensor, init: Optional[torch.Tensor] = None) -> Tuple[torch.Tensor, torch.Tensor]:
        start = init if self.warm_start else None
        return soft_topk_mask_with_threshold(residual, self.top_k, self.dim, self.temperature, self.hard, self.iterations, start)
