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

    Args:
        eps: added to the squared response norms (keeps flat patches finite).
        pair_dim: the axis of size 2 (``1`` above). :class:`~monai_npc.networks.blocks.NPCStage`
            uses ``-2`` with location-major responses ``(B, *grid, 2, C)``, for which ``features`` is
            ``(B, *grid, 3, C)`` and ``residual`` ``(B, *grid, C)``: the pair index is then the
            contiguous axis.
    """

    def __init__(self, eps: float = 1e-6, pair_dim: int = 1) -> None:
        super().__init__()
        self.eps = eps
        self.pair_dim = pair_dim

    def response_norm(self, b: torch.Tensor) -> torch.Tensor:
        """``sqrt(||b_k||^2 + eps)`` (``b`` without the pair axis): pass it to ``forward`` when ``b`` is reused."""
        return torch.sqrt((b * b).sum(self.pair_dim) + self.eps)

    def forward(self, a: torch.Tensor, b: torch.Tensor, b_norm: Optional[torch.Tensor] = None) -> Tuple[torch.Tensor, torch.Tensor]:
        return interaction_features(a, b, self.pair_dim, self.eps, b_norm)
