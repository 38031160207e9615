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

from .phantom_fields import Array, SmoothField, cosine_taper, invert_ddf, pixel_grid_mm, soft_inside, unit_vector, vector_length
from .phantom_echo import EchoPatient, echo_pair, echo_patient, render_echo

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
    texture: SmoothField  # fine tissue texture (relative)
    tissue: SmoothField  # coarse organ-scale intensity variation
    warp: SmoothField  # random smooth displacement field (mm)


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
        texture=SmoothField.draw(rng, 420.0, 7.0, 0.05),
        tissue=SmoothField.draw(rng, 420.0, 16.0, 0.1),
        warp=SmoothField.draw(rng, 420.0, 30.0, 0.7, channels=2),
    )


def _lv_radius(patient: CardiacPatient, level: float) -> float:
    """ED endocardial radius at ``level`` (0 = base, 1 = apex)."""
    return patient.r_endo * float(np.sqrt(max(1.0 - 0.72 * level**2, 0.12)))


def cardiac_scene(q: Array, patient: CardiacPatient, level: float, centre: Array, spacing: float) -> Tuple[Array, Array]:
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
            pc = centre + (a - 4.5) * unit_vector(ang + patient.rv_angle + np.pi)
            sd_pap = np.minimum(sd_pap, vector_length(q - pc) - 3.0)
    # surroundings: body, chest wall fat, lungs, liver
    b = (q - centre - patient.body_offset) / patient.body_axes
    sd_body = (vector_length(b) - 1.0) * patient.body_axes.min()
    lung1 = vector_length((d - np.array([-30.0, 55.0])) / np.array([38.0, 30.0])) - 1.0
    lung2 = vector_length((d - np.array([-35.0, -85.0])) / np.array([40.0, 28.0])) - 1.0
    liver = vector_length((d - np.array([75.0, -45.0])) / np.array([35.0, 60.0])) - 1.0
    tex = patient.tissue(d)
    img = np.zeros(q.shape[:-1])
    img = img + soft_inside(sd_body, edge) * (c["subcut"] + 0.5 * tex)
    inner = soft_inside(sd_body + 10.0, 2.0)  # inside the subcutaneous fat ring
    img = img * (1 - inner) + inner * (c["tissue"] + tex)
    for sd_organ, value in ((liver * 30.0, c["liver"]), (np.minimum(lung1, lung2) * 30.0, c["lung"])):
        m = soft_inside(sd_organ, 2.0) * inner
        img = img * (1 - m) + m * (value + 0.3 * tex)
    heart_fat = soft_inside(rho - (a + t + 3.0 + 2.0 * np.cos(2 * theta)), edge)
    for mask, value in (
        (heart_fat, c["fat"]),
        (soft_inside(sd_rvwall, edge), c["myo"]),
        (soft_inside(sd_rv, edge), c["blood"]),
        (soft_inside(sd_epi, edge), c["myo"]),
        (soft_inside(sd_lv, edge), c["blood"]),
        (soft_inside(sd_pap, edge), c["myo"] + 0.05),
    ):
        img = img * (1 - mask) + mask * value
    img = img * (1.0 + patient.texture(d))
    label = np.zeros(q.shape[:-1], np.uint8)
    label[sd_rv < 0] = 1
    label[sd_epi < 0] = 2
    label[sd_lv < 0] = 3
    return img, label


def cardiac_pull(p: Array, patient: CardiacPatient, level: float, centre: Array) -> Array:
    """ES -> ED source positions ``(..., 2)`` mm for ES positions ``p``."""
    # heart translation, fading away from the heart
    w = np.exp(-vector_length(p - centre) ** 2 / (2 * 70.0**2))[..., None]
    q = p + patient.shift * w
    d = q - centre
    r = np.maximum(vector_length(d), 1e-6)
    a0 = _lv_radius(patient, level)
    t0 = patient.thick * (1.0 - 0.2 * level)
    b0 = a0 + t0
    a1 = a0 * (1.0 - patient.contraction)
    c = a0**2 - a1**2
    b1 = np.sqrt(b0**2 - c)  # incompressible wall: ES ring area = ED ring area
    src = np.where(
        r <= a1, r * a0 / a1, np.where(r <= b1, np.sqrt(r**2 + c), r + (b0 - b1) * cosine_taper(r - b1, 22.0))
    )
    phi = patient.twist * cosine_taper(r - b1, 25.0)
    cp, sp = np.cos(phi), np.sin(phi)
    unit = d / r[..., None]
    rot = np.stack([unit[..., 0] * cp - unit[..., 1] * sp, unit[..., 0] * sp + unit[..., 1] * cp], -1)
    q = centre + rot * src[..., None]
    # RV free wall moves towards the septum
    rv_c = centre + unit_vector(patient.rv_angle) * (b0 + 0.4 * patient.rv_depth * (1.0 - 0.55 * level))
    outside = 1.0 - cosine_taper(vector_length(q - centre) - b0 + 2.0, 10.0)  # the LV does not follow
    g = patient.rv_contraction * np.exp(-vector_length(q - rv_c) ** 2 / (2 * (0.8 * b0) ** 2)) * outside
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
    p = pixel_grid_mm(shape, spacing)
    src = cardiac_pull(p, patient, level, centre)
    u = ndimage.gaussian_filter(src - p, sigma=(1.0, 1.0, 0), mode="nearest")  # smooth the kinks
    src = p + u
    yy, xx = (p[..., 0] - centre[0]) / 100.0, (p[..., 1] - centre[1]) / 100.0
    bias = np.exp(patient.bias[0] * yy + patient.bias[1] * xx + 0.5 * (patient.bias[2] * yy**2 + patient.bias[3] * xx**2 + patient.bias[4] * xx * yy))
    out = {}
    for name, where in (("moving", p), ("fixed", src)):
        img, lab = cardiac_scene(where, patient, level, centre, float(spacing_arr.min()))
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
