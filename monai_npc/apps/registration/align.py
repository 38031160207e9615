"""Step 0 of the input path: a rigid in-plane pre-alignment of the moving image to the fixed one.

The networks learn non-rigid motion of one acquisition (a cine's frames, an echo sequence): they do
not undo a patient turned or shifted between two studies, and a stack turned in-plane
registers much worse (docs/design_notes.md, "apps/registration/align.py";
``python benchmarks/rigid_alignment.py``). :func:`rigid_in_plane` finds that turn and shift
first, by Mattes mutual information with SimpleITK, as ANTs and the ITK examples start a
deformable registration from a rigid one; the network then registers what is left.

The transform is one rotation about the fixed image's slice normal and one in-plane translation
for the whole stack (a patient's turn between studies is the same for every slice), estimated in
the fixed image's own index frame so that it never moves a slice through the plane. It is returned
as a displacement field on the fixed grid in fixed voxels (array order, MONAI ``Warp``
convention), the form every later step composes with.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass
from typing import Any, Dict, Sequence, Tuple

import numpy as np
import SimpleITK as sitk

from monai_npc.interop.images import grid_mismatch

__all__ = ["ALIGN_MODES", "RigidAlignment", "check_align", "wants_rigid", "rigid_in_plane"]

#: ``register(align=...)``: ``"auto"`` aligns two images that do not share a grid (two acquisitions)
#: and leaves frames of one series (the same grid) alone; ``"rigid"`` always; ``"none"`` never.
ALIGN_MODES = ("auto", "none", "rigid")

#: the coarse search's starting turns are this many degrees apart
SEARCH_STEP_DEG = 30.0
#: pyramid levels (4x, 8x... coarser in-plane) keep at least this many voxels along each in-plane axis
MIN_LEVEL_SIZE = 32
#: the metric samples at least this many voxels of a level (a regular grid; at least 10 % of them)
MIN_SAMPLES = 5000
#: ITK jitters the regular sample grid randomly (by default from the wall clock): a fixed seed makes a
#: registration repeat itself exactly
SAMPLING_SEED = 1
#: no alignment is tried when the moving image covers less than this share of the fixed grid (the
#: overlap warning of ``register`` already names such a pair)
MIN_OVERLAP = 0.1
#: the transform found is kept only if the mutual information it gives is at least this fraction of the
#: fixed image's with itself: far above it for right turns, far below for wrong ones and for noise
#: (docs/design_notes.md, "apps/registration/align.py")
MIN_SHARED = 0.3


@dataclass
class RigidAlignment:
    """A rigid in-plane transform from the fixed image's points to the moving image's.

    Attributes:
        ddf: ``(Z, 2, H, W)`` float64 displacement on the fixed grid in fixed voxels (array order:
            channel 0 along rows, 1 along columns).
        angle_deg: rotation about the fixed image's slice normal through the centre of its grid,
            degrees, in its index frame (from its column axis towards its row axis).
        translation_mm: where that centre goes, ``(row, col)`` mm along the fixed image's axes.
        seconds: time of the estimate.
        cost, cost_unmoved: the Mattes mutual-information cost (negative; lower is better) of the
            transform found and of none, on the finest pyramid level.
        dropped: why the transform found was not kept (then the transform is the identity), else ``""``.
    """

    ddf: np.ndarray
    angle_deg: float
    translation_mm: Tuple[float, float]
    seconds: float
    cost: float = math.nan
    cost_unmoved: float = math.nan
    dropped: str = ""

    @property
    def applied(self) -> bool:
        """Whether the transform found was kept (else the identity is returned)."""
        return not self.dropped

    def as_dict(self) -> Dict[str, Any]:
        """What ``summary.json`` records."""
        out = {"method": "rigid", "applied": self.applied, "angle_deg": round(self.angle_deg, 3),
               "translation_mm": [round(t, 3) for t in self.translation_mm], "seconds": round(self.seconds, 3)}
        if self.dropped:
            out["dropped"] = self.dropped
        return out


def check_align(align: str, name: str = "align") -> str:
    """``align`` if it is one of :data:`ALIGN_MODES`, else a ``ValueError`` naming the argument ``name``."""
    if align not in ALIGN_MODES:
        raise ValueError(f"{name} must be one of {', '.join(ALIGN_MODES)}, got {align!r}.")
    return align


def wants_rigid(align: str, moving: sitk.Image, fixed: sitk.Image) -> bool:
    """Resolve ``align`` (one of :data:`ALIGN_MODES`) for a pair: ``"auto"`` aligns images that do not share
    size, spacing, origin and direction (:func:`~monai_npc.interop.images.grid_mismatch`)."""
    return check_align(align) == "rigid" or (align == "auto" and grid_mismatch(moving, fixed) is not None)


def _plane_image(array: np.ndarray, spacing: Sequence[float], factor: int = 1) -> sitk.Image:
    """``(Z, H, W)`` (Z = 1: a 2-D image) in the fixed image's index frame (identity direction, voxel
    centre ``(0, 0)`` at the origin), ``factor`` x coarser in-plane (its voxels' centres placed so)."""
    img = sitk.GetImageFromArray(np.ascontiguousarray(array[0] if array.shape[0] == 1 else array, dtype=np.float32))
    sp = (spacing[0] * factor, spacing[1] * factor, spacing[2])[: img.GetDimension()]
    img.SetSpacing(tuple(float(v) for v in sp))
    img.SetOrigin(tuple([(factor - 1) / 2.0 * spacing[0], (factor - 1) / 2.0 * spacing[1], 0.0][: img.GetDimension()]))
    return img


def _pooled(values: np.ndarray, valid: np.ndarray, factor: int) -> Tuple[np.ndarray, np.ndarray]:
    """In-plane block means of ``values`` over its ``valid`` voxels (``factor`` x ``factor`` blocks); a block is
    valid when more than half of it is. The pyramid is built here, not by the registration method, whose
    smoothing needs 4 voxels along every axis (a stack of 3 slices has fewer) and whose shrinking would
    mix slices."""
    if factor == 1:
        return np.where(valid, values, 0.0), valid
    z, h, w = values.shape
    hh, ww = h // factor * factor, w // factor * factor

    def blocks(a: np.ndarray) -> np.ndarray:
        return a[:, :hh, :ww].reshape(z, hh // factor, factor, ww // factor, factor).sum((2, 4))

    total, count = blocks(np.where(valid, values, 0.0)), blocks(valid.astype(np.float64))
    return total / np.maximum(count, 1.0), count > 0.5 * factor * factor


def rigid_in_plane(moving_on_fixed: np.ndarray, fixed: np.ndarray, spacing_mm: Sequence[float], search_deg: float = 90.0) -> RigidAlignment:
    """Estimate one in-plane rotation and translation that maps ``fixed`` onto ``moving_on_fixed``.

    Mattes mutual information (32 bins, a regular sample of at least :data:`MIN_SAMPLES` voxels),
    regular-step gradient descent, on an in-plane pyramid (8x, 4x, 2x coarser than the fixed grid,
    each level at least :data:`MIN_LEVEL_SIZE` voxels wide; the network refines what is left).
    On the coarsest level the turn is searched from starts :data:`SEARCH_STEP_DEG` apart within
    ``+-search_deg``; the best start is refined level by level. No transform is returned (with the
    reason in ``dropped``) when the images overlap too little (the moving image covers less than
    :data:`MIN_OVERLAP` of the fixed grid, or ITK finds too few samples inside both), when the
    result matches no better than no transform, or when it shares less than :data:`MIN_SHARED` of
    the fixed image's mutual information with itself (noise, unrelated content, a turn beyond the
    search: a turn found by chance).

    Args:
        moving_on_fixed: ``(Z, H, W)`` the moving image resampled on the fixed grid (NaN where it
            has no data: left out of the metric).
        fixed: ``(Z, H, W)`` the fixed image.
        spacing_mm: the fixed grid's voxel size ``(row, col[, slice])`` in mm.
        search_deg: the largest turn searched for, degrees (0: a local search from no turn).

    Returns:
        the transform as a field on the fixed grid (:class:`RigidAlignment`).
    """
    if moving_on_fixed.shape != fixed.shape or fixed.ndim != 3:
        raise ValueError(f"rigid_in_plane needs two (Z, H, W) arrays of one shape, got {moving_on_fixed.shape} and {fixed.shape}.")
    t0 = time.perf_counter()
    finite = np.isfinite(moving_on_fixed)
    if not finite.any():
        raise ValueError("rigid_in_plane: the moving image does not reach the fixed image's grid at all.")
    spacing = (float(spacing_mm[1]), float(spacing_mm[0]), float(spacing_mm[2]) if len(spacing_mm) > 2 else 1.0)  # (x=col, y=row, z)
    z, h, w = fixed.shape
    dims = 2 if z == 1 else 3
    centre = ((w - 1) / 2.0 * spacing[0], (h - 1) / 2.0 * spacing[1], 0.0)[:dims]
    levels = _pyramid(moving_on_fixed, fixed, finite, spacing)

    def run(factor: int, angle: float, shift: Sequence[float], iterations: int, itself: bool = False) -> Tuple[float, float, Tuple[float, float]]:
        return _optimise(levels[factor], centre, angle, shift, iterations, itself)

    angle, shift, cost, unmoved, dropped = 0.0, (0.0, 0.0), math.nan, math.nan, ""
    if not levels or finite.mean() < MIN_OVERLAP:
        dropped = f"the moving image covers {100 * finite.mean():.1f} % of the fixed grid (at least {100 * MIN_OVERLAP:.0f} % needed)"
    else:
        coarse = max(levels)
        if search_deg > 0:  # the turn can be large (a short-axis plane planned again): start from several
            top = min(float(search_deg), 180.0 - SEARCH_STEP_DEG / 2)  # -180 and 180 are one turn
            starts = np.deg2rad(np.concatenate([-np.arange(SEARCH_STEP_DEG, top + 1e-6, SEARCH_STEP_DEG)[::-1], np.arange(0.0, top + 1e-6, SEARCH_STEP_DEG)]))
            tries = [run(coarse, float(a), (0.0, 0.0), 30) for a in starts]
            _, angle, shift = min(tries, key=lambda t: t[0])  # Mattes MI is a cost: lower is better
        for factor in sorted(levels, reverse=True):
            cost, angle, shift = run(factor, angle, shift, 100)
        unmoved = run(min(levels), 0.0, (0.0, 0.0), 0)[0]
        itself = run(min(levels), 0.0, (0.0, 0.0), 0, itself=True)[0]  # Mattes MI is a cost: negative, lower is better
        if not (math.isfinite(cost) and math.isfinite(unmoved)):
            dropped = "too few voxels of the two images overlap for the metric"
        elif not cost < unmoved:
            dropped = "no turn or shift matches the images better than none"
        elif not cost <= MIN_SHARED * itself:
            dropped = (f"the best match shares {100 * cost / itself:.0f} % of the fixed image's information with itself (at least "
                       f"{100 * MIN_SHARED:.0f} % needed): the images look too different to align on, or the turn is beyond "
                       f"+-{search_deg:g} degrees")
        if dropped:
            angle, shift = 0.0, (0.0, 0.0)
    plane = _plane_field(angle, shift, centre, spacing, (h, w))
    return RigidAlignment(ddf=np.repeat(plane[None], z, 0), angle_deg=math.degrees(angle),
                          translation_mm=(float(shift[1]), float(shift[0])), seconds=time.perf_counter() - t0,
                          cost=float(cost), cost_unmoved=float(unmoved), dropped=dropped)


#: one pyramid level: (fixed, moving, moving mask, fixed mask) as SimpleITK images
_Level = Tuple[sitk.Image, sitk.Image, sitk.Image, sitk.Image]


def _pyramid(moving_on_fixed: np.ndarray, fixed: np.ndarray, finite: np.ndarray, spacing: Tuple[float, float, float]) -> Dict[int, _Level]:
    """``{factor: level}``: the images pooled 8x, 4x, 2x in-plane (each level at least :data:`MIN_LEVEL_SIZE` wide;
    else the full grid) where the moving image has data."""
    h, w = fixed.shape[1:]
    fixed_ok = np.isfinite(fixed)
    levels = {}
    for factor in [f for f in (8, 4, 2) if min(h, w) // f >= MIN_LEVEL_SIZE] or [1]:
        f_arr, f_ok = _pooled(fixed.astype(np.float64), fixed_ok, factor)
        m_arr, m_ok = _pooled(moving_on_fixed.astype(np.float64), finite, factor)
        if m_ok.any():
            levels[factor] = (_plane_image(f_arr, spacing, factor), _plane_image(m_arr, spacing, factor),
                              _plane_image(m_ok.astype(np.float32), spacing, factor) > 0.5,
                              _plane_image(f_ok.astype(np.float32), spacing, factor) > 0.5)
    return levels


def _optimise(level: _Level, centre: Sequence[float], angle: float, shift: Sequence[float], iterations: int,
              itself: bool = False) -> Tuple[float, float, Tuple[float, float]]:
    """One optimisation on a pyramid ``level`` from ``angle`` (rad) and ``shift`` (x, y mm): ``(metric value, angle,
    shift)`` at its end (``itself``: of the fixed image against itself; ``iterations`` 0: the cost of the start)."""
    dims = len(centre)
    tx = sitk.Euler2DTransform() if dims == 2 else sitk.Euler3DTransform()
    tx.SetCenter(centre)
    if dims == 2:
        tx.SetAngle(angle)
    else:
        tx.SetRotation(0.0, 0.0, angle)
    tx.SetTranslation(tuple(shift) + (0.0,) * (dims - 2))
    f_img, m_img, m_mask, f_mask = level
    if itself:
        m_img, m_mask = f_img, f_mask
    reg = sitk.ImageRegistrationMethod()
    reg.SetMetricAsMattesMutualInformation(32)
    reg.SetMetricSamplingStrategy(reg.REGULAR)
    reg.SetMetricSamplingPercentage(min(1.0, max(0.1, MIN_SAMPLES / float(np.prod(f_img.GetSize())))), SAMPLING_SEED)
    reg.SetMetricMovingMask(m_mask)
    reg.SetInterpolator(sitk.sitkLinear)
    reg.SetShrinkFactorsPerLevel([1])
    reg.SetSmoothingSigmasPerLevel([0.0])
    reg.MetricUseMovingImageGradientFilterOff()  # central differences: the Gaussian one needs 4 slices
    reg.MetricUseFixedImageGradientFilterOff()
    reg.SetOptimizerAsRegularStepGradientDescent(learningRate=1.0, minStep=1e-3, numberOfIterations=iterations, relaxationFactor=0.5)
    reg.SetOptimizerScalesFromPhysicalShift()
    if dims == 3:  # rotation about z (the slice normal) and x / y shifts only
        reg.SetOptimizerWeights([0.0, 0.0, 1.0, 1.0, 1.0, 0.0])
    reg.SetInitialTransform(tx, inPlace=True)
    try:
        if iterations == 0:  # the cost of the start itself
            return reg.MetricEvaluate(f_img, m_img), angle, tuple(shift)
        reg.Execute(f_img, m_img)
    except RuntimeError:  # ITK: too few samples inside both images from this start (little overlap)
        return math.inf, angle, tuple(shift)
    return reg.GetMetricValue(), (tx.GetAngle() if dims == 2 else tx.GetAngleZ()), tuple(tx.GetTranslation()[:2])


def _plane_field(angle: float, shift: Sequence[float], centre: Sequence[float], spacing: Sequence[float], shape: Tuple[int, int]) -> np.ndarray:
    """``(2, H, W)``: the turn by ``angle`` (rad) about ``centre`` and ``shift`` (x, y mm) as a field on the fixed voxels, in
    fixed voxels (rows, cols; array order), the same for every slice."""
    h, w = shape
    rows, cols = np.meshgrid(np.arange(h, dtype=np.float64), np.arange(w, dtype=np.float64), indexing="ij")
    x, y = cols * spacing[0] - centre[0], rows * spacing[1] - centre[1]
    c, s = math.cos(angle), math.sin(angle)
    dx = c * x - s * y + centre[0] + shift[0] - cols * spacing[0]
    dy = s * x + c * y + centre[1] + shift[1] - rows * spacing[1]
    return np.stack([dy / spacing[1], dx / spacing[0]])
