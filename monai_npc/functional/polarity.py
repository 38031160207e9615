"""Whether two images share one contrast or one is the other's turned upside down.

A sequence with inverted contrast, an intensity window reversed or a negative image: the anatomy is the same
but every edge has the opposite sign, and a network comparing local phases reads each one half a wavelength off.
The zero-shift value of the phase correlation over the low frequencies tells the two cases apart: two views of
one anatomy, even with the heart moved between them, have mostly agreeing phases at the scale of organs
(positive), one inverted has each of them turned by half a turn (negative). Only those frequencies vote, each
with its phase alone, so strong stripes beyond them (a k-space spike; most of k-space lies beyond) cannot swing
the sign, although they dominate the images' correlation.
"""

from __future__ import annotations

from typing import List

import torch

__all__ = ["POLARITY_BAND", "contrast_polarity", "signed"]

#: frequencies that vote (cycles per voxel, the DC term excluded): structures of about ten voxels and larger
POLARITY_BAND = 0.1


def contrast_polarity(moving: torch.Tensor, fixed: torch.Tensor, band: float = POLARITY_BAND) -> torch.Tensor:
    """``(B,)``: ``+1`` where the images' contrasts agree, ``-1`` where one is the other's inverted.

    The sign of the mean ``cos`` of the phase differences of ``moving`` and ``fixed`` ``(B, 1, *S)`` at the
    frequencies ``0 < |k| < band`` (cycles per voxel); ``+1`` where it is 0 (e.g. flat images). No gradient.
    """
    if moving.shape != fixed.shape:
        raise ValueError(f"contrast_polarity needs two images of one shape, got {list(moving.shape)} and {list(fixed.shape)}.")
    dims: List[int] = list(range(2, moving.dim()))
    cross = torch.fft.fftn(moving.detach().float(), dim=dims) * torch.fft.fftn(fixed.detach().float(), dim=dims).conj()
    freqs = [torch.fft.fftfreq(moving.shape[d], device=moving.device) for d in dims]
    radius = torch.stack(torch.meshgrid(freqs, indexing="ij")).pow(2).sum(0).sqrt()
    votes = ((radius > 0) & (radius < band)).to(cross.real.dtype)
    agreement = (cross.real / cross.abs().clamp(min=1e-12) * votes).flatten(1).sum(1)
    return torch.where(agreement < 0, -1.0, 1.0).to(fixed.dtype)


def signed(x: torch.Tensor, polarity: torch.Tensor) -> torch.Tensor:
    """``x`` ``(B, ...)`` times the per-item ``polarity`` ``(B,)``."""
    return x * polarity.view((-1,) + (1,) * (x.dim() - 1))
