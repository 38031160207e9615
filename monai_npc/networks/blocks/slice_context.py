"""Through-plane readout of one NPC stage over the slices of whole stacks."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

__all__ = ["SliceContextHead"]


class SliceContextHead(nn.Module):
    """Evidence of a slice and its neighbours -> a 3-component velocity correction on the coarse grid.

    ``evidence`` ``(N, *grid, 3, F)`` channel-last, one row per slice of a batch of whole stacks: ``F`` features of
    each of the three pairings (moving slice ``z - 1``, fixed slice ``z``), (``z``, ``z``), (``z + 1``, ``z``), in
    that order (in :class:`~monai_npc.networks.nets.SliceContextNPC` the decoder's ``MLP_z`` embedding of the
    pairing's masked polar features and its masked mean residual, ``F = G + 1``).
    ``h = act(W_e evidence)``; through-plane mixing with kernel 3 over the stack's slices,
    ``h = act(W_m [h(z - 1), h(z), h(z + 1)])`` (``previous`` / ``following`` give the neighbours' rows, replicated
    at the stack's ends); ``o = conv3x3(h)`` ``(N, 3, *grid)``.

    The head is equivariant to reversing the slice order by construction: ``o'`` is ``o`` of the reversed stack
    (pairings and neighbours swapped); the output is ``((o_0 - o'_0) / 2, (o_12 + o'_12) / 2)``: channel 0 the
    through-plane velocity (slices), odd under the reversal, so it comes from which neighbour matches, never from a
    learned constant; channels 1-2 an in-plane correction (voxels), even. The output convolution starts at exactly
    zero, so an untrained head changes nothing: the network it sits in starts as the 2-D NPC.

    Args:
        features: ``F``, per pairing.
        channels: hidden width.
        negative_slope: LeakyReLU slope.
    """

    def __init__(self, features: int, channels: int = 32, negative_slope: float = 0.2) -> None:
        super().__init__()
        if features < 1 or channels < 1:
            raise ValueError(f"features and channels must be >= 1, got {features}, {channels}.")
        self.embed = nn.Linear(3 * features, channels)
        self.mix = nn.Linear(3 * channels, channels)
        self.out = nn.Conv2d(channels, 3, 3, padding=1)
        nn.init.zeros_(self.out.weight)
        nn.init.zeros_(self.out.bias)
        self.negative_slope = negative_slope

    def forward(self, evidence: torch.Tensor, previous: torch.Tensor, following: torch.Tensor) -> torch.Tensor:
        """``evidence`` ``(N, gh, gw, 3, F)``, ``previous`` / ``following`` ``(N,)`` int64 rows -> ``(N, 3, gh, gw)``."""
        n, width = evidence.shape[0], self.embed.out_features
        # the embedding of the evidence as given and reversed (pairings swapped) in one product: the reversed one is
        # the same linear map with its three pairing blocks swapped
        weight = self.embed.weight.view(width, 3, -1)
        both = F.linear(evidence.flatten(-2), torch.cat([weight, weight.flip(1)]).flatten(1), self.embed.bias.repeat(2))
        h = F.leaky_relu(torch.cat(both.split(width, -1)), self.negative_slope)  # (2N, gh, gw, channels)
        before, after = torch.cat([previous, following + n]), torch.cat([following, previous + n])
        h = F.leaky_relu(self.mix(torch.cat([h[before], h, h[after]], -1)), self.negative_slope)
        o, reversed_o = self.out(h.movedim(-1, 1)).split(n)
        return torch.cat([(o[:, :1] - reversed_o[:, :1]) * 0.5, (o[:, 1:] + reversed_o[:, 1:]) * 0.5], 1)
