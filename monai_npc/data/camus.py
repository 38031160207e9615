"""CAMUS apical echocardiography (both releases) and the paper's ED->ES pair protocol.

Layouts (``root`` may be the folder holding the patient folders or a parent of it, e.g.
``CAMUS_public/database_nifti`` or ``training``):

- original release: ``patientNNNN/patientNNNN_{2CH,4CH}_{ED,ES}.mhd`` (+ ``.raw``) and
  ``..._{ED,ES}_gt.mhd``, ``Info_2CH.cfg`` / ``Info_4CH.cfg``;
- NIfTI release: the same names ending ``.nii.gz``;
- the public 224 x 224 PNG copy (``train/`` and ``val/`` folders of ``patientNNNN`` with
  ``patientNNNN_{2CH,4CH}_{ED,ES}[_gt].png``): resized images without pixel spacing.

When an ``_ED``/``_ES`` image is absent but the view's ``_sequence`` (or ``_half_sequence``)
file and its ``Info_*.cfg`` are present, the frame named by ``ED:``/``ES:`` (1-based) is
taken from the sequence. Labels: 0 background, 1 LV endocardium (cavity), 2 LV myocardium,
3 left atrium; LV myocardium is the evaluated structure. Arrays are in array order
``(H, W)`` (rows = depth), spacing in mm.

Protocol (paper, after Zhang et al. 2024): resample to 1.0 mm in-plane, centre-crop (or pad)
to 128x128, min-max normalise each image to ``[0, 1]``; split patients 300/100/100 at seed 42;
one ED->ES pair per view (2CH and 4CH) and patient; no augmentation. Files without physical
spacing (the PNG copy) cannot be resampled to 1 mm: ``protocol="resize"`` (chosen automatically
for them) resizes each whole image to 128x128 instead (bilinear images, nearest labels), which
gives a comparable scale on that copy.
"""

from __future__ import annotations

import logging
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Dict, List, Mapping, Sequence, Tuple, Union

import numpy as np
from monai.transforms import Compose, ResizeWithPadOrCropd, Resized

from monai_npc.transforms import MinMaxNormalized, ResampleToSpacingd

from .datasets import dataset_spec
from .io import find_image, load_image, read_array, read_vector_image, select_frame, to_array_order
from .layout import find_patient_dirs, read_cfg
from .pairs import frame_item_to_numpy, frames_to_pairs, make_dataset, pair_transforms
from .splits import SPLITS, Count, empty_split_error, patient_split, split_patients

__all__ = [
    "CAMUS_LABELS",
    "CAMUS_VIEWS",
    "CAMUSPatient",
    "find_camus_patients",
    "load_camus_view",
    "camus_frame_item",
    "camus_preprocess",
    "camus_patient_split",
    "CAMUS_PROTOCOLS",
    "build_camus_pairs",
    "build_camus_dataset",
]

logger = logging.getLogger(__name__)

#: label value -> structure (those of the dataset registry, :mod:`monai_npc.data.datasets`)
CAMUS_LABELS: Dict[int, str] = dict(dataset_spec("camus").labels)
CAMUS_VIEWS: Tuple[str, ...] = ("2CH", "4CH")
PathLike = Union[str, Path]
_PATIENT_DIR = re.compile(r"patient\d+")
_SUFFIXES = (".nii.gz", ".nii", ".mhd", ".mha", ".png")
#: ``protocol`` values of :func:`build_camus_pairs`
CAMUS_PROTOCOLS: Tuple[str, ...] = ("auto", "resample", "resize")


@dataclass(frozen=True)
class CAMUSPatient:
    """Files of one patient: ``views[view]`` maps ``"ED"``, ``"ES"``, ``"ED_gt"``, ``"ES_gt"``
    (and optionally ``"sequence"``, ``"ddf_ED_ES"``, ``"ddf_ES_ED"``) to paths; ``info[view]``
    is the parsed ``Info_<view>.cfg`` (empty if absent)."""

    name: str
    folder: Path
    views: Mapping[str, Mapping[str, Path]]
    info: Mapping[str, Mapping[str, str]] = field(default_factory=dict)


def _camus_patient(folder: Path, views: Sequence[str]) -> CAMUSPatient:
    name = folder.name
    files: Dict[str, Dict[str, Path]] = {}
    infos: Dict[str, Dict[str, str]] = {}
    for view in views:
        cfg = folder / f"Info_{view}.cfg"
        infos[view] = read_cfg(cfg) if cfg.is_file() else {}
        entry: Dict[str, Path] = {}
        for key, stem in (
            ("ED", f"{name}_{view}_ED"), ("ES", f"{name}_{view}_ES"),
            ("ED_gt", f"{name}_{view}_ED_gt"), ("ES_gt", f"{name}_{view}_ES_gt"),
            ("sequence", f"{name}_{view}_sequence"), ("half_sequence", f"{name}_{view}_half_sequence"),
            ("ddf_ED_ES", f"{name}_{view}_ddf_ED_ES"), ("ddf_ES_ED", f"{name}_{view}_ddf_ES_ED"),
        ):
            found = find_image(folder / stem, _SUFFIXES)
            if found is not None:
                entry[key] = found
        if "sequence" not in entry and "half_sequence" in entry:
            entry["sequence"] = entry["half_sequence"]
        entry.pop("half_sequence", None)
        for phase in ("ED", "ES"):
            if f"{phase}_gt" not in entry:
                raise FileNotFoundError(
                    f"patient {name} {view}: {phase} label {folder / f'{name}_{view}_{phase}_gt'}.mhd/.nii.gz/.png is missing"
                )
            if phase not in entry:
                if "sequence" not in entry or phase not in infos[view]:
                    raise FileNotFoundError(
                        f"patient {name} {view}: {phase} image {folder / f'{name}_{view}_{phase}'}.mhd/.nii.gz/.png is missing "
                        f"(and no _sequence file with an Info_{view}.cfg '{phase}:' frame to take it from)"
                    )
        files[view] = entry
    return CAMUSPatient(name, folder, files, infos)


def find_camus_patients(root: PathLike, views: Sequence[str] = CAMUS_VIEWS) -> List[CAMUSPatient]:
    """All patients under ``root`` with ED and ES images and labels for every view in ``views``.

    Raises ``FileNotFoundError`` for a missing folder, a folder without patients, or a patient
    lacking a required file (naming it).
    """
    root = Path(root).expanduser()
    if not root.is_dir():
        raise FileNotFoundError(f"CAMUS folder not found: {root}")
    bad = [v for v in views if v not in CAMUS_VIEWS]
    if bad or not views:
        raise ValueError(f"views must be a non-empty subset of {CAMUS_VIEWS}, got {tuple(views)}.")
    dirs = find_patient_dirs(root, _PATIENT_DIR)
    if not dirs:
        raise FileNotFoundError(
            f"no CAMUS patient folders (patientNNNN/patientNNNN_2CH_ED.mhd, .nii.gz or .png) found under {root}"
        )
    return [_camus_patient(d, views) for d in dirs]


def _read_2d(path: Path, dtype=np.float32) -> Tuple[np.ndarray, Tuple[float, float]]:
    arr, spacing = read_array(path, dtype=dtype)
    if arr.ndim == 3 and arr.shape[0] == 1:  # a 2-D image stored with a unit third axis
        arr, spacing = arr[0], spacing[1:]
    if arr.ndim != 2:
        raise ValueError(f"{path}: expected a 2-D image, got array shape {arr.shape}")
    return arr, (float(spacing[0]), float(spacing[1]))


def _read_frame(patient: CAMUSPatient, view: str, phase: str) -> Tuple[np.ndarray, Tuple[float, float], str]:
    entry = patient.views[view]
    if phase in entry:
        arr, spacing = _read_2d(entry[phase])
        return arr, spacing, str(entry[phase])
    seq_path, info = entry["sequence"], patient.info[view]
    frame = int(float(info[phase]))
    seq = load_image(seq_path)
    if seq.ndim != 3 or not 1 <= frame <= seq.shape[-1]:
        raise ValueError(f"{seq_path}: cannot take {phase} frame {frame} (1-based) from a sequence of shape {tuple(seq.shape)}")
    arr, spacing = to_array_order(select_frame(seq, frame - 1, axis=-1))
    return arr, (float(spacing[0]), float(spacing[1])), f"{seq_path}[frame {frame}]"


def load_camus_view(patient: CAMUSPatient, view: str) -> Dict[str, object]:
    """Read one view: ``ed``, ``es`` ``(H, W)`` float32, ``ed_label``, ``es_label`` ``(H, W)``
    uint8, ``spacing`` ``(h, w)`` mm and, for phantoms, ``ddf_ed_es``/``ddf_es_ed`` ``(2, H, W)``
    float32 voxels. Raises ``ValueError`` naming the files on shape mismatches or bad labels."""
    if view not in patient.views:
        raise ValueError(f"patient {patient.name} was indexed without view {view}; it has {sorted(patient.views)}")
    entry = patient.views[view]
    out: Dict[str, object] = {"patient": patient.name, "view": view}
    shape = None
    for phase in ("ED", "ES"):
        image, spacing, src = _read_frame(patient, view, phase)
        label, _ = _read_2d(entry[f"{phase}_gt"], dtype=None)
        if label.shape != image.shape:
            raise ValueError(f"{entry[f'{phase}_gt']} has shape {label.shape} but its image {src} has {image.shape}")
        values = np.unique(label)
        if values.size and (values.min() < 0 or values.max() > 3 or np.any(values != np.round(values))):
            raise ValueError(f"label file {entry[f'{phase}_gt']} holds values {values.tolist()}; CAMUS labels are 0..3")
        if shape is not None and image.shape != shape[0]:
            raise ValueError(f"patient {patient.name} {view}: ED {shape[1]} has shape {shape[0]} but ES {src} has {image.shape}")
        shape = (image.shape, src)
        out[phase.lower()] = image.astype(np.float32)
        out[f"{phase.lower()}_label"] = label.astype(np.uint8)
        out["spacing"] = spacing
    for key, tag in (("ddf_ed_es", "ddf_ED_ES"), ("ddf_es_ed", "ddf_ES_ED")):
        if tag in entry:
            ddf, _ = read_vector_image(entry[tag])
            if ddf.shape != shape[0] + (2,):
                raise ValueError(f"displacement file {entry[tag]} has shape {ddf.shape}; expected {shape[0] + (2,)}")
            out[key] = np.ascontiguousarray(np.moveaxis(ddf, -1, 0)).astype(np.float32)
    # always present (items of a batch must share keys); "unknown" without a cfg entry
    out["image_quality"] = patient.info.get(view, {}).get("ImageQuality", "unknown")
    return out


def camus_frame_item(view_data: Mapping[str, object]) -> Dict[str, object]:
    """Frame item (:mod:`monai_npc.data.pairs`) of one view: arrays gain a channel axis."""
    item = {k: v for k, v in view_data.items()}
    for key in ("ed", "es", "ed_label", "es_label"):
        item[key] = np.asarray(view_data[key])[None]
    item["slice"] = 0
    return item


def camus_preprocess(pixdim: float = 1.0, roi_size: Union[int, Sequence[int]] = 128, protocol: str = "resample") -> Compose:
    """The protocol as dict transforms on a view's frame item (:func:`camus_frame_item`).

    ``protocol="resample"``: resample to ``pixdim`` mm, centre crop/pad to ``roi_size`` (zeros),
    min-max to ``[0, 1]``. ``protocol="resize"`` (images without spacing, e.g. the PNG copy):
    resize the whole image to ``roi_size`` (bilinear images, nearest labels; displacement fields
    are rescaled per axis), then min-max.
    """
    images = ["ed", "es"]
    labels = ["ed_label", "es_label"]
    ddfs = ["ddf_ed_es", "ddf_es_ed"]
    roi = (roi_size, roi_size) if isinstance(roi_size, int) else tuple(roi_size)
    if protocol == "resize":
        return Compose(
            [
                Resized(images, spatial_size=roi, mode="bilinear", align_corners=False, anti_aliasing=True),
                Resized(labels, spatial_size=roi, mode="nearest"),
                MinMaxNormalized(images),
            ]
        )
    if protocol != "resample":
        raise ValueError(f"protocol must be 'resample' or 'resize' here, got {protocol!r}.")
    return Compose(
        [
            ResampleToSpacingd(images, pixdim=pixdim, label_keys=labels, ddf_keys=ddfs, allow_missing_keys=True),
            ResizeWithPadOrCropd(images + labels + ddfs, spatial_size=roi, mode="constant", allow_missing_keys=True),
            MinMaxNormalized(images),
        ]
    )


def camus_patient_split(
    root_or_patients: Union[PathLike, Sequence[str]],
    n_train: Count = 300,
    n_val: Count = 100,
    n_test: Count = 100,
    seed: int = 42,
) -> Dict[str, List[str]]:
    """Patient-level split (paper: 300/100/100 at seed 42; scaled with a warning when fewer
    patients exist; counts may be ints, fractions or ``None`` = the rest)."""
    if isinstance(root_or_patients, (str, Path)):
        names = [p.name for p in find_camus_patients(root_or_patients)]
    else:
        names = list(root_or_patients)
    return patient_split(names, n_train, n_val, n_test, seed)


def build_camus_pairs(
    root: PathLike,
    split: str = "train",
    n_train: Count = 300,
    n_val: Count = 100,
    n_test: Count = 100,
    seed: int = 42,
    views: Sequence[str] = CAMUS_VIEWS,
    directions: Sequence[str] = ("ED->ES",),
    pixdim: float = 1.0,
    roi_size: Union[int, Sequence[int]] = 128,
    protocol: str = "auto",
    split_file: Union[PathLike, None] = None,
) -> List[Dict]:
    """Preprocessed CAMUS pair items of one split (``"train"``, ``"val"``, ``"test"``, ``"all"``).

    One pair per patient, view and direction: ``moving``/``fixed`` ``(1, R, R)`` float32 in
    ``[0, 1]``, ``moving_label``/``fixed_label`` ``(1, R, R)`` uint8, ``patient``, ``view``,
    ``slice`` (0), ``direction``, ``spacing`` (``(pixdim, pixdim)``; the PNG copy: ``(1, 1)``
    pixels of the resized image), ``image_quality`` (from the cfg, ``"unknown"`` without one),
    and ``ddf`` for phantoms.

    Args:
        views: ``("2CH", "4CH")`` or one of them.
        directions: ``("ED->ES",)`` (the paper's task) and/or ``"ES->ED"``.
        protocol: ``"resample"`` (1 mm, centre crop), ``"resize"`` (whole image to ``roi_size``)
            or ``"auto"``: ``"resize"`` for PNG files (no spacing), else ``"resample"``.
        split_file: optional JSON ``{"train": [ids], "val": [ids], "test": [ids]}``; it replaces
            ``n_train``/``n_val``/``n_test``/``seed``.
    """
    if protocol not in CAMUS_PROTOCOLS:
        raise ValueError(f"protocol must be one of {CAMUS_PROTOCOLS}, got {protocol!r}.")
    bad = [d for d in directions if d not in ("ED->ES", "ES->ED")]
    if bad or not directions:
        raise ValueError(f"directions must be a non-empty subset of ('ED->ES', 'ES->ED'), got {tuple(directions)}.")
    patients = find_camus_patients(root, views)
    n_available = len(patients)
    png = patients[0].views[views[0]]["ED"].suffix.lower() == ".png" if patients else False
    if split != "all":
        if split not in SPLITS:
            raise ValueError(f"split must be one of {SPLITS + ('all',)}, got {split!r}.")
        if png and split_file is None:  # a generated split would mix the copy's patients with those weights were trained on
            raise ValueError(
                f"{root} is the PNG copy of CAMUS: split {split!r} needs a split_file (--split_file); the npc_camus bundle's "
                "weights were trained on configs/camus224_split.json (its test patients are the copy's val/ folder), and a "
                "split generated from n_train/n_val/n_test would put training patients in the test set. Use split 'all' for every patient."
            )
        chosen = set(split_patients([p.name for p in patients], split, n_train, n_val, n_test, seed, split_file))
        patients = [p for p in patients if p.name in chosen]
    if not patients:
        raise empty_split_error("CAMUS", split, root, n_available, n_train, n_val, n_test, split_file)
    if protocol == "auto":
        protocol = "resize" if png else "resample"
    preprocess = camus_preprocess(pixdim, roi_size, protocol)
    pairs = []
    for patient in patients:
        for view in views:
            item = frame_item_to_numpy(preprocess(camus_frame_item(load_camus_view(patient, view))))
            pairs.extend(frames_to_pairs(item, directions))
    logger.info("CAMUS %s: %d patients, %d pairs", split, len(patients), len(pairs))
    return pairs


def build_camus_dataset(root: PathLike, split: str = "train", cache: bool = False, **kwargs):
    """``monai.data.Dataset`` of :func:`build_camus_pairs` items (no augmentation, as in the
    paper), with ``image`` ``(2, H, W)`` and float32 tensors."""
    return make_dataset(build_camus_pairs(root, split=split, **kwargs), pair_transforms(augment=False), cache=cache)
