"""A segmentation prior on the fixed image for the refinement's label-guided term.

The label-guided term (:mod:`monai_npc.functional.label_intensity`) asks each carried label to
cover fixed voxels that *look like* the moving image under that label. Intensity alone is
ambiguous where two structures share it (the RV and LV blood pools, the myocardium and the liver,
papillary muscles and the myocardium). A prior ``p_k(x)``, the probability that fixed voxel ``x``
belongs to label ``k`` as a segmentation network sees it, resolves that: the carried labels pay
``-log p_k(x)`` for every voxel they cover. The term stays a sum of warped one-hot labels times
per-voxel weights (linear in the warped labels, as the intensity term), so the refinement adds the
two weight maps once and its steps cost the same.

Pure functions on tensors; the network that gives ``p`` is
:class:`~monai_npc.networks.nets.label_prior.LabelPrior`.
"""

from __future__ import annotations

from typing import Sequence

import torch

__all__ = ["PRIOR_FLOOR", "label_prior_weights", "label_prior_cost"]

#: probabilities are floored at this value before the log: a voxel the prior is sure of costs at most
#: ``-log(PRIOR_FLOOR)`` (6.9) per label, so one confident mistake of the prior cannot dominate the term
PRIOR_FLOOR = 1e-3


def label_prior_weights(prior: torch.Tensor, values: Sequence[int], region: torch.Tensor, floor: float = PRIOR_FLOOR) -> torch.Tensor:
    """``(B, C, *S)`` per-voxel, per-label weights ``w`` with ``label_prior_cost(...) = sum(warped_onehot * w)``
    over each sample: ``-log max(p_{values[c]}(x), floor)`` inside ``region``, divided by the region's size.

    Args:
        prior: ``(B, K, *S)`` class probabilities of the fixed image (channel ``k`` = label value ``k``,
            summing to 1 over ``K``).
        values: the label value of each of the ``C`` one-hot channels (:func:`label_onehot` order);
            a value the prior does not know (``>= K``) gets weight 0 (only its intensity term acts). Value 0 (the
            label's background) is the prior's background together with every structure ``1 .. K - 1`` that
            ``values`` do not name (a label of the LV alone calls the myocardium and the RV background).
        region: ``(B, 1, *S)`` where the term is evaluated.
        floor: probability floor before the log.

    Raises:
        ValueError: ``prior`` and ``region`` differ in batch or spatial shape.
    """
    if prior.shape[0] != region.shape[0] or prior.shape[2:] != region.shape[2:]:
        raise ValueError(f"prior {tuple(prior.shape)} and region {tuple(region.shape)} must share batch and spatial shape.")
    known = [int(v) < prior.shape[1] for v in values]
    index = torch.tensor([int(v) if k else 0 for v, k in zip(values, known)], device=prior.device)
    chosen = prior.index_select(1, index)  # (B, C, *S)
    named = {int(v) for v in values}
    unnamed = [k for k in range(1, prior.shape[1]) if k not in named]
    if unnamed and 0 in named:
        # a label that leaves out some of the prior's structures (an LV alone) calls them background: its 0 is the
        # prior's background or any structure the label does not name
        background = [c for c, v in enumerate(values) if int(v) == 0]
        chosen[:, background] += prior.index_select(1, torch.tensor(unnamed, device=prior.device)).sum(1, keepdim=True)
    cost = -torch.log(chosen.clamp(min=float(floor)))  # (B, C, *S)
    cost = cost * torch.tensor(known, dtype=cost.dtype, device=cost.device).view([1, -1] + [1] * (prior.dim() - 2))
    count = region.flatten(1).sum(1).clamp(min=1.0).view([-1] + [1] * (prior.dim() - 1))
    return cost.to(region.dtype) * region / count


def label_prior_cost(prior: torch.Tensor, warped_onehot: torch.Tensor, values: Sequence[int], region: torch.Tensor) -> torch.Tensor:
    """``(B,)`` mean over ``region`` of ``sum_c q_c(x) (-log p_{values[c]}(x))``: how unlikely the prior finds the
    warped labels ``q`` (``(B, C, *S)``, soft one-hot) on the fixed image."""
    return (warped_onehot * label_prior_weights(prior, values, region)).flatten(1).sum(1)
