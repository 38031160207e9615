"""Jacobian-determinant penalties on displacement fields (voxel units, full grid)."""

from __future__ import annotations

import torch
from monai.utils import LossReduction
from torch.nn.modules.loss import _Loss

from monai_npc.functional.warp import jacobian_determinant

__all__ = ["JacobianFoldLoss", "LogJacobianLoss"]


def _reduce(values: torch.Tensor, reduction: str) -> torch.Tensor:
    if reduction == LossReduction.MEAN.value:
        return values.mean()
    if reduction == LossReduction.SUM.value:
        return values.sum()
    if reduction == LossReduction.NONE.value:
        return values
    raise ValueError(f"reduction must be mean, sum or none, got {reduction!r}.")


class JacobianFoldLoss(_Loss):
    """Fold penalty ``L_|J| = mean(relu(-det J))`` of ``x -> x + ddf(x)``; 0 for a fold-free field.

    ``forward(ddf)``: ``ddf`` ``(B, D, *S)`` in voxels (D = 2 or 3). ``det J`` is computed with
    central differences on the full voxel grid (:func:`~monai_npc.functional.jacobian_determinant`).
    """

    def __init__(self, reduction: LossReduction | str = LossReduction.MEAN) -> None:
        super().__init__(reduction=LossReduction(reduction).value)

    def forward(self, ddf: torch.Tensor) -> torch.Tensor:
        return _reduce(torch.relu(-jacobian_determinant(ddf)), self.reduction)


class LogJacobianLoss(_Loss):
    """Log-Jacobian penalty ``L_logJ = mean(log(max(det J, eps))^2)``: penalises volume change both ways.

    ``eps`` floors non-positive determinants so the loss stays finite where the field folds.
    """

    def __init__(self, eps: float = 1e-3, reduction: LossReduction | str = LossReduction.MEAN) -> None:
        super().__init__(reduction=LossReduction(reduction).value)
        self.eps = eps

    def forward(self, ddf: torch.Tensor) -> torch.Tensor:
        logdet = torch.log(torch.clamp(jacobian_determinant(ddf), min=self.eps))
        return _reduce(logdet * logdet, self.reduction)
