"""QHO training losses: magnitude-NCC reconstruction, invariance residual, diversity and span coverage.

Wavefunctions are ``(B, 2, N)`` real/imaginary parts; coefficient pairs ``(B, 2, K)``.
"""

from __future__ import annotations

from typing import Dict

import torch

from monai_npc.functional.interaction import pair_residual

from .model import PAIR_DIM, QHOOutput

__all__ = ["magnitude_ncc_loss", "residual_loss", "diversity_loss", "span_loss", "qho_loss"]


def magnitude_ncc_loss(pred: torch.Tensor, target: torch.Tensor, eps: float = 1e-8) -> torch.Tensor:
    """``1 - mean_b |<pred_b, target_b>| / (||pred_b|| ||target_b||)`` with the complex inner product.

    Invariant to a global phase ``exp(i alpha_b)`` per pair (and to scale); 0 iff ``pred`` is
    proportional to ``target`` for every pair. Not mean-centred: the wavefunctions have no offset.
    """
    pr, pi = pred[:, 0], pred[:, 1]
    tr, ti = target[:, 0], target[:, 1]
    re = (pr * tr + pi * ti).sum(-1)
    im = (pr * ti - pi * tr).sum(-1)
    num = torch.sqrt(re * re + im * im + eps)
    den = torch.sqrt((pred * pred).sum((1, 2)) * (target * target).sum((1, 2)) + eps)
    return 1.0 - (num / den).mean()


def residual_loss(coeffs0: torch.Tensor, coeffst: torch.Tensor, normalized: bool = False) -> torch.Tensor:
    """Mean of the core invariance residual ``r_k^2 = (|c_k(Psi_tau)| - |c_k(Psi_0)|)^2`` (paper Eq. residual).

    ``normalized=True`` uses ``r_k^2 / (|c_k(Psi_0)| |c_k(Psi_tau)|)`` instead.
    """
    r2, r2n = pair_residual(coeffs0, coeffst, PAIR_DIM)
    return (r2n if normalized else r2).mean()


def diversity_loss(filters: torch.Tensor) -> torch.Tensor:
    """Sum of squared off-diagonal entries of the Gram matrix of ``(K, N)`` unit filters (0 iff orthonormal)."""
    gram = filters @ filters.t()
    off = gram - torch.diag_embed(torch.diagonal(gram))
    return (off * off).sum()


def span_loss(psi: torch.Tensor, coeffs: torch.Tensor) -> torch.Tensor:
    """Span coverage ``E_b[||Psi_b||^2 - sum_k |c_k|^2]`` (>= 0 for orthonormal filters, 0 iff ``Psi`` is in their span)."""
    return ((psi * psi).sum((1, 2)) - (coeffs * coeffs).sum((1, 2))).mean()


def qho_loss(
    out: QHOOutput,
    psi0: torch.Tensor,
    psit: torch.Tensor,
    w_recon: float = 1.0,
    w_residual: float = 1.0,
    w_diversity: float = 1.0,
    w_span: float = 1.0,
    residual_normalized: bool = False,
) -> Dict[str, torch.Tensor]:
    """Weighted sum of the four terms (paper: all weights 1); returns ``{"total", "recon", "residual", "diversity", "span"}``."""
    terms = {
        "recon": magnitude_ncc_loss(out.recon, psit),
        "residual": residual_loss(out.coeffs0, out.coeffst, residual_normalized),
        "diversity": diversity_loss(out.filters),
        "span": 0.5 * (span_loss(psi0, out.coeffs0) + span_loss(psit, out.coeffst)),
    }
    terms["total"] = (
        w_recon * terms["recon"]
        + w_residual * terms["residual"]
        + w_diversity * terms["diversity"]
        + w_span * terms["span"]
    )
    return terms
