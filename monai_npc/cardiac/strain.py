"""Myocardial strain of a short-axis cine from its displacements: global, per AHA segment, over the cycle.

:func:`strain_from_displacements` turns the displacements of every frame relative to a
reference frame (``monai_npc.track``'s ``ddf``: frame voxels, ``label_t(x) = label_ref(x + ddf_t(x))``)
and the reference label into a :class:`Strain`:

- at every myocardium voxel ``X`` of the reference label (label 2), each slice in its own plane,
  the deformation gradient ``F(X)`` of the tissue's motion reference -> frame ``t`` in mm: the
  inverse of the gradient of ``x -> x + ddf_t(x)`` at the frame point ``y`` with ``y + ddf_t(y) = X``
  (:func:`monai_npc.functional.strain.reference_deformation_gradient`);
- the radial direction ``e_r`` (from the slice's LV centre on the reference label: the centroid of
  its LV cavity, label 3, or of its myocardium on an apical cap) and the circumferential one ``e_c``
  (``e_r`` turned by 90 degrees), in the reference configuration;
- the Lagrangian strain along each: ``"engineering"`` ``|F e| - 1`` (the relative change of length
  of the material line, what feature-tracking software reports; default) or ``"green"``
  (Green-Lagrange ``e^T E e``), in percent;
- averaged over the reference myocardium (every voxel weighs the same: the global curves) and
  over each AHA segment (:mod:`~monai_npc.cardiac.aha`: the regional curves). A voxel whose frame
  point cannot be found (no frame point reaches it: a miss above :data:`INVERSION_TOL_VOXELS`)
  or where the field folds or nearly does (``det F`` not within ``[1 / MAX_AREA_RATIO, MAX_AREA_RATIO]``,
  :data:`MAX_AREA_RATIO`) has no strain in that frame and is left out of its averages (:attr:`Strain.unresolved`
  counts them).

The strain of the reference frame is 0. Circumferential strain is negative in systole (the
muscle shortens), radial strain positive (it thickens). Peaks: the most negative circumferential
and the most positive radial value over the frames. Time to peak is counted from the reference
frame, going forwards round the cycle (ms with ``frame_times``, else frames); strain rate is the
time derivative of the curve (``numpy.gradient``, one-sided at the first and last frame) as a
fraction per second (``1/s``, with ``frame_times`` in ms) or per frame.
"""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional, Sequence, Tuple

import numpy as np
import torch

from monai_npc.functional.strain import FIELD_CONVENTIONS, STRAIN_KINDS, normal_strain, polar_directions, reference_deformation_gradient

from .aha import AHA_SEGMENTS, AHASegments, aha_segments, slice_centres

logger = logging.getLogger(__name__)

__all__ = ["STRAIN_COMPONENTS", "INVERSION_TOL_VOXELS", "MAX_AREA_RATIO", "UNRESOLVED_WARN_SHARE", "Strain", "strain_from_displacements"]

#: the components, in the order of the strain map's channel axis
STRAIN_COMPONENTS = ("circumferential", "radial")
#: a reference myocardium voxel whose frame point is not found to within this many voxels (no frame point reaches it)
#: is left out of that frame's strain (NaN in the map), as one where the field folds
INVERSION_TOL_VOXELS = 0.1
#: a reference myocardium voxel whose in-plane area the motion changes by more than this factor (``det F`` above it
#: or below its inverse) is left out of that frame's strain as well: the muscle is nearly incompressible, so its
#: in-plane area changes only as much as it shortens along the long axis (tens of percent), and a tenfold change is
#: the field nearly folding there, whose stretch (radial strain of thousands of percent) would swamp the average
#: (chosen on the ACDC validation pairs, docs/strain.md: 3 left out 7 % of the myocardium on average)
MAX_AREA_RATIO = 10.0
#: a warning names the frames where more than this share of the myocardium is left out
UNRESOLVED_WARN_SHARE = 0.01
#: the sign of each component's peak: circumferential strain peaks negative, radial positive
_PEAK_SIGN = {"circumferential": -1.0, "radial": +1.0}


def _nan_to_none(x: float) -> Optional[float]:
    return None if x is None or not math.isfinite(x) else float(x)


@dataclass
class Strain:
    """Myocardial strain of a cine relative to its reference frame (:func:`strain_from_displacements`).

    Attributes:
        global_circumferential: ``(T,)`` percent per frame, the mean over the reference myocardium (0 at the reference).
        global_radial: ``(T,)`` percent per frame.
        segment_curves: ``{"circumferential", "radial"}`` -> ``(T, 16)`` percent, the mean over each AHA
            segment (column ``s - 1`` for segment ``s``; NaN for a segment without voxels or without segments).
        strain_map: ``(T, 2, Z, H, W)`` float32 percent on the reference grid (channel 0 circumferential,
            1 radial), NaN outside the reference myocardium.
        reference_frame: the frame the strain is relative to (0-based).
        frame_times: ``(T,)`` ms, or ``None`` (times are frame numbers).
        kind: ``"engineering"`` (stretch - 1) or ``"green"`` (Green-Lagrange).
        aha: the segments used (``None`` when they could not be placed).
        inversion_residual: ``(T,)`` largest miss in voxels of the frame point found for a myocardium voxel.
        unresolved: ``(T,)`` share of the myocardium voxels left out of each frame (miss above
            :data:`INVERSION_TOL_VOXELS`, or a fold; NaN in ``strain_map``, not in the averages).
        myocardium_voxels: voxels averaged.
        notes: what the caller says about how the strain was read (``strain.json`` ``notes`` where there are any; e.g.
            a stack network's through-plane motion, which this in-plane strain does not read).
    """

    global_circumferential: np.ndarray
    global_radial: np.ndarray
    segment_curves: Dict[str, np.ndarray]
    strain_map: np.ndarray = field(repr=False)
    reference_frame: int = 0
    frame_times: Optional[np.ndarray] = None
    kind: str = "engineering"
    aha: Optional[AHASegments] = field(default=None, repr=False)
    inversion_residual: Optional[np.ndarray] = None
    unresolved: Optional[np.ndarray] = None
    myocardium_voxels: int = 0
    notes: List[str] = field(default_factory=list)

    @property
    def frames(self) -> int:
        return int(self.global_circumferential.shape[0])

    @property
    def curves(self) -> Dict[str, np.ndarray]:
        """``{"circumferential", "radial"}`` -> the global ``(T,)`` curves (percent)."""
        return {"circumferential": self.global_circumferential, "radial": self.global_radial}

    @property
    def time_unit(self) -> str:
        return "frame" if self.frame_times is None else "ms"

    @property
    def rate_unit(self) -> str:
        return "1/frame" if self.frame_times is None else "1/s"

    @property
    def times(self) -> np.ndarray:
        """``(T,)`` the time of each frame: ``frame_times`` (ms), else the frame numbers."""
        return np.arange(self.frames, dtype=np.float64) if self.frame_times is None else np.asarray(self.frame_times, dtype=np.float64)

    def _peak_index(self, curve: np.ndarray, sign: float) -> Optional[int]:
        if not np.isfinite(curve).any():
            return None
        return int(np.nanargmax(sign * curve))

    @property
    def peak_frame(self) -> Dict[str, Optional[int]]:
        """Frame of each global peak (``None`` for an all-NaN curve)."""
        return {k: self._peak_index(v, _PEAK_SIGN[k]) for k, v in self.curves.items()}

    @property
    def peak(self) -> Dict[str, float]:
        """``{"circumferential": most negative, "radial": most positive}`` global strain, percent."""
        return {k: float("nan") if self.peak_frame[k] is None else float(v[self.peak_frame[k]]) for k, v in self.curves.items()}

    def _since_reference(self, frame: Optional[int]) -> float:
        """Time from the reference frame to ``frame`` going forwards round the cycle (``time_unit``)."""
        if frame is None:
            return float("nan")
        t = self.times
        period = (t[-1] - t[0]) + (float(np.median(np.diff(t))) if len(t) > 1 else 1.0)
        dt = t[frame] - t[self.reference_frame]
        return float(dt + period if dt < 0 else dt)

    @property
    def time_to_peak(self) -> Dict[str, float]:
        """Time from the reference frame to each global peak (``time_unit``)."""
        return {k: self._since_reference(f) for k, f in self.peak_frame.items()}

    @property
    def strain_rate(self) -> Dict[str, np.ndarray]:
        """``{"circumferential", "radial"}`` -> ``(T,)`` d(strain)/dt as a fraction per ``rate_unit``'s time."""
        t = self.times / (1000.0 if self.frame_times is not None else 1.0)
        return {k: np.gradient(v / 100.0, t) for k, v in self.curves.items()}

    @property
    def peak_strain_rate(self) -> Dict[str, float]:
        """Most negative circumferential and most positive radial strain rate (``rate_unit``)."""
        out = {}
        for k, v in self.strain_rate.items():
            i = self._peak_index(v, _PEAK_SIGN[k])
            out[k] = float("nan") if i is None else float(v[i])
        return out

    @property
    def segments(self) -> Dict[int, Dict[str, float]]:
        """``{segment 1-16: {"circumferential": most negative, "radial": most positive}}`` percent (NaN where absent)."""
        out: Dict[int, Dict[str, float]] = {}
        for s in range(1, 17):
            out[s] = {}
            for k, curves in self.segment_curves.items():
                i = self._peak_index(curves[:, s - 1], _PEAK_SIGN[k])
                out[s][k] = float("nan") if i is None else float(curves[i, s - 1])
        return out

    @property
    def summary(self) -> Dict[str, Any]:
        """JSON-ready (NaN as ``None``): units, reference frame, global peaks / times / rates and curves,
        per-segment peaks and names, the AHA placement, the conventions (what ``strain.json`` holds)."""
        seg_peaks = self.segments
        notes = {"notes": list(self.notes)} if self.notes else {}
        glob = {}
        for k, curve in self.curves.items():
            glob[k] = {"peak": _nan_to_none(self.peak[k]), "peak_frame": self.peak_frame[k], "time_to_peak": _nan_to_none(self.time_to_peak[k]),
                       "peak_strain_rate": _nan_to_none(self.peak_strain_rate[k]), "curve": [_nan_to_none(round(float(v), 4)) for v in curve]}
        return {
            "units": {"strain": "%", "time": self.time_unit, "strain_rate": self.rate_unit},
            "kind": self.kind, "reference_frame": self.reference_frame, "frames": self.frames,
            "frame_times": None if self.frame_times is None else [float(v) for v in self.frame_times],
            "global": glob,
            "segments": {str(s): {"name": AHA_SEGMENTS[s], **{k: _nan_to_none(v) for k, v in seg_peaks[s].items()}} for s in range(1, 17)},
            "aha": None if self.aha is None else self.aha.summary,
            "myocardium_voxels": self.myocardium_voxels,
            "inversion_residual_voxels": None if self.inversion_residual is None else float(np.max(self.inversion_residual)),
            "unresolved_share": None if self.unresolved is None else [round(float(v), 5) for v in self.unresolved],
            "convention": ("Lagrangian strain relative to the reference frame, in-plane per short-axis slice, averaged over the "
                           "reference myocardium; circumferential and radial directions around each slice's LV centre; "
                           f"{'stretch - 1' if self.kind == 'engineering' else 'Green-Lagrange'}; frames 0-based"),
            **notes,
        }


def _in_plane_spacing(spacing: Sequence[float]) -> Tuple[float, float]:
    sp = [float(s) for s in np.asarray(spacing, dtype=np.float64).ravel()]
    if len(sp) == 3:
        sp = sp[1:]
    if len(sp) != 2 or not all(math.isfinite(s) and s > 0 for s in sp):
        raise ValueError(f"spacing must be (Z, H, W) or (H, W) positive mm, got {list(np.asarray(spacing).ravel())}.")
    return sp[0], sp[1]


def _frame_times(frame_times: Optional[Sequence[float]], frames: int) -> Optional[np.ndarray]:
    if frame_times is None:
        return None
    t = np.asarray(frame_times, dtype=np.float64).ravel()
    if t.shape != (frames,) or not np.isfinite(t).all() or (np.diff(t) <= 0).any():
        raise ValueError(f"frame_times must be {frames} increasing finite times in ms (one per frame of ddfs), got {t.tolist()}.")
    return t


def strain_from_displacements(
    ddfs: Any,
    reference_label: Any,
    spacing: Sequence[float],
    reference_frame: int = 0,
    frame_times: Optional[Sequence[float]] = None,
    *,
    kind: str = "engineering",
    convention: str = "to_reference",
    segments: bool = True,
    mirrored: bool = False,
    base: Optional[str] = None,
    rv: int = 1,
    myocardium: int = 2,
    lv: int = 3,
    iterations: int = 50,
    tol: float = 1e-3,
    max_area_ratio: Optional[float] = MAX_AREA_RATIO,
) -> Strain:
    """Myocardial strain of every frame relative to the reference frame (module docstring).

    Args:
        ddfs: ``(T, 2 | 3, Z, H, W)`` tensor or array, voxels; with 3 channels channel 0 is
            through-plane and is ignored, channels ``-2, -1`` are along ``H`` and ``W``.
            ``convention="to_reference"`` (``monai_npc.track``'s ``ddf``): ``ddfs[t]`` maps a point of
            frame ``t`` to its reference point; ``"from_reference"``: a reference point to its point in frame ``t``.
        reference_label: ``(Z, H, W)`` labels of the reference frame (ACDC: 1 RV, 2 myocardium, 3 LV).
        spacing: mm, ``(Z, H, W)`` or ``(H, W)``.
        reference_frame: the frame of ``reference_label`` (its displacement should be 0).
        frame_times: ``(T,)`` ms (time to peak in ms, strain rate in 1/s); ``None``: frames.
        kind: ``"engineering"`` (stretch - 1) or ``"green"`` (Green-Lagrange).
        segments: place the AHA segments (:func:`~monai_npc.cardiac.aha.aha_segments`); without an RV
            touching the myocardium they are skipped with a warning (segment curves NaN).
        mirrored, base: of :func:`~monai_npc.cardiac.aha.aha_segments`.
        rv, myocardium, lv: label values.
        iterations, tol: of the inversion of a ``"to_reference"`` field at the myocardium (voxels).
        max_area_ratio: voxels whose ``det F`` lies outside ``[1 / max_area_ratio, max_area_ratio]`` are left out
            (:data:`MAX_AREA_RATIO`); ``None``: only folds (``det F <= 0``).

    Returns:
        :class:`Strain`.

    Raises:
        ValueError: a ``ddfs`` that is not ``(T, 2 | 3, Z, H, W)`` with ``T >= 2``, a ``reference_label`` off its grid or
            without myocardium, a ``reference_frame`` out of range, bad ``spacing`` / ``frame_times`` / ``kind`` / ``convention`` /
            ``base``.
    """
    if kind not in STRAIN_KINDS:
        raise ValueError(f"kind must be one of {STRAIN_KINDS}, got {kind!r}.")
    if convention not in FIELD_CONVENTIONS:
        raise ValueError(f"convention must be one of {FIELD_CONVENTIONS}, got {convention!r}.")
    if max_area_ratio is not None and not (np.isfinite(max_area_ratio) and max_area_ratio > 1):
        raise ValueError(f"max_area_ratio must be a finite number > 1 or None, got {max_area_ratio}.")
    u = torch.as_tensor(ddfs).detach().to("cpu", torch.float32)
    if u.dim() != 5 or u.shape[1] not in (2, 3) or u.shape[0] < 2:
        raise ValueError(f"ddfs must be (T, 2 or 3, Z, H, W) with T >= 2 frames, got shape {tuple(u.shape)}.")
    frames = int(u.shape[0])
    lab = np.asarray(reference_label)
    if lab.shape != tuple(u.shape[2:]):
        raise ValueError(f"reference_label of shape {lab.shape} is not on the grid of ddfs {tuple(u.shape[2:])} (Z, H, W).")
    if not 0 <= int(reference_frame) < frames:
        raise ValueError(f"reference_frame {reference_frame} is out of range for {frames} frames (0-based).")
    ref = int(reference_frame)
    sp = _in_plane_spacing(spacing)
    times = _frame_times(frame_times, frames)
    myo = lab == myocardium
    if not myo.any():
        raise ValueError(f"reference_label has no myocardium (label {myocardium}): strain is averaged over it.")
    u = u[:, -2:]
    still = float(u[ref].abs().max())
    if still > 0.5:
        logger.warning("ddfs[%d] (the reference frame) moves by up to %.2f voxels; strain is relative to the frame of reference_label, "
                       "is reference_frame right?", ref, still)

    if base not in (None, "first", "last"):
        raise ValueError(f"base must be 'first', 'last' or None, got {base!r}.")
    aha: Optional[AHASegments] = None
    if segments:
        try:
            aha = aha_segments(lab, sp, rv=rv, myocardium=myocardium, lv=lv, base=base, mirrored=mirrored)
        except ValueError as err:
            logger.warning("no AHA segments: %s", err)

    # the myocardium voxels of each slice that has some, padded to one length with the slice's first voxel
    zs = [z for z in range(lab.shape[0]) if myo[z].any()]
    coords = [np.argwhere(myo[z]) for z in zs]
    n = max(len(c) for c in coords)
    padded = np.stack([np.concatenate([c, np.repeat(c[:1], n - len(c), 0)]) for c in coords])  # (Z', N, 2)
    valid = np.stack([np.arange(n) < len(c) for c in coords])  # (Z', N)
    points = torch.from_numpy(padded.astype(np.float32)).permute(0, 2, 1).contiguous()  # (Z', 2, N)
    centres = torch.from_numpy(slice_centres(lab, myocardium, lv)[zs])
    radial, circumferential = polar_directions(points.double(), centres, sp)  # (Z', N, 2) float64: strain 0 where F = I
    seg_ids = np.zeros(valid.shape, np.int64)
    if aha is not None:
        seg_ids = np.stack([aha.segments[z][tuple(p.T)] for z, p in zip(zs, padded)]).astype(np.int64)
    seg_ids = np.where(valid, seg_ids, 0)

    strain_map = np.full((frames, 2, *lab.shape), np.nan, np.float32)
    curves = np.full((2, frames), np.nan)
    seg_curves = np.full((2, frames, 16), np.nan)
    residual, unresolved = np.zeros(frames), np.zeros(frames)
    seg_of = seg_ids[valid]
    zi = np.concatenate([np.full(len(c), z) for z, c in zip(zs, coords)])
    rows, cols = np.concatenate(coords)[:, 0], np.concatenate(coords)[:, 1]
    for t in range(frames):
        field_ = u[t][:, zs].permute(1, 0, 2, 3).contiguous()  # (Z', 2, H, W)
        f, miss = reference_deformation_gradient(field_, sp, points, convention, iterations, tol)  # (Z', N, 2, 2), (Z', N)
        miss = miss.double().numpy()[valid]
        det = torch.linalg.det(f).double().numpy()[valid]
        ok = (miss <= INVERSION_TOL_VOXELS) & (det > 0)  # found, and not folded over
        if max_area_ratio is not None:  # nor nearly folded: an area change no muscle makes
            ok &= (det <= max_area_ratio) & (det >= 1.0 / max_area_ratio)
        residual[t], unresolved[t] = float(miss.max()), 1.0 - float(ok.mean())
        counts = np.bincount(seg_of[ok], minlength=17)[1:17]
        for k, direction in enumerate((circumferential, radial)):
            kept = np.where(ok, 100.0 * normal_strain(f.double(), direction, kind).numpy()[valid], np.nan)
            strain_map[t, k, zi, rows, cols] = kept
            if ok.any():
                curves[k, t] = float(kept[ok].mean())
            sums = np.bincount(seg_of[ok], weights=kept[ok], minlength=17)[1:17]
            seg_curves[k, t] = np.where(counts > 0, sums / np.maximum(counts, 1), np.nan)
    if aha is None:
        seg_curves[:] = np.nan
    bad = [t for t in range(frames) if unresolved[t] > UNRESOLVED_WARN_SHARE]
    if bad:
        logger.warning("frames %s: the displacement does not resolve up to %.1f %% of the reference myocardium (the field folds or "
                       "changes the area more than %.1f-fold there, or no frame point comes within %.2f voxels); those voxels are left out "
                       "of the strain.", bad, 100.0 * float(unresolved.max()), max_area_ratio or float("inf"), INVERSION_TOL_VOXELS)
    return Strain(
        global_circumferential=curves[0], global_radial=curves[1],
        segment_curves={name: seg_curves[k] for k, name in enumerate(STRAIN_COMPONENTS)}, strain_map=strain_map, reference_frame=ref,
        frame_times=times, kind=kind, aha=aha, inversion_residual=residual, unresolved=unresolved, myocardium_voxels=int(myo.sum()),
    )
