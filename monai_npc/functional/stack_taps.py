"""A stack's 3-D warp when its through-plane component is fixed: weighted neighbour slices, sampled in 2-D.

Trilinear sampling of a stack at ``(z + t(x), y + u(x), x + v(x))`` is, through the plane, a weighted sum of the stack's
slices with the hat weights ``max(0, 1 - |z + t(x) - j|)`` (the slice coordinate clamped as
:func:`~monai_npc.functional.warp_stack_slices` clamps it, :func:`~monai_npc.functional.stack_field.slice_coordinate`),
and in-plane a bilinear sample of each of those slices at
``(y + u, x + v)``. When ``t`` does not change (a stack network's through-plane channel, held while the test-time
refinement moves the in-plane ones: :meth:`~monai_npc.networks.blocks.InstanceRefinement.refine_stack`), the slices and
weights are computed once (:func:`through_plane_taps`) and every warp is one 2-D ``grid_sample`` of the neighbour slices
stacked as channels (:func:`warp_stack_taps`): the same values as the 3-D warp, about half its time with its gradient on
the CPU, where 3-D ``grid_sample`` has no vectorised kernel. Same batch layout and conventions as
:mod:`~monai_npc.functional.stack_field`.
"""

from __future__ import annotations

import math
from typing import Optional, Tuple

import torch
import torch.nn.functional as F

from .stack_field import slice_coordinate, stack_positions

__all__ = ["through_plane_taps", "stack_tap_slabs", "warp_stack_taps"]


def through_plane_taps(through: torch.Tensor, group: torch.Tensor, n_groups: int, through_padding: str = "border"
                       ) -> Tuple[torch.Tensor, torch.Tensor]:
    """``(rows (K, N) int64, weights (K, N, 1, H, W))`` of a through-plane displacement ``through`` ``(N, H, W)``
    (slices): for each slice offset from ``-R`` to ``R`` (``R = ceil(max |d|)``, ``d``: how far the clamped
    slice coordinate lies from the slice, at most ``|through|``) that has a weight above 0 somewhere, the batch row of every
    slice's neighbour at that offset (clamped to its stack) and its trilinear weight (0 where the sampled coordinate is
    not within one slice of it). ``through_padding`` as :func:`~monai_npc.functional.warp_stack_slices`'s: with
    ``"border"`` the weights of a slice sum to 1 at every pixel; with ``"zeros"`` (labels) less within one slice past
    the stack's ends and 0 beyond."""
    if through.dim() != 3 or group.shape != (through.shape[0],):
        raise ValueError(f"through must be (N, H, W) with group (N,); got {tuple(through.shape)} and {tuple(group.shape)}.")
    position, first, count = stack_positions(group, n_groups)
    within = slice_coordinate(through.detach(), position, count, through_padding)
    # offsets further than the clamped coordinate reads have zero weight everywhere (a displacement reaching past a
    # stack's end reads its end slice, or zeros, whatever its length): the taps span what is read, not |through|
    reach = int(math.ceil(float((within - position.view(-1, 1, 1).to(within.dtype)).abs().max()))) if through.numel() else 0
    rows, weights = [], []
    for offset in range(-reach, reach + 1):
        at = torch.minimum(torch.clamp(position + offset, min=0), count - 1)  # the neighbour's position, clamped
        rows.append(first + at)
        hat = (1.0 - (within - at.view(-1, 1, 1).to(through.dtype)).abs()).clamp_min(0.0)
        # a clamped offset repeats the end slice: count it once (the offset that is the end slice itself)
        hat = torch.where((position + offset == at).view(-1, 1, 1), hat, torch.zeros_like(hat))
        weights.append(hat.unsqueeze(1))
    rows_k, weights_k = torch.stack(rows), torch.stack(weights)
    # an offset that weighs nothing anywhere (a coordinate past a stack's end with zero padding reaches further than
    # any slice it reads) would only add zero channels to every warp: leave it out
    used = weights_k.flatten(1).gt(0).any(1)
    used[reach] = True
    return rows_k[used], weights_k[used]


def stack_tap_slabs(image: torch.Tensor, taps: Tuple[torch.Tensor, torch.Tensor]) -> torch.Tensor:
    """``(N, K * C, H, W)``: each slice's ``K`` neighbour slices of ``image`` ``(N, C, H, W)`` named by ``taps``
    (:func:`through_plane_taps`) stacked as channels, what :func:`warp_stack_taps` samples (compute it once for an image
    warped many times)."""
    rows, _ = taps
    k, n = rows.shape
    if image.dim() != 4 or image.shape[0] != n:
        raise ValueError(f"image must be (N, C, H, W) with the taps' N = {n}; got {tuple(image.shape)}.")
    return image[rows.reshape(-1)].reshape((k, n) + tuple(image.shape[1:])).movedim(0, 1).reshape((n, -1) + tuple(image.shape[2:]))


def warp_stack_taps(image: torch.Tensor, in_plane: torch.Tensor, taps: Tuple[torch.Tensor, torch.Tensor],
                    region: Optional[Tuple[slice, slice]] = None, slabs: Optional[torch.Tensor] = None) -> torch.Tensor:
    """``image`` ``(N, C, H, W)`` warped by the 3-D field whose through-plane part gave ``taps``
    (:func:`through_plane_taps`) and whose in-plane part is ``in_plane`` ``(N, 2, H, W)`` (voxels along ``H``, ``W``):
    bilinear, border padding in-plane; equal to :func:`~monai_npc.functional.warp_stack_slices` of the whole field
    (``mode="bilinear"``), differentiable in ``image`` and ``in_plane``. ``region``: ``(rows, columns)`` slices of the
    output grid to compute (``(N, C, h, w)`` out, the same values as the whole warp there; a loss on part of the grid
    pays for that part only). ``slabs``: :func:`stack_tap_slabs` of ``image`` if already computed."""
    rows, weights = taps
    k, n = rows.shape
    _, c, h, w = image.shape
    if in_plane.shape != (n, 2, h, w) or image.shape[0] != n:
        raise ValueError(f"image (N, C, H, W) and in_plane (N, 2, H, W) must match the taps' N = {n}; got "
                         f"{tuple(image.shape)} and {tuple(in_plane.shape)}.")
    along_h, along_w = region if region is not None else (slice(None), slice(None))
    in_plane, weights = in_plane[..., along_h, along_w], weights[..., along_h, along_w]
    start_h, start_w = along_h.indices(h)[0], along_w.indices(w)[0]
    out_h, out_w = in_plane.shape[-2:]
    slabs = stack_tap_slabs(image, taps) if slabs is None else slabs
    along_y, along_x = in_plane.unbind(1)  # (its backward stacks the two gradients; a slice's would zero-fill a buffer each)
    y = torch.arange(start_h, start_h + out_h, device=in_plane.device, dtype=in_plane.dtype).view(1, out_h, 1) + along_y
    x = torch.arange(start_w, start_w + out_w, device=in_plane.device, dtype=in_plane.dtype).view(1, 1, out_w) + along_x
    grid = torch.stack([x * (2.0 / max(w - 1, 1)) - 1.0, y * (2.0 / max(h - 1, 1)) - 1.0], -1)
    sampled = F.grid_sample(slabs.to(in_plane.dtype), grid, mode="bilinear", padding_mode="border", align_corners=True)
    return (sampled.view(n, k, c, out_h, out_w) * weights.movedim(0, 1).to(sampled.dtype)).sum(1)
