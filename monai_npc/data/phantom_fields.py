"""Shared pieces of the analytic phantoms: pixel grids in mm, soft edges, smooth random fields, and the
numerical inverse of a displacement (MONAI ``Warp`` convention, voxels)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Tuple

import numpy as np
from scipy import ndimage

__all__ = ["Array", "pixel_grid_mm", "soft_inside", "vector_length", "cosine_taper", "unit_vector", "SmoothField", "sample_bilinear", "invert_ddf"]

Array = np.ndarray


def pixel_grid_mm(shape: Tuple[int, int], spacing: Tuple[float, float], offset: Tuple[float, float] = (0.0, 0.0)) -> Array:
    """Pixel centres in mm, ``(H, W, 2)`` (row, column)."""
    rows = offset[0] + spacing[0] * np.arange(shape[0], dtype=np.float32)
    cols = offset[1] + spacing[1] * np.arange(shape[1], dtype=np.float32)
    return np.stack(np.meshgrid(rows, cols, indexing="ij"), -1)


def soft_inside(sd: Array, width: float) -> Array:
    """Partial-volume mask from a signed distance (mm, negative inside): a linear ramp of
    ``2 * width`` mm across the boundary."""
    return np.clip(0.5 - sd * (0.5 / width), 0.0, 1.0)


def vector_length(d: Array) -> Array:
    """Length of 2-vectors ``(..., 2)``."""
    return np.hypot(d[..., 0], d[..., 1])


def cosine_taper(x: Array, length: float) -> Array:
    """1 at ``x <= 0`` falling smoothly (cosine) to 0 at ``x >= length``."""
    y = np.clip(x / length, 0.0, 1.0)
    return 0.5 * (1.0 + np.cos(np.pi * y))


def unit_vector(angle: float) -> Array:
    """Unit vector (row, col) at ``angle`` (radians, measured like ``atan2(row, col)``)."""
    return np.array([np.sin(angle), np.cos(angle)])


@dataclass(frozen=True)
class SmoothField:
    """A smooth random field evaluable anywhere: linear interpolation of a smoothed coarse
    random grid ``values`` ``(C, n, n)`` with ``cell`` mm spacing.

    Positions are in mm relative to an anchor (the heart centre or the probe); outside the
    grid the field mirrors.
    """

    values: Array
    cell: float
    half_extent: float

    @staticmethod
    def draw(rng: np.random.Generator, extent: float, cell: float, amp: float, channels: int = 1) -> "SmoothField":
        n = int(np.ceil(extent / cell)) + 4
        raw = np.stack([ndimage.gaussian_filter(c, 0.7) for c in rng.normal(0.0, 1.0, (channels, n, n))])
        raw *= amp / max(float(raw.std()), 1e-6)  # the interpolant passes through these values
        return SmoothField(raw, cell, 0.5 * (n - 1) * cell)

    def __call__(self, q: Array) -> Array:
        coords = np.moveaxis((q + self.half_extent) / self.cell, -1, 0)
        out = [ndimage.map_coordinates(c, coords, order=1, mode="mirror") for c in self.values]
        return out[0] if len(out) == 1 else np.stack(out, -1)


def invert_ddf(ddf: Array, iterations: int = 50, tol: float = 1e-3) -> Array:
    """Inverse of a displacement field ``(2, H, W)`` (voxels, pull convention) by fixed-point
    iteration ``v(y) = -u(y + v(y))`` with linear interpolation (border values outside), until
    the update is below ``tol`` voxels or after ``iterations`` steps.

    If ``ddf`` warps moving onto fixed, the result warps fixed onto moving.
    """
    grid = np.stack(np.meshgrid(*[np.arange(n, dtype=np.float32) for n in ddf.shape[1:]], indexing="ij"))
    ddf = ddf.astype(np.float32)
    inv = -ddf
    for _ in range(iterations):
        coords = grid + inv
        new = -np.stack([ndimage.map_coordinates(c, coords, order=1, mode="nearest") for c in ddf])
        done = float(np.abs(new - inv).max()) < tol
        inv = new
        if done:
            break
    return inv


def sample_bilinear(field: Array, coords_vox: Array) -> Array:
    """Bilinear samples of ``field`` ``(H, W)`` (real or complex) at ``coords_vox`` ``(H', W', 2)``."""
    c = np.moveaxis(coords_vox, -1, 0)
    if np.iscomplexobj(field):
        return sample_bilinear(field.real, coords_vox) + 1j * sample_bilinear(field.imag, coords_vox)
    return ndimage.map_coordinates(field, c, order=1, mode="reflect")
