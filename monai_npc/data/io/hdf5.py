"""HDF5 datasets (the SSL4MIS ACDC files) into numpy arrays."""

from __future__ import annotations

from pathlib import Path
from typing import Dict, Sequence

import numpy as np

from .formats import PathLike

__all__ = ["read_h5"]


def read_h5(path: PathLike, keys: Sequence[str] = ("image", "label")) -> Dict[str, np.ndarray]:
    """Read datasets ``keys`` of an HDF5 file into numpy arrays.

    Raises ``FileNotFoundError`` for a missing file and ``ValueError`` naming the file for a
    corrupt file or a missing dataset.
    """
    import h5py

    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"HDF5 file not found: {path}")
    try:
        with h5py.File(path, "r") as f:
            missing = [k for k in keys if k not in f]
            if missing:
                raise ValueError(f"HDF5 file {path} lacks dataset(s) {missing}; it has {sorted(f.keys())}")
            return {k: np.asarray(f[k][()]) for k in keys}
    except ValueError:
        raise
    except Exception as err:  # OSError for truncated/corrupt files
        raise ValueError(f"cannot read HDF5 file {path}: {type(err).__name__}: {err}") from err
