"""The AHA 16-segment model of the LV myocardium on a short-axis label stack.

Pure numpy on a label map ``(Z, H, W)`` (slice axis first; ACDC values: 1 RV cavity, 2 LV
myocardium, 3 LV cavity). The rules:

- **Levels.** The slices that hold myocardium, ordered from base to apex, are split in thirds
  (``numpy.array_split``: basal, mid, apical; with a number of slices not divisible by 3 the basal,
  then the mid third take the extra slice). The base is the end of the labelled slices nearer the
  area-weighted centre of all labels along the slice axis (the ventricles are widest at the
  base), unless ``base`` says which end it is.
- **Centre.** Angles are taken around each slice's LV centre: the centroid of its LV cavity, or
  of its myocardium where the slice has no cavity (apical cap), in mm.
- **Angle.** Screen angle in mm coordinates: on a display of the ``(H, W)`` slice with rows going
  down, counterclockwise, 0 degrees to the right, 90 up (``atan2(-row, col)``). ``mirrored=True``
  flips the sense (the angle is taken clockwise) for slices stored as a mirror image of the
  standard short-axis view.
- **Anchor.** The RV cavity touches the myocardium along the septum; that contact, seen from the
  LV centre, is an arc whose two ends are the RV insertion points. The contact points are the
  midpoints of the edges between a myocardium voxel and a 4-neighbour RV voxel (where a slice has
  none, the myocardium voxels within 1, 2, then 3 voxels of the RV). The arc is what is left of
  the circle after its largest gap between contact angles; the **anterior insertion point is the
  arc's counterclockwise start** (in the standard view, anterior up and the RV on the left, the
  upper end: the septum then follows counterclockwise). A slice with myocardium and no contact
  (often apical slices, where the RV ends) takes the angle of the nearest slice that has one.
- **Segments.** With ``a`` the anterior insertion angle: basal (1-6) and mid (7-12) slices have
  six 60-degree sectors going counterclockwise from ``a - 60`` (segment 1 anterior
  ``[a - 60, a)``, 2 anteroseptal ``[a, a + 60)``, 3 inferoseptal, 4 inferior, 5 inferolateral,
  6 anterolateral): the septal segments 2 and 3 cover the 120 degrees counterclockwise from the
  anterior insertion point, as the AHA model places them. Apical slices (13-16) have four
  90-degree sectors from ``a - 75`` (13 anterior, 14 septal centred on ``a + 60``, the middle of
  the septum, 15 inferior, 16 lateral). The apex cap (segment 17) is not labelled.

ACDC stores short-axis slices so that their arrays show the standard view (RV on the left,
anterior up, liver below), so ``mirrored=False`` fits it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Dict, List, Optional, Sequence, Tuple

import numpy as np
from scipy import ndimage

from .through_plane import base_end

__all__ = [
    "AHA_SEGMENTS",
    "AHA_LEVELS",
    "AHASegments",
    "base_end",
    "slice_levels",
    "slice_centres",
    "screen_angles",
    "insertion_angle",
    "sector_segments",
    "aha_segments",
]

#: AHA segment number -> name (16 segments; the apex cap, 17, is not used)
AHA_SEGMENTS: Dict[int, str] = {
    1: "basal anterior", 2: "basal anteroseptal", 3: "basal inferoseptal", 4: "basal inferior", 5: "basal inferolateral",
    6: "basal anterolateral", 7: "mid anterior", 8: "mid anteroseptal", 9: "mid inferoseptal", 10: "mid inferior",
    11: "mid inferolateral", 12: "mid anterolateral", 13: "apical anterior", 14: "apical septal", 15: "apical inferior",
    16: "apical lateral",
}
#: the three levels from base to apex
AHA_LEVELS = ("basal", "mid", "apical")


@dataclass
class AHASegments:
    """The AHA segments of one reference label (:func:`aha_segments`).

    Attributes:
        segments: ``(Z, H, W)`` int32, the segment (1-16) of each myocardium voxel, 0 elsewhere.
        levels: per slice ``"basal"``, ``"mid"``, ``"apical"`` or ``""`` (no myocardium).
        centres: ``(Z, 2)`` voxel ``(row, col)`` of each slice's LV centre (NaN without myocardium).
        insertion_deg: ``(Z,)`` angle (module docstring) of the anterior RV insertion point used on each
            slice, in ``[0, 360)`` degrees (NaN without myocardium).
        found: ``(Z,)`` bool, the slice's own RV contact gave its angle (else the nearest slice's).
        base: index of the most basal slice with myocardium.
        mirrored: the angle sense used.
    """

    segments: np.ndarray
    levels: Tuple[str, ...]
    centres: np.ndarray
    insertion_deg: np.ndarray
    found: np.ndarray
    base: int
    mirrored: bool = False

    @property
    def summary(self) -> Dict[str, object]:
        """JSON-ready: levels, insertion angles (``None`` where absent), which slices found their own, voxels per segment."""
        counts = np.bincount(self.segments.ravel(), minlength=17)[1:17]
        return {
            "levels": list(self.levels), "base_slice": self.base, "mirrored": self.mirrored,
            "insertion_deg": [None if not np.isfinite(a) else round(float(a), 2) for a in self.insertion_deg],
            "insertion_found": [bool(f) for f in self.found], "voxels": {str(s): int(c) for s, c in zip(range(1, 17), counts)},
        }


def _check_label(label: np.ndarray, name: str = "reference_label") -> np.ndarray:
    lab = np.asarray(label)
    if lab.ndim != 3:
        raise ValueError(f"{name} must be a (Z, H, W) label map, got shape {lab.shape}.")
    return lab


def _spacing2(spacing: Sequence[float]) -> np.ndarray:
    sp = np.asarray(spacing, dtype=np.float64).ravel()
    if sp.size == 3:
        sp = sp[1:]
    if sp.size != 2 or not np.isfinite(sp).all() or (sp <= 0).any():
        raise ValueError(f"spacing must be (Z, H, W) or (H, W) positive mm, got {tuple(np.asarray(spacing).ravel().tolist())}.")
    return sp


def slice_levels(label: np.ndarray, myocardium: int = 2, base: Optional[str] = None) -> Tuple[Tuple[str, ...], int]:
    """``(level per slice, most basal myocardium slice)``: the myocardium slices in base-to-apex thirds.

    ``base``: ``"first"`` (slice 0 is basal), ``"last"``, or ``None`` (:func:`base_end`).
    """
    lab = _check_label(label)
    with_myo = [z for z in range(lab.shape[0]) if (lab[z] == myocardium).any()]
    if not with_myo:
        raise ValueError(f"reference_label has no myocardium (label {myocardium}) on any slice.")
    if base is None:
        step = base_end(lab)[1]
    elif base in ("first", "last"):
        step = +1 if base == "first" else -1
    else:
        raise ValueError(f"base must be 'first', 'last' or None, got {base!r}.")
    ordered = with_myo if step > 0 else with_myo[::-1]
    levels = [""] * lab.shape[0]
    for name, part in zip(AHA_LEVELS, np.array_split(np.asarray(ordered), 3)):
        for z in part:
            levels[int(z)] = name
    return tuple(levels), ordered[0]


def slice_centres(label: np.ndarray, myocardium: int = 2, lv: int = 3) -> np.ndarray:
    """``(Z, 2)`` voxel centroid of each slice's LV cavity (its myocardium where it has none; NaN without either)."""
    lab = _check_label(label)
    out = np.full((lab.shape[0], 2), np.nan)
    for z in range(lab.shape[0]):
        for value in (lv, myocardium):
            pts = np.argwhere(lab[z] == value)
            if len(pts):
                out[z] = pts.mean(0)
                break
    return out


def screen_angles(points: np.ndarray, centre: Sequence[float], spacing: Sequence[float], mirrored: bool = False) -> np.ndarray:
    """Angles in degrees ``[0, 360)`` of voxel points ``(..., 2)`` ``(row, col)`` around ``centre`` (voxels),
    in mm (``spacing`` ``(H, W)``): counterclockwise on a display with rows going down (clockwise if ``mirrored``)."""
    sp = _spacing2(spacing)
    d = (np.asarray(points, dtype=np.float64) - np.asarray(centre, dtype=np.float64)) * sp
    angle = np.degrees(np.arctan2(-d[..., 0], d[..., 1]))
    return np.mod(-angle if mirrored else angle, 360.0)


def _contact_points(rv: np.ndarray, myo: np.ndarray) -> np.ndarray:
    """``(N, 2)`` voxel points where the RV meets the myocardium of one slice (module docstring)."""
    pts: List[np.ndarray] = []
    for axis in (0, 1):
        for step in (1, -1):
            shifted = np.zeros_like(rv)
            src = [slice(None)] * 2
            dst = [slice(None)] * 2
            src[axis] = slice(step, None) if step > 0 else slice(None, step)
            dst[axis] = slice(None, -step) if step > 0 else slice(-step, None)
            shifted[tuple(dst)] = rv[tuple(src)]  # shifted[x] = rv[x + step e_axis]
            edge = np.argwhere(myo & shifted).astype(np.float64)
            edge[:, axis] += 0.5 * step
            pts.append(edge)
    found = np.concatenate(pts)
    for k in (1, 2, 3):
        if len(found):
            break
        found = np.argwhere(myo & ndimage.binary_dilation(rv, np.ones((3, 3), bool), iterations=k)).astype(np.float64)
    return found


def insertion_angle(label2d: np.ndarray, centre: Sequence[float], spacing: Sequence[float], rv: int = 1, myocardium: int = 2,
                    mirrored: bool = False) -> Optional[float]:
    """Angle in degrees ``[0, 360)`` of the anterior RV insertion point of one ``(H, W)`` slice: the
    counterclockwise start of the RV-myocardium contact arc (module docstring); ``None`` without contact."""
    lab = np.asarray(label2d)
    pts = _contact_points(lab == rv, lab == myocardium)
    if not len(pts):
        return None
    angles = np.sort(screen_angles(pts, centre, spacing, mirrored))
    gaps = np.diff(np.concatenate([angles, angles[:1] + 360.0]))  # gap after each angle, the last one wrapping round
    return float(angles[(int(np.argmax(gaps)) + 1) % len(angles)])


def sector_segments(angles: np.ndarray, insertion_deg: float, level: str) -> np.ndarray:
    """AHA segment numbers of points at ``angles`` (degrees, the angle of :func:`screen_angles`) on a slice
    of ``level`` whose anterior insertion point is at ``insertion_deg`` (module docstring)."""
    rel = np.asarray(angles, dtype=np.float64) - float(insertion_deg)
    if level in ("basal", "mid"):
        first = 1 if level == "basal" else 7
        return first + np.floor(np.mod(rel + 60.0, 360.0) / 60.0).astype(np.int32) % 6
    if level == "apical":
        return 13 + np.floor(np.mod(rel + 75.0, 360.0) / 90.0).astype(np.int32) % 4
    raise ValueError(f"level must be one of {AHA_LEVELS}, got {level!r}.")


def aha_segments(
    reference_label: np.ndarray, spacing: Sequence[float], *, rv: int = 1, myocardium: int = 2, lv: int = 3, base: Optional[str] = None,
    mirrored: bool = False,
) -> AHASegments:
    """The AHA 16 segments of the myocardium of a short-axis label stack (module docstring for the rules).

    Args:
        reference_label: ``(Z, H, W)`` integer labels.
        spacing: mm, ``(Z, H, W)`` or ``(H, W)`` (angles are taken in mm).
        rv, myocardium, lv: label values (ACDC: 1, 2, 3).
        base: ``"first"`` / ``"last"``: which end of the slice axis is the base; ``None``: found (:func:`base_end`).
        mirrored: the slices are a mirror image of the standard short-axis view.

    Raises:
        ValueError: not ``(Z, H, W)``, no myocardium, or no slice where the RV touches the myocardium.
    """
    lab = _check_label(reference_label)
    sp = _spacing2(spacing)
    levels, first = slice_levels(lab, myocardium, base)
    centres = slice_centres(lab, myocardium, lv)
    z_myo = [z for z, level in enumerate(levels) if level]
    own = {z: insertion_angle(lab[z], centres[z], sp, rv, myocardium, mirrored) for z in z_myo}
    have = [z for z in z_myo if own[z] is not None]
    if not have:
        raise ValueError(f"no slice of reference_label has the RV (label {rv}) touching the myocardium (label {myocardium}): the anterior "
                         "RV insertion point, which anchors AHA segment 1, cannot be found.")
    insertion = np.full(lab.shape[0], np.nan)
    found = np.zeros(lab.shape[0], bool)
    segments = np.zeros(lab.shape, np.int32)
    for z in z_myo:
        near = min(have, key=lambda k: (abs(k - z), k))
        insertion[z], found[z] = own[near], near == z
        pts = np.argwhere(lab[z] == myocardium)
        segments[z][tuple(pts.T)] = sector_segments(screen_angles(pts, centres[z], sp, mirrored), insertion[z], levels[z])
    return AHASegments(segments=segments, levels=levels, centres=centres, insertion_deg=insertion, found=found, base=first, mirrored=mirrored)
