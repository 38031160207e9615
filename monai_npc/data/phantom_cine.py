"""A beating short-axis cine phantom (4-D) with its true labels and motion in every frame.

Built on the ED/ES anatomy and motion model of :mod:`monai_npc.data.phantoms`
(:class:`~monai_npc.data.phantoms.CardiacPatient`): frame ``t`` is the ED anatomy pulled by the
ED->ES motion scaled by the contraction fraction ``s(t)`` (0 at ED, 1 at ES; systole takes
:data:`SYSTOLE_FRACTION` of the cycle, a cosine ramp each way). Labels are rendered from the
same positions, so every frame's label is exact (no through-plane motion: each slice keeps its
level). Arrays are in array order ``(T, Z, H, W)``.
"""

from __future__ import annotations

import dataclasses
import os
from typing import Dict, Sequence, Tuple, Union

import numpy as np
from scipy import ndimage

from .phantom_fields import SmoothField, pixel_grid_mm
from .phantoms import cardiac_patient, cardiac_pull, cardiac_scene

__all__ = ["SYSTOLE_FRACTION", "RV_MOTION", "contraction_curve", "cardiac_cine", "write_cardiac_cine"]

#: fraction of the cycle from ED (frame 0) to ES
SYSTOLE_FRACTION = 0.4

#: the RV free-wall motion of the ED/ES pair phantom, scaled up so the RV ejects (RV EF about 15-40 %)
RV_MOTION = 2.5


def contraction_curve(frames: int, systole: float = SYSTOLE_FRACTION) -> np.ndarray:
    """``(T,)`` contraction fraction per frame: 0 at ED (frame 0), 1 at ES (frame ``round(systole T)``)."""
    phase = np.arange(frames) / frames
    es = round(systole * frames) / frames
    x = np.where(phase <= es, phase / es, 1.0 + (phase - es) / (1.0 - es))  # 0..1 systole, 1..2 diastole
    return 0.5 * (1.0 - np.cos(np.pi * x))


def _scaled(patient, s: float):
    """``patient`` with its ED->ES motion scaled by ``s`` (contraction, twist, shift, random warp;
    the RV's by ``s * RV_MOTION``)."""
    return dataclasses.replace(
        patient, contraction=s * patient.contraction, rv_contraction=s * RV_MOTION * patient.rv_contraction, twist=s * patient.twist,
        shift=s * patient.shift, warp=SmoothField(s * patient.warp.values, patient.warp.cell, patient.warp.half_extent),
    )


def cardiac_cine(
    frames: int = 10,
    size: int = 96,
    levels: Sequence[float] = (0.15, 0.4, 0.65),
    spacing: Tuple[float, float, float] = (8.0, 2.0, 2.0),
    seed: int = 0,
) -> Dict[str, object]:
    """A 4-D short-axis cine of a beating LV/RV/myocardium phantom.

    Args:
        frames: ``T`` frames over one cycle (ED = frame 0, ES = ``round(0.4 T)``).
        size: ``H = W`` pixels; spacing: ``(slice, row, col)`` mm.
        levels: slice levels (0 = base, 1 = apex), one per slice ``Z``.
        seed: anatomy, motion and noise.

    Returns:
        ``image`` ``(T, Z, H, W)`` float32 in ``[0, 1]`` per frame and slice; ``label`` ``(T, Z, H, W)``
        uint8 (0 bg, 1 RV, 2 Myo, 3 LV); ``ddf`` ``(T, Z, 2, H, W)`` float32 in-plane voxels with
        ``frame_t(x) ~ ED(x + ddf[t](x))``; ``spacing`` (mm, array order); ``contraction`` ``(T,)``;
        ``ed``, ``es`` frame indices.
    """
    rng = np.random.default_rng(seed)
    patient = cardiac_patient(rng)
    sp = np.asarray(spacing[1:], dtype=np.float64)
    shape = (size, size)
    centre = np.array([0.5 * (size - 1) * sp[0], 0.5 * (size - 1) * sp[1] + 8.0])
    p = pixel_grid_mm(shape, tuple(sp))
    yy, xx = (p[..., 0] - centre[0]) / 100.0, (p[..., 1] - centre[1]) / 100.0
    b = patient.bias
    bias = np.exp(b[0] * yy + b[1] * xx + 0.5 * (b[2] * yy**2 + b[3] * xx**2 + b[4] * xx * yy))
    curve = contraction_curve(frames)
    image = np.zeros((frames, len(levels), size, size), np.float32)
    label = np.zeros(image.shape, np.uint8)
    ddf = np.zeros((frames, len(levels), 2, size, size), np.float32)
    for t, s in enumerate(curve):
        moved = _scaled(patient, float(s))
        for z, level in enumerate(levels):
            u = ndimage.gaussian_filter(cardiac_pull(p, moved, level, centre) - p, sigma=(1.0, 1.0, 0), mode="nearest")
            img, lab = cardiac_scene(p + u, patient, level, centre, float(sp.min()))
            img = img * bias
            noise = patient.noise
            img = np.sqrt((img + rng.normal(0, noise, img.shape)) ** 2 + rng.normal(0, noise, img.shape) ** 2)
            image[t, z] = (img - img.min()) / max(float(img.max() - img.min()), 1e-8)
            label[t, z] = lab
            ddf[t, z] = np.moveaxis(u / sp, -1, 0)
    return {"image": image, "label": label, "ddf": ddf, "spacing": tuple(float(v) for v in spacing), "contraction": curve,
            "ed": 0, "es": int(np.argmax(curve))}


def write_cardiac_cine(
    folder: Union[str, os.PathLike], name: str = "phantom", frames: int = 10, size: int = 96,
    levels: Sequence[float] = (0.15, 0.4, 0.65), spacing: Tuple[float, float, float] = (8.0, 2.0, 2.0), seed: int = 0,
    frame_seconds: float = 0.03,
) -> Dict[str, object]:
    """:func:`cardiac_cine` as files, as ACDC ships a study: ``folder/<name>_4d.nii.gz`` (the cine,
    ``(X, Y, Z, T)``, ``frame_seconds`` apart) and ``folder/<name>_ed_gt.nii.gz`` (the true label of
    ED = frame 0, on the frame grid); each written atomically.

    Returns:
        ``{"cine": path, "label": path, "label_frame": 0}``: a row of a cohort CSV (``monai-npc track --batch``); for
        :func:`monai_npc.track` pass ``track(cine, label, reference_frame=label_frame)``.
    """
    import SimpleITK as sitk

    from monai_npc.io_safety import atomic_write, make_folder

    c = cardiac_cine(frames=frames, size=size, levels=levels, spacing=spacing, seed=seed)
    sp = tuple(float(v) for v in spacing[::-1])  # (X, Y, Z) mm
    cine = sitk.JoinSeries([sitk.GetImageFromArray(f) for f in c["image"]])
    cine.SetSpacing(sp + (float(frame_seconds),))
    label = sitk.GetImageFromArray(c["label"][0])
    label.SetSpacing(sp)
    out = make_folder(folder)
    paths = {"cine": out / f"{name}_4d.nii.gz", "label": out / f"{name}_ed_gt.nii.gz"}
    atomic_write(paths["cine"], lambda p: sitk.WriteImage(cine, str(p), True))
    atomic_write(paths["label"], lambda p: sitk.WriteImage(label, str(p), True))
    return {"cine": str(paths["cine"]), "label": str(paths["label"]), "label_frame": 0}
