"""Write the phantoms to disk in the official ACDC and CAMUS layouts (``monai-npc phantom``).

ACDC (``write_acdc_phantom``)::

    OUT/patient001/Info.cfg                       ED: 1, ES: <frame>, Group, Height, NbFrame, Weight
    OUT/patient001/patient001_frame01.nii.gz      ED volume, int16, (Z, H, W) = NIfTI (W, H, Z)
    OUT/patient001/patient001_frame01_gt.nii.gz   ED labels, uint8 (1 RV, 2 Myo, 3 LV)
    OUT/patient001/patient001_frameFF.nii.gz      ES volume (FF = the ES frame of Info.cfg)
    OUT/patient001/patient001_frameFF_gt.nii.gz
    OUT/patient001/patient001_ddf_ED_ES.nii.gz    true ED->ES displacement (see below)
    OUT/patient001/patient001_ddf_ES_ED.nii.gz    its inverse, for the ES->ED direction

CAMUS (``write_camus_phantom``, ``fmt="mhd"`` or ``"nifti"``)::

    OUT/patient0001/patient0001_{2CH,4CH}_{ED,ES}.mhd + .raw    uint8 B-mode, spacing in the header
    OUT/patient0001/patient0001_{2CH,4CH}_{ED,ES}_gt.mhd + .raw 1 LV endo, 2 LV myo, 3 LA
    OUT/patient0001/patient0001_{2CH,4CH}_ddf_ED_ES.mhd + .raw  true ED->ES displacement
    OUT/patient0001/patient0001_{2CH,4CH}_ddf_ES_ED.mhd + .raw  its inverse
    OUT/patient0001/Info_2CH.cfg, Info_4CH.cfg                  ED, ES, NbFrame, Sex, Age, ImageQuality, ...

Displacement files are 2-component vector images on the image grid (same spacing, origin and
direction). In array order (SimpleITK ``GetArrayFromImage``: ``(Z, H, W, 2)`` for ACDC,
``(H, W, 2)`` for CAMUS) component 0 is the displacement along H (rows) and component 1 along W
(columns), in voxels, in MONAI's ``Warp`` convention: ``ES(x) = ED(x + ddf_ED_ES(x))`` and
``ED(x) = ES(x + ddf_ES_ED(x))``. The dataset loaders attach them to the pairs as ``ddf``.
"""

from __future__ import annotations

from pathlib import Path
from typing import List, Optional, Union

import numpy as np

from .io import write_image
from .phantoms import cardiac_patient, echo_patient, invert_ddf, render_cardiac, render_echo

__all__ = ["write_acdc_phantom", "write_camus_phantom", "PHANTOM_README"]

PathLike = Union[str, Path]

PHANTOM_README = """Phantom data written by `monai-npc phantom` (monai_npc.data.phantom_layouts).
Synthetic images with known motion; not patient data.

Layout: {layout}.
Displacements (*_ddf_ED_ES.*, *_ddf_ES_ED.*): 2-component vector images on the image grid.
In array order (SimpleITK GetArrayFromImage) component 0 is along rows (H), component 1 along
columns (W), in voxels, MONAI Warp convention: ES(x) = ED(x + ddf_ED_ES(x)), ED(x) = ES(x + ddf_ES_ED(x)).
Read them back with monai_npc.data.acdc / monai_npc.data.camus (pairs gain a `ddf` entry).
"""


def _progress(iterable, total: int, desc: str, enabled: bool):
    if not enabled:
        return iterable
    from tqdm.auto import tqdm

    return tqdm(iterable, total=total, desc=desc, unit="patient")


def _check(out: PathLike, patients: int) -> Path:
    if int(patients) < 1:
        raise ValueError(f"--patients must be at least 1, got {patients}.")
    out = Path(out).expanduser()
    if out.exists() and not out.is_dir():
        raise ValueError(f"output path {out} exists and is not a folder.")
    out.mkdir(parents=True, exist_ok=True)
    return out


def write_acdc_phantom(
    out: PathLike, patients: int = 5, seed: int = 0, first_id: int = 1, progress: bool = True,
    max_slices: Optional[int] = None,
) -> List[Path]:
    """Write ``patients`` short-axis cine phantoms in the official ACDC layout under ``out``.

    Patient ``k`` depends only on ``(seed, first_id + k)``. Each has 4-7 short-axis slices
    (base to apex; the most apical ones may lack the RV, as in real data) of 160-208 pixels at
    1.35-1.75 mm, 7-10 mm apart. ``max_slices`` caps the slice count (quick tests).
    Returns the patient folders.
    """
    out = _check(out, patients)
    (out / "README_phantom.txt").write_text(PHANTOM_README.format(layout="official ACDC"))
    folders = []
    ids = range(first_id, first_id + int(patients))
    for pid in _progress(ids, int(patients), "ACDC phantom", progress):
        rng = np.random.default_rng([int(seed), pid])
        anatomy = cardiac_patient(rng)
        spacing = float(rng.uniform(1.35, 1.75))
        shape = (int(rng.integers(20, 27)) * 8, int(rng.integers(20, 27)) * 8)
        nz = int(rng.integers(4, 8)) if max_slices is None else int(min(max(max_slices, 1), 7))
        dz = float(rng.uniform(7.0, 10.0))
        centre = np.array([0.5 * shape[0] * spacing, 0.5 * shape[1] * spacing + 12.0]) + rng.uniform(-12, 12, 2)
        levels = np.linspace(0.05, 0.92, nz) if nz > 1 else np.array([0.4])
        frames = {k: [] for k in ("moving", "fixed", "moving_label", "fixed_label", "ddf", "inv")}
        for level in levels:
            sl = render_cardiac(anatomy, float(level), shape, (spacing, spacing), centre=centre, rng=rng)
            for k in ("moving", "fixed", "moving_label", "fixed_label", "ddf"):
                frames[k].append(sl[k])
            frames["inv"].append(invert_ddf(sl["ddf"]))
        es_frame = int(rng.integers(9, 16))
        name = f"patient{pid:03d}"
        folder = out / name
        vox = (dz, spacing, spacing)
        scale = float(rng.uniform(600, 1200))
        for frame, img_key, lab_key in ((1, "moving", "moving_label"), (es_frame, "fixed", "fixed_label")):
            vol = np.round(np.stack(frames[img_key]) * scale).astype(np.int16)
            write_image(vol, folder / f"{name}_frame{frame:02d}.nii.gz", spacing=vox)
            write_image(np.stack(frames[lab_key]).astype(np.uint8), folder / f"{name}_frame{frame:02d}_gt.nii.gz", spacing=vox)
        for tag, key in (("ED_ES", "ddf"), ("ES_ED", "inv")):
            field = np.moveaxis(np.stack(frames[key]), 1, -1)  # (Z, 2, H, W) -> (Z, H, W, 2)
            write_image(field.astype(np.float32), folder / f"{name}_ddf_{tag}.nii.gz", spacing=vox, vector=True)
        info = {
            "ED": 1, "ES": es_frame, "Group": "NOR", "Height": round(float(rng.uniform(155, 195)), 1),
            "NbFrame": int(rng.integers(max(es_frame + 5, 20), 31)), "Weight": round(float(rng.uniform(50, 100)), 1),
        }
        (folder / "Info.cfg").write_text("".join(f"{k}: {v}\n" for k, v in info.items()))
        folders.append(folder)
    return folders


def _lv_volume_ml(label: np.ndarray, spacing: tuple, length_mm: float) -> float:
    """Area-length LV volume from the cavity label (``8 A^2 / (3 pi L)``), ml."""
    area = float((label == 1).sum()) * spacing[0] * spacing[1]
    return 8.0 * area**2 / (3.0 * np.pi * max(length_mm, 1.0)) / 1000.0


def write_camus_phantom(
    out: PathLike, patients: int = 5, seed: int = 0, fmt: str = "mhd", first_id: int = 1, progress: bool = True
) -> List[Path]:
    """Write ``patients`` apical echo phantoms (2CH and 4CH views) in a CAMUS layout under ``out``.

    ``fmt``: ``"mhd"`` (original release: ``.mhd`` + ``.raw``) or ``"nifti"`` (``.nii.gz``).
    Images cover the whole sector (140-160 mm deep) at 0.35 mm (rows, depth) x 0.7 mm
    (columns), so the loader's 1 mm resampling and 128x128 centre crop are exercised.
    Patient ``k`` depends only on ``(seed, first_id + k)``. Returns the patient folders.
    """
    if fmt not in ("mhd", "nifti"):
        raise ValueError(f"fmt must be 'mhd' or 'nifti', got {fmt!r}.")
    out = _check(out, patients)
    (out / "README_phantom.txt").write_text(PHANTOM_README.format(layout=f"CAMUS ({fmt})"))
    suffix = ".mhd" if fmt == "mhd" else ".nii.gz"
    folders = []
    ids = range(first_id, first_id + int(patients))
    for pid in _progress(ids, int(patients), "CAMUS phantom", progress):
        rng = np.random.default_rng([int(seed), pid])
        name = f"patient{pid:04d}"
        folder = out / name
        sex, age = ("F", "M")[int(rng.integers(0, 2))], int(rng.integers(20, 90))
        quality = ("Good", "Medium", "Poor")[int(rng.choice(3, p=[0.5, 0.35, 0.15]))]
        for view in ("2CH", "4CH"):
            anatomy = echo_patient(rng, view)
            depth = float(rng.uniform(140.0, 160.0))
            spacing = (0.35, 0.7)
            width = 2.0 * depth * np.sin(anatomy.half_angle) + 10.0
            shape = (int(round(depth / spacing[0])), int(round(width / spacing[1])))
            pair = render_echo(anatomy, shape, spacing, depth_offset=0.0, rng=rng)
            inverse = invert_ddf(pair["ddf"])
            stem = folder / f"{name}_{view}"
            for phase, img_key, lab_key in (("ED", "moving", "moving_label"), ("ES", "fixed", "fixed_label")):
                write_image(np.round(pair[img_key] * 255).astype(np.uint8), f"{stem}_{phase}{suffix}", spacing=spacing)
                write_image(pair[lab_key], f"{stem}_{phase}_gt{suffix}", spacing=spacing)
            for tag, field in (("ED_ES", pair["ddf"]), ("ES_ED", inverse)):
                write_image(np.moveaxis(field, 0, -1).astype(np.float32), f"{stem}_ddf_{tag}{suffix}", spacing=spacing, vector=True)
            nb = int(rng.integers(15, 25))
            es = int(rng.integers(max(nb // 2, 2), nb))
            edv = _lv_volume_ml(pair["moving_label"], spacing, anatomy.length)
            esv = _lv_volume_ml(pair["fixed_label"], spacing, anatomy.length - anatomy.base_descent)
            info = {
                "ED": 1, "ES": es, "NbFrame": nb, "Sex": sex, "Age": age, "ImageQuality": quality,
                "LVedv": round(edv, 2), "LVesv": round(esv, 2), "LVef": round(100.0 * (edv - esv) / max(edv, 1e-6), 2),
            }
            (folder / f"Info_{view}.cfg").write_text("".join(f"{k}: {v}\n" for k, v in info.items()))
        folders.append(folder)
    return folders
