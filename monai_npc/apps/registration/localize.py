"""Label-free localisation of the moving region of interest in a pair of stacks.

A cardiac pair (two frames of one cine) differs where the heart beats: blood pools fill and
empty and the myocardium thickens, while the chest wall, liver and lungs barely change within a
breath-hold. :func:`motion_centre` finds that region from the two images alone (no label, no
detector to train): the in-plane point where the smoothed absolute frame difference, summed over
the slices, peaks. It is what :mod:`monai_npc.apps.registration` centres the model's field of view
on for models trained on heart-centred crops (``meta["field_of_view"] == "heart"``).

The map is smoothed by :data:`SMOOTHING_MM` and its centre is the weighted centroid of the map above
:data:`PEAK_FRACTION` of its peak: the single peak lies off the heart's centre, towards the left
ventricle (measurements: docs/design_notes.md, "apps/registration/localize.py";
``python benchmarks/localisation.py``).

Arrays are in array order ``(Z, H, W)``; ``spacing`` is in mm per array axis of a slice
``(H, W)``; the centre is returned in fractional voxel indices ``(row, col)`` of that grid.
"""

from __future__ import annotations

from typing import Sequence, Tuple

import numpy as np
import torch

from monai_npc.functional.intensity import robust_unit
from monai_npc.functional.polarity import contrast_polarity

__all__ = ["gaussian_smooth", "motion_map", "motion_centre"]

#: Gaussian smoothing of the frame difference (mm): about the size of a ventricle
SMOOTHING_MM = 20.0
#: the centre is the weighted centroid of the map above this fraction of its peak (the two ventricles
#: and the myocardium, rather than the single voxel where the left ventricle empties most)
PEAK_FRACTION = 0.7


def _gaussian_matrix(n: int, sigma: float) -> torch.Tensor:
    """``(n, n)`` banded matrix of a Gaussian of ``sigma`` voxels truncated at 4 sigma, zero outside the axis."""
    radius = int(np.ceil(4.0 * sigma))
    taps = torch.arange(-radius, radius + 1, dtype=torch.float32)
    norm = torch.exp(-0.5 * (taps / sigma) ** 2).sum()
    i = torch.arange(n, dtype=torch.float32)
    d = i[:, None] - i[None, :]
    return torch.exp(-0.5 * (d / sigma) ** 2) * (d.abs() <= radius) / norm


def gaussian_smooth(image: np.ndarray, sigma: Sequence[float]) -> np.ndarray:
    """``(H, W)`` image smoothed by a Gaussian of ``sigma`` voxels per axis (truncated at 4 sigma),
    zero outside the image (so a peak near the border is damped: the region of interest is rarely
    at the image's edge).

    Two products with banded matrices, ``G_rows @ image @ G_cols^T``: the same sums as separable
    zero-padded convolutions (to 1e-7) but much faster on the CPU for the wide kernels used here
    (docs/design_notes.md, "apps/registration/localize.py"). Torch (the register path imports no scipy).
    """
    out = torch.from_numpy(np.ascontiguousarray(image, dtype=np.float32))
    if out.ndim != 2:
        raise ValueError(f"gaussian_smooth needs an (H, W) image, got shape {tuple(out.shape)}.")
    for axis, s in enumerate(sigma):
        if int(np.ceil(4.0 * float(s))) < 1:
            continue
        g = _gaussian_matrix(out.shape[axis], float(s))
        out = g @ out if axis == 0 else out @ g.T
    return out.numpy()


def motion_map(moving: np.ndarray, fixed: np.ndarray, spacing: Sequence[float], smoothing_mm: float = SMOOTHING_MM) -> np.ndarray:
    """``(H, W)`` map of how much the two stacks differ, smoothed and summed over slices. Frames of opposite
    contrast (:func:`~monai_npc.functional.polarity.contrast_polarity` of the stacks negative: one inverted, another
    sequence) are compared with the fixed frame's intensities turned upside down, so that static anatomy still cancels.

    Args:
        moving, fixed: ``(Z, H, W)`` stacks on one grid (NaN outside an image counts as no change).
        spacing: in-plane voxel size ``(row, col)`` in mm.
        smoothing_mm: Gaussian standard deviation of the smoothing, mm.
    """
    if moving.shape != fixed.shape or moving.ndim != 3:
        raise ValueError(f"motion_map needs two (Z, H, W) stacks of one shape, got {moving.shape} and {fixed.shape}.")
    both = np.isfinite(moving) & np.isfinite(fixed)
    m, f = robust_unit(moving), robust_unit(fixed)
    stacks = [torch.from_numpy(np.where(both, a, 0.0).astype(np.float32))[None, None] for a in (m, f)]
    if float(contrast_polarity(*stacks)) < 0:
        f = 1.0 - f  # the fixed frame's contrast is the moving one's upside down: compare like with like
    diff = np.where(both, np.abs(m - f), 0.0)
    sigma = [smoothing_mm / max(float(s), 1e-6) for s in spacing]
    return gaussian_smooth(diff.sum(0), sigma)  # smoothing is linear: smoothing the sum = summing the smoothed slices


def motion_centre(
    moving: np.ndarray,
    fixed: np.ndarray,
    spacing: Sequence[float],
    smoothing_mm: float = SMOOTHING_MM,
    peak_fraction: float = PEAK_FRACTION,
) -> Tuple[float, float]:
    """In-plane ``(row, col)`` voxel index of the region where the frames differ most: the weighted
    centroid of :func:`motion_map` above ``peak_fraction`` of its peak.

    Falls back to the grid's centre when the stacks are identical (no motion to find).
    """
    score = motion_map(moving, fixed, spacing, smoothing_mm)
    if not np.isfinite(score).all() or score.max() <= 0:
        return (score.shape[0] - 1) / 2.0, (score.shape[1] - 1) / 2.0
    weight = np.where(score >= peak_fraction * score.max(), score, 0.0)
    rows, cols = np.indices(score.shape)
    return float((rows * weight).sum() / weight.sum()), float((cols * weight).sum() / weight.sum())
