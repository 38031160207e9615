"""Two label maps of one fixed image fused slice by slice: a registration's label and a segmentation network's.

The registration's label (the moving label carried by the transform) knows which structures each slice holds
and where they lie; a segmentation network of the fixed image often draws their outlines more closely. Where the
two agree on a slice (mean Dice over the structures either holds there, at least ``min_agreement``), the fused
map takes the network's outlines; where they do not (a structure one of them lacks, a slice the network read
wrongly), it keeps the registration's. The fused map is therefore never a transform's output: it is an estimate of
its own, next to the transform's label.
"""

from __future__ import annotations

from typing import Tuple

import numpy as np

from .overlap import dice_by_value

__all__ = ["FUSION_MIN_AGREEMENT", "FUSION_MIN_PRIOR_AGREEMENT", "slice_agreement", "fuse_by_slice"]


#: a slice takes the segmentation network's outlines when it agrees at least this much with the registration's
#: label there (mean Dice over the structures either holds; chosen on the validation patients, docs/design_notes.md)
FUSION_MIN_AGREEMENT = 0.5


#: ... and a fused map is made at all only when the network reproduces the user's own labels at least this well where
#: both are known (mean Dice against the moving label on the moving image): fusing puts its outlines in place of the
#: transform's, so a network that draws them otherwise (another convention, images unlike its training data) must not
#: (docs/design_notes.md, "functional/label_fusion.py")
FUSION_MIN_PRIOR_AGREEMENT = 0.88


def slice_agreement(a: np.ndarray, b: np.ndarray) -> float:
    """Mean Dice of two ``(H, W)`` integer label maps over the non-zero values either holds; 1.0 when both are empty."""
    values = np.union1d(np.unique(a), np.unique(b))
    values = values[values != 0]
    if values.size == 0:
        return 1.0
    return float(np.mean([d for d in dice_by_value(a, b, values.tolist()).values() if d is not None]))


def fuse_by_slice(registered: np.ndarray, segmented: np.ndarray, min_agreement: float = FUSION_MIN_AGREEMENT
                  ) -> Tuple[np.ndarray, np.ndarray]:
    """``(fused, taken)``: the slices of ``segmented`` that agree with ``registered``, ``registered`` elsewhere.

    Args:
        registered: ``(Z, H, W)`` (or ``(H, W)``) integer label map: the moving label carried by a transform.
        segmented: the same shape: a segmentation network's label map of the same fixed image (0 where it has none).
        min_agreement: a slice takes ``segmented`` when :func:`slice_agreement` of the two there is at least this (in [0, 1]).

    Returns:
        ``fused`` (the dtype of ``registered``) and ``taken`` ``(Z,)`` bool: the slices that took ``segmented``.

    Raises:
        ValueError: shapes differ, or ``min_agreement`` outside [0, 1].
    """
    registered, segmented = np.asarray(registered), np.asarray(segmented)
    if registered.shape != segmented.shape or registered.ndim not in (2, 3):
        raise ValueError(f"registered {registered.shape} and segmented {segmented.shape} must be one (Z, H, W) or (H, W) grid.")
    if not 0.0 <= float(min_agreement) <= 1.0:
        raise ValueError(f"min_agreement must lie in [0, 1], got {min_agreement}.")
    reg3, seg3 = (registered[None], segmented[None]) if registered.ndim == 2 else (registered, segmented)
    taken = np.array([slice_agreement(r, s) >= min_agreement for r, s in zip(reg3, seg3)], bool)
    fused = np.where(taken[:, None, None], seg3, reg3).astype(registered.dtype)
    return (fused[0] if registered.ndim == 2 else fused), taken
