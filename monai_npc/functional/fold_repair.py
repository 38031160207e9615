"""The few folds a registration's field keeps, smoothed away where they are.

A field whose Jacobian determinant is ``<= 0`` somewhere maps two fixed points onto one moving point there (a fold):
the written transform is not invertible, and a label carried through it loses or doubles tissue. The network's field
and its test-time refinement (with a fold penalty) leave a few such voxels on some pairs, mostly where the label term
pulls hard. :func:`repair_folds` smooths the field in-plane (a Gaussian of ``sigma`` voxels) at the folded voxels and
their in-plane neighbours only, and repeats on what still folds, up to ``max_rounds`` rounds: elsewhere the field is
untouched (bit for bit).

The smoothing is numpy (:func:`~monai_npc.functional.gaussian.gaussian_filter_nearest`, on a crop around the folds),
the determinant torch (:func:`~monai_npc.functional.warp.jacobian_determinant`). Fields ``(D, *S)`` in voxels, MONAI ``Warp`` convention: a
2-D field ``(2, H, W)``, or a stack's ``(3, Z, H, W)`` with channel 0 through the slices.
"""

from __future__ import annotations

from typing import Any, Dict, Tuple

import numpy as np
import torch

from .gaussian import gaussian_filter_nearest
from .warp import jacobian_determinant

__all__ = ["field_determinant", "repair_folds"]


def field_determinant(ddf: np.ndarray) -> np.ndarray:
    """``det(I + grad u)`` of a ``(D, *S)`` field in voxels (MONAI ``Warp`` convention; 3-D: channel 0 through-plane),
    as ``(Z, H, W)`` float32 (2-D: ``Z`` = 1): the in-plane determinant of every slice when the through-plane component
    is 0 (2-D models), else the full 3-D determinant (central differences, :func:`jacobian_determinant`)."""
    ddf = np.asarray(ddf)
    if ddf.shape[0] == 3 and np.any(ddf[0]):
        return jacobian_determinant(torch.from_numpy(ddf)[None])[0].float().numpy()
    in_plane = torch.from_numpy(np.ascontiguousarray(ddf[1:] if ddf.shape[0] == 3 else ddf[:, None]))
    return jacobian_determinant(in_plane.permute(1, 0, 2, 3)).float().numpy()  # (Z, 2, H, W): one 2-D field per slice


def _grow(mask: np.ndarray, through_plane: bool) -> np.ndarray:
    """``mask`` ``(Z, H, W)`` with each voxel's 8 in-plane neighbours added, and its two neighbours across the slices
    when ``through_plane``."""
    padded = np.pad(mask, ((0, 0), (1, 1), (1, 1)))
    h, w = mask.shape[1:]
    out = np.zeros_like(mask)
    for dy in range(3):
        for dx in range(3):
            out |= padded[:, dy:dy + h, dx:dx + w]
    if through_plane:
        grown = out.copy()
        grown[1:] |= out[:-1]
        grown[:-1] |= out[1:]
        out = grown
    return out


def _refresh(det: np.ndarray, field: np.ndarray, first: int, last: int) -> np.ndarray:
    """``det`` ``(Z, H, W)`` with slices ``first..last`` recomputed from ``field`` (the determinant there needs the
    slices beside them too: central differences; a slab whose through-plane component is 0 gets the in-plane one)."""
    lo, hi = max(first - 1, 0), min(last + 2, det.shape[0])
    part = field[:, lo:hi] if field.ndim == 4 else field
    det = det.copy()
    det[first:last + 1] = field_determinant(part)[first - lo:last + 1 - lo]
    return det


def repair_folds(ddf: np.ndarray, sigma: float = 1.5, max_rounds: int = 30, return_determinant: bool = False) -> Tuple[Any, ...]:
    """``(the field with its folds smoothed away, what was done)`` (and its determinant with ``return_determinant``).

    Each round takes the voxels with ``det J <= 0`` (:func:`field_determinant`) and their 8 in-plane neighbours, and
    gives them the field smoothed by a Gaussian of ``sigma`` voxels in-plane (every channel, borders replicated);
    rounds stop when nothing folds or after ``max_rounds`` (and if the field then folds more than ``ddf``, ``ddf`` is
    returned as it is). A field that moves through the plane (channel 0 of a stack's field not 0) folds
    across the slices too: its rounds also take the folded voxels' neighbours in the slices beside them. Each round's
    slices are smoothed from the field as it was before the round.

    Args:
        ddf: ``(2, H, W)`` or ``(3, Z, H, W)`` displacement in voxels (not changed).
        sigma: in-plane Gaussian width in voxels (> 0).
        max_rounds: at most this many rounds (>= 0; 0 returns the field as it is).
        return_determinant: also return :func:`field_determinant` of the returned field, as it would compute it, or
            ``None`` where the rounds cannot tell it exactly (a field that moves through the plane and was changed: the
            rounds recompute it on slabs of slices).

    Returns:
        The field (float64, a copy; equal to ``ddf`` where no round acted) and ``{"rounds", "voxels_changed",
        "folding_percent_before", "folding_percent_after"}``.

    Raises:
        ValueError: a field of another shape, non-finite values, ``sigma`` <= 0 or ``max_rounds`` < 0.
    """
    field = np.array(ddf, dtype=np.float64, copy=True)
    if not ((field.ndim == 3 and field.shape[0] == 2) or (field.ndim == 4 and field.shape[0] == 3)):
        raise ValueError(f"ddf must be a (2, H, W) or (3, Z, H, W) field, got shape {field.shape}.")
    if not np.isfinite(field).all():
        raise ValueError("ddf holds NaN or Inf values: no fold repair of a broken field.")
    if not sigma > 0 or max_rounds < 0:
        raise ValueError(f"sigma must be > 0 and max_rounds >= 0, got sigma={sigma}, max_rounds={max_rounds}.")
    through = field.ndim == 4 and bool(np.any(field[0]))
    stack = field if field.ndim == 4 else field[:, None]  # a view: (C, Z, H, W)
    det = given_det = field_determinant(field)
    bad = det <= 0
    before = int(bad.sum())
    given = field.copy() if before else field
    touched = np.zeros(bad.shape, bool)
    reach = int(4.0 * sigma + 0.5) + 2  # the Gaussian's radius and the grown border
    rounds = 0
    while bad.any() and rounds < max_rounds:
        rounds += 1
        where = _grow(bad, through)
        updates = []
        for z in np.flatnonzero(where.any((1, 2))):  # one crop per slice around its voxels to smooth
            rows, cols = np.flatnonzero(where[z].any(1)), np.flatnonzero(where[z].any(0))
            box = (slice(max(rows[0] - reach, 0), min(rows[-1] + reach + 1, where.shape[1])),
                   slice(max(cols[0] - reach, 0), min(cols[-1] + reach + 1, where.shape[2])))
            m = where[z][box]
            updates.append((z, box, m, gaussian_filter_nearest(stack[:, z][(slice(None),) + box], (0.0, sigma, sigma))[:, m]))
        for z, box, m, values in updates:  # written after all are computed
            stack[:, z][(slice(None),) + box][:, m] = values
        touched |= where
        det = _refresh(det, field, int(updates[0][0]), int(updates[-1][0]))
        bad = det <= 0
    if int(bad.sum()) > before:  # it folds more than the field given (a fold these rounds do not resolve): keep that
        field, touched, det = given, np.zeros_like(touched), given_det
        bad = det <= 0
    info = {"rounds": rounds, "voxels_changed": int(touched.sum()), "folding_percent_before": 100.0 * before / bad.size,
            "folding_percent_after": float(100.0 * bad.mean())}
    if not return_determinant:
        return field, info
    return field, info, det if not (through and touched.any()) else None
