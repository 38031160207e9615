"""ACDC cine-MRI in its three common layouts, and the paper's 2-D ED/ES pair protocol.

Layouts (``root`` may be the folder holding the files or a parent of it):

- ``"official"``: the challenge release, ``patientNNN/patientNNN_frameFF.nii.gz``,
  ``..._frameFF_gt.nii.gz`` and ``Info.cfg`` (``ED: 1``, ``ES: 12``); patient folders directly
  under ``root`` or under ``root/training``, ``root/testing``, ``root/database/...``.
- ``"ssl4mis_volume"``: ``patientNNN_frameFF.h5`` with datasets ``image``, ``label`` ``(Z, H, W)``.
- ``"ssl4mis_slice"``: ``patientNNN_frameFF_slice_K.h5`` with ``image``, ``label`` ``(H, W)``.

In the SSL4MIS layouts each patient has two frames: the lower frame number (``frame01``) is
ED, the other (``frame02`` or the original ES number) ES. Labels: 0 background, 1 RV,
2 myocardium, 3 LV. All arrays here are in *array order* ``(Z, H, W)`` (see
:mod:`monai_npc.data.io`); spacing is in mm, ``None`` when the layout stores none.

Protocol (paper, Appendix "Per-benchmark protocol details", after Jian et al. 2025): keep the
2-D slices whose ED and ES labels both contain RV, myocardium and LV; crop 128x128 centred on
the union of the ED/ES label bounding boxes (zero padding near borders); min-max normalise each
slice to ``[0, 1]``; split patients 80/20/50 at seed 2023; register both ED->ES and ES->ED;
train with random h/v flips (p = 0.5) shared by the pair.
"""

from __future__ import annotations

import logging
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Dict, List, Mapping, Optional, Sequence, Tuple, Union

import numpy as np
from monai.transforms import Compose

from monai_npc.transforms import CropOnLabelUniond, MinMaxNormalized

from .datasets import dataset_spec
from .io import find_image, read_array, read_h5, read_vector_image
from .layout import cfg_frame, find_patient_dirs, read_cfg
from .pairs import DIRECTIONS, frame_item_to_numpy, frames_to_pairs, make_dataset, pair_transforms
from .splits import SPLITS, Count, empty_split_error, patient_split, read_split_file, split_patients

__all__ = [
    "ACDC_LABELS",
    "ACDC_LAYOUTS",
    "ACDCPatient",
    "find_acdc_patients",
    "read_acdc_info",
    "load_acdc_patient",
    "acdc_slice_items",
    "acdc_preprocess",
    "acdc_patient_split",
    "build_acdc_pairs",
    "acdc_split_summary",
    "build_acdc_dataset",
]

logger = logging.getLogger(__name__)

#: label value -> structure (those of the dataset registry, :mod:`monai_npc.data.datasets`)
ACDC_LABELS: Dict[int, str] = dict(dataset_spec("acdc").labels)
ACDC_LAYOUTS = ("official", "ssl4mis_volume", "ssl4mis_slice")
PathLike = Union[str, Path]

_PATIENT_DIR = re.compile(r"patient\d+")
_VOLUME_H5 = re.compile(r"(patient\d+)_frame(\d+)\.h5")
_SLICE_H5 = re.compile(r"(patient\d+)_frame(\d+)_slice_(\d+)\.h5")


@dataclass(frozen=True)
class ACDCPatient:
    """Where one patient's ED and ES data live.

    ``files`` maps ``"ED"``/``"ES"`` to the image file (official), the HDF5 volume, or a
    ``{slice: path}`` dict (slice layout); ``labels`` maps them to the ``_gt`` files (official
    only). ``ddf`` maps ``"ED->ES"``/``"ES->ED"`` to phantom ground-truth displacement files.
    """

    name: str
    layout: str
    ed_frame: int
    es_frame: int
    files: Mapping[str, object]
    labels: Mapping[str, Path] = field(default_factory=dict)
    ddf: Mapping[str, Path] = field(default_factory=dict)
    info: Mapping[str, str] = field(default_factory=dict)


# ----------------------------------------------------------------------------- discovery


def read_acdc_info(path: PathLike) -> Dict[str, str]:
    """Parse an ACDC ``Info.cfg`` (``ED: 1``, ``ES: 12``, ``Group: DCM``, ...) into strings."""
    return read_cfg(path)


def _official_patient(folder: Path) -> ACDCPatient:
    name = folder.name
    cfg = folder / "Info.cfg"
    if cfg.is_file():
        info = read_acdc_info(cfg)
        ed, es = cfg_frame(info, "ED", cfg), cfg_frame(info, "ES", cfg)
    else:
        gts = sorted(
            int(m.group(1))
            for p in folder.iterdir()
            if (m := re.fullmatch(rf"{name}_frame(\d+)_gt\.nii(\.gz)?", p.name))
        )
        if len(gts) != 2:
            raise FileNotFoundError(
                f"{folder}: no Info.cfg to name the ED and ES frames, and {len(gts)} labelled frames "
                f"(*_frameFF_gt.nii.gz) instead of exactly two to infer them from"
            )
        info, (ed, es) = {}, gts
    files, labels = {}, {}
    for phase, frame in (("ED", ed), ("ES", es)):
        stem = folder / f"{name}_frame{frame:02d}"
        image, label = find_image(stem), find_image(f"{stem}_gt")
        if image is None:
            raise FileNotFoundError(f"patient {name}: {phase} image {stem}.nii.gz (frame {frame} from Info.cfg) is missing")
        if label is None:
            raise FileNotFoundError(f"patient {name}: {phase} label {stem}_gt.nii.gz (frame {frame}) is missing")
        files[phase], labels[phase] = image, label
    ddf = {}
    for direction, tag in (("ED->ES", "ED_ES"), ("ES->ED", "ES_ED")):
        found = find_image(folder / f"{name}_ddf_{tag}")
        if found is not None:
            ddf[direction] = found
    return ACDCPatient(name, "official", ed, es, files, labels, ddf, info)


def _two_frames(name: str, frames: Sequence[int], where: Path) -> Tuple[int, int]:
    frames = sorted(set(frames))
    if len(frames) != 2:
        raise ValueError(
            f"patient {name} in {where} has frame(s) {frames}; expected exactly two (ED = frame01, ES = the other)"
        )
    return frames[0], frames[1]


def _candidate_dirs(root: Path) -> List[Path]:
    dirs = [root, root / "data", root / "data" / "slices", root / "slices"]
    return [d for d in dirs if d.is_dir()]


def find_acdc_patients(root: PathLike, layout: str = "auto") -> List[ACDCPatient]:
    """All patients under ``root``, sorted by name.

    ``layout``: one of :data:`ACDC_LAYOUTS` or ``"auto"`` (official, else SSL4MIS volumes, else
    SSL4MIS slices). Raises ``FileNotFoundError`` when ``root`` is missing or holds no ACDC data,
    and ``FileNotFoundError``/``ValueError`` naming the patient when its ED or ES is missing.
    """
    root = Path(root).expanduser()
    if not root.is_dir():
        raise FileNotFoundError(f"ACDC folder not found: {root}")
    if layout not in ("auto",) + ACDC_LAYOUTS:
        raise ValueError(f"layout must be 'auto' or one of {ACDC_LAYOUTS}, got {layout!r}.")
    if layout in ("auto", "official"):
        dirs = find_patient_dirs(root, _PATIENT_DIR)
        if dirs:
            return [_official_patient(d) for d in dirs]
    for kind, pattern in (("ssl4mis_volume", _VOLUME_H5), ("ssl4mis_slice", _SLICE_H5)):
        if layout not in ("auto", kind):
            continue
        for folder in _candidate_dirs(root):
            groups: Dict[str, Dict[int, object]] = {}
            for p in folder.iterdir():
                m = pattern.fullmatch(p.name)
                if not m:
                    continue
                frames = groups.setdefault(m.group(1), {})
                if kind == "ssl4mis_volume":
                    frames[int(m.group(2))] = p
                else:
                    frames.setdefault(int(m.group(2)), {})[int(m.group(3))] = p
            if groups:
                return [_h5_patient(name, groups[name], kind, folder) for name in sorted(groups)]
    raise FileNotFoundError(
        f"no ACDC data found under {root} (layout={layout}): expected patientNNN/patientNNN_frameFF.nii.gz "
        f"+ _gt + Info.cfg (official), or patientNNN_frameFF.h5 / patientNNN_frameFF_slice_K.h5 (SSL4MIS) "
        f"in {root} or {root / 'data'}"
    )


def _h5_patient(name: str, frames: Dict[int, object], kind: str, folder: Path) -> ACDCPatient:
    ed, es = _two_frames(name, list(frames), folder)
    files = {"ED": frames[ed], "ES": frames[es]}
    if kind == "ssl4mis_slice":
        missing = sorted(set(files["ED"]) ^ set(files["ES"]))
        if missing:
            have = "ED" if missing[0] in files["ED"] else "ES"
            other = "ES" if have == "ED" else "ED"
            frame = es if other == "ES" else ed
            raise FileNotFoundError(
                f"patient {name}: slice(s) {missing} exist for {have} but {other} file "
                f"{folder / f'{name}_frame{frame:02d}_slice_{missing[0]}.h5'} is missing"
            )
    return ACDCPatient(name, kind, ed, es, files)


# ----------------------------------------------------------------------------- loading


def _check_labels(label: np.ndarray, path: object) -> np.ndarray:
    if not np.all(np.isfinite(label)) or np.any(label != np.round(label)):
        raise ValueError(f"label file {path} holds non-integer values")
    values = np.unique(label)
    if values.size and (values.min() < 0 or values.max() > 3):
        raise ValueError(f"label file {path} holds values {values.tolist()}; ACDC labels are 0 bg, 1 RV, 2 Myo, 3 LV")
    return label.astype(np.uint8)


def _load_frame(patient: ACDCPatient, phase: str) -> Tuple[np.ndarray, np.ndarray, Optional[Tuple[float, ...]], List[int], str]:
    src = patient.files[phase]
    if patient.layout == "official":
        image, spacing = read_array(src)
        label, _ = read_array(patient.labels[phase], dtype=None)
        if image.ndim != 3 or label.shape != image.shape:
            raise ValueError(
                f"patient {patient.name} {phase}: image {src} has shape {image.shape}, label "
                f"{patient.labels[phase]} {label.shape}; expected equal (Z, H, W) shapes"
            )
        return image, _check_labels(label, patient.labels[phase]), spacing, list(range(image.shape[0])), str(src)
    if patient.layout == "ssl4mis_volume":
        arrays = read_h5(src)
        image, label = arrays["image"], arrays["label"]
        if image.ndim != 3 or label.shape != image.shape:
            raise ValueError(f"{src}: image {image.shape} and label {label.shape} must be equal (Z, H, W) shapes")
        return image.astype(np.float32), _check_labels(label, src), None, list(range(image.shape[0])), str(src)
    slices = sorted(src)
    images, labels = [], []
    shape = None
    for k in slices:
        arrays = read_h5(src[k])
        image, label = arrays["image"], arrays["label"]
        if image.ndim != 2 or label.shape != image.shape:
            raise ValueError(f"{src[k]}: image {image.shape} and label {label.shape} must be equal (H, W) shapes")
        if shape is not None and image.shape != shape:
            raise ValueError(f"{src[k]}: shape {image.shape} differs from the patient's other slices {shape}")
        shape = image.shape
        images.append(image.astype(np.float32))
        labels.append(_check_labels(label, src[k]))
    return np.stack(images), np.stack(labels), None, slices, str(src[slices[0]].parent)


def _load_ddf(path: Path, shape: Tuple[int, ...]) -> np.ndarray:
    ddf, _ = read_vector_image(path)
    if ddf.ndim == 3 and len(shape) == 3 and shape[0] == 1:  # a one-slice volume is read back as 2-D
        ddf = ddf[None]
    if ddf.ndim == 4 and ddf.shape[-1] == 2 and ddf.shape[:3] == shape:
        return np.ascontiguousarray(ddf.transpose(0, 3, 1, 2)).astype(np.float32)
    raise ValueError(f"displacement file {path} has shape {ddf.shape}; expected (Z, H, W, 2) with (Z, H, W) = {shape}")


def load_acdc_patient(patient: ACDCPatient) -> Dict[str, object]:
    """Read one patient's ED and ES volumes.

    Returns a dict with ``ed_image``, ``es_image`` ``(Z, H, W)`` float32, ``ed_label``,
    ``es_label`` ``(Z, H, W)`` uint8, ``slices`` (list of slice numbers, length ``Z``),
    ``spacing`` (``(z, h, w)`` mm or ``None``) and, for phantoms, ``ddf_ed_es`` /
    ``ddf_es_ed`` ``(Z, 2, H, W)`` float32 (voxels; channel 0 along H, 1 along W).
    Raises ``ValueError`` naming the files when ED and ES shapes differ.
    """
    ed_img, ed_lab, spacing, ed_slices, ed_src = _load_frame(patient, "ED")
    es_img, es_lab, _, es_slices, es_src = _load_frame(patient, "ES")
    if ed_img.shape != es_img.shape:
        raise ValueError(
            f"patient {patient.name}: ED {ed_src} has shape {ed_img.shape} but ES {es_src} has {es_img.shape}"
        )
    out: Dict[str, object] = {
        "patient": patient.name,
        "ed_image": ed_img,
        "es_image": es_img,
        "ed_label": ed_lab,
        "es_label": es_lab,
        "slices": ed_slices,
        "spacing": spacing,
    }
    for direction, key in (("ED->ES", "ddf_ed_es"), ("ES->ED", "ddf_es_ed")):
        if direction in patient.ddf:
            out[key] = _load_ddf(Path(patient.ddf[direction]), ed_img.shape)
    return out


# ----------------------------------------------------------------------------- protocol


def _has_all(label: np.ndarray, structures: Sequence[int]) -> bool:
    present = np.unique(label)
    return all(s in present for s in structures)


def acdc_slice_items(volumes: Mapping[str, object], structures: Sequence[int] = (1, 2, 3)) -> List[Dict]:
    """2-D frame items (see :mod:`monai_npc.data.pairs`) of the slices whose ED *and* ES labels
    contain every label in ``structures``.

    Each item: ``ed``, ``es`` ``(1, H, W)`` float32, ``ed_label``, ``es_label`` ``(1, H, W)``
    uint8, ``patient``, ``slice``, ``spacing`` (``(h, w)`` mm, only when the layout has it) and the phantom
    ``ddf_ed_es`` / ``ddf_es_ed`` ``(2, H, W)`` when loaded.
    """
    items = []
    spacing = volumes.get("spacing")
    for z, k in enumerate(volumes["slices"]):
        ed_lab, es_lab = volumes["ed_label"][z], volumes["es_label"][z]
        if not (_has_all(ed_lab, structures) and _has_all(es_lab, structures)):
            continue
        item = {
            "ed": volumes["ed_image"][z][None],
            "es": volumes["es_image"][z][None],
            "ed_label": ed_lab[None],
            "es_label": es_lab[None],
            "patient": volumes["patient"],
            "slice": int(k),
        }
        if spacing is not None:  # SSL4MIS HDF5 stores none; None would not collate
            item["spacing"] = tuple(float(s) for s in spacing[1:])
        for key in ("ddf_ed_es", "ddf_es_ed"):
            if key in volumes:
                item[key] = volumes[key][z]
        items.append(item)
    return items


def acdc_preprocess(roi_size: Union[int, Sequence[int]] = 128) -> Compose:
    """Crop on the ED/ES label union (``roi_size``, zero padding) then min-max per slice."""
    frame_keys = ["ed", "es", "ed_label", "es_label", "ddf_ed_es", "ddf_es_ed"]
    return Compose(
        [
            CropOnLabelUniond(frame_keys, label_keys=("ed_label", "es_label"), roi_size=roi_size, allow_missing_keys=True),
            MinMaxNormalized(keys=("ed", "es")),
        ]
    )


def acdc_patient_split(
    root_or_patients: Union[PathLike, Sequence[str]],
    n_train: Count = 80,
    n_val: Count = 20,
    n_test: Count = 50,
    seed: int = 2023,
    layout: str = "auto",
) -> Dict[str, List[str]]:
    """Patient-level split ``{"train", "val", "test"}`` of a dataset folder or a list of ids.

    Defaults are the paper's 80/20/50 at seed 2023. Counts may be ints, fractions or ``None``
    (= the rest); if they need more patients than exist (e.g. 150 on the 70-patient SSL4MIS
    copy) they are scaled proportionally with a warning (70 patients -> 38/9/23).
    """
    if isinstance(root_or_patients, (str, Path)):
        names = [p.name for p in find_acdc_patients(root_or_patients, layout)]
    else:
        names = list(root_or_patients)
    return patient_split(names, n_train, n_val, n_test, seed)


def _select(
    patients: List[ACDCPatient], split: str, n_train, n_val, n_test, seed, split_file: Optional[PathLike] = None
) -> List[ACDCPatient]:
    if split == "all":
        return patients
    if split not in SPLITS:
        raise ValueError(f"split must be one of {SPLITS + ('all',)}, got {split!r}.")
    chosen = set(split_patients([p.name for p in patients], split, n_train, n_val, n_test, seed, split_file))
    return [p for p in patients if p.name in chosen]


def _frame_items(patients: Sequence[ACDCPatient], roi_size, structures) -> Tuple[List[Dict], Dict[str, int]]:
    preprocess = acdc_preprocess(roi_size)
    items, n_slices, cut = [], 0, 0
    seen_values: set = set()
    for patient in patients:
        volumes = load_acdc_patient(patient)
        n_slices += len(volumes["slices"])
        seen_values |= set(np.unique(volumes["ed_label"]).tolist()) | set(np.unique(volumes["es_label"]).tolist())
        for item in acdc_slice_items(volumes, structures):
            before = int((item["ed_label"] > 0).sum() + (item["es_label"] > 0).sum())
            item = frame_item_to_numpy(preprocess(item))
            cut += before != int((item["ed_label"] > 0).sum() + (item["es_label"] > 0).sum())
            items.append(item)
    if cut:
        logger.warning("%d slice(s) had labels wider than the crop; label voxels outside it were cut.", cut)
    stats = {"patients": len(patients), "slices": n_slices, "kept_slices": len(items), "label_values": sorted(seen_values)}
    return items, stats


def build_acdc_pairs(
    root: PathLike,
    split: str = "train",
    n_train: Count = 80,
    n_val: Count = 20,
    n_test: Count = 50,
    seed: int = 2023,
    directions: Sequence[str] = DIRECTIONS,
    roi_size: Union[int, Sequence[int]] = 128,
    structures: Sequence[int] = (1, 2, 3),
    layout: str = "auto",
    split_file: Optional[PathLike] = None,
) -> List[Dict]:
    """Preprocessed ACDC pair items of one split (see :mod:`monai_npc.data.pairs` for the format).

    Args:
        root: dataset folder in any layout of :data:`ACDC_LAYOUTS` (or a parent of it).
        split: ``"train"``, ``"val"``, ``"test"`` or ``"all"`` (every patient, no split).
        n_train, n_val, n_test, seed: patient split (:func:`acdc_patient_split`).
        directions: ``("ED->ES", "ES->ED")`` or a subset; pairs are ordered slice by slice.
        roi_size: crop size (voxels) centred on the ED/ES label union.
        structures: labels that both frames of a kept slice must contain.
        layout: ``"auto"`` or a layout name.
        split_file: optional JSON ``{"train": [ids], "val": [ids], "test": [ids]}`` (:func:`read_split_file`);
            when given it defines the split and ``n_train``/``n_val``/``n_test``/``seed`` are ignored.

    Returns:
        ``[{"moving", "fixed": (1, R, R) float32 in [0, 1], "moving_label", "fixed_label":
        (1, R, R) uint8, "patient", "slice", "direction", "spacing", ["ddf"]}, ...]``

    Raises:
        ValueError: no slice of the split has all ``structures`` in both frames (naming the
            folder and the label values seen), or a split of zero patients.
    """
    patients = find_acdc_patients(root, layout)
    chosen = _select(patients, split, n_train, n_val, n_test, seed, split_file)
    if not chosen:
        raise empty_split_error("ACDC", split, root, len(patients), n_train, n_val, n_test, split_file)
    items, stats = _frame_items(chosen, roi_size, structures)
    if not items:
        names = ", ".join(f"{s}={ACDC_LABELS.get(s, '?')}" for s in structures)
        raise ValueError(
            f"no slice of the {len(chosen)} '{split}' patient(s) in {root} has ED and ES labels containing all of "
            f"{names}; label values found: {stats['label_values']}"
        )
    pairs = [pair for item in items for pair in frames_to_pairs(item, directions)]
    logger.info(
        "ACDC %s: %d patients, %d of %d slices kept, %d pairs",
        split, stats["patients"], stats["kept_slices"], stats["slices"], len(pairs),
    )
    return pairs


def acdc_split_summary(
    root: PathLike,
    n_train: Count = 80,
    n_val: Count = 20,
    n_test: Count = 50,
    seed: int = 2023,
    directions: Sequence[str] = DIRECTIONS,
    structures: Sequence[int] = (1, 2, 3),
    layout: str = "auto",
) -> Dict[str, Dict[str, int]]:
    """Per split: ``patients``, ``slices`` (all), ``kept_slices`` and ``pairs`` (kept x directions)."""
    patients = find_acdc_patients(root, layout)
    split = patient_split([p.name for p in patients], n_train, n_val, n_test, seed)
    summary = {}
    for name in SPLITS:
        chosen = [p for p in patients if p.name in set(split[name])]
        n_slices = kept = 0
        for patient in chosen:
            volumes = load_acdc_patient(patient)
            n_slices += len(volumes["slices"])
            kept += len(acdc_slice_items(volumes, structures))
        summary[name] = {"patients": len(chosen), "slices": n_slices, "kept_slices": kept, "pairs": kept * len(directions)}
    return summary


def build_acdc_dataset(root: PathLike, split: str = "train", augment: Optional[bool] = None, cache: bool = False, **kwargs):
    """``monai.data.Dataset`` of :func:`build_acdc_pairs` items through :func:`pair_transforms`.

    ``augment`` defaults to ``True`` for the train split (random h/v flips, p = 0.5).
    Items gain ``image`` ``(2, H, W)`` (moving, fixed) and float32 tensors.
    """
    pairs = build_acdc_pairs(root, split=split, **kwargs)
    augment = (split == "train") if augment is None else augment
    return make_dataset(pairs, pair_transforms(augment=augment), cache=cache)
