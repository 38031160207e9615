"""Normalised cross-correlation: global (one value per image) and local, with box windows computed by separable running sums."""

from __future__ import annotations

from typing import Optional, Tuple

import torch
import torch.nn.functional as F

__all__ = ["box_sum", "global_ncc", "local_ncc", "local_target_stats"]


def global_ncc(a: torch.Tensor, b: torch.Tensor, eps: float = 1e-12) -> torch.Tensor:
    """Normalised cross-correlation (Pearson) of each batch item of ``a`` and ``b`` ``(B, ...)`` -> ``(B,)`` float64.

    Everything after the batch axis is one sample; sums in float64. ``eps`` keeps a constant image at 0.
    """
    a, b = a.flatten(1).double(), b.flatten(1).double()
    a, b = a - a.mean(1, keepdim=True), b - b.mean(1, keepdim=True)
    return (a * b).sum(1) / (a.norm(dim=1) * b.norm(dim=1) + eps)


def _box_sum(x: torch.Tensor, window: int) -> torch.Tensor:
    """The running-sum box filter of :func:`box_sum` (float64 inside, ``x``'s dtype out), without autograd.

    Along each axis of length ``n``, with ``h = window // 2``: ``x`` zero-padded by ``h + 1`` before
    and ``h`` after, ``S`` its cumulative sum, ``out[i] = S[i + 2h + 1] - S[i]`` (the sum of
    ``x[i - h .. i + h]`` inside the axis): one padded copy, one cumulative sum and one subtraction
    of two views per axis (faster than writing the clipped ends by slices). Each axis is summed as the
    innermost one on the CPU (a transposed copy for the others): there a running sum along the innermost axis is
    several times faster than along an outer one, and the sums are the same.
    """
    half = window // 2
    dtype = x.dtype
    x = x.double()  # running sums of float32 lose the small differences that local variances are made of
    for axis in range(2, x.dim()):
        at = x.dim() - 1 if x.device.type == "cpu" else axis  # the axis the running sum goes along
        along = x.movedim(axis, at).contiguous()
        n = along.shape[at]
        s = F.pad(along, [0, 0] * (x.dim() - 1 - at) + [half + 1, half]).cumsum_(at)
        x = (s.narrow(at, 2 * half + 1, n) - s.narrow(at, 0, n)).movedim(at, axis)
    return x.to(dtype, memory_format=torch.contiguous_format)


class _BoxSum(torch.autograd.Function):
    """A zero-padded box filter is its own adjoint (a symmetric kernel), so the gradient of
    :func:`box_sum` is :func:`box_sum` of the incoming gradient: one more pair of running sums
    instead of autograd's record of the padding, the sums and the slices (a shorter backward pass)."""

    @staticmethod
    def forward(ctx, x: torch.Tensor, window: int) -> torch.Tensor:  # type: ignore[override]
        ctx.window = window
        return _box_sum(x, window)

    @staticmethod
    def backward(ctx, grad: torch.Tensor):  # type: ignore[override]
        return _box_sum(grad, ctx.window), None


def box_sum(x: torch.Tensor, window: int) -> torch.Tensor:
    """Sum of ``x`` ``(B, C, *S)`` over a ``window``-wide box around every voxel (zero padding), same shape.

    Separable running sums (a cumulative sum per spatial axis and one subtraction, in float64 so
    that the subtraction keeps the precision local variances need): the cost per voxel does not
    grow with ``window``, forward and backward, unlike a convolution with a ones kernel or an
    average pooling. The backward pass is the same box filter of the gradient (:class:`_BoxSum`).
    """
    if window < 1 or window % 2 == 0:
        raise ValueError(f"window must be a positive odd integer, got {window}.")
    return _BoxSum.apply(x, int(window))


def local_target_stats(target: torch.Tensor, window: int = 17, smooth_dr: float = 1e-5) -> Tuple[torch.Tensor, torch.Tensor]:
    """``(box sum, clamped windowed sum of squared deviations)`` of ``target`` ``(B, C, *S)``: the part of
    :func:`local_ncc` that depends on the target only, for callers that score many images against one
    target (the test-time refinement)."""
    n = float(window ** (target.dim() - 2))
    t_sum = box_sum(target, window)
    return t_sum, torch.clamp(box_sum(target * target, window) - t_sum * t_sum / n, min=smooth_dr)


def _ncc_from_sums(p_sum, p2_sum, tp_sum, t_sum, t_var, n: float, smooth_nr: float, smooth_dr: float):
    """``(ncc, cross, p_var, p_var unclamped)`` from the box sums of the prediction and the target statistics."""
    cross = tp_sum - p_sum * t_sum / n
    p_var_raw = p2_sum - p_sum * p_sum / n
    p_var = torch.clamp(p_var_raw, min=smooth_dr)
    return (cross * cross + smooth_nr) / (t_var * p_var), cross, p_var, p_var_raw


class _LocalNCCToTarget(torch.autograd.Function):
    """:func:`local_ncc` of a prediction against a fixed target with precomputed statistics, with the
    gradient written out: the chain rule through the box sums by hand (three box sums of the
    gradient and a few fused products) instead of autograd's record of some twenty element-wise ops."""

    @staticmethod
    def forward(ctx, pred, target, t_sum, t_var, window: int, smooth_nr: float, smooth_dr: float):  # type: ignore[override]
        n = float(window ** (pred.dim() - 2))
        p_sum = _box_sum(pred, window)
        ncc, cross, p_var, p_var_raw = _ncc_from_sums(p_sum, _box_sum(pred * pred, window), _box_sum(target * pred, window),
                                                     t_sum, t_var, n, smooth_nr, smooth_dr)
        ctx.save_for_backward(pred, target, t_sum, t_var, p_sum, ncc, cross, p_var, p_var_raw >= smooth_dr)
        ctx.consts = (window, n)
        return ncc

    @staticmethod
    def backward(ctx, grad):  # type: ignore[override]
        pred, target, t_sum, t_var, p_sum, ncc, cross, p_var, unclamped = ctx.saved_tensors
        window, n = ctx.consts
        # in place on fresh buffers: each full-size temporary is a page-faulted allocation on the CPU
        g_cross = (grad * cross).mul_(2.0).div_(t_var).div_(p_var)  # d ncc / d cross
        g_var = (grad * ncc).div_(p_var).mul_(unclamped).neg_()  # d ncc / d p_var, zero where the variance is clamped
        g_p_sum = (g_cross * t_sum).addcmul_(g_var, p_sum, value=2.0).div_(-n)
        g_pred = _box_sum(g_p_sum, window).addcmul_(pred, _box_sum(g_var, window), value=2.0).addcmul_(target, _box_sum(g_cross, window))
        return g_pred, None, None, None, None, None, None


def local_ncc(
    pred: torch.Tensor, target: torch.Tensor, window: int = 17, smooth_nr: float = 0.0, smooth_dr: float = 1e-5,
    target_stats: Optional[Tuple[torch.Tensor, torch.Tensor]] = None,
) -> torch.Tensor:
    """Squared local normalised cross-correlation map ``(B, C, *S)`` of images ``(B, C, *S)``, in ``[0, 1]``.

    The same quantity as MONAI's ``LocalNormalizedCrossCorrelationLoss`` with a rectangular
    window (whose loss is ``-local_ncc(...).mean()``), including its smoothing constants.
    ``target_stats``: :func:`local_target_stats` of ``target`` with the same ``window`` and
    ``smooth_dr``, computed once instead of at every call; with them, and a ``target`` that needs
    no gradient, the gradient with respect to ``pred`` is computed in closed form (same values as
    autograd's, about twice as fast).
    """
    if pred.shape != target.shape:
        raise ValueError(f"pred and target must have the same shape, got {tuple(pred.shape)} and {tuple(target.shape)}.")
    if window < 1 or window % 2 == 0:
        raise ValueError(f"window must be a positive odd integer, got {window}.")
    if target_stats is not None and not (target.requires_grad or target_stats[0].requires_grad or target_stats[1].requires_grad):
        return _LocalNCCToTarget.apply(pred, target, target_stats[0], target_stats[1], int(window), float(smooth_nr), float(smooth_dr))
    n = float(window ** (pred.dim() - 2))
    t_sum, t_var = local_target_stats(target, window, smooth_dr) if target_stats is None else target_stats
    p_sum = box_sum(pred, window)
    return _ncc_from_sums(p_sum, box_sum(pred * pred, window), box_sum(target * pred, window), t_sum, t_var, n, smooth_nr, smooth_dr)[0]
