"""Differentiable top-K selection of the pairs with the smallest residual (SOFT top-k, Xie et al. 2020).

With two targets (kept / dropped) and a squared transport cost, the entropic optimal-transport
top-K of Xie et al. reduces to a sigmoid mask ``m_k = sigmoid((t - s_k) / tau)`` whose threshold
``t`` makes ``sum_k m_k = K``. ``t`` is found by bisection without gradients; one Newton step taken
with gradients then gives ``dt/ds`` equal to the implicit-function gradient at the solution.
"""

from __future__ import annotations

import math

import torch

__all__ = ["soft_topk_mask"]


def _hard_topk_smallest(scores: torch.Tensor, k: int, dim: int) -> torch.Tensor:
    idx = torch.topk(scores, k, dim=dim, largest=False).indices
    return torch.zeros_like(scores).scatter_(dim, idx, 1.0)


def soft_topk_mask(
    scores: torch.Tensor,
    k: int,
    dim: int = 1,
    temperature: float = 0.1,
    hard: bool = False,
    iterations: int = 24,
) -> torch.Tensor:
    """Mask in ``[0, 1]`` keeping the ``k`` smallest ``scores`` along ``dim``; sums to ``k`` along ``dim``.

    Args:
        scores: any shape; lower is better (the normalised residual ``r_bar^2``).
        k: number of entries kept, ``1 <= k``; ``k >= scores.shape[dim]`` returns all ones.
        dim: the axis the selection runs over (the filter-pair axis).
        temperature: sigmoid width ``tau`` in score units; smaller is closer to a hard top-K.
        hard: forward the exact 0/1 top-K mask and backpropagate the soft mask's gradient
            (straight-through estimator).
        iterations: bisection steps for the threshold (each halves the bracket).

    Returns:
        mask with the shape of ``scores``.
    """
    n = scores.shape[dim]
    if k < 1:
        raise ValueError(f"k must be >= 1, got {k}.")
    if k >= n:
        return torch.ones_like(scores)
    s = scores.detach()
    margin = temperature * (math.log(float(n)) + 12.0)
    lo = s.amin(dim, keepdim=True) - margin  # sum of sigmoids < k here
    hi = s.amax(dim, keepdim=True) + margin  # and > k here
    for _ in range(iterations):
        mid = 0.5 * (lo + hi)
        below = torch.sigmoid((mid - s) / temperature).sum(dim, keepdim=True) < k
        lo = torch.where(below, mid, lo)
        hi = torch.where(below, hi, mid)
    t0 = 0.5 * (lo + hi)
    p = torch.sigmoid((t0 - scores) / temperature)
    f = p.sum(dim, keepdim=True) - k
    fprime = (p * (1.0 - p)).sum(dim, keepdim=True) / temperature
    t = t0 - f / torch.clamp(fprime, min=1e-12)
    mask = torch.sigmoid((t - scores) / temperature)
    if hard:
        hard_mask = _hard_topk_smallest(s, k, dim)
        mask = hard_mask + (mask - mask.detach())
    return mask
