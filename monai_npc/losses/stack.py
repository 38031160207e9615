"""Soft 3-D Dice of warped labels over whole stacks batched slice by slice (training only; issue 51)."""

from __future__ import annotations

from typing import Any, Dict, Optional, Sequence

import torch
from torch import nn

from monai_npc.functional.warp import warp_image

from .label import warped_masks
from .registration import RegistrationLoss

__all__ = ["StackDiceLoss", "StackRegistrationLoss", "group_overlap"]


def group_overlap(pred: torch.Tensor, target: torch.Tensor, group: torch.Tensor, n_groups: int) -> torch.Tensor:
    """``(3, n_groups, K)``: per stack and structure, ``sum(pred * target)``, ``sum(pred)`` and ``sum(target)`` over
    the stack's slices; ``pred``, ``target`` ``(N, K, H, W)`` masks (soft or hard), ``group`` ``(N,)`` int64."""
    axes = tuple(range(2, pred.dim()))
    per_slice = torch.stack([(pred * target).sum(axes), pred.sum(axes), target.sum(axes)])  # (3, N, K)
    return per_slice.new_zeros(3, n_groups, pred.shape[1]).index_add_(1, group, per_slice)


class StackDiceLoss(nn.Module):
    """``1 - mean`` soft **3-D** Dice of the moving labels warped by ``ddf`` against the fixed labels, one Dice per
    stack and structure, when a batch holds the slices of several stacks one after the other.

    The slices of stack ``g`` are those with ``group == g``; the Dice of structure ``k`` of that stack is
    ``(2 sum(w_k f_k) + smooth) / (sum(w_k) + sum(f_k) + smooth)`` over all of its slices, ``w_k`` the bilinearly
    warped one-hot moving mask (differentiable with respect to ``ddf``), ``f_k`` the fixed one. This is what
    :class:`WarpedLabelDiceLoss` with ``batch=True`` gives for a batch of one stack, for many stacks in one pass:
    a basal slice whose LV has left at end-systole adds the stack's false positives instead of a slice Dice of 0.
    Structures absent from both stacks of a pair contribute no term.

    Args:
        labels: label values of the structures, e.g. ``(1, 2, 3)`` for ACDC's RV, Myo, LV.
        smooth: added to numerator and denominator (voxels).

    ``forward(moving_label, fixed_label, ddf, group)``: label maps ``(N, 1, H, W)`` (integer values), ``ddf``
    ``(N, 2, H, W)`` (voxels, MONAI ``Warp`` convention), ``group`` ``(N,)`` int64 stack index, ``n_groups`` the
    number of stacks (``group.max() + 1`` when ``None``). Returns a scalar (0 when no structure is present).
    """

    def __init__(self, labels: Sequence[int] = (1, 2, 3), smooth: float = 1.0) -> None:
        super().__init__()
        self.labels = [int(v) for v in labels]
        if not self.labels:
            raise ValueError("StackDiceLoss needs at least one label value.")
        self.smooth = float(smooth)

    def forward(self, moving_label: torch.Tensor, fixed_label: torch.Tensor, ddf: torch.Tensor, group: torch.Tensor,
                n_groups: Optional[int] = None) -> torch.Tensor:
        if group.shape != (ddf.shape[0],):
            raise ValueError(f"group must be (N,) = ({ddf.shape[0]},), one stack index per slice; got {tuple(group.shape)}.")
        _, fixed, warped = warped_masks(moving_label, fixed_label, ddf, self.labels)
        n = int(group.max()) + 1 if n_groups is None else int(n_groups)  # given: no host synchronisation
        inter, w, f = group_overlap(warped, fixed, group, n)
        dice = (2 * inter + self.smooth) / (w + f + self.smooth)
        present = ((w + f) > 0).to(dice.dtype)
        return ((1.0 - dice) * present).sum() / present.sum().clamp(min=1.0)


class StackRegistrationLoss(nn.Module):
    """The whole-stack training loss: :class:`RegistrationLoss` (LNCC, regulariser, fold and log-Jacobian penalties
    on the images, slice by slice) plus ``label_weight`` times :class:`StackDiceLoss` (the soft 3-D Dice of the
    warped RV / Myo / LV per stack; labels enter the loss only, never the network).

    Args:
        preset: :class:`RegistrationLoss` preset (``"acdc"``: LNCC window 17, ``lambda_reg`` 0.05, ``lambda_jac`` 100,
            ``lambda_logj`` 1e-5); ``image_overrides`` its explicit arguments (``window``, ``lambda_reg``, ...).
        label_weight: weight of the Dice term; 0 trains on the images alone.
        labels: structures of the Dice term.

    ``forward(moving, fixed, moving_label, fixed_label, ddf, group, n_groups)``: images and label maps
    ``(N, 1, H, W)``, ``ddf`` ``(N, 2, H, W)`` voxels, ``group`` ``(N,)``. Returns the weighted terms
    (``similarity``, ``regularization``, ``fold``, ``logj``, ``label``) and their sum ``loss``, all scalars.
    """

    def __init__(self, preset: Optional[str] = "acdc", label_weight: float = 1.0, labels: Sequence[int] = (1, 2, 3),
                 image_overrides: Optional[Dict[str, Any]] = None) -> None:
        super().__init__()
        if label_weight < 0:
            raise ValueError(f"label_weight must be >= 0, got {label_weight}.")
        self.image = RegistrationLoss(preset, spatial_dims=2, **dict(image_overrides or {}))
        self.dice = StackDiceLoss(labels)
        self.label_weight = float(label_weight)

    def forward(self, moving: torch.Tensor, fixed: torch.Tensor, moving_label: torch.Tensor, fixed_label: torch.Tensor,
                ddf: torch.Tensor, group: torch.Tensor, n_groups: int) -> Dict[str, torch.Tensor]:
        terms = self.image.components(warp_image(moving, ddf, "bilinear", "border"), fixed, ddf)
        terms["label"] = (self.label_weight * self.dice(moving_label, fixed_label, ddf, group, n_groups)
                          if self.label_weight else torch.zeros_like(terms["loss"]))
        terms["loss"] = terms["loss"] + terms["label"]
        return terms
