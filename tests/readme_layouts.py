"""Small generated data laid out under the file names the READMEs' commands use (``tests/test_readme.py``).

Each writer mirrors a layout a user has: the ED/ES pair of ``monai-npc quickstart``, an ACDC study in the official
layout with its cine (ED at the frame its ``Info.cfg`` names, as in ``../shared/data/acdc_cine_example``), ACDC and
CAMUS phantom folders (``monai-npc phantom``) and the public 224 x 224 PNG copy of CAMUS. Images are small (2-3
slices, 96 px cines, short cycles) so that every README command runs in seconds on one thread.
"""

from __future__ import annotations

import csv
import shutil
from pathlib import Path
from typing import Dict, Iterable, List, Mapping, Sequence

import numpy as np

__all__ = ["write_pair", "write_acdc_cine_study", "write_csv", "write_acdc_stacks", "write_acdc_ssl4mis", "write_camus_folder",
           "write_camus_png_copy"]


def write_pair(folder: Path, names: Mapping[str, str], seed: int = 0) -> Dict[str, Path]:
    """quickstart's ED -> ES phantom pair (:func:`monai_npc.cli.quickstart.write_phantom_pair`) under the file names
    ``names`` maps its parts to (``ED``, ``ES``, ``ED_gt``, ``ES_gt`` -> file name)."""
    from monai_npc.cli.quickstart import write_phantom_pair

    written = write_phantom_pair(folder / "_pair", "pair", seed)
    paths = {}
    for part, src in zip(("ED", "ES", "ED_gt", "ES_gt"), written):
        if part in names:
            paths[part] = Path(shutil.move(str(src), str(folder / names[part])))
    shutil.rmtree(folder / "_pair")
    return paths


def write_acdc_cine_study(folder: Path, name: str, ed: int, frames: int = 4, size: int = 96, seed: int = 0) -> Dict[str, object]:
    """One cine study in the official ACDC layout, files directly in ``folder``: ``{name}_4d.nii.gz``,
    ``{name}_frameFF.nii.gz`` and ``{name}_frameFF_gt.nii.gz`` for ED and ES, and ``Info.cfg``.

    The beating phantom (:func:`monai_npc.data.phantom_cine.cardiac_cine`, 3 slices) is shifted in time so that
    end-diastole is frame ``ed`` (1-based, as ACDC counts); ES follows from the phantom's contraction curve.
    Returns ``{"ED": ed, "ES": es, "NbFrame": frames}``.
    """
    import SimpleITK as sitk

    from monai_npc.data.phantom_cine import cardiac_cine

    if not 1 <= ed <= frames:
        raise ValueError(f"ED frame {ed} is not among frames 1..{frames}")
    c = cardiac_cine(frames=frames, size=size, seed=seed)
    image, label = (np.roll(np.asarray(c[k]), ed - 1, axis=0) for k in ("image", "label"))
    es = (ed - 1 + int(c["es"])) % frames + 1
    spacing = tuple(float(v) for v in c["spacing"][::-1])  # (X, Y, Z) mm
    folder.mkdir(parents=True, exist_ok=True)
    cine = sitk.JoinSeries([sitk.GetImageFromArray(f) for f in image])
    cine.SetSpacing(spacing + (0.03,))
    sitk.WriteImage(cine, str(folder / f"{name}_4d.nii.gz"), True)
    for frame in (ed, es):
        for suffix, array in (("", image[frame - 1]), ("_gt", label[frame - 1])):
            volume = sitk.GetImageFromArray(array)
            volume.SetSpacing(spacing)
            sitk.WriteImage(volume, str(folder / f"{name}_frame{frame:02d}{suffix}.nii.gz"), True)
    info = {"ED": ed, "ES": es, "Group": "NOR", "Height": 170.0, "NbFrame": frames, "Weight": 70.0}
    (folder / "Info.cfg").write_text("".join(f"{k}: {v}\n" for k, v in info.items()))
    return info


def write_csv(path: Path, rows: Sequence[Mapping[str, object]]) -> Path:
    """A CSV with the keys of ``rows[0]`` as its columns."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    return path


def write_acdc_stacks(folders: Iterable[Path], patients: int = 1, max_slices: int = 2, first_id: int = 1) -> List[Path]:
    """``monai-npc phantom acdc`` (official ACDC layout: ``patientNNN/...frameFF[_gt].nii.gz``, ``Info.cfg``) into the
    first folder, copied to the others."""
    from monai_npc.data.phantom_layouts import write_acdc_phantom

    folders = list(folders)
    write_acdc_phantom(folders[0], patients=patients, seed=0, first_id=first_id, progress=False, max_slices=max_slices)
    for other in folders[1:]:
        shutil.copytree(folders[0], other)
    return folders


def write_acdc_ssl4mis(folder: Path, patients: int = 5, max_slices: int = 2) -> Path:
    """The SSL4MIS copy of ACDC (``folder/data/patientNNN_frameFF.h5`` with ``image`` and ``label`` ``(Z, H, W)``) of
    ``monai-npc phantom acdc`` patients."""
    import h5py
    import SimpleITK as sitk

    from monai_npc.data.phantom_layouts import write_acdc_phantom

    (folder / "data").mkdir(parents=True, exist_ok=True)
    for patient in write_acdc_phantom(folder / "_source", patients=patients, seed=0, progress=False, max_slices=max_slices):
        for image in sorted(patient.glob(f"{patient.name}_frame??.nii.gz")):
            with h5py.File(folder / "data" / image.name.replace(".nii.gz", ".h5"), "w") as f:
                f["image"] = sitk.GetArrayFromImage(sitk.ReadImage(str(image))).astype(np.float32)
                f["label"] = sitk.GetArrayFromImage(sitk.ReadImage(str(image).replace(".nii.gz", "_gt.nii.gz"))).astype(np.uint8)
    shutil.rmtree(folder / "_source")
    return folder


def write_camus_folder(folder: Path, patients: int = 5) -> Path:
    """``monai-npc phantom camus`` (the original MHD release's layout) into ``folder``."""
    from monai_npc.data.phantom_layouts import write_camus_phantom

    write_camus_phantom(folder, patients=patients, seed=0, progress=False)
    return folder


def write_camus_png_copy(folder: Path, patient_ids: Sequence[str], size: int = 224) -> Path:
    """The public 224 x 224 PNG copy of CAMUS (``val/patientNNNN/patientNNNN_{2CH,4CH}_{ED,ES}[_gt].png``, no pixel
    spacing) for ``patient_ids``: one echo phantom, resized, written under every id (the bundle's split file names
    the copy's real ids)."""
    import SimpleITK as sitk
    from scipy import ndimage

    from monai_npc.data.phantom_layouts import write_camus_phantom

    source = write_camus_phantom(folder / "_source", patients=1, seed=0, fmt="nifti", progress=False)[0]
    pngs: Dict[str, np.ndarray] = {}
    for path in sorted(source.glob("*.nii.gz")):
        part = path.name[len(source.name) + 1:-len(".nii.gz")]  # e.g. 2CH_ED, 2CH_ED_gt
        if "ddf" in part:
            continue
        array = sitk.GetArrayFromImage(sitk.ReadImage(str(path))).squeeze().astype(np.float32)
        zoom = (size / array.shape[0], size / array.shape[1])
        if part.endswith("_gt"):
            pngs[part] = ndimage.zoom(array, zoom, order=0).astype(np.uint8)
        else:
            resized = ndimage.zoom(array, zoom, order=1)
            pngs[part] = np.clip(255 * resized / max(float(resized.max()), 1e-6), 0, 255).astype(np.uint8)
    shutil.rmtree(folder / "_source")
    for pid in patient_ids:
        target = folder / "val" / pid
        target.mkdir(parents=True, exist_ok=True)
        for part, array in pngs.items():
            sitk.WriteImage(sitk.GetImageFromArray(array), str(target / f"{pid}_{part}.png"))
    return folder
