"""Overlap of two integer label maps on one grid (numpy; no MONAI import, for the light register path)."""

from __future__ import annotations

from typing import Dict, Optional, Sequence

import numpy as np

__all__ = ["dice_by_value"]


def dice_by_value(a: np.ndarray, b: np.ndarray, values: Sequence[int]) -> Dict[int, Optional[float]]:
    """Dice of each label value of ``a`` and ``b`` (integer arrays of one shape): ``{value: Dice}``,
    ``None`` for a value absent from both."""
    out: Dict[int, Optional[float]] = {}
    for v in values:
        pa, pb = a == v, b == v
        total = int(pa.sum() + pb.sum())
        out[int(v)] = float(2.0 * np.logical_and(pa, pb).sum() / total) if total else None
    return out
