"""A small 3-D network from through-plane evidence to a through-plane displacement, odd under reversing the slices."""

from __future__ import annotations

from typing import Sequence

import torch
import torch.nn.functional as F
from torch import nn

__all__ = ["ThroughPlaneHead"]


class ThroughPlaneHead(nn.Module):
    """Per-voxel evidence of whole stacks ``(N, C, H, W)`` -> a through-plane displacement ``(N, 1, H, W)`` (slices).

    Each stack is read as one volume ``(C, Z, H / pool, W / pool)`` (average-pooled in-plane: the through-plane
    motion is smooth on the scale of the heart's wall): a 3-D encoder (kernels ``3 x 3 x 3`` and ``1 x 3 x 3``), a
    coarser level at half that in-plane resolution with dilated in-plane kernels (an in-plane reach of about 40
    voxels: where in the heart a voxel lies), the two levels concatenated, a ``3 x 3 x 3`` layer and a ``1 x 1 x 1``
    output that starts at zero (an untrained head adds no motion). The output is upsampled bilinearly to ``H x W``.

    The head is odd under reversing a stack's slice order by construction: with ``o`` its output on the stack and
    ``o'`` on the reversed stack (rows reversed, the evidence channels permuted by ``reversed_channels``), it returns
    ``(o - reverse(o')) / 2``. So a stack ordered apex to base gets the same motion read the other way, and the
    direction comes from what the evidence shows, not from a slice's index.

    Args:
        in_channels: ``C``.
        reversed_channels: the permutation of the channels that gives the reversed stack's evidence
            (:data:`~monai_npc.functional.REVERSED_CHANNELS` for :func:`~monai_npc.functional.through_plane_evidence`).
        width: channels of the first level (the coarse level has twice as many).
        pool: in-plane average pooling before the first layer (voxels).
        negative_slope: LeakyReLU slope.
    """

    def __init__(self, in_channels: int, reversed_channels: Sequence[int], width: int = 16, pool: int = 4,
                 negative_slope: float = 0.1) -> None:
        super().__init__()
        if sorted(int(c) for c in reversed_channels) != list(range(in_channels)):
            raise ValueError(f"reversed_channels must be a permutation of 0..{in_channels - 1}, got {list(reversed_channels)}.")
        if width < 1 or pool < 1:
            raise ValueError(f"width and pool must be >= 1, got {width}, {pool}.")
        self.register_buffer("reversed_channels", torch.as_tensor([int(c) for c in reversed_channels]), persistent=False)
        self.pool = int(pool)

        def act() -> nn.Module:
            return nn.LeakyReLU(negative_slope)

        self.encoder = nn.Sequential(nn.Conv3d(in_channels, width, 3, padding=1), act(),
                                     nn.Conv3d(width, width, (1, 3, 3), padding=(0, 1, 1)), act())
        self.coarse = nn.Sequential(nn.Conv3d(width, 2 * width, 3, padding=1), act(),
                                    nn.Conv3d(2 * width, 2 * width, (1, 3, 3), padding=(0, 2, 2), dilation=(1, 2, 2)), act(),
                                    nn.Conv3d(2 * width, 2 * width, 3, padding=(1, 4, 4), dilation=(1, 4, 4)), act())
        self.decoder = nn.Sequential(nn.Conv3d(3 * width, width, 3, padding=1), act(), nn.Conv3d(width, 1, 1))
        nn.init.zeros_(self.decoder[-1].weight)
        nn.init.zeros_(self.decoder[-1].bias)

    def volume(self, x: torch.Tensor) -> torch.Tensor:
        """``(B, C, Z, h, w)`` pooled evidence volumes -> ``(B, 1, Z, h, w)``."""
        fine = self.encoder(x)
        coarse = F.interpolate(self.coarse(F.avg_pool3d(fine, (1, 2, 2), ceil_mode=True)), size=fine.shape[2:],
                               mode="trilinear", align_corners=False)
        return self.decoder(torch.cat([fine, coarse], 1))

    def forward(self, evidence: torch.Tensor, group: torch.Tensor, n_groups: int) -> torch.Tensor:
        """``evidence`` ``(N, C, H, W)`` of whole stacks batched slice by slice, ``group`` ``(N,)`` int64 (contiguous
        stacks, slices in order) -> ``(N, 1, H, W)`` through-plane displacement (slices)."""
        if evidence.dim() != 4 or evidence.shape[1] != self.reversed_channels.numel():
            raise ValueError(f"evidence must be (N, {self.reversed_channels.numel()}, H, W), got {tuple(evidence.shape)}.")
        size = evidence.shape[2:]
        pooled = F.avg_pool2d(evidence, self.pool, ceil_mode=True) if self.pool > 1 else evidence
        counts = torch.bincount(group, minlength=int(n_groups)).tolist()
        out = []
        for stack in pooled.split([c for c in counts if c > 0]):
            x = stack.movedim(0, 1)  # (C, Z, h, w)
            reversed_x = x[self.reversed_channels].flip(1)
            o, reversed_o = self.volume(torch.stack([x, reversed_x])).unbind(0)
            out.append((0.5 * (o - reversed_o.flip(1))).movedim(1, 0))  # (Z, 1, h, w)
        through = torch.cat(out)
        return F.interpolate(through, size=size, mode="bilinear", align_corners=False) if self.pool > 1 else through
