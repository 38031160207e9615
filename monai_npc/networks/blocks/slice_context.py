"""Through-plane readout of one NPC stage over the slices of whole stacks (issue 51 item 1)."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

__all__ = ["SliceContextHead"]


class SliceContextHead(nn.Module):
    """Evidence of a slice and its neighbours -> a 3-component velocity correction on the coarse grid.

    ``evidence`` ``(N, *grid, E)`` channel-last, one row per slice of a batch of whole stacks (``E = 3 G + 3`` in
    :class:`~monai_npc.networks.nets.SliceContextNPC`: the decoder's ``MLP_z`` embedding of the masked polar features
    of the pairings (moving slice ``z - 1``, fixed slice ``z``), (``z``, ``z``) and (``z + 1``, ``z``), and their
    masked mean residuals). ``h = act(W_e evidence)``; through-plane mixing with kernel 3 over the stack's slices,
    ``h = act(W_m [h(z - 1), h(z), h(z + 1)])`` (``previous`` / ``following`` give the neighbours' rows, replicated
    at the stack's ends); ``out = conv3x3(h)``, ``(N, 3, *grid)``: channel 0 the through-plane velocity (slices),
    channels 1-2 an in-plane correction (voxels). The output convolution starts at exactly zero, so an untrained
    head changes nothing: the network it sits in starts as the 2-D NPC.

    Args:
        evidence_dim: ``E``.
        channels: hidden width.
        negative_slope: LeakyReLU slope.
    """

    def __init__(self, evidence_dim: int, channels: int = 32, negative_slope: float = 0.2) -> None:
        super().__init__()
        if evidence_dim < 1 or channels < 1:
            raise ValueError(f"evidence_dim and channels must be >= 1, got {evidence_dim}, {channels}.")
        self.embed = nn.Linear(evidence_dim, channels)
        self.mix = nn.Linear(3 * channels, channels)
        self.out = nn.Conv2d(channels, 3, 3, padding=1)
        nn.init.zeros_(self.out.weight)
        nn.init.zeros_(self.out.bias)
        self.negative_slope = negative_slope

    def forward(self, evidence: torch.Tensor, previous: torch.Tensor, following: torch.Tensor) -> torch.Tensor:
        """``evidence`` ``(N, gh, gw, E)``, ``previous`` / ``following`` ``(N,)`` int64 rows -> ``(N, 3, gh, gw)``."""
        h = F.leaky_relu(self.embed(evidence), self.negative_slope)
        h = F.leaky_relu(self.mix(torch.cat([h[previous], h, h[following]], -1)), self.negative_slope)
        return self.out(h.movedim(-1, 1))
