"""Resample a label map through a transform: ITK's label-linear interpolation, optionally of in-plane smoothed labels.

``sitk.sitkLabelLinear`` (ANTs ``-n GenericLabel``) interpolates each label's indicator linearly and
keeps the largest. Its boundaries follow the moving image's voxel staircase; with ``sigma > 0`` each
indicator is first smoothed in-plane by a Gaussian of ``sigma`` voxels (the first two index axes,
as the 2-D models register slice by slice; never across slices), which gives the warped boundary
the smooth course expert contours have; ITK's ``sitkLabelGaussian``, which smooths across the thick
slices too, did worse (docs/design_notes.md, "interop/label_resample.py").
"""

from __future__ import annotations

from typing import List, Optional, Tuple

import numpy as np
import SimpleITK as sitk

from monai_npc.functional.label_warp import label_indicators

__all__ = ["resample_label"]


def resample_label(label: sitk.Image, reference: sitk.Image, transform: sitk.Transform, sigma: float = 0.0) -> sitk.Image:
    """``label`` resampled onto ``reference``'s grid through ``transform`` (fixed point -> moving point), int32.

    Args:
        label: integer label map on the moving image's grid.
        reference: the fixed image (the output's grid).
        transform: the fixed -> moving transform (as for ``sitk.Resample``).
        sigma: in-plane Gaussian width, in voxels of ``label``, applied to each label's indicator
            before the linear interpolation; 0: ``sitk.sitkLabelLinear`` exactly. Voxels outside
            ``label`` get 0.

    Raises:
        ValueError: ``sigma`` negative or not finite.
    """
    sigma = float(sigma)
    if not np.isfinite(sigma) or sigma < 0:
        raise ValueError(f"label sigma must be a finite number >= 0 (voxels), got {sigma}.")
    coarse = sitk.Resample(label, reference, transform, sitk.sitkLabelLinear, 0, sitk.sitkInt32)
    box = None if sigma == 0 else _box(sitk.GetArrayViewFromImage(coarse), margin=int(np.ceil(3 * sigma)) + 2)
    if box is None:  # label-linear asked for, or no label lands on the fixed grid
        return coarse
    array = sitk.GetArrayViewFromImage(label)  # its last two axes are the in-plane index axes (x, y)
    values, indicators = label_indicators(array, np.unique(array).tolist(), sigma)
    stacked = sitk.GetImageFromArray(np.moveaxis(indicators, 0, -1), isVector=True)
    stacked.CopyInformation(label)
    # the smoothed indicators resampled together on the box of the fixed grid where label-linear put
    # labels, widened by the smoothing's reach (the rest stays background, as label-linear has it);
    # outside the moving grid every channel is 0 and background, the first, wins the tie
    lo, hi = box
    region = sitk.RegionOfInterest(reference, [int(h - l) for h, l in zip(hi[::-1], lo[::-1])], [int(v) for v in lo[::-1]])
    prob = sitk.GetArrayFromImage(sitk.Resample(stacked, region, transform, sitk.sitkLinear, 0.0))  # a copy: the image is a temporary
    out = sitk.GetArrayFromImage(coarse)
    out[tuple(slice(l, h) for l, h in zip(lo, hi))] = values[np.argmax(prob, -1)]
    image = sitk.GetImageFromArray(out)
    image.CopyInformation(reference)
    return image


def _box(array: np.ndarray, margin: int) -> Optional[Tuple[List[int], List[int]]]:
    """``(lo, hi)`` array-order bounds of the non-zero voxels of ``array``, widened by ``margin`` in-plane
    (the last two axes) and by one slice through-plane, clipped to the array; ``None`` when all are 0."""
    nz = np.nonzero(array)
    if nz[0].size == 0:
        return None
    pad = [1] * (array.ndim - 2) + [margin, margin]
    lo = [max(0, int(i.min()) - p) for i, p in zip(nz, pad)]
    hi = [min(n, int(i.max()) + 1 + p) for i, p, n in zip(nz, pad, array.shape)]
    return lo, hi
