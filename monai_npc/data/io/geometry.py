"""World geometry of a ``MetaTensor`` in ITK's convention, from MONAI's RAS affine."""

from __future__ import annotations

from typing import Dict

import numpy as np

__all__ = ["world_meta"]


def world_meta(affine: np.ndarray) -> Dict[str, np.ndarray]:
    """``spacing``, LPS ``origin`` and ``direction`` from MONAI's RAS ``affine`` ``(r+1, r+1)``."""
    from monai.data.utils import orientation_ras_lps

    lps = np.asarray(orientation_ras_lps(np.asarray(affine, dtype=np.float64)))
    rank = lps.shape[0] - 1
    linear = lps[:rank, :rank]
    spacing = np.linalg.norm(linear, axis=0)
    direction = linear / np.where(spacing > 0, spacing, 1.0)
    return {"spacing": spacing, "origin": lps[:rank, rank].copy(), "direction": direction}
