"""Classical global phase correlation (Kuglin & Hines 1975) with sub-pixel refinement.

The sub-pixel step is the matrix-multiply DFT upsampling of Guizar-Sicairos et al. (2008): the
normalised cross-power spectrum's inverse transform is evaluated on a ``1/upsample_factor`` grid
in a 1.5-pixel neighbourhood of the integer peak.
"""

from __future__ import annotations

import math
from typing import Optional, Sequence

import torch

__all__ = ["phase_correlation", "tukey_window"]


def tukey_window(shape: Sequence[int], alpha: float = 0.25) -> torch.Tensor:
    """Separable Tukey window of ``shape`` (float64): flat centre, cosine tapers over ``alpha / 2`` of each side."""
    from scipy.signal.windows import tukey

    win = torch.ones((), dtype=torch.float64)
    for n in shape:
        win = win.unsqueeze(-1) * torch.from_numpy(tukey(int(n), alpha))
    return win


def _upsampled_idft_axis(spec: torch.Tensor, axis: int, centers: torch.Tensor, offsets: torch.Tensor) -> torch.Tensor:
    """Evaluate the inverse DFT of ``spec`` along ``axis`` at ``centers[b] + offsets`` (per batch item)."""
    n = spec.shape[axis]
    freqs = torch.fft.fftfreq(n, device=spec.device, dtype=torch.float64)  # cycles / sample
    pos = centers.view(-1, 1) + offsets.view(1, -1)  # (B, J)
    kernel = torch.exp(2j * math.pi * pos.unsqueeze(-1) * freqs.view(1, 1, -1))  # (B, J, n)
    moved = spec.movedim(axis, -1)
    shape = moved.shape
    flat = moved.reshape(shape[0], -1, n)  # (B, M, n)
    out = flat @ kernel.transpose(1, 2)  # (B, M, J)
    return out.reshape(*shape[:-1], offsets.numel()).movedim(-1, axis)


def phase_correlation(
    moving: torch.Tensor, fixed: torch.Tensor, upsample_factor: int = 20, eps: float = 1e-12, window: Optional[float] = None,
    whitening: float = 1.0, max_shift: Optional[float] = None,
) -> torch.Tensor:
    """Global translation ``s`` (voxels) with ``fixed(x) ~= moving(x + s)``; shape ``(B, D)``.

    Args:
        moving: ``(B, 1, *S)`` or ``(B, *S)`` real image.
        fixed: same shape as ``moving``.
        upsample_factor: sub-pixel precision is ``1 / upsample_factor`` voxel; 1 gives the integer peak.
        window: Tukey ``alpha`` of an apodisation applied after removing each image's mean, or
            ``None`` (no window). Real images need one: their borders do not move, and without a
            window they put a peak at zero shift.
        whitening: exponent ``p`` of the normalisation ``cross / |cross|^p`` of the cross-power
            spectrum: 1 (default) is classical phase correlation, 0 plain cross-correlation; values
            in between (e.g. 0.8) keep some weight on the strong, low-frequency structures, which
            is more robust when large areas have no counterpart (changes, sea).
        max_shift: bound (voxels) of the peak search: only integer shifts with ``|s_k| <= max_shift``
            on every axis are candidates (the sub-pixel step may move the result by < 1 voxel beyond).
            A prior on the plausible misalignment: a spurious peak far out (unrelated texture, e.g.
            sea under a different wind) can no longer win. ``None`` (default): the whole surface.
    Returns:
        ``s`` with channel ``k`` along spatial axis ``k``: the constant displacement field ``ddf = s``
        warps ``moving`` onto ``fixed`` in the MONAI ``Warp`` convention.
    """
    if moving.shape != fixed.shape:
        raise ValueError(f"moving {tuple(moving.shape)} and fixed {tuple(fixed.shape)} must have the same shape.")
    if moving.dim() >= 3 and moving.shape[1] == 1:
        moving, fixed = moving[:, 0], fixed[:, 0]
    spatial = list(moving.shape[1:])
    axes = list(range(1, moving.dim()))
    out_dtype = moving.dtype
    moving, fixed = moving.double(), fixed.double()
    if window is not None:
        win = tukey_window(spatial, window).to(moving.device)
        moving = (moving - moving.mean(axes, keepdim=True)) * win
        fixed = (fixed - fixed.mean(axes, keepdim=True)) * win
    fm = torch.fft.fftn(moving, dim=axes)
    ff = torch.fft.fftn(fixed, dim=axes)
    cross = ff * fm.conj()
    if not 0.0 <= whitening <= 1.0:
        raise ValueError(f"whitening must be in [0, 1], got {whitening}.")
    cross = cross / (cross.abs() + eps) if whitening == 1.0 else cross / (cross.abs() + eps) ** whitening
    corr = torch.fft.ifftn(cross, dim=axes).real
    if max_shift is not None:
        if max_shift < 0:
            raise ValueError(f"max_shift must be >= 0, got {max_shift}.")
        allowed = torch.ones((), dtype=torch.bool, device=corr.device)
        for n in spatial:
            lag = torch.fft.fftfreq(n, 1.0 / n, device=corr.device).abs()  # |signed integer lag| per index
            allowed = allowed.unsqueeze(-1) & (lag <= max_shift)
        corr = corr.masked_fill(~allowed, float("-inf"))
    flat_idx = corr.flatten(1).argmax(1)
    peak = []
    for n in reversed(spatial):
        peak.append(flat_idx % n)
        flat_idx = torch.div(flat_idx, n, rounding_mode="floor")
    peak_t = torch.stack(list(reversed(peak)), 1).double()  # (B, D)
    sizes = torch.tensor(spatial, dtype=torch.float64, device=moving.device)
    peak_t = torch.where(peak_t > sizes / 2, peak_t - sizes, peak_t)
    if upsample_factor > 1:
        width = math.ceil(1.5 * upsample_factor)
        offsets = (torch.arange(width, dtype=torch.float64, device=moving.device) - width // 2) / upsample_factor
        up = cross
        for i, axis in enumerate(axes):
            up = _upsampled_idft_axis(up, axis, peak_t[:, i], offsets)
        idx = up.real.flatten(1).argmax(1)
        fine = []
        for _ in axes:
            fine.append(offsets[idx % width])
            idx = torch.div(idx, width, rounding_mode="floor")
        peak_t = peak_t + torch.stack(list(reversed(fine)), 1)
    return (-peak_t).to(out_dtype)
