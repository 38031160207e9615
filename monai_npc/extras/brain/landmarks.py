"""Landmark-curve distances before and after registration (the r16 <-> r85 curves).

To carry a curve drawn on image ``A`` into image ``B``, register ``B`` (moving) onto ``A`` (fixed):
the field ``ddf`` on ``A``'s grid sends each point ``p`` of ``A`` to ``p + ddf(p)`` in ``B``
(MONAI ``Warp`` convention), so the points move exactly, with no label resampling.
"""

from __future__ import annotations

from typing import Dict

import numpy as np
import torch
import torch.nn.functional as F

__all__ = ["sample_field", "move_points", "mean_symmetric_distance", "hausdorff_distance"]


def sample_field(ddf: torch.Tensor, points: np.ndarray) -> np.ndarray:
    """Bilinear value of ``ddf`` ``(2, H, W)`` at ``points`` ``(N, 2)`` (row, column, pixels; border clamped) -> ``(N, 2)``."""
    d = torch.as_tensor(ddf, dtype=torch.float64)
    h, w = d.shape[1:]
    p = torch.as_tensor(np.asarray(points), dtype=torch.float64)
    grid = torch.stack([p[:, 1] * 2 / (w - 1) - 1, p[:, 0] * 2 / (h - 1) - 1], -1)[None, None]  # (1, 1, N, 2) x, y
    return F.grid_sample(d[None], grid, mode="bilinear", padding_mode="border", align_corners=True)[0, :, 0].T.numpy()


def move_points(points: np.ndarray, ddf: torch.Tensor) -> np.ndarray:
    """``p + ddf(p)`` for ``points`` ``(N, 2)`` on ``ddf``'s grid (pixels)."""
    return np.asarray(points, dtype=np.float64) + sample_field(ddf, points)


def _nearest(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Distance from each point of ``a`` ``(N, 2)`` to its nearest point of ``b`` ``(M, 2)``."""
    from scipy.spatial import cKDTree

    return cKDTree(b).query(a)[0]


def mean_symmetric_distance(a: np.ndarray, b: np.ndarray) -> float:
    """``(mean_a d(a, B) + mean_b d(b, A)) / 2`` between two point sets (same units as the points)."""
    return float(0.5 * (_nearest(a, b).mean() + _nearest(b, a).mean()))


def hausdorff_distance(a: np.ndarray, b: np.ndarray) -> float:
    """Symmetric Hausdorff distance between two point sets."""
    return float(max(_nearest(a, b).max(), _nearest(b, a).max()))


def curve_distances(a: np.ndarray, b: np.ndarray) -> Dict[str, float]:
    """``{"msd": mean_symmetric_distance, "hausdorff": hausdorff_distance}``."""
    return {"msd": mean_symmetric_distance(a, b), "hausdorff": hausdorff_distance(a, b)}
