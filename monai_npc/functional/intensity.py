"""Per-slice intensity normalisation of ``(Z, H, W)`` stacks (numpy): min-max and robust percentiles."""

from __future__ import annotations

from typing import Any, Mapping, Optional

import numpy as np

__all__ = ["minmax_slices", "robust_unit"]


def minmax_slices(array: np.ndarray, meta: Optional[Mapping[str, Any]] = None) -> np.ndarray:
    """Min-max each slice of ``(Z, H, W)`` to ``[0, 1]``; NaN (outside the image) becomes 0."""
    out = np.zeros(array.shape, np.float32)
    for z, sl in enumerate(array):
        finite = np.isfinite(sl)
        if not finite.any():
            continue
        lo, hi = float(sl[finite].min()), float(sl[finite].max())
        out[z] = np.where(finite, (sl - lo) / (hi - lo) if hi > lo else 0.0, 0.0)
    return out



def robust_unit(stack: np.ndarray, low: float = 1.0, high: float = 99.0) -> np.ndarray:
    """``(Z, H, W)`` -> each slice mapped to ``[0, 1]`` by its ``low``/``high`` percentiles (clipped);
    NaN (outside the image) becomes 0. Percentiles, not min/max: a few bright voxels (fat, flow
    artefacts) must not flatten the contrast of the heart."""
    out = np.zeros(stack.shape, np.float32)
    for z, sl in enumerate(stack):
        finite = np.isfinite(sl)
        if not finite.any():
            continue
        lo, hi = np.percentile(sl[finite], [low, high])
        if hi > lo:
            out[z] = np.where(finite, np.clip((sl - lo) / (hi - lo), 0.0, 1.0), 0.0)
    return out
