"""A raised-cosine window that takes a field smoothly to zero at a grid's border."""

from __future__ import annotations

import math
from typing import Sequence

import torch

__all__ = ["taper_window"]


def taper_window(shape: Sequence[int], margin: int) -> torch.Tensor:
    """``(H, W)`` weight: 1 inside, falling to 0 at the border over ``margin`` voxels (raised cosine).

    Multiplying a smooth field by it keeps the field smooth and makes it vanish at the window's
    edge, so a window's field pasted into a larger grid with identity outside has no seam.
    """
    axes = []
    for n in shape:
        d = torch.minimum(torch.arange(n, dtype=torch.float64), torch.arange(n - 1, -1, -1, dtype=torch.float64))
        t = (d / max(margin, 1)).clamp(0, 1) if margin > 0 else torch.ones(n, dtype=torch.float64)
        axes.append(0.5 - 0.5 * torch.cos(math.pi * t))
    return axes[0][:, None] * axes[1][None, :]
