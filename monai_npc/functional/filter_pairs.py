"""Filter pairs applied by strided, patch-normalised convolution.

A filter bank of ``C`` pairs is stored as a tensor of shape ``(C, 2, *kernel)``: pair ``k`` holds
the two filters whose responses form the 2-vector ``psi_k^T x`` of the paper (Eq. residual).
Responses are returned as ``(B, 2, C, *grid)``: axis 1 is the pair axis (first / second filter of
every pair, each a contiguous block), axis 2 the pair index and ``grid`` the coarse grid
``floor(n / stride)`` along every spatial axis.
"""

from __future__ import annotations

import math
from typing import List, Tuple

import torch
import torch.nn.functional as F

__all__ = [
    "same_padding",
    "unit_normalize_filters",
    "fourier_filter_pairs",
    "patch_norm_statistics",
    "pair_responses",
]


def same_padding(kernel_size: int, stride: int, spatial_dims: int) -> List[int]:
    """Padding (in ``F.pad`` order) so that a ``kernel_size`` window at ``stride`` gives ``floor(n / stride)`` outputs.

    The total padding per axis is ``kernel_size - stride`` so that window ``p`` is centred on the
    ``stride``-sized cell ``p`` of the input.
    """
    if kernel_size < stride:
        raise ValueError(f"kernel_size ({kernel_size}) must be >= stride ({stride}).")
    total = kernel_size - stride
    left = total // 2
    right = total - left
    pad: List[int] = []
    for _ in range(spatial_dims):
        pad += [left, right]
    return pad


def unit_normalize_filters(filters: torch.Tensor, eps: float = 1e-8) -> torch.Tensor:
    """Scale every filter of a ``(C, 2, *kernel)`` bank to unit l2 norm (the paper's only constraint)."""
    flat = filters.flatten(2)
    norm = torch.sqrt((flat * flat).sum(-1, keepdim=True) + eps)
    return (flat / norm).view(filters.shape)


def _half_space_frequencies(kernel_size: int, spatial_dims: int) -> List[Tuple[int, ...]]:
    """Distinct integer DFT frequencies of a ``kernel_size``-wide window, one of each ``+-`` pair, by magnitude.

    Self-conjugate frequencies (``f = -f`` modulo ``kernel_size``: DC and pure Nyquist) are left
    out, since their sine filter vanishes.
    """
    half = kernel_size // 2
    axis = list(range(-((kernel_size - 1) // 2), half + 1))
    grids = torch.meshgrid(*[torch.tensor(axis)] * spatial_dims, indexing="ij")
    keep = []
    for f in torch.stack([g.flatten() for g in grids], -1).tolist():
        key = tuple(v % kernel_size for v in f)
        neg = tuple((-v) % kernel_size for v in f)
        if key < neg:
            keep.append(tuple(int(v) for v in f))
    keep.sort(key=lambda f: (sum(v * v for v in f), f))
    return keep


def fourier_filter_pairs(
    num_pairs: int, kernel_size: int, spatial_dims: int = 2, generator: torch.Generator | None = None
) -> torch.Tensor:
    """Fourier (cos, sin) filter pairs, lowest frequencies first: shape ``(num_pairs, 2, *[kernel_size]*spatial_dims)``.

    Pair ``k`` is ``(cos(2 pi w_k . n / kernel_size), sin(2 pi w_k . n / kernel_size))`` for the
    ``k``-th smallest integer frequency ``w_k``; with these pairs the bilinear interaction is the
    classical cross-power spectrum at ``w_k`` (the reduction of the paper's Appendix A). When more
    pairs are requested than the window has frequencies, the remaining pairs repeat the lattice
    with a random sub-integer frequency jitter. Filters are unit-l2 normalised.
    """
    lattice = _half_space_frequencies(kernel_size, spatial_dims)
    coords = torch.meshgrid(*[torch.arange(kernel_size, dtype=torch.float64)] * spatial_dims, indexing="ij")
    coords_t = torch.stack(coords, 0)  # (D, *k)
    out = []
    for i in range(num_pairs):
        f = torch.tensor(lattice[i % len(lattice)], dtype=torch.float64)
        if i >= len(lattice):
            f = f + (torch.rand(spatial_dims, generator=generator, dtype=torch.float64) - 0.5)
        phase = 2 * math.pi * (f.view(-1, *[1] * spatial_dims) * coords_t).sum(0) / kernel_size
        out.append(torch.stack([torch.cos(phase), torch.sin(phase)], 0))
    return unit_normalize_filters(torch.stack(out, 0).float())


def _pad(image: torch.Tensor, pad: List[int], mode: str) -> torch.Tensor:
    if mode == "zeros":
        return F.pad(image, pad)
    return F.pad(image, pad, mode=mode)


def _avg_pool(x: torch.Tensor, kernel_size: int, stride: int, spatial_dims: int) -> torch.Tensor:
    if spatial_dims == 1:
        return F.avg_pool1d(x, kernel_size, stride)
    if spatial_dims == 2:
        return F.avg_pool2d(x, kernel_size, stride)
    return F.avg_pool3d(x, kernel_size, stride)


def _conv(x: torch.Tensor, weight: torch.Tensor, stride: int, spatial_dims: int) -> torch.Tensor:
    if spatial_dims == 1:
        return F.conv1d(x, weight, stride=stride)
    if spatial_dims == 2:
        return F.conv2d(x, weight, stride=stride)
    return F.conv3d(x, weight, stride=stride)


def patch_norm_statistics(
    padded: torch.Tensor, kernel_size: int, stride: int, eps: float = 1e-6
) -> Tuple[torch.Tensor, torch.Tensor]:
    """Mean and standard deviation of every ``kernel_size`` patch of an already padded ``(B, 1, *S)`` image.

    Returns ``(mean, std)``, each ``(B, 1, *grid)``, with ``std = sqrt(var_p + eps)`` (intensity
    units) so that flat patches have a small positive spread instead of zero.
    """
    spatial_dims = padded.dim() - 2
    mean = _avg_pool(padded, kernel_size, stride, spatial_dims)
    mean_sq = _avg_pool(padded * padded, kernel_size, stride, spatial_dims)
    var = torch.clamp(mean_sq - mean * mean, min=0.0)
    return mean, torch.sqrt(var + eps)


def _strided_conv(padded: torch.Tensor, weight: torch.Tensor, stride: int, spatial_dims: int) -> torch.Tensor:
    """``conv(padded, weight, stride)``; for 2-D kernels that are a multiple of the stride, computed as a
    stride-1 convolution of the pixel-unshuffled image (same numbers, much faster on CPUs, forward and backward)."""
    kernel_size = weight.shape[-1]
    if spatial_dims == 2 and stride > 1 and kernel_size % stride == 0 and padded.shape[-1] % stride == 0 and padded.shape[-2] % stride == 0:
        q = kernel_size // stride
        out_ch = weight.shape[0]
        w = weight.reshape(out_ch, q, stride, q, stride).permute(0, 2, 4, 1, 3).reshape(out_ch, stride * stride, q, q)
        # channels-last input: mkldnn then writes the responses channels-last, so the pair axis of every
        # location is contiguous (callers can view them as (B, *grid, 2, C) without a copy)
        return F.conv2d(F.pixel_unshuffle(padded, stride).contiguous(memory_format=torch.channels_last), w)
    return _conv(padded, weight, stride, spatial_dims)


def pair_responses(
    image: torch.Tensor,
    filters: torch.Tensor,
    stride: int,
    padding_mode: str = "reflect",
    eps: float = 1e-5,
) -> torch.Tensor:
    """Patch-normalised filter-pair responses ``psi_k^T x_p`` on the coarse grid.

    Args:
        image: ``(B, 1, *S)`` single-channel image (any intensity offset and scale).
        filters: ``(C, 2, *[k]*D)`` filter pairs; use them unit-normalised (:func:`unit_normalize_filters`).
        stride: coarse-grid stride ``s``; the grid is ``floor(S / s)``.
        padding_mode: ``"reflect"``, ``"replicate"`` or ``"zeros"`` (``"reflect"`` needs ``S > (k - s) / 2``).
        eps: added to the patch variance (intensity^2 units); keeps flat patches finite (they respond 0).

    Returns:
        ``(B, 2, C, *grid)``: responses of every standardised patch,
        ``psi^T (x_p - mean_p) / std_p``. They do not change when the image is replaced by
        ``a * image + b`` (``a > 0``, up to ``eps``) and are bounded by ``sqrt(k^D)`` for unit filters.
        For 2-D images the memory is location-major: ``out.movedim((1, 2), (-2, -1))`` is a
        contiguous ``(B, *grid, 2, C)`` view.
    """
    spatial_dims = image.dim() - 2
    kernel_size = filters.shape[-1]
    num_pairs = filters.shape[0]
    pad = same_padding(kernel_size, stride, spatial_dims)
    padded = _pad(image, pad, padding_mode)
    # channel j * C + k holds filter j of pair k
    weight = filters.transpose(0, 1).reshape([2 * num_pairs, 1] + list(filters.shape[2:]))
    # psi^T (x_p - mean_p) = (psi - mean(psi))^T x_p: centring the filter removes the patch mean exactly
    centred = weight - weight.mean(list(range(2, weight.dim())), keepdim=True)
    raw = _strided_conv(padded, centred, stride, spatial_dims)  # (B, 2C, *grid)
    _, std = patch_norm_statistics(padded, kernel_size, stride, eps)
    resp = raw * torch.reciprocal(std)
    return resp.view([resp.shape[0], 2, num_pairs] + list(resp.shape[2:]))
