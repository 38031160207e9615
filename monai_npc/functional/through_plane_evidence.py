"""What a slice of a whole stack matches through the plane once the in-plane field is applied: per-voxel evidence for
a through-plane displacement (read by :class:`~monai_npc.networks.blocks.ThroughPlaneHead`).

An in-plane field aligns each moving slice with the fixed slice of the same index. Where the heart has moved through
the plane between the frames (the base descends towards the apex in systole by about a slice), the fixed slice
matches the moving slice above or below better than its own, or, at the stack's basal end, nothing in the moving
stack. The evidence is that comparison, voxel by voxel: the fixed slice, the in-plane-warped moving slice and its two
neighbours in the stack (zeros beyond the stack's ends, with a flag saying so), their local correlations with the
fixed slice, and the in-plane field's divergence (positive where the fixed frame's structures are smaller, as the
cavity at end-systole: which frame is systolic, hence which way the base has moved).
"""

from __future__ import annotations

from typing import Optional, Tuple

import torch

from .polarity import matched_contrast
from .similarity import local_ncc
from .stack_field import stack_neighbours, stack_positions
from .warp import warp_image

__all__ = ["EVIDENCE_CHANNELS", "REVERSED_CHANNELS", "LABEL_EVIDENCE_CHANNELS", "LABEL_REVERSED_CHANNELS", "LABEL_VALUES",
           "in_plane_divergence", "through_plane_evidence", "label_evidence", "reads_label"]

#: the channels of :func:`through_plane_evidence`, in order
EVIDENCE_CHANNELS: Tuple[str, ...] = ("fixed", "warped", "warped_previous", "warped_next", "correlation",
                                      "correlation_previous", "correlation_next", "divergence", "has_previous", "has_next")
#: the channel order that gives the evidence of the same stack with its slices reversed (after reversing the rows):
#: previous and next swap, the rest stays
REVERSED_CHANNELS: Tuple[int, ...] = (0, 1, 3, 2, 4, 6, 5, 7, 9, 8)
#: the label values :func:`label_evidence` reads (ACDC's RV, myocardium, LV)
LABEL_VALUES: Tuple[int, ...] = (1, 2, 3)
#: the channels of :func:`label_evidence`, in order: per structure the in-plane-warped moving label on the slice and
#: its two neighbours, then whether a label was given
LABEL_EVIDENCE_CHANNELS: Tuple[str, ...] = tuple(f"label{v}_{where}" for v in LABEL_VALUES
                                                 for where in ("slice", "previous", "next")) + ("has_label",)
#: :data:`REVERSED_CHANNELS` for :func:`label_evidence`: each structure's previous and next swap
LABEL_REVERSED_CHANNELS: Tuple[int, ...] = tuple(3 * k + j for k in range(len(LABEL_VALUES)) for j in (0, 2, 1)) + (3 * len(LABEL_VALUES),)


def in_plane_divergence(ddf: torch.Tensor) -> torch.Tensor:
    """``(N, 1, H, W)``: ``d u_H / dH + d u_W / dW`` of an in-plane field ``ddf`` ``(N, 2, H, W)`` (voxels; central
    differences, one-sided at the borders). Positive where the field samples the moving image from a larger
    region than the fixed one (the moving structures are the larger)."""
    if ddf.dim() != 4 or ddf.shape[1] != 2:
        raise ValueError(f"in_plane_divergence needs an in-plane field (N, 2, H, W), got {tuple(ddf.shape)}.")
    return (torch.gradient(ddf[:, 0], dim=1)[0] + torch.gradient(ddf[:, 1], dim=2)[0]).unsqueeze(1)


def _neighbours_in_stack(x: torch.Tensor, group: torch.Tensor, n_groups: int) -> Tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """``(previous, next, has_previous, has_next)`` of slices ``x`` ``(N, C, H, W)`` of whole stacks: each slice's
    neighbours ``z - 1`` / ``z + 1`` in its own stack (0 beyond the stack's ends) and ``(N, 1, 1, 1)`` flags, 1 where
    that neighbour exists."""
    position, _, count = stack_positions(group, n_groups)
    has_previous = (position > 0).to(x.dtype).view(-1, 1, 1, 1)
    has_next = (position < count - 1).to(x.dtype).view(-1, 1, 1, 1)
    rows_before, rows_after = stack_neighbours(group, n_groups)  # an end slice is its own neighbour: zeroed here
    return x[rows_before] * has_previous, x[rows_after] * has_next, has_previous, has_next


def through_plane_evidence(moving: torch.Tensor, fixed: torch.Tensor, ddf: torch.Tensor, group: torch.Tensor,
                           n_groups: int, window: int = 9) -> torch.Tensor:
    """``(N, 10, H, W)`` evidence (:data:`EVIDENCE_CHANNELS`) for whole stacks batched slice by slice.

    Args:
        moving, fixed: ``(N, 1, H, W)`` slices of the stacks, each in ``[0, 1]``.
        ddf: ``(N, 2, H, W)`` the in-plane field (voxels, MONAI ``Warp`` convention), e.g. a 2-D NPC's.
        group: ``(N,)`` int64 stack index of each slice (contiguous stacks, slices in order); ``n_groups`` stacks.
        window: side of the local correlation's window (voxels, odd).

    The moving slices are warped in-plane by ``ddf`` and put in the fixed frame's contrast where the two are of
    opposite contrast (:func:`~monai_npc.functional.matched_contrast`); ``warped_previous`` / ``warped_next`` are
    the warped slices ``z - 1`` / ``z + 1`` of the same stack (0 beyond its ends, where ``has_previous`` /
    ``has_next`` are 0, else 1); ``correlation*`` the squared local normalised cross-correlation of the fixed slice
    with each (:func:`~monai_npc.functional.local_ncc`, 0 beyond the ends); ``divergence``
    :func:`in_plane_divergence`. No gradient flows to ``ddf`` (the evidence is an input)."""
    if not (moving.shape == fixed.shape and moving.dim() == 4 and moving.shape[1] == 1):
        raise ValueError(f"moving and fixed must be (N, 1, H, W) of one shape, got {tuple(moving.shape)} and {tuple(fixed.shape)}.")
    if ddf.shape != (moving.shape[0], 2) + tuple(moving.shape[2:]):
        raise ValueError(f"ddf must be the in-plane field (N, 2, H, W) = {(moving.shape[0], 2, *moving.shape[2:])}, got {tuple(ddf.shape)}.")
    if group.shape != (moving.shape[0],):
        raise ValueError(f"group must be (N,) = ({moving.shape[0]},), one stack index per slice; got {tuple(group.shape)}.")
    with torch.no_grad():
        ddf = ddf.detach()
        warped = matched_contrast(warp_image(moving, ddf, "bilinear", "border"), fixed)
        previous, following, has_previous, has_next = _neighbours_in_stack(warped, group, n_groups)
        pairs = torch.cat([warped, previous, following])
        correlation = local_ncc(pairs, fixed.repeat(3, 1, 1, 1), window).split(moving.shape[0])
        ones = torch.ones_like(fixed)
        return torch.cat([fixed, warped, previous, following, correlation[0], correlation[1] * has_previous,
                          correlation[2] * has_next, in_plane_divergence(ddf), ones * has_previous, ones * has_next], 1)


def label_evidence(moving_label: Optional[torch.Tensor], ddf: torch.Tensor, group: torch.Tensor, n_groups: int) -> torch.Tensor:
    """``(N, 10, H, W)`` evidence from the moving frame's label (:data:`LABEL_EVIDENCE_CHANNELS`): where each structure
    of :data:`LABEL_VALUES` lies on the in-plane-warped moving slice and on its two neighbours in the stack (one-hot,
    warped bilinearly by ``ddf``; 0 beyond the stack's ends), and ``has_label`` 1. With ``moving_label`` ``None``
    every channel is 0 (images only).

    Args:
        moving_label: ``(N, 1, H, W)`` label values of the moving slices (others than :data:`LABEL_VALUES` read as
            background), or ``None``.
        ddf: ``(N, 2, H, W)`` the in-plane field (voxels, MONAI ``Warp`` convention).
        group: ``(N,)`` int64 stack index of each slice (contiguous stacks, slices in order); ``n_groups`` stacks.

    No gradient flows to ``ddf`` (the evidence is an input)."""
    if ddf.dim() != 4 or ddf.shape[1] != 2:
        raise ValueError(f"ddf must be the in-plane field (N, 2, H, W), got {tuple(ddf.shape)}.")
    n, size = ddf.shape[0], tuple(ddf.shape[2:])
    if moving_label is None:
        return ddf.new_zeros((n, len(LABEL_EVIDENCE_CHANNELS)) + size)
    if tuple(moving_label.shape) != (n, 1) + size:
        raise ValueError(f"moving_label must be (N, 1, H, W) = {(n, 1, *size)} like ddf, got {tuple(moving_label.shape)}.")
    with torch.no_grad():
        one_hot = torch.cat([(moving_label == v).to(ddf.dtype) for v in LABEL_VALUES], 1)
        warped = warp_image(one_hot, ddf.detach(), "bilinear", "zeros")
        previous, following, _, _ = _neighbours_in_stack(warped, group, n_groups)
        per_structure = torch.stack([warped, previous, following], 2).flatten(1, 2)  # (N, 3 K): slice, previous, next
        return torch.cat([per_structure, ddf.new_ones((n, 1) + size)], 1)


def reads_label(label: torch.Tensor) -> bool:
    """Whether :func:`label_evidence` can read ``label`` as it was trained to: some voxel labelled, and every value 0
    or one of :data:`LABEL_VALUES` (ACDC's coding). A label coded otherwise (a single mask valued 255, more
    structures) is not misread as RV / Myo / LV: a network then registers the images alone."""
    values = torch.unique(label)
    allowed = torch.tensor((0,) + LABEL_VALUES, dtype=values.dtype, device=values.device)
    return bool((values != 0).any()) and bool(torch.isin(values, allowed).all())
