"""Cardiac cine-MRI and apical echocardiography phantoms with known ED->ES motion.

Each phantom is an analytic *scene* (intensity and label as functions of position in mm) and a
smooth, invertible *pull map* ``p -> p + u(p)`` from end-systole (ES) to end-diastole (ED)
positions. The ED frame renders the scene on the pixel grid; the ES frame renders it at
``p + u(p)``, so ``fixed(x) = moving(x + ddf(x))`` holds exactly for the noise-free images and
the labels (ED = moving, ES = fixed), up to the pixel sampling of the label boundaries.
Scanner effects stay in image space: the MRI bias field and the echo sector/gain do not move;
noise (Rician for MRI) is drawn independently per frame; echo speckle is partly carried by
the tissue (correlation 0.8) and partly fresh.

Displacements ``ddf`` are ``(2, H, W)`` float32 in voxels: channel ``k`` is the displacement
along array axis ``k`` (0 = rows, 1 = columns), MONAI ``Warp`` convention
``warped_moving(x) = moving(x + ddf(x))``.

Short-axis MRI (``cardiac_pair``): LV blood pool (label 3) with papillary muscles, myocardium
(2), RV crescent (1), epicardial fat, lungs, liver, chest wall; bSSFP-like contrast. ED->ES:
LV radial contraction (endocardial radius -20..30 %) with incompressible wall thickening,
RV contraction, twist, heart translation and a random smooth field.

Apical echo (``echo_pair``): sector with speckle; LV cavity (1), LV myocardium (2), left atrium
(3) and, in the four-chamber view, the right heart (unlabelled). ED->ES: the base descends
towards the fixed apex (8..14 mm), the cavity narrows (18..28 %), the wall thickens and the
atrium lengthens.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Dict, Optional, Sequence, Tuple

import numpy as np
from scipy import ndimage

__all__ = [
    "CardiacPatient",
    "EchoPatient",
    "cardiac_patient",
    "echo_patient",
    "render_cardiac",
    "render_echo",
    "cardiac_pair",
    "echo_pair",
    "invert_ddf",
]

Array = np.ndarray


# ----------------------------------------------------------------------------- helpers


def _grid(shape: Tuple[int, int], spacing: Tuple[float, float], offset: Tuple[float, float] = (0.0, 0.0)) -> Array:
    """Pixel centres in mm, ``(H, W, 2)`` (row, column)."""
    rows = offset[0] + spacing[0] * np.arange(shape[0], dtype=np.float32)
    cols = offset[1] + spacing[1] * np.arange(shape[1], dtype=np.float32)
    return np.stack(np.meshgrid(rows, cols, indexing="ij"), -1)


def _soft(sd: Array, width: float) -> Array:
    """Partial-volume mask from a signed distance (mm, negative inside): a linear ramp of
    ``2 * width`` mm across the boundary."""
    return np.clip(0.5 - sd * (0.5 / width), 0.0, 1.0)


def _hypot(d: Array) -> Array:
    """Length of 2-vectors ``(..., 2)``."""
    return np.hypot(d[..., 0], d[..., 1])


def _taper(x: Array, length: float) -> Array:
    """1 at ``x <= 0`` falling smoothly (cosine) to 0 at ``x >= length``."""
    y = np.clip(x / length, 0.0, 1.0)
    return 0.5 * (1.0 + np.cos(np.pi * y))


def _unit(angle: float) -> Array:
    """Unit vector (row, col) at ``angle`` (radians, measured like ``atan2(row, col)``)."""
    return np.array([np.sin(angle), np.cos(angle)])


@dataclass(frozen=True)
class _Field:
    """A smooth random field evaluable anywhere: linear interpolation of a smoothed coarse
    random grid ``values`` ``(C, n, n)`` with ``cell`` mm spacing.

    Positions are in mm relative to an anchor (the heart centre or the probe); outside the
    grid the field mirrors.
    """

    values: Array
    cell: float
    half_extent: float

    @staticmethod
    def draw(rng: np.random.Generator, extent: float, cell: float, amp: float, channels: int = 1) -> "_Field":
        n = int(np.ceil(extent / cell)) + 4
        raw = np.stack([ndimage.gaussian_filter(c, 0.7) for c in rng.normal(0.0, 1.0, (channels, n, n))])
        raw *= amp / max(float(raw.std()), 1e-6)  # the interpolant passes through these values
        return _Field(raw, cell, 0.5 * (n - 1) * cell)

    def __call__(self, q: Array) -> Array:
        coords = np.moveaxis((q + self.half_extent) / self.cell, -1, 0)
        out = [ndimage.map_coordinates(c, coords, order=1, mode="mirror") for c in self.values]
        return out[0] if len(out) == 1 else np.stack(out, -1)


def invert_ddf(ddf: Array, iterations: int = 50, tol: float = 1e-3) -> Array:
    """Inverse of a displacement field ``(2, H, W)`` (voxels, pull convention) by fixed-point
    iteration ``v(y) = -u(y + v(y))`` with linear interpolation (border values outside), until
    the update is below ``tol`` voxels or after ``iterations`` steps.

    If ``ddf`` warps moving onto fixed, the result warps fixed onto moving.
    """
    grid = np.stack(np.meshgrid(*[np.arange(n, dtype=np.float32) for n in ddf.shape[1:]], indexing="ij"))
    ddf = ddf.astype(np.float32)
    inv = -ddf
    for _ in range(iterations):
        coords = grid + inv
        new = -np.stack([ndimage.map_coordinates(c, coords, order=1, mode="nearest") for c in ddf])
        done = float(np.abs(new - inv).max()) < tol
        inv = new
        if done:
            break
    return inv


def _sample(field: Array, coords_vox: Array) -> Array:
    """Bilinear samples of ``field`` ``(H, W)`` (real or complex) at ``coords_vox`` ``(H', W', 2)``."""
    c = np.moveaxis(coords_vox, -1, 0)
    if np.iscomplexobj(field):
        return _sample(field.real, coords_vox) + 1j * _sample(field.imag, coords_vox)
    return ndimage.map_coordinates(field, c, order=1, mode="reflect")


# ----------------------------------------------------------------------------- cardiac MRI


@dataclass(frozen=True)
class CardiacPatient:
    """Random anatomy, contrast and motion of one short-axis cine phantom (lengths in mm)."""

    r_endo: float  # LV ED endocardial radius at the base
    thick: float  # LV wall thickness
    ellip: float  # LV minor/major axis ratio
    ell_angle: float
    rv_angle: float  # direction of the RV from the LV centre
    rv_span: float  # half angle of the RV crescent
    rv_depth: float  # RV cavity width at the base
    contraction: float  # ED->ES relative reduction of the LV endocardial radius
    rv_contraction: float
    twist: float  # radians
    shift: Array  # heart translation ED->ES, mm
    body_offset: Array  # body centre relative to the LV centre
    body_axes: Array
    papillary: Array  # angles of the two papillary muscles
    contrast: Dict[str, float]
    noise: float  # Rician sigma relative to blood signal
    bias: Array  # quadratic bias field coefficients
    texture: _Field  # fine tissue texture (relative)
    tissue: _Field  # coarse organ-scale intensity variation
    warp: _Field  # random smooth displacement field (mm)


def cardiac_patient(rng: np.random.Generator) -> CardiacPatient:
    """Draw a :class:`CardiacPatient` from ``rng``."""
    u = rng.uniform
    contrast = {
        "blood": u(0.85, 1.0), "myo": u(0.22, 0.32), "fat": u(0.7, 0.9), "lung": u(0.02, 0.08),
        "liver": u(0.3, 0.42), "muscle": u(0.25, 0.35), "tissue": u(0.3, 0.45), "subcut": u(0.7, 0.9),
    }
    return CardiacPatient(
        r_endo=u(21.0, 27.0),
        thick=u(7.5, 10.5),
        ellip=u(0.88, 1.0),
        ell_angle=u(0, np.pi),
        rv_angle=np.deg2rad(rng.normal(165.0, 10.0)),
        rv_span=np.deg2rad(u(62.0, 80.0)),
        rv_depth=u(13.0, 20.0),
        contraction=u(0.2, 0.3),
        rv_contraction=u(0.12, 0.25),
        twist=np.deg2rad(u(-6.0, 6.0)),
        shift=rng.normal(0.0, 0.8, 2),
        body_offset=np.array([u(10, 30), u(-45, -20)]),
        body_axes=np.array([u(105, 125), u(150, 175)]),
        papillary=np.deg2rad(np.array([u(-10, 30), u(50, 100)])),
        contrast=contrast,
        noise=u(0.025, 0.05),
        bias=rng.normal(0.0, 0.25, 5),
        texture=_Field.draw(rng, 420.0, 7.0, 0.05),
        tissue=_Field.draw(rng, 420.0, 16.0, 0.1),
        warp=_Field.draw(rng, 420.0, 30.0, 0.7, channels=2),
    )


def _lv_radius(patient: CardiacPatient, level: float) -> float:
    """ED endocardial radius at ``level`` (0 = base, 1 = apex)."""
    return patient.r_endo * float(np.sqrt(max(1.0 - 0.72 * level**2, 0.12)))


def _cardiac_scene(q: Array, patient: CardiacPatient, level: float, centre: Array, spacing: float) -> Tuple[Array, Array]:
    """Noise-free intensity and labels of the ED anatomy at positions ``q`` ``(..., 2)`` mm."""
    c = patient.contrast
    edge = 0.35 * spacing
    a = _lv_radius(patient, level)
    t = patient.thick * (1.0 - 0.2 * level)
    d = q - centre
    # LV: slightly elliptic; rho is the distance scaled to the circle of radius a
    ca, sa = np.cos(patient.ell_angle), np.sin(patient.ell_angle)
    du, dv = d[..., 0] * ca + d[..., 1] * sa, -d[..., 0] * sa + d[..., 1] * ca
    rho = np.sqrt((du / patient.ellip) ** 2 + dv**2) * np.sqrt(patient.ellip)
    sd_lv, sd_epi = rho - a, rho - (a + t)
    # RV crescent hugging the LV epicardium
    theta = np.mod(np.arctan2(d[..., 0], d[..., 1]) - patient.rv_angle + np.pi, 2 * np.pi) - np.pi
    depth = patient.rv_depth * (1.0 - 0.55 * level) * np.clip(np.cos(0.5 * np.pi * theta / patient.rv_span), 0, None) ** 0.6
    has_rv = level < 0.85
    sd_rv = np.maximum((a + t) - rho, rho - (a + t) - depth) if has_rv else np.full_like(rho, 1e3)
    sd_rv = np.where(depth > 0.5, sd_rv, np.maximum(sd_rv, 0.5))
    sd_rvwall = np.maximum(-sd_epi, rho - (a + t) - depth - 3.0) if has_rv else np.full_like(rho, 1e3)
    # papillary muscles inside the LV (labelled LV, as in ACDC)
    sd_pap = np.full_like(rho, 1e3)
    if level < 0.75:
        for ang in patient.papillary:
            pc = centre + (a - 4.5) * _unit(ang + patient.rv_angle + np.pi)
            sd_pap = np.minimum(sd_pap, _hypot(q - pc) - 3.0)
    # surroundings: body, chest wall fat, lungs, liver
    b = (q - centre - patient.body_offset) / patient.body_axes
    sd_body = (_hypot(b) - 1.0) * patient.body_axes.min()
    lung1 = _hypot((d - np.array([-30.0, 55.0])) / np.array([38.0, 30.0])) - 1.0
    lung2 = _hypot((d - np.array([-35.0, -85.0])) / np.array([40.0, 28.0])) - 1.0
    liver = _hypot((d - np.array([75.0, -45.0])) / np.array([35.0, 60.0])) - 1.0
    tex = patient.tissue(d)
    img = np.zeros(q.shape[:-1])
    img = img + _soft(sd_body, edge) * (c["subcut"] + 0.5 * tex)
    inner = _soft(sd_body + 10.0, 2.0)  # inside the subcutaneous fat ring
    img = img * (1 - inner) + inner * (c["tissue"] + tex)
    for sd_organ, value in ((liver * 30.0, c["liver"]), (np.minimum(lung1, lung2) * 30.0, c["lung"])):
        m = _soft(sd_organ, 2.0) * inner
        img = img * (1 - m) + m * (value + 0.3 * tex)
    heart_fat = _soft(rho - (a + t + 3.0 + 2.0 * np.cos(2 * theta)), edge)
    for mask, value in (
        (heart_fat, c["fat"]),
        (_soft(sd_rvwall, edge), c["myo"]),
        (_soft(sd_rv, edge), c["blood"]),
        (_soft(sd_epi, edge), c["myo"]),
        (_soft(sd_lv, edge), c["blood"]),
        (_soft(sd_pap, edge), c["myo"] + 0.05),
    ):
        img = img * (1 - mask) + mask * value
    img = img * (1.0 + patient.texture(d))
    label = np.zeros(q.shape[:-1], np.uint8)
    label[sd_rv < 0] = 1
    label[sd_epi < 0] = 2
    label[sd_lv < 0] = 3
    return img, label


def _cardiac_pull(p: Array, patient: CardiacPatient, level: float, centre: Array) -> Array:
    """ES -> ED source positions ``(..., 2)`` mm for ES positions ``p``."""
    # heart translation, fading away from the heart
    w = np.exp(-_hypot(p - centre) ** 2 / (2 * 70.0**2))[..., None]
    q = p + patient.shift * w
    d = q - centre
    r = np.maximum(_hypot(d), 1e-6)
    a0 = _lv_radius(patient, level)
    t0 = patient.thick * (1.0 - 0.2 * level)
    b0 = a0 + t0
    a1 = a0 * (1.0 - patient.contraction)
    c = a0**2 - a1**2
    b1 = np.sqrt(b0**2 - c)  # incompressible wall: ES ring area = ED ring area
    src = np.where(
        r <= a1, r * a0 / a1, np.where(r <= b1, np.sqrt(r**2 + c), r + (b0 - b1) * _taper(r - b1, 22.0))
    )
    phi = patient.twist * _taper(r - b1, 25.0)
    cp, sp = np.cos(phi), np.sin(phi)
    unit = d / r[..., None]
    rot = np.stack([unit[..., 0] * cp - unit[..., 1] * sp, unit[..., 0] * sp + unit[..., 1] * cp], -1)
    q = centre + rot * src[..., None]
    # RV free wall moves towards the septum
    rv_c = centre + _unit(patient.rv_angle) * (b0 + 0.4 * patient.rv_depth * (1.0 - 0.55 * level))
    outside = 1.0 - _taper(_hypot(q - centre) - b0 + 2.0, 10.0)  # the LV does not follow
    g = patient.rv_contraction * np.exp(-_hypot(q - rv_c) ** 2 / (2 * (0.8 * b0) ** 2)) * outside
    q = q + (q - rv_c) * g[..., None] * (level < 0.85)
    return q + patient.warp(p - centre) * w


def render_cardiac(
    patient: CardiacPatient,
    level: float,
    shape: Tuple[int, int],
    spacing: Tuple[float, float],
    centre: Optional[Sequence[float]] = None,
    rng: Optional[np.random.Generator] = None,
) -> Dict[str, Array]:
    """Render one short-axis slice pair of ``patient`` at ``level`` (0 = base, 1 = apex).

    Args:
        shape: ``(H, W)`` pixels; spacing: ``(row, col)`` mm per pixel.
        centre: LV centre in mm from the first pixel centre (default: the FOV centre, shifted
            12 mm towards the columns' end so the RV on the left fits).
        rng: noise generator (default: seeded from the patient).

    Returns:
        ``moving`` (ED), ``fixed`` (ES) ``(H, W)`` float32 in ``[0, 1]``, ``moving_label``,
        ``fixed_label`` ``(H, W)`` uint8 (1 RV, 2 Myo, 3 LV), ``ddf`` ``(2, H, W)`` float32 voxels.
    """
    rng = np.random.default_rng(0) if rng is None else rng
    spacing_arr = np.asarray(spacing, dtype=np.float64)
    if centre is None:
        centre = np.array([0.5 * (shape[0] - 1) * spacing[0], 0.5 * (shape[1] - 1) * spacing[1] + 12.0])
    centre = np.asarray(centre, dtype=np.float64)
    p = _grid(shape, spacing)
    src = _cardiac_pull(p, patient, level, centre)
    u = ndimage.gaussian_filter(src - p, sigma=(1.0, 1.0, 0), mode="nearest")  # smooth the kinks
    src = p + u
    yy, xx = (p[..., 0] - centre[0]) / 100.0, (p[..., 1] - centre[1]) / 100.0
    bias = np.exp(patient.bias[0] * yy + patient.bias[1] * xx + 0.5 * (patient.bias[2] * yy**2 + patient.bias[3] * xx**2 + patient.bias[4] * xx * yy))
    out = {}
    for name, where in (("moving", p), ("fixed", src)):
        img, lab = _cardiac_scene(where, patient, level, centre, float(spacing_arr.min()))
        img = img * bias
        sigma = patient.noise
        img = np.sqrt((img + rng.normal(0, sigma, img.shape)) ** 2 + rng.normal(0, sigma, img.shape) ** 2)
        lo, hi = img.min(), img.max()
        out[name] = ((img - lo) / max(hi - lo, 1e-8)).astype(np.float32)
        out[f"{name}_label"] = lab
    out["ddf"] = np.moveaxis(u / spacing_arr, -1, 0).astype(np.float32)
    return out


def cardiac_pair(size: int = 128, seed: int = 0) -> Dict[str, Array]:
    """A short-axis cine-MRI ED/ES pair with its true displacement, like a cropped ACDC slice.

    ``size`` x ``size`` pixels over a 192 mm field of view (1.5 mm at 128); ``seed`` draws the
    anatomy, the slice level (mid-ventricular +- basal/apical), the motion and the noise.

    Returns:
        ``moving`` (ED), ``fixed`` (ES): ``(H, W)`` float32 in ``[0, 1]``;
        ``moving_label``, ``fixed_label``: ``(H, W)`` uint8 (0 bg, 1 RV, 2 Myo, 3 LV);
        ``ddf``: ``(2, H, W)`` float32 voxels with ``fixed(x) ~ moving(x + ddf(x))``.
    """
    if int(size) < 16:
        raise ValueError(f"size must be at least 16 pixels, got {size}.")
    rng = np.random.default_rng(seed)
    patient = cardiac_patient(rng)
    level = float(rng.uniform(0.15, 0.7))
    spacing = 192.0 / size
    return render_cardiac(patient, level, (size, size), (spacing, spacing), rng=rng)


# ----------------------------------------------------------------------------- echo


@dataclass(frozen=True)
class EchoPatient:
    """Random anatomy, motion and image formation of one apical echo phantom (mm)."""

    apex_depth: float
    apex_lateral: float
    tilt: float  # radians
    length: float  # apex -> mitral plane (endocardium), ED
    half_width: float  # LV cavity half width, ED
    thick: float
    la_length: float  # atrium semi-axis along the LV axis
    la_width: float
    base_descent: float  # ED->ES mitral-plane motion towards the apex
    narrowing: float  # ED->ES relative cavity narrowing
    thickening: float  # ES / ED wall thickness
    shift: Array
    gain: Dict[str, float]
    texture: _Field
    warp: _Field
    half_angle: float
    four_chamber: bool


def echo_patient(rng: np.random.Generator, view: str = "4CH", scale: float = 1.0) -> EchoPatient:
    """Draw an :class:`EchoPatient`; ``view`` ``"2CH"`` or ``"4CH"``; ``scale`` scales the anatomy."""
    if view not in ("2CH", "4CH"):
        raise ValueError(f"view must be '2CH' or '4CH', got {view!r}.")
    u = rng.uniform
    gain = {"blood": u(0.005, 0.02), "myo": u(0.3, 0.45), "wall": u(0.3, 0.45), "tissue": u(0.06, 0.14), "pericardium": u(0.7, 0.9)}
    return EchoPatient(
        apex_depth=u(14.0, 22.0),
        apex_lateral=rng.normal(0.0, 4.0),
        tilt=np.deg2rad(rng.normal(0.0, 6.0)),
        length=u(68.0, 80.0) * scale,
        half_width=u(19.0, 24.0) * scale,
        thick=u(8.0, 11.0) * scale,
        la_length=u(17.0, 22.0) * scale,
        la_width=u(15.0, 20.0) * scale,
        base_descent=u(8.0, 14.0) * scale,
        narrowing=u(0.18, 0.28),
        thickening=u(1.25, 1.45),
        shift=rng.normal(0.0, 0.8, 2),
        gain=gain,
        texture=_Field.draw(rng, 400.0, 5.0, 0.12),
        warp=_Field.draw(rng, 400.0, 25.0, 0.6, channels=2),
        half_angle=np.deg2rad(u(36.0, 40.0)),
        four_chamber=view == "4CH",
    )


def _echo_local(q: Array, patient: EchoPatient, probe: Array) -> Tuple[Array, Array]:
    """(s, t): distance along the LV axis from the apex and lateral offset, mm."""
    apex = probe + np.array([patient.apex_depth, patient.apex_lateral])
    d = q - apex
    c, s = np.cos(patient.tilt), np.sin(patient.tilt)
    return d[..., 0] * c + d[..., 1] * s, -d[..., 0] * s + d[..., 1] * c


def _from_local(s: Array, t: Array, patient: EchoPatient, probe: Array) -> Array:
    apex = probe + np.array([patient.apex_depth, patient.apex_lateral])
    c, sn = np.cos(patient.tilt), np.sin(patient.tilt)
    return apex + np.stack([s * c - t * sn, s * sn + t * c], -1)


def _ellipse_half_width(s: Array, centre: float, semi_s: float, semi_t: float) -> Array:
    return semi_t * np.sqrt(np.clip(1.0 - ((s - centre) / semi_s) ** 2, 0.0, None))


def _echo_shapes(patient: EchoPatient):
    sm = 0.55 * patient.length  # cavity ellipse centre on the axis; apex at s = 0
    return sm, sm, patient.half_width  # centre, semi-axis along s, lateral semi-axis


def _echo_scene(q: Array, patient: EchoPatient, probe: Array, spacing: float) -> Tuple[Array, Array]:
    """Echogenicity (before speckle) and labels of the ED anatomy at ``q`` ``(..., 2)`` mm."""
    g = patient.gain
    edge = 0.35 * spacing
    s, t = _echo_local(q, patient, probe)
    sm, A, a = _echo_shapes(patient)
    L, th = patient.length, patient.thick
    e = np.sqrt((s - sm) ** 2 / A**2 + t**2 / a**2)
    eo = np.sqrt((s - sm) ** 2 / (A + th) ** 2 + t**2 / (a + th) ** 2)
    sd_cav = np.maximum((e - 1.0) * a, s - L)
    sd_out = np.maximum((eo - 1.0) * (a + th), s - L)
    la_c = L + patient.la_length
    sd_la = np.maximum((np.sqrt((s - la_c) ** 2 / patient.la_length**2 + (t - 2.0) ** 2 / patient.la_width**2) - 1.0) * patient.la_width, L - s)
    sd_heart = np.minimum(sd_out, sd_la - 2.0)
    img = np.full(q.shape[:-1], g["tissue"]) * (1.0 + 2.0 * patient.texture(q - probe))
    layers = [(_soft(sd_heart - 4.0, 1.5), g["pericardium"])]
    if patient.four_chamber:  # right heart on the septal side (t < 0), not labelled
        rv_t = -(a + th + 13.0)
        sd_rv = (np.sqrt((s - 0.55 * L) ** 2 / (0.45 * L) ** 2 + (t - rv_t) ** 2 / 13.0**2) - 1.0) * 13.0
        sd_ra = (np.sqrt((s - la_c) ** 2 / (0.9 * patient.la_length) ** 2 + (t - rv_t - 3.0) ** 2 / 14.0**2) - 1.0) * 14.0
        sd_right = np.maximum(np.minimum(sd_rv, sd_ra), -sd_out)
        layers += [(_soft(sd_right - 4.0, edge), g["wall"]), (_soft(sd_right, edge), g["blood"])]
    layers += [
        (_soft(sd_la - 3.0, edge), g["wall"]),
        (_soft(sd_la, edge), g["blood"]),
        (_soft(sd_out, edge), g["myo"] * (1.0 + patient.texture(q - probe))),
        (_soft(sd_cav, edge), g["blood"]),
    ]
    for mask, value in layers:
        img = img * (1 - mask) + mask * value
    label = np.zeros(q.shape[:-1], np.uint8)
    label[sd_la < 0] = 3
    label[sd_out < 0] = 2
    label[sd_cav < 0] = 1
    return np.clip(img, 0.0, None), label


def _echo_pull(p: Array, patient: EchoPatient, probe: Array) -> Array:
    """ES -> ED source positions for ES positions ``p`` ``(..., 2)`` mm."""
    q = p + patient.shift
    s, t = _echo_local(q, patient, probe)
    L0, dl = patient.length, patient.base_descent
    L1 = L0 - dl
    la_span = 2.0 * patient.la_length
    sm, A, a = _echo_shapes(patient)
    s_src = np.where(s <= 0, s, np.where(s <= L1, s * L0 / L1, s + dl * _taper(s - L1, la_span)))
    # the longitudinal motion belongs to the heart: it fades laterally beyond the walls
    s_src = s + (s_src - s) * _taper(np.abs(t) - (a + patient.thick), 25.0)
    e0 = _ellipse_half_width(s_src, sm, A, a)
    o0 = _ellipse_half_width(s_src, sm, A + patient.thick, a + patient.thick)
    th0 = o0 - e0
    w = _taper(s_src - L0, 12.0)
    e1 = e0 * (1.0 - patient.narrowing * w)
    th1 = th0 * (1.0 + (patient.thickening - 1.0) * w)
    at = np.abs(t)
    with np.errstate(divide="ignore", invalid="ignore"):
        inner = np.where(e1 > 1e-6, at * e0 / np.maximum(e1, 1e-6), at)
        wall = e0 + (at - e1) * np.where(th1 > 1e-6, th0 / np.maximum(th1, 1e-6), 1.0)
    outer = at + ((e0 + th0) - (e1 + th1)) * _taper(at - e1 - th1, 20.0)
    t_src = np.sign(t) * np.where(at <= e1, inner, np.where(at <= e1 + th1, wall, outer))
    return _from_local(s_src, t_src, patient, probe) + patient.warp(p - probe)


def render_echo(
    patient: EchoPatient,
    shape: Tuple[int, int],
    spacing: Tuple[float, float],
    depth_offset: float = 0.0,
    rng: Optional[np.random.Generator] = None,
    speckle_correlation: float = 0.8,
) -> Dict[str, Array]:
    """Render an apical ED/ES pair of ``patient``.

    Args:
        shape: ``(H, W)`` pixels (rows = depth from the probe, columns = lateral).
        spacing: ``(row, col)`` mm per pixel.
        depth_offset: depth (mm) of the first row; the probe sits at the top centre.
        rng: speckle/noise generator.
        speckle_correlation: how much of the ES speckle moves with the tissue (0..1).

    Returns the same keys as :func:`echo_pair` (labels 1 LV cavity, 2 LV myocardium, 3 LA).
    """
    rng = np.random.default_rng(0) if rng is None else rng
    spacing_arr = np.asarray(spacing, dtype=np.float64)
    p = _grid(shape, spacing, offset=(depth_offset, 0.0))
    probe = np.array([0.0, 0.5 * (shape[1] - 1) * spacing[1]])
    src = _echo_pull(p, patient, probe)
    u = ndimage.gaussian_filter(src - p, sigma=(1.5 / spacing[0], 1.5 / spacing[1], 0), mode="nearest")
    src = p + u
    # image formation fixed to the probe: sector, depth attenuation, beam fall-off
    d = p - probe
    depth = _hypot(d)
    angle = np.arctan2(d[..., 1], d[..., 0])
    max_depth = depth_offset + shape[0] * spacing[0]
    sector = _soft(np.maximum(np.abs(angle) - patient.half_angle, 0) * depth + np.maximum(depth - max_depth, 0) - 0.01, 0.5)
    sector = sector * (depth > 1.0)
    tgc = np.exp(-0.006 * depth) * np.clip(1.0 - 0.35 * (angle / patient.half_angle) ** 4, 0.05, None)
    clutter = 0.5 * np.exp(-depth / 12.0)
    # speckle: complex Gaussian field, grains ~0.5 mm axial x 1.2 mm lateral (plus resolution)
    sig = (max(0.5 / spacing[0], 0.5), max(1.2 / spacing[1], 0.7))

    def speckle() -> Array:
        z = rng.normal(size=shape) + 1j * rng.normal(size=shape)
        z = ndimage.gaussian_filter(z.real, sig) + 1j * ndimage.gaussian_filter(z.imag, sig)
        return z / np.sqrt(np.mean(np.abs(z) ** 2))

    z_ed = speckle()
    coords = (src - np.array([depth_offset, 0.0])) / spacing_arr
    rho = float(speckle_correlation)
    z_es = rho * _sample(z_ed, coords) + np.sqrt(max(1.0 - rho**2, 0.0)) * speckle()
    out = {}
    for name, where, z in (("moving", p, z_ed), ("fixed", src, z_es)):
        ech, lab = _echo_scene(where, patient, probe, float(spacing_arr.min()))
        amp = np.sqrt(ech + clutter) * np.abs(z) * tgc
        img = np.log1p(5.0 * amp) / np.log1p(5.0 * 2.0)  # log compression
        img = np.clip(1.15 * img - 0.1, 0.0, 1.0) * sector
        out[name] = (img / max(float(img.max()), 1e-8)).astype(np.float32)  # full [0, 1] range
        out[f"{name}_label"] = np.where(sector > 0.5, lab, 0).astype(np.uint8)
    out["ddf"] = np.moveaxis(u / spacing_arr, -1, 0).astype(np.float32)
    return out


def echo_pair(size: int = 128, seed: int = 0, view: Optional[str] = None) -> Dict[str, Array]:
    """An apical echocardiography ED/ES pair with its true displacement, like a CAMUS pair
    after resampling to 1 mm and centre-cropping (``size`` pixels over 128 mm).

    ``view``: ``"2CH"``, ``"4CH"`` or ``None`` (drawn from ``seed``).

    Returns:
        ``moving`` (ED), ``fixed`` (ES): ``(H, W)`` float32 in ``[0, 1]``;
        ``moving_label``, ``fixed_label``: ``(H, W)`` uint8 (0 bg, 1 LV cavity, 2 LV
        myocardium, 3 left atrium); ``ddf``: ``(2, H, W)`` float32 voxels,
        ``fixed(x) ~ moving(x + ddf(x))``.
    """
    if int(size) < 16:
        raise ValueError(f"size must be at least 16 pixels, got {size}.")
    rng = np.random.default_rng(seed)
    view = view or ("2CH" if rng.random() < 0.5 else "4CH")
    patient = echo_patient(rng, view)
    spacing = 128.0 / size
    return render_echo(patient, (size, size), (spacing, spacing), depth_offset=12.0, rng=rng)
