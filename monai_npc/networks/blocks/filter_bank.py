"""Paired learned filter banks (moving ``Psi``, fixed ``Phi``) applied by normalised strided convolution."""

from __future__ import annotations

from typing import Tuple

import torch
from torch import nn

from monai_npc.functional.filter_pairs import fourier_filter_pairs, pair_responses, unit_normalize_filters

__all__ = ["PairedFilterBank"]


class PairedFilterBank(nn.Module):
    """Two banks of ``num_pairs`` filter pairs of size ``kernel_size^D``: ``psi`` for the moving image, ``phi`` for the fixed.

    Each filter is rescaled to unit l2 norm at use time; patches are standardised (zero mean, unit
    variance), so responses are invariant to intensity offset and (positive) scale.

    Args:
        spatial_dims: 1, 2 or 3.
        num_pairs: ``C``, the number of filter pairs per bank.
        kernel_size: ``k_f``, the filter width in voxels.
        stride: ``s``, the coarse-grid stride in voxels (the grid is ``floor(S / s)``).
        init: ``"fourier"`` (cos/sin pairs of the lowest frequencies, both banks identical, so the
            identity transform is matched exactly at start) or ``"random"`` (Gaussian).
        padding_mode: padding for the border patches: ``"reflect"``, ``"replicate"`` or ``"zeros"``.
        eps: added to the patch variance (intensity^2 units); flat patches respond 0.
            Patches are standardised, so responses are bounded by ``sqrt(kernel_size^D)``.

    Shapes: ``moving_responses(x)`` with ``x`` ``(B, 1, *S)`` returns ``(B, 2, C, *grid)`` (pair axis first).
    """

    def __init__(
        self,
        spatial_dims: int = 2,
        num_pairs: int = 128,
        kernel_size: int = 16,
        stride: int = 4,
        init: str = "fourier",
        padding_mode: str = "reflect",
        eps: float = 1e-5,
    ) -> None:
        super().__init__()
        if spatial_dims not in (1, 2, 3):
            raise ValueError(f"spatial_dims must be 1, 2 or 3, got {spatial_dims}.")
        if kernel_size < stride or stride < 1:
            raise ValueError(f"need 1 <= stride <= kernel_size, got stride {stride}, kernel_size {kernel_size}.")
        if padding_mode not in ("reflect", "replicate", "zeros"):
            raise ValueError(f"padding_mode must be reflect, replicate or zeros, got {padding_mode!r}.")
        shape = (num_pairs, 2) + (kernel_size,) * spatial_dims
        if init == "fourier":
            w = fourier_filter_pairs(num_pairs, kernel_size, spatial_dims)
            psi, phi = w.clone(), w.clone()
        elif init == "random":
            psi, phi = torch.randn(shape), torch.randn(shape)
        else:
            raise ValueError(f"init must be 'fourier' or 'random', got {init!r}.")
        self.psi = nn.Parameter(unit_normalize_filters(psi))
        self.phi = nn.Parameter(unit_normalize_filters(phi))
        self.spatial_dims = spatial_dims
        self.num_pairs = num_pairs
        self.kernel_size = kernel_size
        self.stride = stride
        self.padding_mode = padding_mode
        self.eps = eps

    def moving_responses(self, moving: torch.Tensor) -> torch.Tensor:
        """``psi_k^T x_p`` for every pair and coarse location: ``(B, 2, C, *grid)``."""
        return pair_responses(moving, unit_normalize_filters(self.psi), self.stride, self.padding_mode, self.eps)

    def fixed_responses(self, fixed: torch.Tensor) -> torch.Tensor:
        """``phi_k^T y_p`` for every pair and coarse location: ``(B, 2, C, *grid)``."""
        return pair_responses(fixed, unit_normalize_filters(self.phi), self.stride, self.padding_mode, self.eps)

    def forward(self, moving: torch.Tensor, fixed: torch.Tensor) -> Tuple[torch.Tensor, torch.Tensor]:
        return self.moving_responses(moving), self.fixed_responses(fixed)
