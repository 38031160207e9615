"""Whether two images share one contrast or one is the other's turned upside down.

A sequence with inverted contrast, an intensity window reversed or a negative image: the anatomy is the same
but every edge has the opposite sign, and a network comparing local phases reads each one half a wavelength off.
The two images compared at the scale of organs tell the two cases apart: their correlation over the low
frequencies (structures of about ten voxels and larger, the mean removed) is positive for two views of one
anatomy, even with the heart moved between them, and negative with one of them inverted. The fine scales, where
motion decorrelates the images and where most of k-space (and so most k-space spikes' stripes) lies, do not vote.
"""

from __future__ import annotations

from typing import List

import torch

__all__ = ["POLARITY_BAND", "contrast_polarity", "matched_contrast", "signed"]

#: frequencies that vote (cycles per voxel, the DC term excluded): structures of about ten voxels and larger
POLARITY_BAND = 0.1


def contrast_polarity(moving: torch.Tensor, fixed: torch.Tensor, band: float = POLARITY_BAND) -> torch.Tensor:
    """``(B,)``: ``+1`` where the images' contrasts agree, ``-1`` where one is the other's inverted.

    The sign of the real part of the cross-power spectrum of ``moving`` and ``fixed`` ``(B, 1, *S)`` summed over
    the frequencies ``0 < |k| < band`` (cycles per voxel): the correlation of the two images low-passed, their means
    removed, over the voxels where either is not 0 (0 in both: outside the images); ``+1`` where it is 0 (e.g. flat
    images). No gradient.
    """
    if moving.shape != fixed.shape:
        raise ValueError(f"contrast_polarity needs two images of one shape, got {list(moving.shape)} and {list(fixed.shape)}.")
    dims: List[int] = list(range(2, moving.dim()))
    m, f = moving.detach().float(), fixed.detach().float()
    # voxels that are 0 in both images hold no data (outside the images: a grid's padding); the rest, each image's
    # mean removed there, so that a shared border with the padding does not vote
    valid = ((m != 0) | (f != 0)).float()
    count = valid.sum(dims, keepdim=True).clamp(min=1.0)
    m = (m - (m * valid).sum(dims, keepdim=True) / count) * valid
    f = (f - (f * valid).sum(dims, keepdim=True) / count) * valid
    cross = torch.fft.fftn(m, dim=dims) * torch.fft.fftn(f, dim=dims).conj()
    freqs = [torch.fft.fftfreq(moving.shape[d], device=moving.device) for d in dims]
    radius = torch.stack(torch.meshgrid(freqs, indexing="ij")).pow(2).sum(0).sqrt()
    votes = ((radius > 0) & (radius < band)).to(cross.real.dtype)
    agreement = (cross.real * votes).flatten(1).sum(1)
    return torch.where(agreement < 0, -1.0, 1.0).to(fixed.dtype)


def signed(x: torch.Tensor, polarity: torch.Tensor) -> torch.Tensor:
    """``x`` ``(B, ...)`` times the per-item ``polarity`` ``(B,)``."""
    return x * polarity.view((-1,) + (1,) * (x.dim() - 1))


def matched_contrast(image: torch.Tensor, reference: torch.Tensor, band: float = POLARITY_BAND) -> torch.Tensor:
    """``image`` ``(B, 1, *S)`` in the contrast of ``reference`` (same shape): the items whose contrast is the
    reference's inverted (:func:`contrast_polarity`) turned upside down within their own range, ``min + max - x``;
    the others as they are."""
    dims = list(range(1, image.dim()))
    flipped = image.amin(dims, keepdim=True) + image.amax(dims, keepdim=True) - image
    inverted = (contrast_polarity(reference, image, band) < 0).view((-1,) + (1,) * (image.dim() - 1))
    return torch.where(inverted, flipped, image)
