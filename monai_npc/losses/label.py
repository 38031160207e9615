"""Weak supervision: Dice of the warped moving segmentation against the fixed one (training only)."""

from __future__ import annotations

from typing import Sequence, Tuple

import torch
from monai.losses import DiceLoss
from torch import nn

from monai_npc.functional.warp import warp_image

__all__ = ["WarpedLabelDiceLoss", "WarpedLabelVolumeLoss", "one_hot_labels", "warped_masks"]


def one_hot_labels(label: torch.Tensor, values: Sequence[int]) -> torch.Tensor:
    """``(B, 1, *S)`` integer label map -> ``(B, len(values), *S)`` float masks, one channel per value."""
    if label.dim() < 3 or label.shape[1] != 1:
        raise ValueError(f"one_hot_labels expects a (B, 1, *S) label map, got shape {tuple(label.shape)}.")
    return torch.cat([(label == v) for v in values], 1).to(torch.float32)


def warped_masks(moving_label: torch.Tensor, fixed_label: torch.Tensor, ddf: torch.Tensor,
                 values: Sequence[int]) -> Tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """``(moving, fixed, warped)`` masks ``(B, len(values), *S)`` in ``ddf``'s dtype: the one-hot label maps and
    the moving one warped by ``ddf`` with bilinear interpolation (differentiable; as the evaluation warps labels)."""
    moving = one_hot_labels(moving_label, values).to(ddf.dtype)
    fixed = one_hot_labels(fixed_label, values).to(ddf.dtype)
    return moving, fixed, warp_image(moving, ddf, "bilinear", "border")


class WarpedLabelDiceLoss(nn.Module):
    """Soft Dice loss between the moving segmentation warped by ``ddf`` and the fixed segmentation.

    Each structure of ``labels`` becomes a binary mask, warped with bilinear interpolation (so the
    loss is differentiable with respect to ``ddf``) and compared with MONAI's ``DiceLoss``
    (mean over structures and batch; 0 for a perfect overlap, 1 for none). This is the
    weakly-supervised term of label-driven registration: the segmentations are needed for the
    *training* pairs only; the network registers unlabelled images at inference.

    Args:
        labels: label values of the structures (background excluded), e.g. ``(1, 2, 3)``.
        smooth: Dice smoothing added to numerator and denominator (``smooth_nr`` = ``smooth_dr``).
        batch: one Dice per structure over the whole batch (MONAI ``DiceLoss(batch=True)``) instead
            of one per pair. With the slices of one stack as the batch this is the stack's **3-D**
            Dice, what the whole-stack benchmark scores: a basal slice whose LV has left at
            end-systole adds false positives to the stack's LV instead of being a pair of its own
            whose Dice is 0 however little is left (``examples/train_acdc_stacks.py``).

    ``forward(moving_label, fixed_label, ddf)``: label maps ``(B, 1, *S)`` (integer values), ``ddf``
    ``(B, D, *S)`` in voxels (MONAI ``Warp`` convention). Returns a scalar.
    """

    def __init__(self, labels: Sequence[int] = (1, 2, 3), smooth: float = 1e-5, batch: bool = False) -> None:
        super().__init__()
        self.labels = [int(v) for v in labels]
        if not self.labels:
            raise ValueError("WarpedLabelDiceLoss needs at least one label value.")
        self.dice = DiceLoss(include_background=True, smooth_nr=smooth, smooth_dr=smooth, batch=batch, reduction="mean")

    def forward(self, moving_label: torch.Tensor, fixed_label: torch.Tensor, ddf: torch.Tensor) -> torch.Tensor:
        _, fixed, warped = warped_masks(moving_label, fixed_label, ddf, self.labels)
        return self.dice(warped, fixed)


class WarpedLabelVolumeLoss(nn.Module):
    """Relative volume error of the warped moving segmentation against the fixed one, per structure.

    For each structure ``k`` of ``labels``: ``|V(warp(moving_k)) - V(fixed_k)| / max(V(moving_k),
    V(fixed_k))``, volumes as voxel sums of the bilinearly warped binary masks (differentiable with
    respect to ``ddf``) over the whole batch (the slices of one stack: the stack's volume), then the
    mean over the structures present in either label. With ED and ES frames the denominator is the
    end-diastolic volume in both directions, so for the ED->ES pair the term is the ejection-fraction
    error of the carried label (as a fraction) that the label-propagation benchmarks report.

    Args:
        labels: label values of the structures (background excluded), e.g. ``(1, 3)`` for RV and LV.

    ``forward(moving_label, fixed_label, ddf)``: label maps ``(B, 1, *S)`` (integer values), ``ddf``
    ``(B, D, *S)`` in voxels (MONAI ``Warp`` convention). Returns a scalar (0 when no structure is present).
    """

    def __init__(self, labels: Sequence[int] = (1, 3)) -> None:
        super().__init__()
        self.labels = [int(v) for v in labels]
        if not self.labels:
            raise ValueError("WarpedLabelVolumeLoss needs at least one label value.")

    def forward(self, moving_label: torch.Tensor, fixed_label: torch.Tensor, ddf: torch.Tensor) -> torch.Tensor:
        moving, fixed, warped = warped_masks(moving_label, fixed_label, ddf, self.labels)
        axes = [0] + list(range(2, moving.dim()))  # everything but the structure channel
        v_moving, v_fixed, v_warped = moving.sum(axes), fixed.sum(axes), warped.sum(axes)
        scale = torch.maximum(v_moving, v_fixed)
        present = scale > 0
        if not bool(present.any()):
            return ddf.sum() * 0.0
        return ((v_warped - v_fixed).abs()[present] / scale[present]).mean()
