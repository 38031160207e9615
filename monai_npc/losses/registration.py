"""Composite unsupervised registration loss with the paper's per-benchmark presets."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Callable, Dict

import torch
from monai.losses import BendingEnergyLoss, DiffusionLoss, LocalNormalizedCrossCorrelationLoss
from torch import nn

from monai_npc.functional.warp import warp_image

from .jacobian import JacobianFoldLoss, LogJacobianLoss

__all__ = ["LossPreset", "PRESETS", "RegistrationLoss", "bidirectional_loss"]


@dataclass(frozen=True)
class LossPreset:
    """Weights of ``L = L_sim + lambda_reg L_reg + lambda_jac L_|J| + lambda_logj L_logJ`` (paper Table "Loss and optimization")."""

    window: int
    lambda_reg: float
    lambda_jac: float
    lambda_logj: float
    regularizer: str = "diffusion"


#: the paper's presets: ACDC (NCC window 17) and CAMUS (NCC window 67)
PRESETS: Dict[str, LossPreset] = {
    "acdc": LossPreset(window=17, lambda_reg=5e-2, lambda_jac=100.0, lambda_logj=1e-5),
    "camus": LossPreset(window=67, lambda_reg=2e-1, lambda_jac=1.0, lambda_logj=1e-2),
}


class RegistrationLoss(nn.Module):
    """``L = LNCC(warped, fixed) + lambda_reg * reg(ddf) + lambda_jac * fold(ddf) + lambda_logj * logJ(ddf)``.

    Reuses MONAI's ``LocalNormalizedCrossCorrelationLoss`` (rectangular window, ``-1`` for a perfect
    match), ``DiffusionLoss`` (``||grad ddf||^2``) or ``BendingEnergyLoss``.

    Args:
        preset: ``"acdc"`` or ``"camus"`` to take the paper's weights; explicit arguments override it.
        spatial_dims: 2 or 3.
        window: LNCC window width (voxels, odd).
        lambda_reg, lambda_jac, lambda_logj: weights; 0 disables a term.
        regularizer: ``"diffusion"`` or ``"bending"``.

    ``forward(warped, fixed, ddf)``: images ``(B, 1, *S)``, ``ddf`` ``(B, D, *S)`` in voxels; returns
    the scalar loss. :meth:`components` returns each weighted term as well.
    """

    def __init__(
        self,
        preset: str | None = "acdc",
        spatial_dims: int = 2,
        window: int | None = None,
        lambda_reg: float | None = None,
        lambda_jac: float | None = None,
        lambda_logj: float | None = None,
        regularizer: str | None = None,
    ) -> None:
        super().__init__()
        if preset is not None and preset not in PRESETS:
            raise ValueError(f"preset must be one of {sorted(PRESETS)} or None, got {preset!r}.")
        base = asdict(PRESETS[preset]) if preset else dict(window=9, lambda_reg=0.0, lambda_jac=0.0, lambda_logj=0.0, regularizer="diffusion")
        given = dict(window=window, lambda_reg=lambda_reg, lambda_jac=lambda_jac, lambda_logj=lambda_logj, regularizer=regularizer)
        cfg = {k: (v if v is not None else base[k]) for k, v in given.items()}
        if cfg["regularizer"] not in ("diffusion", "bending"):
            raise ValueError(f"regularizer must be 'diffusion' or 'bending', got {cfg['regularizer']!r}.")
        self.config = cfg
        self.similarity = LocalNormalizedCrossCorrelationLoss(spatial_dims=spatial_dims, kernel_size=int(cfg["window"]))
        self.regularizer = DiffusionLoss() if cfg["regularizer"] == "diffusion" else BendingEnergyLoss()
        self.fold = JacobianFoldLoss()
        self.logj = LogJacobianLoss()

    def components(self, warped: torch.Tensor, fixed: torch.Tensor, ddf: torch.Tensor) -> Dict[str, torch.Tensor]:
        """Weighted terms ``similarity``, ``regularization``, ``fold``, ``logj`` and their sum ``loss``."""
        c = self.config
        terms = {"similarity": self.similarity(warped, fixed)}
        zero = torch.zeros((), device=ddf.device, dtype=ddf.dtype)
        terms["regularization"] = c["lambda_reg"] * self.regularizer(ddf) if c["lambda_reg"] else zero
        terms["fold"] = c["lambda_jac"] * self.fold(ddf) if c["lambda_jac"] else zero
        terms["logj"] = c["lambda_logj"] * self.logj(ddf) if c["lambda_logj"] else zero
        terms["loss"] = terms["similarity"] + terms["regularization"] + terms["fold"] + terms["logj"]
        return terms

    def forward(self, warped: torch.Tensor, fixed: torch.Tensor, ddf: torch.Tensor) -> torch.Tensor:
        return self.components(warped, fixed, ddf)["loss"]


def bidirectional_loss(
    network: Callable[[torch.Tensor], torch.Tensor],
    loss: RegistrationLoss,
    moving: torch.Tensor,
    fixed: torch.Tensor,
) -> Dict[str, torch.Tensor]:
    """Average of the ``moving -> fixed`` and ``fixed -> moving`` losses, both directions in one batch.

    ``network`` maps ``(B, 2, *S)`` (moving, fixed) to a displacement ``(B, D, *S)``. Returns the
    averaged components of :meth:`RegistrationLoss.components` plus ``ddf`` ``(2B, D, *S)`` (forward
    directions first) and ``warped`` ``(2B, 1, *S)``.
    """
    image = torch.cat([torch.cat([moving, fixed], 1), torch.cat([fixed, moving], 1)], 0)
    ddf = network(image)
    warped = warp_image(image[:, 0:1], ddf, "bilinear", "border")
    # the batch mean of each term over both directions is the average of the two directional losses
    terms = loss.components(warped, image[:, 1:2], ddf)
    terms["ddf"] = ddf
    terms["warped"] = warped
    return terms
