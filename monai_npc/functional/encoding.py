"""NeRF-style sinusoidal positional encoding of a regular grid."""

from __future__ import annotations

import math
from typing import List, Optional

import torch

__all__ = ["positional_encoding"]


def positional_encoding(
    shape: List[int],
    num_channels: int,
    max_frequency: Optional[float] = None,
    device: Optional[torch.device] = None,
    dtype: torch.dtype = torch.float32,
) -> torch.Tensor:
    """Sinusoidal encoding ``gamma`` of the grid coordinates: shape ``(num_channels, *shape)``.

    Coordinates run over ``[-1, 1]`` along every axis. Each axis gets ``L = num_channels / (2 D)``
    frequencies ``pi * f_l``, ``f_l`` geometrically spaced from 1 to ``max_frequency`` cycles per
    unit (default: the grid's Nyquist limit ``(min(shape) - 1) / 2``), and a ``sin`` and a ``cos``
    channel per frequency. Channel order: axis, then frequency, then (sin, cos).
    """
    dims = len(shape)
    if num_channels % (2 * dims) != 0:
        raise ValueError(f"num_channels ({num_channels}) must be a multiple of 2 * spatial dims ({2 * dims}).")
    n_freq = num_channels // (2 * dims)
    f_max = max_frequency if max_frequency is not None else max((min(shape) - 1) / 2.0, 1.0)
    if n_freq > 1:
        expo = torch.arange(n_freq, device=device, dtype=torch.float64) / (n_freq - 1)
        freqs = torch.exp(expo * math.log(f_max))
    else:
        freqs = torch.ones(1, dtype=torch.float64, device=device)
    coords = torch.meshgrid(
        [torch.linspace(-1.0, 1.0, n, device=device, dtype=torch.float64) for n in shape], indexing="ij"
    )
    chans: List[torch.Tensor] = []
    for c in coords:
        arg = math.pi * freqs.view([n_freq] + [1] * dims) * c.unsqueeze(0)  # (L, *shape)
        chans.append(torch.stack([torch.sin(arg), torch.cos(arg)], 1).reshape([2 * n_freq] + shape))
    return torch.cat(chans, 0).to(dtype)
