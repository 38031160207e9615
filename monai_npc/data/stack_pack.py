"""Whole short-axis stacks in a heart window, packed into one small ``.npz`` for GPU training.

One file holds, for every patient, the ED and ES stacks cropped to a ``size x size`` in-plane window at the
source's resolution (zero outside the image), as ``uint8`` images (the SSL4MIS ``[0, 1]`` range times 255; other
ranges, e.g. the official release's or the phantoms' ``int16`` NIfTI, min-maxed over the patient's two stacks
first, which training's per-slice min-max makes immaterial) and ``uint8`` labels (0 background, 1 RV, 2 Myo, 3 LV), with the patient ids and their split (``train`` /
``val`` / ``test`` / ``unused`` from a split file such as ``bundles/npc_acdc/configs/acdc70_split.json``).
The 70 ACDC SSL4MIS patients in a 128 x 128 window take about 16 MB compressed (656 slices): the file travels to a GPU
machine and is loaded onto the device once (:mod:`monai_npc.engines.stack_data`).

Arrays of the file (``S`` = total number of slices over the patients, ``P`` = patients):

- ``ed_image``, ``es_image``, ``ed_label``, ``es_label``: ``(S, size, size)`` uint8, the patients' slices one
  after the other (array order ``(Z, H, W)`` per patient, basal to apical as the source stores them);
- ``offsets``: ``(P + 1,)`` int64, patient ``p``'s slices are ``offsets[p]:offsets[p + 1]``;
- ``patients``, ``split``: ``(P,)`` unicode strings;
- ``centres``: ``(P, 2)`` float32 window centre ``(row, col)`` in the source's voxels; ``source_shape``: ``(P, 3)``;
- ``meta``: a JSON string (format version, window size, how the centre was found, the source folder's name).

The window's centre is a function of the stacks: :func:`label_union_centre` (the default; fine for training
data, whose labels are known) or any callable, e.g. ``register``'s label-free
``apps.registration.localize.motion_centre`` (``examples/train_stacks_gpu.py pack --centre motion``).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Dict, List, Mapping, Optional, Sequence, Tuple, Union

import numpy as np

from monai_npc.io_safety import atomic_write

__all__ = ["PACK_FORMAT", "StackPack", "label_union_centre", "crop_stack", "pack_acdc_stacks", "load_stack_pack"]

#: version of the file layout written by :func:`pack_acdc_stacks`
PACK_FORMAT = 1
PathLike = Union[str, Path]
#: ``(ed_image, es_image, ed_label, es_label)`` ``(Z, H, W)`` -> window centre ``(row, col)``, fractional voxels
CentreFn = Callable[[np.ndarray, np.ndarray, np.ndarray, np.ndarray], Tuple[float, float]]
_ARRAYS = ("ed_image", "es_image", "ed_label", "es_label")


@dataclass(frozen=True)
class StackPack:
    """A packed file in memory (numpy); see the module docstring for the arrays' shapes."""

    ed_image: np.ndarray
    es_image: np.ndarray
    ed_label: np.ndarray
    es_label: np.ndarray
    offsets: np.ndarray
    patients: Tuple[str, ...]
    split: Tuple[str, ...]
    centres: np.ndarray
    meta: Mapping[str, object]

    @property
    def size(self) -> int:
        """In-plane window size (voxels)."""
        return int(self.ed_image.shape[-1])

    def indices(self, split: str) -> List[int]:
        """Positions of the patients of ``split`` (``train``, ``val``, ...), in the file's order."""
        return [i for i, s in enumerate(self.split) if s == split]

    def slices(self, patient: int) -> slice:
        """The slice range of patient ``patient`` (a position) in the ``(S, size, size)`` arrays."""
        return slice(int(self.offsets[patient]), int(self.offsets[patient + 1]))


def label_union_centre(ed_image: np.ndarray, es_image: np.ndarray, ed_label: np.ndarray, es_label: np.ndarray) -> Tuple[float, float]:
    """Centre ``(row, col)`` of the in-plane bounding box of the ED and ES labels' union over all slices
    (the image's centre when both are empty). The images are not used."""
    union = ((ed_label > 0) | (es_label > 0)).any(0)
    if not union.any():
        return (union.shape[0] - 1) / 2.0, (union.shape[1] - 1) / 2.0
    rows, cols = np.nonzero(union)
    return (rows.min() + rows.max()) / 2.0, (cols.min() + cols.max()) / 2.0


def crop_stack(stack: np.ndarray, centre: Sequence[float], size: int) -> np.ndarray:
    """``(Z, H, W)`` -> ``(Z, size, size)`` window centred on ``centre`` ``(row, col)`` (rounded to a voxel),
    zero where it leaves the image; same dtype."""
    if stack.ndim != 3:
        raise ValueError(f"crop_stack needs a (Z, H, W) stack, got shape {stack.shape}.")
    r0, c0 = (int(round(float(c) - (size - 1) / 2.0)) for c in centre)
    out = np.zeros((stack.shape[0], size, size), stack.dtype)
    rs, cs = max(r0, 0), max(c0, 0)
    re_, ce = min(r0 + size, stack.shape[1]), min(c0 + size, stack.shape[2])
    if re_ > rs and ce > cs:
        out[:, rs - r0 : re_ - r0, cs - c0 : ce - c0] = stack[:, rs:re_, cs:ce]
    return out


def _to_uint8(ed: np.ndarray, es: np.ndarray, where: str) -> Tuple[np.ndarray, np.ndarray]:
    """Both stacks as ``uint8``: ``[0, 1]`` values times 255, any other range min-maxed over the two stacks first."""
    if not (np.isfinite(ed).all() and np.isfinite(es).all()):
        raise ValueError(f"{where}: the image holds NaN or infinite values.")
    lo, hi = min(float(ed.min()), float(es.min())), max(float(ed.max()), float(es.max()))
    if lo < -1e-3 or hi > 1.0 + 1e-3:  # not the SSL4MIS range: one linear map for both frames
        ed, es = ((x.astype(np.float32) - lo) / max(hi - lo, 1e-6) for x in (ed, es))
    return tuple(np.round(np.clip(x, 0.0, 1.0) * 255.0).astype(np.uint8) for x in (ed, es))  # type: ignore[return-value]


SplitTable = Mapping[str, Sequence[str]]


def _split_of(split_file: Optional[Union[PathLike, SplitTable]]) -> Dict[str, str]:
    if split_file is None:
        return {}
    if isinstance(split_file, Mapping):
        table = split_file
    else:
        path = Path(split_file)
        if not path.is_file():
            raise FileNotFoundError(f"split_file {path} does not exist.")
        table = json.loads(path.read_text())
    return {str(pid): name for name, ids in table.items() if isinstance(ids, (list, tuple)) for pid in ids}


def _pack_patient(patient, size: int, centre: CentreFn) -> Tuple[Dict[str, np.ndarray], Tuple[float, float], Tuple[int, ...]]:
    from .acdc import load_acdc_patient  # MONAI and the readers only when packing

    v = load_acdc_patient(patient)
    ed, es, edl, esl = v["ed_image"], v["es_image"], v["ed_label"], v["es_label"]
    c = tuple(float(x) for x in centre(ed, es, edl, esl))
    ed8, es8 = _to_uint8(ed, es, f"patient {patient.name}")
    arrays = {"ed_image": crop_stack(ed8, c, size), "es_image": crop_stack(es8, c, size),
              "ed_label": crop_stack(edl.astype(np.uint8), c, size), "es_label": crop_stack(esl.astype(np.uint8), c, size)}
    return arrays, c, tuple(ed.shape)


def pack_acdc_stacks(
    data_dir: PathLike,
    out: PathLike,
    split_file: Optional[Union[PathLike, SplitTable]] = None,
    size: int = 128,
    centre: CentreFn = label_union_centre,
    centre_name: str = "label_union",
    patients: Optional[Sequence[str]] = None,
) -> Path:
    """Pack the ACDC stacks under ``data_dir`` (any layout of :func:`~monai_npc.data.acdc.find_acdc_patients`)
    into ``out`` (``.npz``, compressed; its folder is created).

    Args:
        data_dir: the ACDC folder, e.g. ``../shared/data/acdc_ssl4mis``.
        out: the file to write.
        split_file: JSON ``{"train": [ids], "val": [ids], ...}`` (or that mapping itself); patients it does not name
            get ``unused``, ``None`` marks every patient ``train``.
        size: in-plane window size (voxels).
        centre: the window's centre from the stacks (:data:`CentreFn`); ``centre_name`` records it in ``meta``.
        patients: only these patient ids (default: all found).

    Returns the path written. Raises ``FileNotFoundError`` / ``ValueError`` naming the folder, file or patient.
    """
    from .acdc import find_acdc_patients

    if int(size) < 8:
        raise ValueError(f"size must be at least 8 voxels, got {size}.")
    found = {p.name: p for p in find_acdc_patients(data_dir)}
    names = sorted(found) if patients is None else list(patients)
    missing = [n for n in names if n not in found]
    if missing or not names:
        raise ValueError(f"patients {missing or names} not found under {data_dir} (it holds {len(found)} patients).")
    splits = _split_of(split_file)
    parts: Dict[str, List[np.ndarray]] = {k: [] for k in _ARRAYS}
    centres, shapes, offsets = [], [], [0]
    for name in names:
        arrays, c, shape = _pack_patient(found[name], int(size), centre)
        for k in _ARRAYS:
            parts[k].append(arrays[k])
        centres.append(c)
        shapes.append(shape)
        offsets.append(offsets[-1] + shape[0])
    meta = {"format": PACK_FORMAT, "size": int(size), "centre": centre_name, "source": Path(data_dir).name,
            "labels": {"1": "rv", "2": "myo", "3": "lv"}, "split_file": None if split_file is None else "given" if isinstance(split_file, Mapping) else Path(split_file).name}
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    arrays = dict(**{k: np.concatenate(v) for k, v in parts.items()}, offsets=np.asarray(offsets, np.int64),
                  patients=np.asarray(names), split=np.asarray([splits.get(n, "unused" if splits else "train") for n in names]),
                  centres=np.asarray(centres, np.float32), source_shape=np.asarray(shapes, np.int64), meta=np.asarray(json.dumps(meta)))

    def write(tmp: Path) -> None:
        with tmp.open("wb") as fh:  # np.savez_compressed would append .npz to a name without it
            np.savez_compressed(fh, **arrays)

    return atomic_write(out, write)


def load_stack_pack(path: PathLike) -> StackPack:
    """Read a file of :func:`pack_acdc_stacks` (no pickle). Raises ``FileNotFoundError`` / ``ValueError`` naming it."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"stack pack {path} does not exist; write it with `examples/train_stacks_gpu.py pack`.")
    try:
        with np.load(path, allow_pickle=False) as z:
            data = {k: z[k] for k in z.files}
    except (OSError, ValueError) as err:
        raise ValueError(f"cannot read stack pack {path}: {err}") from err
    needed = set(_ARRAYS) | {"offsets", "patients", "split", "centres", "meta"}
    if not needed <= set(data):
        raise ValueError(f"stack pack {path} lacks {sorted(needed - set(data))}; not a file of pack_acdc_stacks.")
    meta = json.loads(str(data["meta"]))
    if meta.get("format") != PACK_FORMAT:
        raise ValueError(f"stack pack {path} has format {meta.get('format')}, this code reads {PACK_FORMAT}: pack it again.")
    offsets = data["offsets"].astype(np.int64)
    shapes = {k: data[k].shape for k in _ARRAYS}
    if len(set(shapes.values())) != 1 or offsets[-1] != shapes["ed_image"][0] or any(data[k].dtype != np.uint8 for k in _ARRAYS):
        raise ValueError(f"stack pack {path} is inconsistent: arrays {shapes}, offsets ending at {offsets[-1]}.")
    return StackPack(**{k: data[k] for k in _ARRAYS}, offsets=offsets, patients=tuple(str(p) for p in data["patients"]),
                     split=tuple(str(s) for s in data["split"]), centres=data["centres"], meta=meta)
