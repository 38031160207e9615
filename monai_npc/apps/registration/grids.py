"""Model grids on the fixed image: the heart window, the fixed image's slices, which slices are constant.

Units: images are SimpleITK images (mm, LPS); arrays are in array order ``(Z, H, W)``; centres are
fractional voxel indices ``(row, col)`` of the fixed image.
"""

from __future__ import annotations

from typing import List, Sequence, Tuple

import numpy as np
import SimpleITK as sitk

from monai_npc.interop.images import resample

__all__ = ["CONSTANT_RTOL", "heart_grid", "constant_slices", "slices_of", "given_centres", "slice_images", "inside_grid"]


#: a slice whose intensity range is below this fraction of its largest magnitude counts as constant (a few float32
#: steps: an image with a large offset, 241 grey levels on top of 1e6, still registers)
CONSTANT_RTOL = 1e-5


def heart_grid(fixed: sitk.Image, centre: Sequence[float], size: int, spacing_mm: Tuple[float, float]) -> sitk.Image:
    """A ``size x size`` in-plane window on ``fixed``'s slices, centred on ``centre``.

    Args:
        fixed: the fixed image (2-D or 3-D); the window keeps its direction and slices.
        centre: ``(row, col)`` fractional voxel index of the fixed image (array order ``H, W``).
        size: window size in voxels per in-plane axis.
        spacing_mm: ``(low, high)``: the window's isotropic in-plane spacing is the fixed image's
            (the mean of its two in-plane spacings) clamped to this range.

    When the clamped spacing equals the fixed image's, the window's voxels are fixed voxels
    (origin snapped to a fixed voxel), so resampling onto it interpolates nothing.
    """
    dims = fixed.GetDimension()
    sp = np.asarray(fixed.GetSpacing(), dtype=np.float64)
    new_sp = sp.copy()
    new_sp[:2] = float(np.clip(sp[:2].mean(), *spacing_mm))
    half = (size - 1) / 2.0 * new_sp[:2] / sp[:2]  # half window in fixed voxels (x, y)
    corner = np.asarray([centre[1], centre[0]], dtype=np.float64) - half  # index (x, y) of the window's voxel 0
    if np.allclose(new_sp[:2], sp[:2]):
        corner = np.round(corner)
    index = np.zeros(dims)
    index[:2] = corner
    direction = np.asarray(fixed.GetDirection(), dtype=np.float64).reshape(dims, dims)
    origin = np.asarray(fixed.GetOrigin(), dtype=np.float64) + direction @ (sp * index)
    n = list(fixed.GetSize())
    n[:2] = [size, size]
    grid = sitk.Image([int(v) for v in n], sitk.sitkFloat32)
    grid.SetSpacing([float(v) for v in new_sp])
    grid.SetOrigin([float(v) for v in origin])
    grid.SetDirection(fixed.GetDirection())
    return grid


def constant_slices(array: np.ndarray, rtol: float = CONSTANT_RTOL) -> np.ndarray:
    """``(Z,)`` bool: slices of ``(Z, H, W)`` whose finite values span less than ``rtol`` of their magnitude (or none are finite)."""
    out = np.zeros(array.shape[0], bool)
    for z, sl in enumerate(array):
        finite = sl[np.isfinite(sl)]
        if finite.size == 0:
            out[z] = True
            continue
        lo, hi = float(finite.min()), float(finite.max())
        out[z] = hi - lo <= rtol * max(abs(lo), abs(hi)) or hi == lo
    return out


def slices_of(array: np.ndarray, dims: int) -> np.ndarray:
    """Array-order image -> ``(Z, H, W)`` (a 2-D image as one slice)."""
    return array[None] if dims == 2 else array


def given_centres(heart_centre: Sequence[Tuple[float, float]], fixed: sitk.Image) -> List[Tuple[float, float]]:
    """``heart_centre`` checked: one ``(row, col)`` per slice of ``fixed`` (a single pair: every slice)."""
    arr = np.asarray(heart_centre, dtype=np.float64)
    slices = fixed.GetSize()[2] if fixed.GetDimension() == 3 else 1
    if arr.shape == (2,):
        arr = np.repeat(arr[None], slices, 0)
    if arr.shape != (slices, 2) or not np.isfinite(arr).all():
        raise ValueError(f"heart_centre must be one finite (row, col) pair or one per slice ({slices}), got shape {arr.shape}.")
    rows, cols = fixed.GetSize()[1], fixed.GetSize()[0]
    outside = (arr[:, 0] < 0) | (arr[:, 0] > rows - 1) | (arr[:, 1] < 0) | (arr[:, 1] > cols - 1)
    if outside.any():
        raise ValueError(f"heart_centre {arr[np.argmax(outside)].tolist()} (row, col) lies outside the fixed image's "
                         f"{rows} x {cols} voxels (array order: rows 0-{rows - 1}, columns 0-{cols - 1}).")
    return [(float(r), float(c)) for r, c in arr]


def slice_images(fixed: sitk.Image) -> List[sitk.Image]:
    """The fixed image's slices as one-slice images with their own geometry (a 2-D image: itself)."""
    if fixed.GetDimension() == 2:
        return [fixed]
    return [fixed[:, :, z : z + 1] for z in range(fixed.GetSize()[2])]


def inside_grid(grid: sitk.Image, fixed: sitk.Image) -> np.ndarray:
    """``(Z, H, W)`` float64: 1 where a fixed voxel lies inside the model grid, else 0."""
    ones = sitk.Image(grid.GetSize(), sitk.sitkFloat32) + 1.0
    ones.CopyInformation(grid)
    return slices_of(resample(ones, fixed, "nearest", 0.0), fixed.GetDimension()).astype(np.float64)
