"""Checks of a registration's inputs: one clear line for every input the models cannot use.

Small pure functions on SimpleITK images, arrays or tensors and the names to report. The
``check_*`` functions raise ``ValueError`` / ``TypeError`` naming the input and what is wrong;
the ``*_warning(s)`` functions return warning strings (``None`` / ``[]`` when all is well) that
the caller issues (:func:`monai_npc.apps.registration.api.register` as ``RuntimeWarning`` and in the
summary's ``warnings``).

Limits, and why:

- :data:`MIN_IMAGE_SIZE` pixels per in-plane axis: the NPC filters are 16 pixels wide on the
  128-pixel model grid; an image with fewer pixels than one filter holds no structure the
  filters (or phase correlation) can lock on, and 1-pixel axes break the Jacobian.
- the short side on the model grid (``size`` pixels along the long side, the short side padded
  when ``keep_aspect``) must be at least :data:`MIN_IMAGE_SIZE` model pixels too: a 3 x 500
  strip becomes a line less than one pixel high.
- overlap below :data:`MIN_OVERLAP_PERCENT` of the smaller image's field of view is a warning
  (0 % stays an error of :func:`~monai_npc.apps.registration.api.register`); in-plane spacing more than
  :data:`MAX_SPACING_RATIO` apart, or axes more than :data:`MAX_ORIENTATION_DEGREES` apart, are
  warnings; so is a label map without any foreground.
"""

from __future__ import annotations

from typing import Any, List, Optional

import numpy as np
import SimpleITK as sitk

__all__ = [
    "MIN_IMAGE_SIZE",
    "MIN_OVERLAP_PERCENT",
    "MAX_SPACING_RATIO",
    "MAX_ORIENTATION_DEGREES",
    "check_tensor",
    "check_image_size",
    "check_aspect",
    "overlap_percent",
    "overlap_warning",
    "fixed_coverage_percent",
    "coverage_warning",
    "slice_offset_warning",
    "label_sigma_warning",
    "spacing_warning",
    "orientation_warning",
    "slice_plane_warning",
    "has_foreground",
    "empty_label_warning",
    "check_inputs",
    "input_warnings",
]

#: smallest in-plane size (pixels per axis) of an image, and of its short side on the model grid
MIN_IMAGE_SIZE = 16
#: below this overlap (percent of the smaller image's field of view) a warning is issued
MIN_OVERLAP_PERCENT = 50.0
#: in-plane spacings further apart than this factor give a warning
MAX_SPACING_RATIO = 2.0
#: image axes further apart than this angle (degrees) give a warning
MAX_ORIENTATION_DEGREES = 10.0


def check_tensor(x: Any, what: str = "image") -> None:
    """``ValueError`` for a torch tensor without data (``meta`` device) or with complex or non-numeric values."""
    import torch

    if not isinstance(x, torch.Tensor):
        return
    if x.device.type == "meta":
        raise ValueError(f"{what}: the tensor is on the 'meta' device and holds no values; pass a tensor with data (e.g. on 'cpu').")
    if x.is_complex():
        raise ValueError(f"{what}: complex tensor ({x.dtype}); pass real values (e.g. its magnitude, tensor.abs()).")
    if not (x.is_floating_point() or x.dtype in (torch.bool, torch.uint8, torch.int8, torch.int16, torch.int32, torch.int64)):
        raise ValueError(f"{what}: tensors of dtype {x.dtype} are not images; pass real numbers (float, int or bool).")


def _in_plane(image: sitk.Image) -> tuple:
    return tuple(int(v) for v in image.GetSize()[:2])


def check_image_size(image: sitk.Image, what: str = "image", min_size: int = MIN_IMAGE_SIZE) -> None:
    """``ValueError`` when an in-plane axis of ``image`` has fewer than ``min_size`` pixels."""
    w, h = _in_plane(image)
    if min(w, h) < min_size:
        raise ValueError(
            f"{what} is {w} x {h} pixels (width x height); images need at least {min_size} x {min_size} "
            f"pixels in-plane (the models' {min_size}-pixel filters see nothing in a smaller image)."
        )


def check_aspect(
    image: sitk.Image, what: str = "image", size: int = 128, keep_aspect: bool = True, min_size: int = MIN_IMAGE_SIZE
) -> None:
    """``ValueError`` when ``image``'s short side covers fewer than ``min_size`` pixels of the
    ``size``-pixel model grid (only with ``keep_aspect``: the short side is padded, not stretched)."""
    if not keep_aspect:
        return
    extent = np.asarray(_in_plane(image), np.float64) * np.asarray(image.GetSpacing()[:2], np.float64)
    short = size * extent.min() / extent.max()
    if short < min_size:
        w, h = _in_plane(image)
        raise ValueError(
            f"{what} is {w} x {h} pixels ({extent[0]:.3g} x {extent[1]:.3g} mm): aspect ratio "
            f"{extent.max() / extent.min():.1f}:1 leaves {short:.1f} of the model grid's {size} pixels to the short side "
            f"(at least {min_size} needed); crop it closer to square, or stretch it (keep_aspect=False, --stretch)."
        )


def _physical_points(image: sitk.Image, samples: int = 256, slices: int = 3) -> np.ndarray:
    """``(N, d)`` LPS points of ``image``'s voxel centres: at most ``samples`` per in-plane axis
    (every voxel of most images) and ``slices`` through-plane."""
    dims = image.GetDimension()
    axes = [np.linspace(0, n - 1, min(n, samples if k < 2 else slices)) for k, n in enumerate(image.GetSize())]
    index = np.stack(np.meshgrid(*axes, indexing="ij"), -1).reshape(-1, dims)
    direction = np.asarray(image.GetDirection(), np.float64).reshape(dims, dims)
    return np.asarray(image.GetOrigin()) + (index * np.asarray(image.GetSpacing())) @ direction.T


def _inside(points: np.ndarray, image: sitk.Image) -> np.ndarray:
    """Which physical ``points`` fall inside ``image``'s in-plane field of view (voxel edges; slices ignored)."""
    dims = image.GetDimension()
    direction = np.asarray(image.GetDirection(), np.float64).reshape(dims, dims)
    index = ((points - np.asarray(image.GetOrigin())) @ direction) / np.asarray(image.GetSpacing())
    size = np.asarray(image.GetSize(), np.float64)
    return np.all((index[:, :2] >= -0.5) & (index[:, :2] <= size[:2] - 0.5), axis=1)


def overlap_percent(moving: sitk.Image, fixed: sitk.Image) -> float:
    """Percent of the smaller image's in-plane field of view (by physical area) that the other covers."""

    def area(image: sitk.Image) -> float:
        return float(np.prod(np.asarray(_in_plane(image), np.float64) * np.asarray(image.GetSpacing()[:2])))

    small, large = (moving, fixed) if area(moving) <= area(fixed) else (fixed, moving)
    return float(100.0 * _inside(_physical_points(small), large).mean())


def overlap_warning(
    percent: float, moving_name: str, fixed_name: str, threshold: float = MIN_OVERLAP_PERCENT
) -> Optional[str]:
    """A warning when ``0 < percent < threshold`` (0 % is an error of the caller)."""
    if 0.0 < percent < threshold:
        return (
            f"moving image {moving_name} and fixed image {fixed_name} overlap by only {percent:.1f} % of the smaller "
            f"image's field of view (less than {threshold:.0f} %); check their origins and directions, or register "
            "in pixel space (--pixel-space)."
        )
    return None


def fixed_coverage_percent(moving: sitk.Image, fixed: sitk.Image) -> float:
    """Percent of the fixed image's in-plane field of view that the moving image covers."""
    return float(100.0 * _inside(_physical_points(fixed), moving).mean())


def coverage_warning(
    percent: float, moving_name: str, fixed_name: str, threshold: float = MIN_OVERLAP_PERCENT
) -> Optional[str]:
    """A warning when the moving image covers ``0 < percent < threshold`` % of the fixed image's field of view
    (:func:`overlap_warning` measures against the smaller image: a small image inside a large one passes it)."""
    if 0.0 < percent < threshold:
        return (
            f"moving image {moving_name} covers only {percent:.1f} % of fixed image {fixed_name}'s field of view (less than "
            f"{threshold:.0f} %): the rest is left as it is; check their pixel sizes and origins (PNG/JPEG/TIFF carry none: "
            "1 mm is assumed), or register in pixel space (--pixel-space)."
        )
    return None


#: in-plane smoothing of a carried label wider than this (mm) gives a warning: thin structures (myocardium) can vanish
MAX_LABEL_SIGMA_MM = 3.0


def label_sigma_warning(sigma: float, label: sitk.Image, what: str, limit: float = MAX_LABEL_SIGMA_MM) -> Optional[str]:
    """A warning when ``sigma`` label voxels (in-plane smoothing of a carried label) exceed ``limit`` mm at this pixel size."""
    mm = float(sigma) * float(min(label.GetSpacing()[:2]))
    if mm > limit:
        return (
            f"{what} has {min(label.GetSpacing()[:2]):.2g} mm pixels: its smoothing of {sigma:g} voxel(s) before it is carried is "
            f"{mm:.1f} mm (more than {limit:g} mm) and can erase thin structures; pass label_sigma=0 (--label-sigma 0)."
        )
    return None


def _slice_positions(image: sitk.Image, normal: np.ndarray) -> np.ndarray:
    """``(Z,)`` positions (mm) of a 3-D image's slices along ``normal``."""
    axis = np.asarray(image.GetDirection(), np.float64).reshape(3, 3)[:, 2] * image.GetSpacing()[2]
    return float(np.asarray(image.GetOrigin()) @ normal) + np.arange(image.GetSize()[2]) * float(axis @ normal)


def slice_offset_warning(moving: sitk.Image, fixed: sitk.Image, moving_name: str, fixed_name: str, share: float = 0.25) -> Optional[str]:
    """A warning when the slices of two 3-D stacks with the same slice normal lie between each other: some fixed
    slice is more than ``share`` of the moving slice spacing from every moving slice, so each warped slice blends
    two moving slices (the registration is in-plane)."""
    if fixed.GetDimension() != 3 or moving.GetDimension() != 3 or min(fixed.GetSize()[2], moving.GetSize()[2]) < 2:
        return None
    nf = np.asarray(fixed.GetDirection(), np.float64).reshape(3, 3)[:, 2]
    nm = np.asarray(moving.GetDirection(), np.float64).reshape(3, 3)[:, 2]
    if abs(float(nf @ nm)) < np.cos(np.radians(MAX_ORIENTATION_DEGREES)):
        return None  # other slice planes: orientation_warning / slice_plane_warning speak
    pf, pm = _slice_positions(fixed, nf), np.sort(_slice_positions(moving, nf))
    inside = pf[(pf >= pm[0] - 1e-6) & (pf <= pm[-1] + 1e-6)]
    if inside.size == 0:
        return None
    gap = float(np.max(np.min(np.abs(inside[:, None] - pm[None, :]), axis=1)))
    step = float(np.median(np.diff(pm)))
    if gap > share * step:
        return (
            f"the slices of moving image {moving_name} and fixed image {fixed_name} do not coincide: a fixed slice lies "
            f"{gap:.1f} mm from the nearest moving slice ({step:.1f} mm apart), so its warped image and label blend two moving "
            "slices; register stacks from the same slice positions (or check the origins)."
        )
    return None


def spacing_warning(
    moving: sitk.Image, fixed: sitk.Image, moving_name: str, fixed_name: str, ratio: float = MAX_SPACING_RATIO
) -> Optional[str]:
    """A warning when the in-plane pixel spacings of the two images differ by more than ``ratio``."""
    sm, sf = np.asarray(moving.GetSpacing()[:2], np.float64), np.asarray(fixed.GetSpacing()[:2], np.float64)
    worst = float(np.max(np.maximum(sm / sf, sf / sm)))
    if worst > ratio:
        return (
            f"moving image {moving_name} has pixel spacing {tuple(round(float(v), 4) for v in sm)} mm and fixed image "
            f"{fixed_name} {tuple(round(float(v), 4) for v in sf)} mm: {worst:.1f}x apart (more than {ratio:g}x); "
            "fine detail of the finer image is lost on the common model grid."
        )
    return None


def orientation_warning(
    moving: sitk.Image, fixed: sitk.Image, moving_name: str, fixed_name: str, degrees: float = MAX_ORIENTATION_DEGREES
) -> Optional[str]:
    """A warning when an image axis of ``moving`` is more than ``degrees`` from the same axis of ``fixed``."""
    dims = fixed.GetDimension()
    dm = np.asarray(moving.GetDirection(), np.float64).reshape(dims, dims)
    df = np.asarray(fixed.GetDirection(), np.float64).reshape(dims, dims)
    cosines = np.clip(np.sum(dm * df, axis=0), -1.0, 1.0)  # column k = index axis k
    angle = float(np.degrees(np.arccos(cosines)).max())
    if angle > degrees:
        return (
            f"moving image {moving_name} and fixed image {fixed_name} differ in orientation by {angle:.1f} degrees "
            f"(directions {tuple(round(float(v), 3) for v in dm.ravel())} vs {tuple(round(float(v), 3) for v in df.ravel())}); "
            "the moving image is resampled onto the fixed image's axes: check the headers if this is unexpected."
        )
    return None


def slice_plane_warning(image: sitk.Image, name: str) -> Optional[str]:
    """A warning when a 3-D stack's slices (the planes of index axes 0 and 1, which a 2-D model
    registers) are not its finest plane: the slice axis has a smaller spacing than an in-plane
    axis, as in an isotropic or reformatted volume whose acquisition plane is another one."""
    if image.GetDimension() != 3 or image.GetSize()[2] < 2:
        return None
    sx, sy, sz = image.GetSpacing()
    if sz < 0.99 * min(sx, sy):
        return (
            f"{name}: its slices (index axes 0-1, {sx:.3g} x {sy:.3g} mm) are coarser than its slice axis ({sz:.3g} mm); "
            "the 2-D model registers each slice of index axes 0-1, so a volume acquired in another plane (or an "
            "isotropic 3-D volume) is seen through-plane: reorient it so that its acquisition plane is axes 0-1."
        )
    return None


#: more distinct values than this in a label map: probably an image given as a label (carrying one costs a resampling per value)
MANY_LABELS = 64


def has_foreground(label: sitk.Image) -> bool:
    """Whether a label map has a voxel > 0 (a structure to carry or to steer by)."""
    return bool((sitk.GetArrayViewFromImage(label) > 0).any())


def empty_label_warning(label: sitk.Image, what: str = "label") -> Optional[str]:
    """A warning when a label map has no foreground (no value > 0), or so many values that it is probably an image."""
    array = sitk.GetArrayViewFromImage(label)
    if not has_foreground(label):
        return f"{what} is empty (no voxel > 0): Dice and warped labels carry no information."
    values = np.unique(array)
    if values.size > MANY_LABELS + 1:
        return (f"{what} has {values.size - 1} label values ({values[1]}..{values[-1]}): is it an intensity image? Each value is "
                "carried as its own label (slow), and Dice is per value.")
    return None


def check_inputs(
    moving: sitk.Image, fixed: sitk.Image, moving_name: str, fixed_name: str, size: int = 128, keep_aspect: bool = True
) -> None:
    """Every raising check of two images about to be registered: size and aspect ratio of each."""
    for image, what in ((moving, f"moving image {moving_name}"), (fixed, f"fixed image {fixed_name}")):
        check_image_size(image, what)
        check_aspect(image, what, size, keep_aspect)


def input_warnings(
    moving: sitk.Image,
    fixed: sitk.Image,
    moving_name: str,
    fixed_name: str,
    moving_label: Optional[sitk.Image] = None,
    fixed_label: Optional[sitk.Image] = None,
    moving_label_name: str = "moving label",
    fixed_label_name: str = "fixed label",
) -> List[str]:
    """Every warning about two images (and their labels) about to be registered; ``[]`` when none."""
    notes = [
        overlap_warning(overlap_percent(moving, fixed), moving_name, fixed_name)
        or coverage_warning(fixed_coverage_percent(moving, fixed), moving_name, fixed_name),
        slice_offset_warning(moving, fixed, moving_name, fixed_name),
        spacing_warning(moving, fixed, moving_name, fixed_name),
        orientation_warning(moving, fixed, moving_name, fixed_name),
        slice_plane_warning(moving, f"moving image {moving_name}"),
        slice_plane_warning(fixed, f"fixed image {fixed_name}"),
    ]
    if moving_label is not None:
        notes.append(empty_label_warning(moving_label, moving_label_name))
    if fixed_label is not None:
        notes.append(empty_label_warning(fixed_label, fixed_label_name))
    return [n for n in notes if n]
