"""Bilinear interaction of paired responses: polar features and the normalised invariance residual."""

from __future__ import annotations

from typing import Optional, Tuple

import torch
from torch import nn

from monai_npc.functional.interaction import interaction_features

__all__ = ["PairInteraction"]


class PairInteraction(nn.Module):
    """``(a, b) -> (features, residual)`` for responses ``a, b`` of shape ``(B, 2, C, *grid)``.

    ``features`` is ``(B, 3, C, *grid)``: ``(cos theta_k, sin theta_k, |z_k|)`` of the bilinear
    interaction ``z_k``; ``residual`` is the normalised residual ``r_bar_k^2`` ``(B, C, *grid)``.
    No parameters.
    """

    def __init__(self, eps: float = 1e-6) -> None:
        super().__init__()
        self.eps = eps

    def response_norm(self, b: torch.Tensor) -> torch.Tensor:
        """``sqrt(||b_k||^2 + eps)`` ``(B, C, *grid)``: pass it to ``forward`` when ``b`` is reused."""
        return torch.sqrt((b * b).sum(1) + self.eps)

    def forward(self, a: torch.Tensor, b: torch.Tensor, b_norm: Optional[torch.Tensor] = None) -> Tuple[torch.Tensor, torch.Tensor]:
        return interaction_features(a, b, 1, self.eps, b_norm)
