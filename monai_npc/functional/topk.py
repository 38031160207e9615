"""Differentiable top-K selection of the pairs with the smallest residual (SOFT top-k, Xie et al. 2020).

With two targets (kept / dropped) and a squared transport cost, the entropic optimal-transport
top-K of Xie et al. reduces to a sigmoid mask ``m_k = sigmoid((t - s_k) / tau)`` whose threshold
``t`` makes ``sum_k m_k = K``. ``t`` is found without gradients (safeguarded Newton, i.e. Newton
steps kept inside a shrinking bisection bracket); one Newton step taken with gradients then gives
``dt/ds`` equal to the implicit-function gradient at the solution.
"""

from __future__ import annotations

import math
from typing import Optional, Tuple

import torch

__all__ = ["soft_topk_mask", "soft_topk_mask_with_threshold"]


def soft_topk_mask_with_threshold(
    scores: torch.Tensor,
    k: int,
    dim: int = 1,
    temperature: float = 0.1,
    hard: bool = False,
    iterations: int = 2,
    init: Optional[torch.Tensor] = None,
) -> Tuple[torch.Tensor, torch.Tensor]:
    """:func:`soft_topk_mask` that also returns its threshold (``scores`` units, ``dim`` kept with size 1, detached).

    ``init`` (e.g. the threshold of the previous ODE step) replaces the ``torch.topk`` start of the
    search; one more Newton step is then taken. Ignored when ``hard`` (the hard mask needs the
    top-K indices anyway).
    """
    n = scores.shape[dim]
    if k < 1:
        raise ValueError(f"k must be >= 1, got {k}.")
    if k >= n:
        return torch.ones_like(scores), torch.full_like(scores.narrow(dim, 0, 1), float("inf"))
    s = scores.detach() / temperature  # work in units of tau
    margin = math.log(float(n)) + 12.0
    hi = s.amax(dim, keepdim=True) + margin  # F(hi) > 0
    indices = torch.empty(0, dtype=torch.long, device=scores.device)
    if init is None or hard:
        smallest = torch.topk(s, k + 1, dim=dim, largest=False)
        ordered = smallest.values  # ascending along dim
        indices = smallest.indices
        lo = ordered.narrow(dim, 0, 1) - margin  # F(lo) < 0
        t = 0.5 * (ordered.narrow(dim, k - 1, 1) + ordered.narrow(dim, k, 1))
    else:
        lo = s.amin(dim, keepdim=True) - margin
        t = torch.minimum(torch.maximum(init.detach() / temperature, lo), hi)
        iterations += 1
    for _ in range(iterations):
        p = torch.sigmoid(t - s)
        sum_p = p.sum(dim, keepdim=True)
        f = sum_p - k
        fprime = sum_p - (p * p).sum(dim, keepdim=True)  # sum p (1 - p)
        below = f < 0
        lo = torch.where(below, t, lo)
        hi = torch.where(below, hi, t)
        step = t - f / torch.clamp(fprime, min=1e-12)
        inside = (step >= lo) & (step <= hi)
        t = torch.where(inside, step, 0.5 * (lo + hi))
    u = scores / temperature
    p = torch.sigmoid(t - u)
    sum_p = p.sum(dim, keepdim=True)
    fprime = sum_p - (p * p).sum(dim, keepdim=True)
    t = t - (sum_p - k) / torch.clamp(fprime, min=1e-12)  # Newton step with gradients: dt/ds is implicit
    mask = torch.sigmoid(t - u)
    if hard:
        hard_mask = torch.zeros_like(s).scatter_(dim, indices.narrow(dim, 0, k), 1.0)
        mask = hard_mask + (mask - mask.detach())
    return mask, t.detach() * temperature


def soft_topk_mask(
    scores: torch.Tensor,
    k: int,
    dim: int = 1,
    temperature: float = 0.1,
    hard: bool = False,
    iterations: int = 2,
) -> torch.Tensor:
    """Mask in ``[0, 1]`` keeping the ``k`` smallest ``scores`` along ``dim``; sums to ``k`` along ``dim``.

    The threshold starts halfway between the ``k``-th and ``(k+1)``-th smallest score (the exact
    hard top-K threshold) and is refined by safeguarded Newton iterations on
    ``F(t) = sum_k sigmoid((t - s_k) / tau) - k``: a Newton step that leaves the current bracket
    is replaced by bisection, so the search cannot diverge. A final Newton step with gradients
    gives the implicit-function gradient.

    Args:
        scores: any shape; lower is better (the normalised residual ``r_bar^2``).
        k: number of entries kept, ``1 <= k``; ``k >= scores.shape[dim]`` returns all ones.
        dim: the axis the selection runs over (the filter-pair axis).
        temperature: sigmoid width ``tau`` in score units; smaller is closer to a hard top-K.
        hard: forward the exact 0/1 top-K mask and backpropagate the soft mask's gradient
            (straight-through estimator).
        iterations: safeguarded Newton steps for the threshold (no gradients).

    Returns:
        mask with the shape of ``scores``.
    """
    return soft_topk_mask_with_threshold(scores, k, dim, temperature, hard, iterations, None)[0]
