"""Soft 3-D Dice of warped labels over whole stacks batched slice by slice (training only)."""

from __future__ import annotations

from typing import Any, Dict, Optional, Sequence

import torch
from torch import nn

from monai_npc.functional.stack_field import stack_field_gradients, warp_stack_slices
from monai_npc.functional.warp import determinant_from_gradients, warp_image

from .label import one_hot_labels, warped_masks
from .registration import RegistrationLoss

__all__ = ["CENTRAL_OFFSET", "PER_STACK_TERMS", "StackDiceLoss", "StackRegistrationLoss", "central_stack_warp", "dice_loss",
           "group_overlap", "volume_error"]


#: the terms of :class:`StackRegistrationLoss` that are means over stacks and structures (the others: over slices),
#: so a process training a share of a step's stacks scales them by its share of the stacks
PER_STACK_TERMS = ("label", "volume")


def group_overlap(pred: torch.Tensor, target: torch.Tensor, group: torch.Tensor, n_groups: int) -> torch.Tensor:
    """``(3, n_groups, K)``: per stack and structure, ``sum(pred * target)``, ``sum(pred)`` and ``sum(target)`` over
    the stack's slices; ``pred``, ``target`` ``(N, K, H, W)`` masks (soft or hard), ``group`` ``(N,)`` int64."""
    axes = tuple(range(2, pred.dim()))
    per_slice = torch.stack([(pred * target).sum(axes), pred.sum(axes), target.sum(axes)])  # (3, N, K)
    return per_slice.new_zeros(3, n_groups, pred.shape[1]).index_add_(1, group, per_slice)


def dice_loss(inter: torch.Tensor, warped_sum: torch.Tensor, fixed_sum: torch.Tensor, smooth: float = 1.0) -> torch.Tensor:
    """``1 - mean`` soft Dice ``(2 inter + smooth) / (sum(w_k) + sum(f_k) + smooth)`` over the stacks and structures
    present in either (``(n_groups, K)`` sums of :func:`group_overlap`); 0 when none is."""
    dice = (2 * inter + smooth) / (warped_sum + fixed_sum + smooth)
    present = ((warped_sum + fixed_sum) > 0).to(dice.dtype)
    return ((1.0 - dice) * present).sum() / present.sum().clamp(min=1.0)


def volume_error(warped_sum: torch.Tensor, fixed_sum: torch.Tensor, smooth: float = 1.0) -> torch.Tensor:
    """Mean relative volume error ``|W - F| / ((W + F) / 2 + smooth)`` (``W = sum(w_k)``, ``F = sum(f_k)``; at most 2)
    over the stacks and structures present in either (``(n_groups, K)`` sums of :func:`group_overlap`); 0 when none
    is. The quantity an ejection fraction reads: a stack's Dice can stay high while a structure's volume is off by
    the basal slice it should have lost."""
    present = ((warped_sum + fixed_sum) > 0).to(warped_sum.dtype)
    error = (warped_sum - fixed_sum).abs() / (0.5 * (warped_sum + fixed_sum) + smooth)
    return (error * present).sum() / present.sum().clamp(min=1.0)


#: half the spread (slices) of the two through-plane readings of :func:`central_stack_warp`
CENTRAL_OFFSET = 1e-3


def central_stack_warp(masks: torch.Tensor, ddf: torch.Tensor, group: torch.Tensor, n_groups: int) -> torch.Tensor:
    """Masks ``(N, C, H, W)`` of whole stacks warped by their 3-D field ``ddf`` ``(N, 3, H, W)`` for a loss: the mean of
    the trilinear warps :data:`CENTRAL_OFFSET` slices above and below (background beyond a stack's ends, as the
    written transform carries a label).

    At an integer slice coordinate (a zero through-plane component, where an untrained head starts) trilinear
    sampling differentiates towards the next slice only, so a basal slice whose label should go (the ES base has
    descended below the ED stack's first slice) is pulled down or up by chance; the two readings give the central
    derivative there, ``(m(z + 1) - m(z - 1)) / 2``, and change the values by at most the offset's fraction."""
    offset = torch.zeros_like(ddf)
    offset[:, 0] = CENTRAL_OFFSET
    return 0.5 * (warp_stack_slices(masks, ddf + offset, group, n_groups, through_padding="zeros")
                  + warp_stack_slices(masks, ddf - offset, group, n_groups, through_padding="zeros"))


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
    ``(N, 2, H, W)`` (voxels, MONAI ``Warp`` convention) or a 3-D field per stack ``(N, 3, H, W)`` (channel 0 through
    the plane in slices; trilinear warp of the stack's masks, :func:`~monai_npc.functional.warp_stack_slices`, with
    background beyond the stack's ends as the written transform carries a label, so that a field may clear a basal
    slice by reading above the stack),
    ``group`` ``(N,)`` int64 stack index, ``n_groups`` the
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
        return dice_loss(*self.overlap(moving_label, fixed_label, ddf, group, n_groups), self.smooth)

    def overlap(self, moving_label: torch.Tensor, fixed_label: torch.Tensor, ddf: torch.Tensor, group: torch.Tensor,
                n_groups: Optional[int] = None) -> torch.Tensor:
        """``(3, n_groups, K)``: :func:`group_overlap` of the warped moving masks and the fixed ones (the sums the
        Dice and :func:`volume_error` read)."""
        if group.shape != (ddf.shape[0],):
            raise ValueError(f"group must be (N,) = ({ddf.shape[0]},), one stack index per slice; got {tuple(group.shape)}.")
        n = int(group.max()) + 1 if n_groups is None else int(n_groups)  # given: no host synchronisation
        if ddf.shape[1] == 3:  # a 3-D field per stack: the stack's masks warped through the plane too
            moving, fixed = (one_hot_labels(x, self.labels).to(ddf.dtype) for x in (moving_label, fixed_label))
            warped = central_stack_warp(moving, ddf, group, n)
        else:
            _, fixed, warped = warped_masks(moving_label, fixed_label, ddf, self.labels)
        return group_overlap(warped, fixed, group, n)


class StackRegistrationLoss(nn.Module):
    """The whole-stack training loss: :class:`RegistrationLoss` (LNCC, regulariser, fold and log-Jacobian penalties
    on the images, slice by slice) plus ``label_weight`` times :class:`StackDiceLoss` (the soft 3-D Dice of the
    warped RV / Myo / LV per stack; labels enter the loss only, never the network).

    Args:
        preset: :class:`RegistrationLoss` preset (``"acdc"``: LNCC window 17, ``lambda_reg`` 0.05, ``lambda_jac`` 100,
            ``lambda_logj`` 1e-5); ``image_overrides`` its explicit arguments (``window``, ``lambda_reg``, ...).
        label_weight: weight of the Dice term; 0 trains on the images alone.
        labels: structures of the Dice term.
        volume_weight: weight of the warped structures' relative volume error (:func:`volume_error`, term ``volume``;
            labels in the loss only, as the Dice): what an ejection fraction from the transform reads.

    ``forward(moving, fixed, moving_label, fixed_label, ddf, group, n_groups)``: images and label maps
    ``(N, 1, H, W)``, ``ddf`` ``(N, 2, H, W)`` voxels, ``group`` ``(N,)``. Returns the weighted terms
    (``similarity``, ``regularization``, ``fold``, ``logj``, ``label``, ``volume``) and their sum ``loss``, all scalars.

    A 3-D field per stack, ``ddf`` ``(N, 3, H, W)`` (channel 0 through the plane in slices, MONAI ``Warp``
    convention on each stack's ``(Z, H, W)`` grid; e.g. :class:`~monai_npc.networks.nets.SliceContextNPC`), is
    scored in 3-D (:meth:`stack_components`): the moving stack and its masks warped trilinearly
    (:func:`~monai_npc.functional.warp_stack_slices`), LNCC in-plane slice by slice as for 2-D fields, the diffusion
    regulariser, fold and log-Jacobian penalties on the 3-D field (:func:`~monai_npc.functional.stack_field_gradients`,
    :func:`~monai_npc.functional.stack_jacobian_determinant`) and the 3-D Dice of the trilinearly warped masks.
    """

    def __init__(self, preset: Optional[str] = "acdc", label_weight: float = 1.0, labels: Sequence[int] = (1, 2, 3),
                 image_overrides: Optional[Dict[str, Any]] = None, volume_weight: float = 0.0) -> None:
        super().__init__()
        if label_weight < 0 or volume_weight < 0:
            raise ValueError(f"label_weight and volume_weight must be >= 0, got {label_weight} and {volume_weight}.")
        self.image = RegistrationLoss(preset, spatial_dims=2, **dict(image_overrides or {}))
        self.dice = StackDiceLoss(labels)
        self.label_weight = float(label_weight)
        self.volume_weight = float(volume_weight)

    def forward(self, moving: torch.Tensor, fixed: torch.Tensor, moving_label: torch.Tensor, fixed_label: torch.Tensor,
                ddf: torch.Tensor, group: torch.Tensor, n_groups: int) -> Dict[str, torch.Tensor]:
        if ddf.shape[1] == 3:
            terms = self.stack_components(moving, fixed, ddf, group, n_groups)
        else:
            terms = self.image.components(warp_image(moving, ddf, "bilinear", "border"), fixed, ddf)
        zero = torch.zeros_like(terms["loss"])
        terms["label"] = terms["volume"] = zero
        if self.label_weight or self.volume_weight:
            inter, w, f = self.dice.overlap(moving_label, fixed_label, ddf, group, n_groups)
            terms["label"] = self.label_weight * dice_loss(inter, w, f, self.dice.smooth)
            terms["volume"] = self.volume_weight * volume_error(w, f, self.dice.smooth) if self.volume_weight else zero
        terms["loss"] = terms["loss"] + terms["label"] + terms["volume"]
        return terms

    def stack_components(self, moving: torch.Tensor, fixed: torch.Tensor, ddf: torch.Tensor, group: torch.Tensor,
                         n_groups: int) -> Dict[str, torch.Tensor]:
        """The image terms of a 3-D field per stack ``ddf`` ``(N, 3, H, W)`` (voxels; channel 0 in slices), weighted as
        :class:`RegistrationLoss`'s preset: ``similarity`` the in-plane LNCC of the trilinearly warped moving slices
        ``(N, 1, H, W)`` against the fixed ones; ``regularization`` the diffusion energy ``sum over the three axes of
        (d ddf / d axis)^2``, mean over components and voxels (in-plane borders left out as MONAI's ``DiffusionLoss``
        does; central differences through the plane, one-sided at a stack's ends); ``fold`` ``mean relu(-det J)`` and
        ``logj`` ``mean log(max(det J, 1e-3))^2`` of the stack's 3-D Jacobian. All in voxel units: a through-plane
        step is one slice (the determinant needs no spacing, :func:`~monai_npc.functional.stack_jacobian_determinant`;
        the diffusion energy weighs a slice step as a pixel step, which makes the through-plane component's
        smoothness cost what a one-slice jump costs, not its length in mm)."""
        c = self.image.config
        if c["regularizer"] != "diffusion":
            raise ValueError(f"a 3-D field per stack is regularised by the diffusion energy; got regularizer={c['regularizer']!r}.")
        grads = stack_field_gradients(ddf, group, n_groups)
        det = determinant_from_gradients(grads)
        energy = sum(g[..., 1:-1, 1:-1] ** 2 for g in grads)
        terms = {"similarity": self.image.similarity(warp_stack_slices(moving, ddf, group, n_groups), fixed),
                 "regularization": c["lambda_reg"] * energy.mean(),
                 "fold": c["lambda_jac"] * torch.relu(-det).mean(),
                 "logj": c["lambda_logj"] * torch.log(torch.clamp(det, min=self.image.logj.eps)).pow(2).mean()}
        terms["loss"] = terms["similarity"] + terms["regularization"] + terms["fold"] + terms["logj"]
        return terms
