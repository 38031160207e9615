"""Whole stacks batched slice by slice: neighbours, 3-D warp, gradients and Jacobian of a through-plane field.

A batch holds the slices of ``n_groups`` stacks one after the other, each stack's slices contiguous and in order
(``group`` ``(N,)`` int64, non-decreasing, the stack index of each slice; the layout of
:class:`~monai_npc.engines.stack_data.StackBatch`). A 3-D field on that batch is ``ddf`` ``(N, 3, H, W)`` in voxels,
MONAI ``Warp`` convention on each stack's ``(Z, H, W)`` grid: channel 0 through the plane (slices), channel 1 along
``H``, channel 2 along ``W``; ``out(z, y, x) = img(z + ddf_0, y + ddf_1, x + ddf_2)`` within the same stack,
replicated beyond its first and last slices. Nothing here synchronises with the host.
"""

from __future__ import annotations

from typing import List, Tuple

import torch
import torch.nn.functional as F

from .warp import determinant_from_gradients

__all__ = ["THROUGH_PADDINGS", "stack_positions", "slice_coordinate", "stack_neighbours", "warp_stack_slices",
           "compose_stack_fields", "stack_field_gradients", "stack_jacobian_determinant"]


def stack_positions(group: torch.Tensor, n_groups: int) -> Tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """``(position, first, count)``, each ``(N,)`` int64: a slice's index within its stack, the batch row of its
    stack's first slice and its stack's number of slices, for ``group`` ``(N,)`` (contiguous stacks, in order)."""
    if group.dim() != 1:
        raise ValueError(f"group must be (N,), one stack index per slice; got shape {tuple(group.shape)}.")
    counts = torch.bincount(group, minlength=int(n_groups))
    starts = torch.cumsum(counts, 0) - counts
    first = starts[group]
    position = torch.arange(group.shape[0], device=group.device) - first
    return position, first, counts[group]


#: ``through_padding`` values of a stack's warp: its end slices replicated beyond it (images) or zeros there (labels)
THROUGH_PADDINGS = ("border", "zeros")


def slice_coordinate(through: torch.Tensor, position: torch.Tensor, count: torch.Tensor,
                     through_padding: str = "border") -> torch.Tensor:
    """``(N, H, W)`` the slice coordinate within its stack that a through-plane displacement ``through`` ``(N, H, W)``
    (slices) reads from each slice at ``position`` of a stack of ``count`` slices (``(N,)`` each,
    :func:`stack_positions`): clamped to the stack's slices (``"border"``), or to one slice beyond its ends, where the
    warp reads zeros (``"zeros"``)."""
    if through_padding not in THROUGH_PADDINGS:
        raise ValueError(f"through_padding must be one of {THROUGH_PADDINGS}, got {through_padding!r}.")
    beyond = 1.0 if through_padding == "zeros" else 0.0
    first = torch.clamp(position.to(through.dtype).view(-1, 1, 1) + through, min=-beyond)
    return torch.minimum(first, (count - 1).to(through.dtype).view(-1, 1, 1) + beyond)


def stack_neighbours(group: torch.Tensor, n_groups: int) -> Tuple[torch.Tensor, torch.Tensor]:
    """``(previous, next)`` ``(N,)`` int64 batch rows of each slice's neighbours within its stack; a stack's first
    (last) slice is its own previous (next) neighbour (replicate padding through the plane)."""
    position, _, count = stack_positions(group, n_groups)
    rows = torch.arange(group.shape[0], device=group.device)
    return torch.where(position > 0, rows - 1, rows), torch.where(position < count - 1, rows + 1, rows)


def _check_field(image: torch.Tensor, ddf: torch.Tensor, group: torch.Tensor) -> None:
    if ddf.dim() != 4 or ddf.shape[1] != 3:
        raise ValueError(f"ddf must be (N, 3, H, W) (through-plane, H, W components), got shape {tuple(ddf.shape)}.")
    if image.dim() != 4 or image.shape[0] != ddf.shape[0] or image.shape[2:] != ddf.shape[2:]:
        raise ValueError(f"image must be (N, C, H, W) = ({ddf.shape[0]}, C, {ddf.shape[2]}, {ddf.shape[3]}) like ddf, "
                         f"got shape {tuple(image.shape)}.")
    if group.shape != (ddf.shape[0],):
        raise ValueError(f"group must be (N,) = ({ddf.shape[0]},), one stack index per slice; got {tuple(group.shape)}.")


def warp_stack_slices(image: torch.Tensor, ddf: torch.Tensor, group: torch.Tensor, n_groups: int,
                      mode: str = "bilinear", through_padding: str = "border") -> torch.Tensor:
    """Pull-warp each stack of ``image`` ``(N, C, H, W)`` by its 3-D field ``ddf`` ``(N, 3, H, W)`` (voxels; channel
    0 in slices) -> ``(N, C, H, W)``.

    Trilinear (``mode="bilinear"``, grid_sample's name) or nearest-neighbour sampling of the stack volume; border
    padding in-plane, and through the plane the sampled slice coordinate is clamped to the stack's own slices
    (never another stack's): ``through_padding="border"`` replicates a stack's first and last slices beyond its ends
    (images), ``"zeros"`` reads zeros one slice beyond them, faded in linearly (labels: nothing is labelled outside
    the stack; with ``mode="nearest"`` exactly what ITK's resampling of a label through the written transform gives:
    the end slice within half a slice of the stack, background beyond; :func:`slice_coordinate`). The batch is sampled
    as one ``(1, C, D, H, W)`` volume whose depth ``D - 1`` is a power of two, so that an integer slice coordinate
    stays exact: a zero through-plane component reads the slice itself only (the result equals
    :func:`~monai_npc.functional.warp_image` of the in-plane components up to the float rounding of grid_sample's 3-D
    kernel, about 1e-7).

    The value and the gradient of a stack's slices depend on that stack only, whichever stacks share the batch: in
    the volume every stack is followed by a copy of its last slice and the first stack starts at depth 1. At an
    integer slice coordinate (a zero through-plane component, e.g. an untrained
    :class:`~monai_npc.networks.nets.SliceContextNPC`) trilinear sampling differentiates towards the next slice
    (one-sided, ``img(z + 1) - img(z)``); at a stack's last slice that next slice is the copy (derivative 0, the
    replicated stack's), never the next stack's first slice or the volume's zero padding, and no slice lies on the
    volume's first row, where grid_sample's border padding would zero the derivative of the batch's first stack only.
    """
    _check_field(image, ddf, group)
    n, _, h, w = image.shape
    position, first, count = stack_positions(group, n_groups)
    within = slice_coordinate(ddf[:, 0], position, count, through_padding)
    depth = 1 << max(n + n_groups - 1, 1).bit_length()  # D - 1 >= N + n_groups, a power of two
    # volume row of every slice of ``image``, or ``n`` (a zero slice): row 0 and the rows past the last stack's copy
    # are zeros; slice i sits at row 1 + i + group[i]; stack g's last slice is copied into the row after it
    rows = torch.arange(n, device=group.device)
    last = torch.cumsum(torch.bincount(group, minlength=int(n_groups)), 0) - 1  # (n_groups,) a stack's last row
    source = torch.full((depth + 1,), n, dtype=torch.int64, device=group.device)
    source[rows + group + 1] = rows
    stacks = torch.arange(int(n_groups), device=group.device)
    # labels: the row after each stack a zero one (the row before is the previous stack's); an empty stack's is read by
    # no slice
    source[last + stacks + 2] = n if through_padding == "zeros" else torch.where(last >= 0, last, n)
    padded = torch.cat([image, image.new_zeros((1,) + tuple(image.shape[1:]))])
    volume = padded[source].movedim(0, 1).unsqueeze(0)
    dtype = ddf.dtype
    z = (first + group + 1).to(dtype).view(n, 1, 1) + within  # the volume row of the stack's first slice + within it
    y = torch.arange(h, device=ddf.device, dtype=dtype).view(1, h, 1) + ddf[:, 1]
    x = torch.arange(w, device=ddf.device, dtype=dtype).view(1, 1, w) + ddf[:, 2]
    grid = torch.stack([x * (2.0 / max(w - 1, 1)) - 1.0, y * (2.0 / max(h - 1, 1)) - 1.0, z * (2.0 / depth) - 1.0], -1)
    out = F.grid_sample(volume.to(dtype), grid.unsqueeze(0), mode=mode, padding_mode="border", align_corners=True)
    return out[0].movedim(1, 0)


def compose_stack_fields(first: torch.Tensor, then: torch.Tensor) -> torch.Tensor:
    """The 3-D displacement of ``x`` through ``then`` and then ``first``: ``then(x) + first(x + then(x))``, both
    ``(Z, 3, H, W)`` fields of one stack (voxels, channel 0 through the plane in slices; MONAI ``Warp`` convention).

    The 3-D counterpart of :func:`~monai_npc.functional.warp.compose`: ``first`` is read trilinearly at ``x + then(x)``
    on the stack's ``(Z, H, W)`` grid (:func:`warp_stack_slices`: border values in-plane, the slice coordinate clamped to
    the stack), so a zero through-plane component reads each slice itself only.
    """
    if first.shape != then.shape or first.dim() != 4 or first.shape[1] != 3:
        raise ValueError(f"first and then must be (Z, 3, H, W) fields of one stack, got shapes {tuple(first.shape)} and "
                         f"{tuple(then.shape)}.")
    group = torch.zeros(then.shape[0], dtype=torch.int64, device=then.device)
    return then + warp_stack_slices(first, then, group, 1)


def stack_field_gradients(ddf: torch.Tensor, group: torch.Tensor, n_groups: int) -> List[torch.Tensor]:
    """``[d/dz, d/dy, d/dx]`` of ``ddf`` ``(N, D, H, W)``, each ``(N, D, H, W)``, in voxels per voxel (per slice
    through the plane): central differences inside, one-sided at the borders and at each stack's first and last
    slice (``torch.gradient``'s rule, per stack); a stack of one slice has ``d/dz = 0``."""
    if group.shape != (ddf.shape[0],):
        raise ValueError(f"group must be (N,) = ({ddf.shape[0]},), one stack index per slice; got {tuple(group.shape)}.")
    previous, following = stack_neighbours(group, n_groups)
    steps = (following - previous).clamp(min=1).to(ddf.dtype).view(-1, 1, 1, 1)
    dz = (ddf[following] - ddf[previous]) / steps
    dy, dx = torch.gradient(ddf, dim=[2, 3])
    return [dz, dy, dx]


def stack_jacobian_determinant(ddf: torch.Tensor, group: torch.Tensor, n_groups: int) -> torch.Tensor:
    """``det(I + grad ddf)`` ``(N, H, W)`` of the 3-D map ``x -> x + ddf(x)`` of each stack, ``ddf`` ``(N, 3, H, W)``
    in voxels (:func:`stack_field_gradients`).

    Voxel units on purpose: with ``S = diag(slice spacing, pixel spacing, pixel spacing)`` the physical Jacobian is
    ``S (I + grad ddf) S^-1``, whose determinant is the same, so folds (``det <= 0``) and volume change need no
    spacing."""
    return determinant_from_gradients(stack_field_gradients(ddf, group, n_groups))
