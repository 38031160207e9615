"""Smoothness and fold penalties of a displacement field, per sample, with a hand-written gradient.

The test-time refinement evaluates ``lambda_reg * diffusion + lambda_jac * fold`` of the full-grid
field at every optimiser step. Through autograd, the forward differences of the diffusion term and
``torch.gradient`` of the Jacobian each cost a zero-filled full-size buffer and a copy per axis
in the backward pass, about a sixth of a step. Here the diffusion gradient is written in closed
form into one buffer, and the fold gradient, which is zero wherever the Jacobian determinant is
positive (almost everywhere in a regularised field), is computed only for the samples that fold.
Values and gradients equal autograd's through the plain expressions (tested).
"""

from __future__ import annotations

from typing import List, Tuple

import torch

from monai_npc.functional.warp import jacobian_determinant

__all__ = ["diffusion_per_sample", "fold_per_sample", "smoothness_fold_penalty", "diffusion_gradient", "gradient_adjoint",
           "determinant_and_cofactors"]


def diffusion_per_sample(ddf: torch.Tensor) -> torch.Tensor:
    """``(B,)``: the sum over spatial axes of the mean squared forward difference of ``ddf`` ``(B, D, *S)``
    (MONAI ``DiffusionLoss`` up to boundary handling, one value per sample)."""
    return sum(ddf.diff(dim=axis).pow(2).flatten(1).mean(1) for axis in range(2, ddf.dim()))


def fold_per_sample(ddf: torch.Tensor) -> torch.Tensor:
    """``(B,)``: the mean of ``relu(-det(I + grad ddf))`` over the grid of ``ddf`` ``(B, D, *S)`` (``JacobianFoldLoss`` per sample)."""
    return torch.relu(-jacobian_determinant(ddf)).flatten(1).mean(1)


def diffusion_gradient(ddf: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
    """Gradient of ``sum_b weight[b] * diffusion_per_sample(ddf)[b]`` with respect to ``ddf``, in one buffer."""
    grad = torch.zeros_like(ddf)
    w = weight.view([-1] + [1] * (ddf.dim() - 1))
    for axis in range(2, ddf.dim()):
        n = ddf.shape[axis]
        if n < 2:
            continue
        d = ddf.diff(dim=axis)
        d.mul_(w * (2.0 / (d[0].numel())))
        grad.narrow(axis, 1, n - 1).add_(d)
        grad.narrow(axis, 0, n - 1).sub_(d)
    return grad


def gradient_adjoint(h: torch.Tensor, axis: int) -> torch.Tensor:
    """``G^T h`` for ``G`` the ``torch.gradient`` operator along ``axis`` (unit spacing: central differences
    inside, one-sided at both ends): the gradient of ``sum(h * torch.gradient(u, dim=axis)[0])`` in ``u``."""
    n = h.shape[axis]
    out = torch.zeros_like(h)
    if n < 2:
        return out
    if n > 2:
        inner = h.narrow(axis, 1, n - 2) * 0.5
        out.narrow(axis, 2, n - 2).add_(inner)
        out.narrow(axis, 0, n - 2).sub_(inner)
    for end, (plus, minus) in ((0, (1, 0)), (n - 1, (n - 1, n - 2))):
        one = h.narrow(axis, end, 1)
        out.narrow(axis, plus, 1).add_(one)
        out.narrow(axis, minus, 1).sub_(one)
    return out


def determinant_and_cofactors(grads: List[torch.Tensor]) -> Tuple[torch.Tensor, List[List[torch.Tensor]]]:
    """``(det J, cof)`` of ``J = I + G`` with ``G[r][c] = grads[c][:, r]`` (``grads[c]`` ``(B, D, *S)`` the derivative of
    every component along axis ``c``, ``D = len(grads)`` 2 or 3): ``det`` ``(B, *S)`` and ``cof[r][c]`` ``(B, *S)``, the
    derivative of ``det J`` with respect to ``J[r][c]``."""
    dims = len(grads)
    j = [[grads[c][:, r] + (1.0 if r == c else 0.0) for c in range(dims)] for r in range(dims)]
    if dims == 2:
        return j[0][0] * j[1][1] - j[0][1] * j[1][0], [[j[1][1], -j[1][0]], [-j[0][1], j[0][0]]]
    cof = [[j[(r + 1) % 3][(c + 1) % 3] * j[(r + 2) % 3][(c + 2) % 3] - j[(r + 1) % 3][(c + 2) % 3] * j[(r + 2) % 3][(c + 1) % 3]
            for c in range(3)] for r in range(3)]
    return sum(j[0][c] * cof[0][c] for c in range(3)), cof


def _fold_grad(ddf: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
    """Gradient of ``sum_b weight[b] * fold_per_sample(ddf)[b]`` in ``ddf`` ``(B, D, *S)``: at folded voxels
    (``det J < 0``) ``-weight / N`` times the cofactors of ``J = I + grad ddf``, through the adjoint of
    the finite differences."""
    dims = ddf.dim() - 2
    det, cof = determinant_and_cofactors(torch.gradient(ddf, dim=list(range(2, dims + 2))))
    h = (det < 0).to(ddf.dtype) * (-weight / det[0].numel()).view([-1] + [1] * dims)  # d loss / d det
    return torch.stack([sum(gradient_adjoint(h * cof[r][c], c + 1) for c in range(dims)) for r in range(dims)], 1)


class _SmoothnessFold(torch.autograd.Function):
    @staticmethod
    def forward(ctx, ddf: torch.Tensor, lambda_reg: float, lambda_jac: float) -> torch.Tensor:  # type: ignore[override]
        value = torch.zeros(ddf.shape[0], dtype=ddf.dtype, device=ddf.device)
        folds = torch.zeros(ddf.shape[0], dtype=torch.bool, device=ddf.device)
        if lambda_reg:
            value = value + lambda_reg * diffusion_per_sample(ddf)
        if lambda_jac:
            fold = fold_per_sample(ddf)
            folds = fold > 0
            value = value + lambda_jac * fold
        ctx.save_for_backward(ddf, folds)
        ctx.lambdas = (lambda_reg, lambda_jac)
        return value

    @staticmethod
    def backward(ctx, grad_out: torch.Tensor) -> Tuple:  # type: ignore[override]
        ddf, folds = ctx.saved_tensors
        lambda_reg, lambda_jac = ctx.lambdas
        grad = diffusion_gradient(ddf, grad_out * lambda_reg) if lambda_reg else torch.zeros_like(ddf)
        if lambda_jac and bool(folds.any()):  # only folding samples have a fold gradient
            idx = folds.nonzero().flatten()
            grad.index_add_(0, idx, _fold_grad(ddf[idx], grad_out[idx] * lambda_jac))
        return grad, None, None


def smoothness_fold_penalty(ddf: torch.Tensor, lambda_reg: float = 0.0, lambda_jac: float = 0.0) -> torch.Tensor:
    """``(B,)``: ``lambda_reg * diffusion_per_sample(ddf) + lambda_jac * fold_per_sample(ddf)`` for ``ddf``
    ``(B, D, *S)`` (voxels, 2-D or 3-D for the fold term), differentiable with respect to ``ddf``.

    Same values and gradients as the plain expressions through autograd; the backward pass writes
    the diffusion gradient in closed form and skips the fold gradient of samples that do not fold.
    """
    return _SmoothnessFold.apply(ddf, float(lambda_reg), float(lambda_jac))
