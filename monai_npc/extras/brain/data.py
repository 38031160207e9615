"""The six real 2-D T1 brain slices (ANTs example slices r16 ... r85) and the r16 / r85 landmark curves.

The files are read from a ``brain2d`` folder (default: :func:`default_data_dir`);
nothing is copied into the package. Slices are 256 x 256 at 1 mm; the model works on a
``size x size`` grid obtained by area-averaging (``size`` dividing 256), so model pixel ``i``
covers original pixels ``[f i, f (i + 1))`` with ``f = 256 / size``.
"""

from __future__ import annotations

import itertools
import os
from pathlib import Path
from typing import Dict, List, Optional, Sequence, Tuple

import numpy as np

__all__ = [
    "SUBJECTS", "HOLDOUT", "LANDMARK_PAIR", "default_data_dir", "check_data_dir", "load_slice", "load_slices",
    "load_landmarks", "curve_points", "all_pairs", "split_pairs", "to_model_coords", "from_model_coords",
]

#: the six subjects (files ``{name}slice.jpg``)
SUBJECTS: Tuple[str, ...] = ("r16", "r27", "r30", "r62", "r64", "r85")
#: the landmark pair (files ``{name}sliceLM.nii.gz``, curves labelled 1 and 2)
LANDMARK_PAIR: Tuple[str, str] = ("r16", "r85")
#: pairs held out of training (the landmark pair among them), used for the figures and the landmark metric
HOLDOUT: Tuple[Tuple[str, str], ...] = (("r16", "r85"), ("r27", "r62"), ("r30", "r64"), ("r62", "r85"))
#: native slice size (pixels of 1 mm)
NATIVE_SIZE = 256


def default_data_dir() -> Path:
    """``$MONAI_NPC_BRAIN2D`` if set, else ``../shared/data/brain2d`` beside the repository root."""
    env = os.environ.get("MONAI_NPC_BRAIN2D")
    if env:
        return Path(env)
    return Path(__file__).resolve().parents[3].parent / "shared" / "data" / "brain2d"


def check_data_dir(data_dir: Optional[str | Path] = None) -> Path:
    """The data folder, after checking that every slice file is there (``FileNotFoundError`` naming the first missing one)."""
    root = Path(data_dir) if data_dir is not None else default_data_dir()
    if not root.is_dir():
        raise FileNotFoundError(f"brain2d data folder {root} does not exist (pass --data DIR or set MONAI_NPC_BRAIN2D).")
    for name in SUBJECTS:
        if not (root / f"{name}slice.jpg").is_file():
            raise FileNotFoundError(f"brain2d slice {root / (name + 'slice.jpg')} is missing.")
    return root


def _factor(size: int) -> int:
    if size < 32 or NATIVE_SIZE % size:
        raise ValueError(f"size must divide {NATIVE_SIZE} and be >= 32, got {size}.")
    return NATIVE_SIZE // size


def load_slice(data_dir: str | Path, name: str, size: int = 128) -> np.ndarray:
    """Slice ``name`` as float32 ``(size, size)`` in ``[0, 1]`` (area-averaged from 256, min-max normalised)."""
    from PIL import Image

    path = Path(data_dir) / f"{name}slice.jpg"
    if not path.is_file():
        raise FileNotFoundError(f"brain2d slice {path} does not exist.")
    with Image.open(path) as im:
        a = np.asarray(im.convert("L"), dtype=np.float32)
    if a.shape != (NATIVE_SIZE, NATIVE_SIZE):
        raise ValueError(f"{path}: expected a {NATIVE_SIZE} x {NATIVE_SIZE} slice, got {a.shape}.")
    f = _factor(size)
    a = a.reshape(size, f, size, f).mean((1, 3))
    lo, hi = float(a.min()), float(a.max())
    return ((a - lo) / (hi - lo) if hi > lo else np.zeros_like(a)).astype(np.float32)


def load_slices(data_dir: str | Path, size: int = 128, names: Sequence[str] = SUBJECTS) -> Dict[str, np.ndarray]:
    """``{name: load_slice(...)}`` for every subject."""
    return {n: load_slice(data_dir, n, size) for n in names}


def load_landmarks(data_dir: str | Path, name: str) -> np.ndarray:
    """Landmark label map ``(256, 256)`` int (0 background, curves 1 and 2) of ``name`` (array order, like the JPEG)."""
    import SimpleITK as sitk

    path = Path(data_dir) / f"{name}sliceLM.nii.gz"
    if not path.is_file():
        raise FileNotFoundError(f"landmark file {path} does not exist (landmarks exist for {LANDMARK_PAIR} only).")
    lab = sitk.GetArrayFromImage(sitk.ReadImage(str(path)))
    if lab.shape != (NATIVE_SIZE, NATIVE_SIZE):
        raise ValueError(f"{path}: expected a {NATIVE_SIZE} x {NATIVE_SIZE} label map, got {lab.shape}.")
    return np.rint(lab).astype(np.int64)


def curve_points(labels: np.ndarray, label: int) -> np.ndarray:
    """Pixel centres ``(N, 2)`` (row, column; native pixels = mm) of ``label`` in a label map."""
    pts = np.argwhere(np.asarray(labels) == label).astype(np.float64)
    if len(pts) == 0:
        raise ValueError(f"label {label} is absent from the landmark map.")
    return pts


def to_model_coords(points: np.ndarray, size: int) -> np.ndarray:
    """Native pixel coordinates -> model-grid coordinates (``(p + 0.5) / f - 0.5``)."""
    f = _factor(size)
    return (np.asarray(points, dtype=np.float64) + 0.5) / f - 0.5


def from_model_coords(points: np.ndarray, size: int) -> np.ndarray:
    """Model-grid coordinates -> native pixel coordinates (inverse of :func:`to_model_coords`)."""
    f = _factor(size)
    return (np.asarray(points, dtype=np.float64) + 0.5) * f - 0.5


def all_pairs(names: Sequence[str] = SUBJECTS) -> List[Tuple[str, str]]:
    """The 15 unordered inter-subject pairs (each registered in both directions)."""
    return list(itertools.combinations(names, 2))


def split_pairs(holdout: Sequence[Tuple[str, str]] = HOLDOUT) -> Tuple[List[Tuple[str, str]], List[Tuple[str, str]]]:
    """``(train, test)`` unordered pairs; ``test`` = ``holdout`` (either order)."""
    held = {frozenset(p) for p in holdout}
    for p in held:
        if not p <= set(SUBJECTS) or len(p) != 2:
            raise ValueError(f"holdout pair {sorted(p)} is not a pair of {SUBJECTS}.")
    pairs = all_pairs()
    return [p for p in pairs if frozenset(p) not in held], [p for p in pairs if frozenset(p) in held]
