"""An analytic short-axis cine with known myocardial strain: a thick-walled LV ring stack that contracts.

Each slice ``z`` is a ring (LV cavity radius ``R_endo(z)``, epicardial radius ``R_epi(z)``, both
narrowing from base to apex) around the LV centre, with an RV crescent on its left (on a display
with rows going down: RV on the left, the standard short-axis view). Angles ``Theta`` are screen
angles in mm coordinates, counterclockwise with rows going down (``atan2(-row, col)``; 0 = right,
90 degrees = up). The RV crescent spans ``[180 - RV_SPAN, 180 + RV_SPAN]`` degrees, so its
contact with the myocardium ends at the anterior RV insertion point, :data:`ANTERIOR_INSERTION_DEG`
(the upper end; the septum follows counterclockwise). The most apical slice has no RV.

Motion reference (frame 0, end-diastole) -> frame ``t``: every point keeps its angle and moves to
radius ``r`` with ``r^2 = h(R^2)``, then the slice turns by ``omega(z, t)`` and shifts by ``shift(t)``
(rigid, no strain). Outside the cavity core ``h(s) = s - Delta``, which keeps the area of every
angular sector: the wall is incompressible, and with ``Delta = R_endo^2 - r_endo^2`` the
endocardium moves from ``R_endo`` to ``r_endo``. ``Delta(z, Theta, t) = c(t) Delta_ES(z) (1 - a b(Theta))``:
``c(t)`` the contraction curve (:func:`~monai_npc.data.phantom_cine.contraction_curve`, 0 at ED,
1 at ES), ``Delta_ES`` from the endocardial radius shortening ``contraction`` at ES, and a
hypokinetic region (depth ``a``, ``b = ((1 + cos(Theta - Theta_h)) / 2)^2``) centred on the
inferolateral wall. Inside the cavity (``s < s_c = (R_endo - m)^2``, ``m`` = :data:`CORE_MARGIN_MM`) ``h`` is the cubic that
meets ``s - Delta`` with the same slope at ``s_c`` and maps 0 to 0 (smooth, increasing while
``Delta < 3 s_c / 4``), so the field is smooth across the endocardium. (The core is a model of
nothing: blood leaves the cavity through the valves; it only has to keep the field smooth.)

The exact strain of the myocardium, at a reference point ``(R, Theta)`` (``r^2 = R^2 - Delta``):
radial stretch ``R / r`` (every radial line stays radial), circumferential stretch
``sqrt((dr/dTheta)^2 + r^2) / R`` with ``dr/dTheta = -Delta'(Theta) / (2 r)``; engineering strain =
stretch - 1, Green-Lagrange = (stretch^2 - 1) / 2. The frame-``t`` label is the reference label at
the frame point's reference point (exact, no interpolation), and the displacement ``ddf`` follows
``monai_npc.track`` (frame voxels, ``label_t(x) = label_ref(x + ddf_t(x))``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Dict, Optional, Sequence, Tuple

import numpy as np

from .phantom_cine import contraction_curve

__all__ = ["ANTERIOR_INSERTION_DEG", "RV_SPAN_DEG", "StrainPhantom", "strain_phantom", "phantom_segments"]

#: half-angle of the RV crescent around 180 degrees (screen angle)
RV_SPAN_DEG = 60.0
#: screen angle of the anterior RV insertion point (the upper end of the RV contact)
ANTERIOR_INSERTION_DEG = 180.0 - RV_SPAN_DEG
#: centre of the hypokinetic region: the middle of segment 5 (basal inferolateral), 210 degrees on from the insertion point
HYPOKINESIS_CENTRE_DEG = ANTERIOR_INSERTION_DEG + 210.0
#: the cavity keeps the incompressible map down to this many mm inside the endocardium (a wider margin makes
#: the core's map steeper, and the inverse field less of a contraction, near the centre)
CORE_MARGIN_MM = 1.5

_COMPONENTS = ("circumferential", "radial")


@dataclass
class StrainPhantom:
    """The cine of :func:`strain_phantom` and its exact strain.

    Attributes:
        images: ``(T, Z, H, W)`` float32 intensities (blood about 1, myocardium 0.3, rest 0.12, Gaussian noise).
        labels: ``(T, Z, H, W)`` int32 (0 bg, 1 RV, 2 myocardium, 3 LV); ``labels[0]`` is the reference label.
        ddf: ``(T, 3, Z, H, W)`` float32 frame voxels, ``label_t(x) = label_ref(x + ddf[t](x))``
            (``monai_npc.track``'s convention; channel 0, through-plane, is 0).
        spacing: ``(Z, H, W)`` mm.
        frame_times: ``(T,)`` ms from frame 0.
        contraction: ``(T,)`` ``c(t)``, 0 at ED (frame 0), 1 at ES.
        centre: ``(2,)`` voxel ``(row, col)`` of the LV centre on the reference frame (every slice).
        segments: ``(Z, H, W)`` int32 true AHA segment (1-16) of each reference myocardium voxel, 0 elsewhere.
        true_global: ``{"circumferential", "radial"}`` -> ``(T,)`` percent, the exact strain averaged over the
            reference myocardium (label 2 of ``labels[0]``).
        true_segments: ``{"circumferential", "radial"}`` -> ``(T, 16)`` percent, the same per true segment.
        true_map: ``(T, 2, Z, H, W)`` float32 percent (channel 0 circumferential, 1 radial), NaN outside the
            reference myocardium.
        kind: ``"engineering"`` or ``"green"`` (what the true values are).
        reference_frame: 0.
        anterior_insertion_deg: screen angle of the anterior RV insertion point (every slice with an RV).
    """

    images: np.ndarray
    labels: np.ndarray
    ddf: np.ndarray
    spacing: Tuple[float, float, float]
    frame_times: np.ndarray
    contraction: np.ndarray
    centre: np.ndarray
    segments: np.ndarray
    true_global: Dict[str, np.ndarray]
    true_segments: Dict[str, np.ndarray]
    true_map: np.ndarray
    kind: str = "engineering"
    reference_frame: int = 0
    anterior_insertion_deg: float = ANTERIOR_INSERTION_DEG


def _wrap(angle: np.ndarray) -> np.ndarray:
    """Angles in radians wrapped to ``(-pi, pi]``."""
    return np.pi - np.mod(np.pi - angle, 2 * np.pi)


def _h(s: np.ndarray, delta: np.ndarray, s_c: float) -> np.ndarray:
    """``r^2`` of reference ``s = R^2`` (module docstring)."""
    k, b, d = 1.0 - delta / s_c, -delta / s_c**2, delta / s_c**3
    return np.where(s >= s_c, s - delta, k * s + b * s**2 + d * s**3)


def _h_inverse(q: np.ndarray, delta: np.ndarray, s_c: float) -> np.ndarray:
    """``s = R^2`` of frame ``q = r^2``: exact outside the core, bisection (60 halvings) inside."""
    out = q + delta
    core = q < s_c - delta
    qc, dc = q[core], np.broadcast_to(delta, q.shape)[core]
    lo, hi = np.zeros_like(qc), np.full_like(qc, s_c)
    for _ in range(60):
        mid = 0.5 * (lo + hi)
        low = _h(mid, dc, s_c) < qc
        lo, hi = np.where(low, mid, lo), np.where(low, hi, mid)
    out[core] = 0.5 * (lo + hi)
    return out


def phantom_segments(shape: Tuple[int, int, int], myocardium: np.ndarray, theta: np.ndarray, insertion_deg: float) -> np.ndarray:
    """True AHA segments ``(Z, H, W)`` of the myocardium ``(Z, H, W)`` bool from screen angles ``theta``
    ``(Z, H, W)`` radians: slices with myocardium split in thirds from ``z = 0`` (base; the first third
    takes any extra slice), 60-degree sectors from ``insertion_deg - 60`` (segment 1, 7) and 90-degree
    ones from ``insertion_deg - 75`` (13) going counterclockwise."""
    out = np.zeros(shape, np.int32)
    slices = [z for z in range(shape[0]) if myocardium[z].any()]
    thirds = np.array_split(np.asarray(slices, dtype=int), 3)
    rel = np.degrees(theta) - insertion_deg
    for level, zs in enumerate(thirds):
        for z in zs:
            if level < 2:
                seg = 1 + 6 * level + np.floor(np.mod(rel[z] + 60.0, 360.0) / 60.0).astype(np.int32)
            else:
                seg = 13 + np.floor(np.mod(rel[z] + 75.0, 360.0) / 90.0).astype(np.int32)
            out[z] = np.where(myocardium[z], seg, 0)
    return out


def strain_phantom(
    frames: int = 20,
    size: int = 128,
    slices: int = 6,
    spacing: Sequence[float] = (8.0, 1.5, 1.5),
    contraction: float = 0.25,
    hypokinesis: float = 0.6,
    twist_deg: Tuple[float, float] = (-4.0, 8.0),
    shift_mm: Tuple[float, float] = (2.0, -1.5),
    noise: float = 0.05,
    cycle_ms: float = 800.0,
    kind: str = "engineering",
    seed: int = 0,
) -> StrainPhantom:
    """A cine of ``frames`` short-axis stacks of an incompressible contracting LV ring with its exact strain.

    Args:
        frames: ``T`` frames over one cycle (ED = frame 0, ES = ``round(0.4 T)``).
        size: ``H = W`` pixels.
        slices: ``Z`` slices, base (``z = 0``, ``R_endo`` 25 mm, wall 10 mm) to near the apex
            (``R_endo`` 15 mm, wall 8 mm).
        spacing: ``(Z, H, W)`` mm.
        contraction: endocardial radius shortening at ES, a fraction (0.25: ``r_endo = 0.75 R_endo``)
            outside the hypokinetic region.
        hypokinesis: how much less the inferolateral wall contracts (0: not at all; 1: its centre stays still).
        twist_deg: in-plane rotation at ES of the base and the last slice (degrees, counterclockwise
            on screen), linear in between; rigid, no strain.
        shift_mm: in-plane translation ``(row, col)`` of the whole stack at ES (mm); rigid.
        noise: standard deviation of the Gaussian image noise (blood = 1).
        cycle_ms: duration of the cycle (``frame_times`` are ``t * cycle_ms / T``).
        kind: ``"engineering"`` (stretch - 1) or ``"green"`` (Green-Lagrange) for the true values.
        seed: the noise.

    Raises:
        ValueError: fewer than 2 frames or 3 slices, a grid too small for the heart, or a contraction too
            strong for the smooth cavity core (``Delta >= 3 s_c / 4``).
    """
    if frames < 2 or slices < 3:
        raise ValueError(f"strain_phantom needs at least 2 frames and 3 slices, got frames={frames}, slices={slices}.")
    if kind not in ("engineering", "green"):
        raise ValueError(f"kind must be 'engineering' or 'green', got {kind!r}.")
    if not 0.0 <= hypokinesis <= 1.0 or not 0.0 <= contraction < 1.0:
        raise ValueError(f"contraction must be in [0, 1) and hypokinesis in [0, 1], got {contraction}, {hypokinesis}.")
    sp = np.asarray(spacing, dtype=np.float64)
    if sp.shape != (3,) or (sp <= 0).any():
        raise ValueError(f"spacing must be 3 positive values (Z, H, W) mm, got {tuple(spacing)}.")
    level = np.arange(slices) / (slices - 1)
    r_endo = 25.0 - 10.0 * level
    r_epi = r_endo + 10.0 - 2.0 * level
    rv_depth = 15.0 - 5.0 * level
    has_rv = np.arange(slices) < slices - 1
    twist = np.radians(twist_deg[0] + (twist_deg[1] - twist_deg[0]) * level)
    if (r_epi.max() + rv_depth.max() + 2.0 * (abs(shift_mm[0]) + abs(shift_mm[1]))) > 0.5 * (size - 1) * sp[1:].min():
        raise ValueError(f"a {size} x {size} grid of {tuple(sp[1:])} mm is too small for the phantom heart (radius about "
                         f"{r_epi.max() + rv_depth.max():.0f} mm): give a larger size or spacing.")
    s_c = (r_endo - CORE_MARGIN_MM) ** 2
    delta_es = r_endo**2 * (1.0 - (1.0 - contraction) ** 2)
    if (delta_es >= 0.75 * s_c).any():
        raise ValueError(f"contraction {contraction} is too strong for the phantom's smooth cavity core; use at most about 0.35.")
    theta_h = np.radians(HYPOKINESIS_CENTRE_DEG)
    span = np.radians(RV_SPAN_DEG)
    curve = contraction_curve(frames)
    times = np.arange(frames) * (cycle_ms / frames)
    centre = np.array([0.5 * (size - 1), 0.5 * (size - 1)])
    rows, cols = np.meshgrid(np.arange(size, dtype=np.float64), np.arange(size, dtype=np.float64), indexing="ij")
    dr, dc = (rows - centre[0]) * sp[1], (cols - centre[1]) * sp[2]  # mm from the centre

    def profile(theta: np.ndarray) -> Tuple[np.ndarray, np.ndarray]:
        """``(1 - a b(theta), its derivative)``."""
        c = 0.5 * (1.0 + np.cos(theta - theta_h))
        return 1.0 - hypokinesis * c**2, hypokinesis * c * np.sin(theta - theta_h)

    def scene(big_r: np.ndarray, theta: np.ndarray, z: int, rng: Optional[np.random.Generator]) -> Tuple[np.ndarray, np.ndarray]:
        """``(image, label)`` of slice ``z`` at reference polar points."""
        label = np.zeros(big_r.shape, np.int32)
        rv = has_rv[z] & (big_r >= r_epi[z]) & (big_r < r_epi[z] + rv_depth[z]) & (np.abs(_wrap(theta - np.pi)) <= span)
        label[rv] = 1
        label[(big_r >= r_endo[z]) & (big_r < r_epi[z])] = 2
        label[big_r < r_endo[z]] = 3
        if rng is None:
            return np.zeros(big_r.shape, np.float32), label
        w = 0.7  # mm, edge width

        def inside(d: np.ndarray) -> np.ndarray:
            return 0.5 * (1.0 + np.tanh(d / w))

        lv = inside(r_endo[z] - big_r)
        wall = inside(r_epi[z] - big_r) - lv
        rv_soft = (inside(big_r - r_epi[z]) * inside(r_epi[z] + rv_depth[z] - big_r) * inside((span - np.abs(_wrap(theta - np.pi))) * big_r)
                   if has_rv[z] else 0.0)
        img = 0.12 + 0.88 * (lv + rv_soft) + 0.18 * wall + rng.normal(0.0, noise, big_r.shape)
        return img.astype(np.float32), label

    rng = np.random.default_rng(seed)
    ref_r, ref_theta = np.hypot(dr, dc), np.arctan2(-dr, dc)
    ref_labels = np.stack([scene(ref_r, ref_theta, z, None)[1] for z in range(slices)])
    myo = ref_labels == 2
    theta3 = np.broadcast_to(ref_theta, myo.shape)
    segments = phantom_segments(myo.shape, myo, theta3, ANTERIOR_INSERTION_DEG)

    images = np.zeros((frames, slices, size, size), np.float32)
    labels = np.zeros(images.shape, np.int32)
    ddf = np.zeros((frames, 3, slices, size, size), np.float32)
    true_map = np.full((frames, 2, slices, size, size), np.nan, np.float32)
    prof, dprof = profile(ref_theta)
    for t, c in enumerate(curve):
        for z in range(slices):
            # frame point -> reference point: undo the shift and the turn, then the radial map
            fr, fc = dr - c * shift_mm[0], dc - c * shift_mm[1]
            q, theta = fr**2 + fc**2, np.arctan2(-fr, fc) - c * twist[z]
            p_theta, _ = profile(theta)
            big_s = _h_inverse(q, c * delta_es[z] * p_theta, float(s_c[z]))
            big_r = np.sqrt(big_s)
            ref_row, ref_col = -big_r * np.sin(theta), big_r * np.cos(theta)  # mm from the centre
            ddf[t, 1, z] = (ref_row - dr) / sp[1]
            ddf[t, 2, z] = (ref_col - dc) / sp[2]
            images[t, z], labels[t, z] = scene(big_r, theta, z, rng)
            # exact strain at the reference myocardium points
            delta = c * delta_es[z] * prof
            small_r = np.sqrt(np.maximum(ref_r**2 - delta, 1e-12))
            radial = ref_r / small_r
            dr_dtheta = -(c * delta_es[z] * dprof) / (2.0 * small_r)
            circ = np.sqrt(dr_dtheta**2 + small_r**2) / np.maximum(ref_r, 1e-12)
            for k, stretch in enumerate((circ, radial)):
                value = stretch - 1.0 if kind == "engineering" else 0.5 * (stretch**2 - 1.0)
                true_map[t, k, z] = np.where(myo[z], 100.0 * value, np.nan)
    if ((ref_r**2)[None] < s_c[:, None, None])[myo].any():  # pragma: no cover - the core lies inside the cavity by construction
        raise AssertionError("a myocardium voxel lies in the cavity core")
    true_global = {name: np.array([float(np.nanmean(true_map[t, k][myo])) for t in range(frames)]) for k, name in enumerate(_COMPONENTS)}
    true_segments = {name: np.stack([[float(true_map[t, k][segments == s].mean()) if (segments == s).any() else np.nan
                                      for s in range(1, 17)] for t in range(frames)]) for k, name in enumerate(_COMPONENTS)}
    return StrainPhantom(images=images, labels=labels, ddf=ddf, spacing=tuple(float(v) for v in sp), frame_times=times, contraction=curve,
                         centre=centre, segments=segments, true_global=true_global, true_segments=true_segments, true_map=true_map, kind=kind)
