"""A stack field's smoothness and fold penalties, one value per slice, with a hand-written gradient.

The 3-D test-time refinement (:meth:`~monai_npc.networks.blocks.InstanceRefinement.refine_stack`) evaluates
``lambda_reg * diffusion + lambda_jac * fold`` of the whole stack's field at every optimiser step. Through autograd,
every slice the plain expressions take of the field (a component, a slice's neighbour, ``torch.gradient``'s
differences) costs a zero-filled buffer of the field's size in the backward pass: most of the penalty's time, and
the penalty most of a step's. Here the backward pass writes the diffusion gradient in closed form into one buffer and
the fold gradient (the Jacobian's cofactors through the adjoint of the finite differences) only when some voxel folds.
Values and gradients equal autograd's through the plain expressions (tested). Batch layout and conventions as
:mod:`~monai_npc.functional.stack_field`: ``ddf`` ``(N, 3, H, W)``, channel 0 through the plane in slices, ``group``
``(N,)`` the stack of each slice.
"""

from __future__ import annotations

from typing import Tuple

import torch

from .regularisers import determinant_and_cofactors, diffusion_gradient, gradient_adjoint
from .stack_field import stack_field_gradients, stack_jacobian_determinant, stack_neighbours
from .warp import determinant_from_gradients

__all__ = ["stack_diffusion_per_slice", "stack_fold_per_slice", "stack_smoothness_fold"]


def _check(ddf: torch.Tensor) -> None:
    if ddf.dim() != 4 or ddf.shape[1] != 3:
        raise ValueError(f"ddf must be (N, 3, H, W) (through-plane, H, W components), got shape {tuple(ddf.shape)}.")


def stack_diffusion_per_slice(ddf: torch.Tensor, group: torch.Tensor, n_groups: int) -> torch.Tensor:
    """``(N,)``: the diffusion energy of a 3-D field per stack ``ddf`` ``(N, 3, H, W)`` (voxels; channel 0 in slices),
    one value per slice, normalised as the 2-D refinement's
    (:func:`~monai_npc.functional.regularisers.diffusion_per_sample` of an in-plane field ``(B, 2, H, W)``): the sum
    over the three axes of the mean over voxels of the squared forward difference, summed over the components and
    divided by 2. A field whose channel 0 is 0 and that does not change through the plane has exactly the 2-D energy of
    its in-plane channels. Through the plane the difference is to the next slice of the same stack (0 on a stack's
    last slice), a slice step counted as a pixel step (voxel units, as the training loss's
    :meth:`~monai_npc.losses.StackRegistrationLoss.stack_components`)."""
    _check(ddf)
    _, following = stack_neighbours(group, n_groups)
    half = ddf.shape[1] / 2.0  # the mean over the 3 components -> their sum / 2
    in_plane = sum(ddf.diff(dim=axis).pow(2).flatten(1).mean(1) for axis in (2, 3))
    through = (ddf[following] - ddf).pow(2).flatten(1).mean(1)
    return half * (in_plane + through)


def stack_fold_per_slice(ddf: torch.Tensor, group: torch.Tensor, n_groups: int) -> torch.Tensor:
    """``(N,)``: the mean over each slice of ``relu(-det J)``, ``J`` the 3-D Jacobian of ``x -> x + ddf(x)``
    (:func:`~monai_npc.functional.stack_field.stack_jacobian_determinant`)."""
    _check(ddf)
    return torch.relu(-stack_jacobian_determinant(ddf, group, n_groups)).flatten(1).mean(1)


def _through_diffusion_gradient(ddf: torch.Tensor, following: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
    """Gradient of ``sum_s weight[s] * mean((ddf[following[s]] - ddf[s]) ** 2)`` in ``ddf`` ``(N, C, H, W)``."""
    step = (ddf[following] - ddf).mul_((2.0 / ddf[0].numel()) * weight.view(-1, 1, 1, 1))
    return (-step).index_add_(0, following, step)


def _stack_fold_gradient(grads, det: torch.Tensor, following: torch.Tensor, previous: torch.Tensor, weight: torch.Tensor
                         ) -> torch.Tensor:
    """Gradient of ``sum_s weight[s] * stack_fold_per_slice(ddf)[s]`` in ``ddf`` from its
    :func:`~monai_npc.functional.stack_field.stack_field_gradients` ``grads`` and their ``det J`` ``(N, H, W)``: at folded
    voxels ``-weight / (H W)`` times the cofactors of ``J``, through the adjoint of the differences (through the plane:
    ``(ddf[next] - ddf[prev]) / steps`` within each stack; in-plane: ``torch.gradient``'s)."""
    n, _, h, w = grads[0].shape
    folded = det < 0
    # the gradient reaches the folded voxels' in-plane neighbours only: work on the box around them, one voxel wider
    # (within it the adjoint's one-sided ends see zeros, so the box gives the whole image's values there)
    rows, cols = folded.any(2).any(0).nonzero().flatten(), folded.any(1).any(0).nonzero().flatten()
    box = (slice(max(int(rows[0]) - 1, 0), int(rows[-1]) + 2), slice(max(int(cols[0]) - 1, 0), int(cols[-1]) + 2))
    det, cof = determinant_and_cofactors([g[..., box[0], box[1]] for g in grads])
    dloss = (det < 0).to(det.dtype) * (-weight / (h * w)).view(-1, 1, 1)  # d loss / d det
    steps = (following - previous).clamp(min=1).to(det.dtype).view(-1, 1, 1)
    out = grads[0].new_zeros(n, 3, h, w)
    for r in range(3):
        through = dloss * cof[r][0] / steps
        component = gradient_adjoint(dloss * cof[r][1], 1) + gradient_adjoint(dloss * cof[r][2], 2)
        out[:, r, box[0], box[1]] = component.index_add_(0, following, through).index_add_(0, previous, -through)
    return out


class _StackSmoothnessFold(torch.autograd.Function):
    @staticmethod
    def forward(ctx, ddf: torch.Tensor, group: torch.Tensor, n_groups: int, lambda_reg: float,  # type: ignore[override]
                lambda_jac: float) -> torch.Tensor:
        value = ddf.new_zeros(ddf.shape[0])
        kept = []  # the differences and det J, for the fold's gradient
        if lambda_reg:
            value = value + lambda_reg * stack_diffusion_per_slice(ddf, group, n_groups)
        if lambda_jac:
            grads = stack_field_gradients(ddf, group, n_groups)
            det = determinant_from_gradients(grads)
            fold = torch.relu(-det).flatten(1).mean(1)
            if bool((fold > 0).any()):  # only a fold has a gradient
                value = value + lambda_jac * fold
                kept = [*grads, det]
        ctx.save_for_backward(ddf, *kept)
        ctx.neighbours = stack_neighbours(group, n_groups)  # index tensors (a caller's may be an inference tensor)
        ctx.lambdas = (lambda_reg, lambda_jac)
        return value

    @staticmethod
    def backward(ctx, grad_out: torch.Tensor) -> Tuple:  # type: ignore[override]
        ddf, *kept = ctx.saved_tensors
        lambda_reg, lambda_jac = ctx.lambdas
        previous, following = ctx.neighbours
        grad = torch.zeros_like(ddf)
        if lambda_reg:
            weight = grad_out * (lambda_reg * ddf.shape[1] / 2.0)
            grad = diffusion_gradient(ddf, weight).add_(_through_diffusion_gradient(ddf, following, weight))
        if kept:
            *grads, det = kept
            grad.add_(_stack_fold_gradient(grads, det, following, previous, grad_out * lambda_jac))
        return grad, None, None, None, None


def stack_smoothness_fold(ddf: torch.Tensor, group: torch.Tensor, n_groups: int, lambda_reg: float = 0.0,
                          lambda_jac: float = 0.0) -> torch.Tensor:
    """``(N,)``: ``lambda_reg *`` :func:`stack_diffusion_per_slice` ``+ lambda_jac *`` :func:`stack_fold_per_slice`
    of ``ddf`` ``(N, 3, H, W)``: the 3-D counterpart of the 2-D refinement's
    :func:`~monai_npc.functional.regularisers.smoothness_fold_penalty`, differentiable in ``ddf`` with the gradient
    written in closed form (the same as autograd's through the plain expressions)."""
    _check(ddf)
    if group.shape != (ddf.shape[0],):
        raise ValueError(f"group must be (N,) = ({ddf.shape[0]},), one stack index per slice; got {tuple(group.shape)}.")
    return _StackSmoothnessFold.apply(ddf, group, int(n_groups), float(lambda_reg), float(lambda_jac))
