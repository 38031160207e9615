"""One evaluation of the NPC model ``M(x, y)``: filter pairs -> interaction -> top-K mask -> decoder."""

from __future__ import annotations

from typing import List, Optional, Tuple

import torch
import torch.nn.functional as F
from torch import nn

from .decoder import PositionalEncodingDecoder
from .filter_bank import PairedFilterBank
from .interaction import PairInteraction
from .topk import ResidualTopKMask

__all__ = ["NPCStage"]


class NPCStage(nn.Module):
    """The NPC model of one cascade stage, evaluated once per ODE step.

    Args:
        spatial_dims: 1, 2 or 3.
        kernel_size: filter width ``k_f`` (voxels).
        stride: coarse-grid stride ``s`` (voxels).
        num_pairs: ``C`` filter pairs per bank.
        top_k: ``K`` pairs kept per location (``K >= C``: unmasked).
        gate_dim, hidden_dim, num_pe, head, head_channels: decoder sizes (:class:`PositionalEncodingDecoder`).
        mask_temperature, hard_mask: top-K mask options (:class:`ResidualTopKMask`).
        init, padding_mode: filter-bank options (:class:`PairedFilterBank`).

    Call :meth:`prepare` once per image pair with the fixed image (its responses, their norms and the gated
    positional encoding do not change across steps), then ``forward(moving_warped, *context)``
    at every step. ``forward`` returns ``(velocity, residual, mask, threshold)``: the displacement
    update ``(B, D, *S)`` in voxels on the full grid, the normalised residual and the mask, each
    ``(B, C, *grid)``, and the mask's threshold ``(B, 1, *grid)``, which the next step may pass
    back as ``threshold`` to warm-start the top-K search.

    Internally every location's pairs are contiguous: responses are ``(B, *grid, 2, C)``, features
    ``(B, *grid, 3C)`` feed the decoder's matrix products directly, and the returned residual,
    mask and threshold are ``(B, C, *grid)`` views of that memory.
    """

    def __init__(
        self,
        spatial_dims: int = 2,
        kernel_size: int = 16,
        stride: int = 4,
        num_pairs: int = 128,
        top_k: int = 64,
        gate_dim: int = 128,
        hidden_dim: int = 128,
        num_pe: int = 256,
        head: str = "unet",
        head_channels: int = 16,
        mask_temperature: float = 0.1,
        hard_mask: bool = False,
        init: str = "fourier",
        padding_mode: str = "reflect",
    ) -> None:
        super().__init__()
        self.filters = PairedFilterBank(spatial_dims, num_pairs, kernel_size, stride, init, padding_mode)
        self.interaction = PairInteraction(pair_dim=-2)
        self.mask = ResidualTopKMask(top_k, mask_temperature, hard_mask, dim=-1)
        self.decoder = PositionalEncodingDecoder(
            spatial_dims, num_pairs, hidden_dim, gate_dim, num_pe, head, head_channels
        )
        self.mode = ("linear", "bilinear", "trilinear")[spatial_dims - 1]
        self.masked = top_k < num_pairs

    def prepare(self, fixed: torch.Tensor) -> Tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
        """Step-invariant context for a fixed image ``(B, 1, *S)``.

        Returns ``(fixed_responses (B, *grid, 2, C), their norms (B, *grid, C), gamma (1, n_pe, *grid),
        gamma_g (1, G, *grid))``; the last two in channel-last memory.
        """
        b = self.filters.fixed_responses(fixed).movedim((1, 2), (-2, -1))
        b_norm = self.interaction.response_norm(b)
        gamma, gate = self.decoder.encoding(list(b.shape[1:-2]), b)
        return b, b_norm, _channel_last_memory(gamma), _channel_last_memory(gate)

    def forward(
        self,
        moving: torch.Tensor,
        fixed_responses: torch.Tensor,
        fixed_norm: torch.Tensor,
        gamma: torch.Tensor,
        gate: torch.Tensor,
        threshold: Optional[torch.Tensor] = None,
    ) -> Tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
        a, features, residual, mask, threshold = self.respond(moving, fixed_responses, fixed_norm, threshold)
        velocity = self.decode(features, gamma, gate, moving.shape[2:])
        return velocity, residual.movedim(-1, 1), mask.movedim(-1, 1), threshold.movedim(-1, 1)

    def respond(
        self, moving: torch.Tensor, fixed_responses: torch.Tensor, fixed_norm: torch.Tensor, threshold: Optional[torch.Tensor] = None
    ) -> Tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
        """The first half of :meth:`forward`, location-major: ``(a, features, residual, mask, threshold)`` with the
        moving responses ``a`` ``(B, *grid, 2, C)``, the masked polar features ``(B, *grid, 3, C)``, the residual and
        the mask ``(B, *grid, C)`` and the threshold ``(B, *grid, 1)`` (``threshold`` given as ``(B, 1, *grid)``)."""
        a = self.filters.moving_responses(moving).movedim((1, 2), (-2, -1))  # (B, *grid, 2, C)
        features, residual = self.interaction(a, fixed_responses, fixed_norm)  # (B, *grid, 3, C), (B, *grid, C)
        if self.masked:
            if threshold is not None:
                threshold = threshold.movedim(1, -1)
            mask, threshold = self.mask(residual, threshold)
            features = features * mask.unsqueeze(-2)
        else:
            mask = torch.ones_like(residual)
            threshold = torch.full_like(residual.narrow(-1, 0, 1), float("inf"))
        return a, features, residual, mask, threshold

    def decode(self, features: torch.Tensor, gamma: torch.Tensor, gate: torch.Tensor, size: List[int],
               embedded: Optional[torch.Tensor] = None) -> torch.Tensor:
        """The second half of :meth:`forward`: masked features ``(B, *grid, 3, C)`` -> velocity ``(B, D, *size)`` (voxels);
        ``embedded``: the decoder's ``MLP_z`` of these features ``(B, *grid, G)`` when already computed."""
        coarse = self.decoder(features.flatten(-2).movedim(-1, 1), gamma, gate, embedded)
        return F.interpolate(coarse, size=size, mode=self.mode, align_corners=False).contiguous()


def _channel_last_memory(x: torch.Tensor) -> torch.Tensor:
    """``x`` ``(B, C, *S)`` with the same values and the channel axis contiguous (``torch.channels_last`` in 2-D)."""
    return x.movedim(1, -1).contiguous().movedim(-1, 1)
