"""Registration metrics: per-structure Dice and HD95 of warped labels, and Jacobian regularity.

Jacobian-based metrics (SDlogJ, NDV, % folding) use ``det(I + grad ddf)`` computed with central
differences on the full voxel grid of the displacement field (the grid of the fixed image), as in
:func:`~monai_npc.functional.jacobian_determinant`.
"""

from __future__ import annotations

from typing import Dict, Sequence

import torch
from monai.metrics import compute_dice, compute_hausdorff_distance
from monai.networks.utils import one_hot

from monai_npc.functional.warp import jacobian_determinant

__all__ = ["dice_per_structure", "hd95_per_structure", "sdlogj", "ndv", "folding_percent", "registration_metrics"]


def _one_hot(label: torch.Tensor, labels: Sequence[int]) -> torch.Tensor:
    return torch.cat([(label == v) for v in labels], 1).float()


def dice_per_structure(pred: torch.Tensor, target: torch.Tensor, labels: Sequence[int] = (1, 2, 3)) -> torch.Tensor:
    """Dice of each structure: ``pred``, ``target`` ``(B, 1, *S)`` label maps -> ``(B, len(labels))``.

    A structure absent from ``target`` gives NaN (MONAI's ``ignore_empty``); average with ``nanmean``.
    """
    return compute_dice(_one_hot(pred, labels), _one_hot(target, labels), include_background=True)


def hd95_per_structure(
    pred: torch.Tensor, target: torch.Tensor, labels: Sequence[int] = (1, 2, 3), spacing: float | Sequence[float] | None = None
) -> torch.Tensor:
    """95th-percentile Hausdorff distance per structure (voxels, or mm with ``spacing``): ``(B, len(labels))``."""
    return compute_hausdorff_distance(
        _one_hot(pred, labels), _one_hot(target, labels), include_background=True, percentile=95, spacing=spacing
    )


def sdlogj(ddf: torch.Tensor) -> torch.Tensor:
    """Standard deviation of ``log(det J + 3)`` per field, in units of ``1e-2`` (the paper's SDlogJ): ``(B,)``."""
    logj = torch.log(torch.clamp(jacobian_determinant(ddf) + 3.0, min=1e-9))
    return 100.0 * logj.flatten(1).std(1)


def ndv(ddf: torch.Tensor, moving_label: torch.Tensor, fixed_label: torch.Tensor) -> torch.Tensor:
    """Non-positive ``det J`` voxels per 10,000 foreground voxels: ``(B,)``.

    Foreground is the union of the moving and fixed label maps (``> 0``); only foreground voxels
    are counted. A pair without foreground raises ``ValueError``.
    """
    fg = ((moving_label > 0) | (fixed_label > 0)).flatten(1)
    n_fg = fg.sum(1)
    if bool((n_fg == 0).any()):
        raise ValueError("ndv: a pair has no foreground voxels in either label map.")
    bad = (jacobian_determinant(ddf).flatten(1) <= 0) & fg
    return 1e4 * bad.sum(1).float() / n_fg.float()


def folding_percent(ddf: torch.Tensor) -> torch.Tensor:
    """Percentage of voxels with ``det J <= 0`` over the whole field: ``(B,)``."""
    return 100.0 * (jacobian_determinant(ddf).flatten(1) <= 0).float().mean(1)


def registration_metrics(
    warped_label: torch.Tensor,
    fixed_label: torch.Tensor,
    moving_label: torch.Tensor,
    ddf: torch.Tensor,
    labels: Sequence[int] = (1, 2, 3),
    names: Sequence[str] | None = None,
) -> Dict[str, torch.Tensor]:
    """Every metric of a batch of registered pairs; each value is ``(B,)``.

    Keys: ``dice_<name>`` per structure, ``dice_mean`` (mean over structures), ``hd95`` (mean over
    structures, voxels), ``sdlogj`` (x1e-2), ``ndv`` (per 10k foreground voxels), ``folding_percent``.
    """
    names = list(names) if names is not None else [str(v) for v in labels]
    dice = dice_per_structure(warped_label, fixed_label, labels)
    out = {f"dice_{n}": dice[:, i] for i, n in enumerate(names)}
    out["dice_mean"] = torch.nanmean(dice, 1)
    out["hd95"] = torch.nanmean(hd95_per_structure(warped_label, fixed_label, labels), 1)
    out["sdlogj"] = sdlogj(ddf)
    out["ndv"] = ndv(ddf, moving_label, fixed_label)
    out["folding_percent"] = folding_percent(ddf)
    return out
