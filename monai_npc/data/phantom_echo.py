"""Apical echocardiography phantoms (2CH / 4CH) with known ED->ES motion: sector, speckle, LV cavity (1), LV
myocardium (2), left atrium (3). Conventions as :mod:`monai_npc.data.phantoms`."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Dict, Optional, Tuple

import numpy as np
from scipy import ndimage

from .phantom_fields import Array, SmoothField, cosine_taper, pixel_grid_mm, sample_bilinear, soft_inside, vector_length

__all__ = ["EchoPatient", "echo_patient", "render_echo", "echo_pair"]


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
    texture: SmoothField
    warp: SmoothField
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
        texture=SmoothField.draw(rng, 400.0, 5.0, 0.12),
        warp=SmoothField.draw(rng, 400.0, 25.0, 0.6, channels=2),
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
    layers = [(soft_inside(sd_heart - 4.0, 1.5), g["pericardium"])]
    if patient.four_chamber:  # right heart on the septal side (t < 0), not labelled
        rv_t = -(a + th + 13.0)
        sd_rv = (np.sqrt((s - 0.55 * L) ** 2 / (0.45 * L) ** 2 + (t - rv_t) ** 2 / 13.0**2) - 1.0) * 13.0
        sd_ra = (np.sqrt((s - la_c) ** 2 / (0.9 * patient.la_length) ** 2 + (t - rv_t - 3.0) ** 2 / 14.0**2) - 1.0) * 14.0
        sd_right = np.maximum(np.minimum(sd_rv, sd_ra), -sd_out)
        layers += [(soft_inside(sd_right - 4.0, edge), g["wall"]), (soft_inside(sd_right, edge), g["blood"])]
    layers += [
        (soft_inside(sd_la - 3.0, edge), g["wall"]),
        (soft_inside(sd_la, edge), g["blood"]),
        (soft_inside(sd_out, edge), g["myo"] * (1.0 + patient.texture(q - probe))),
        (soft_inside(sd_cav, edge), g["blood"]),
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
    s_src = np.where(s <= 0, s, np.where(s <= L1, s * L0 / L1, s + dl * cosine_taper(s - L1, la_span)))
    # the longitudinal motion belongs to the heart: it fades laterally beyond the walls
    s_src = s + (s_src - s) * cosine_taper(np.abs(t) - (a + patient.thick), 25.0)
    e0 = _ellipse_half_width(s_src, sm, A, a)
    o0 = _ellipse_half_width(s_src, sm, A + patient.thick, a + patient.thick)
    th0 = o0 - e0
    w = cosine_taper(s_src - L0, 12.0)
    e1 = e0 * (1.0 - patient.narrowing * w)
    th1 = th0 * (1.0 + (patient.thickening - 1.0) * w)
    at = np.abs(t)
    with np.errstate(divide="ignore", invalid="ignore"):
        inner = np.where(e1 > 1e-6, at * e0 / np.maximum(e1, 1e-6), at)
        wall = e0 + (at - e1) * np.where(th1 > 1e-6, th0 / np.maximum(th1, 1e-6), 1.0)
    outer = at + ((e0 + th0) - (e1 + th1)) * cosine_taper(at - e1 - th1, 20.0)
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
    p = pixel_grid_mm(shape, spacing, offset=(depth_offset, 0.0))
    probe = np.array([0.0, 0.5 * (shape[1] - 1) * spacing[1]])
    src = _echo_pull(p, patient, probe)
    u = ndimage.gaussian_filter(src - p, sigma=(1.5 / spacing[0], 1.5 / spacing[1], 0), mode="nearest")
    src = p + u
    # image formation fixed to the probe: sector, depth attenuation, beam fall-off
    d = p - probe
    depth = vector_length(d)
    angle = np.arctan2(d[..., 1], d[..., 0])
    max_depth = depth_offset + shape[0] * spacing[0]
    sector = soft_inside(np.maximum(np.abs(angle) - patient.half_angle, 0) * depth + np.maximum(depth - max_depth, 0) - 0.01, 0.5)
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
    z_es = rho * sample_bilinear(z_ed, coords) + np.sqrt(max(1.0 - rho**2, 0.0)) * speckle()
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
