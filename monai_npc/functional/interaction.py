"""Bilinear interaction of filter-pair responses, polar features and the invariance residual.

All functions take the moving responses ``a = psi_k^T x`` and the fixed responses ``b = phi_k^T y``
with the pair axis (size 2) at ``pair_dim``; every other axis (batch, pair index, grid) is kept.
"""

from __future__ import annotations

from typing import Optional, Tuple

import torch

__all__ = ["pair_interaction", "polar_features", "pair_residual", "interaction_features"]


def pair_interaction(a: torch.Tensor, b: torch.Tensor, pair_dim: int = 2) -> torch.Tensor:
    """Bilinear interaction ``z_k = (a^T b, a^T J b)`` with ``J = [[0, -1], [1, 0]]`` (paper Eq. interaction).

    In complex notation (``v = v_0 + i v_1``) ``z_0 + i z_1 = conj(conj(a) b)``: for ``b = R(t) a``,
    ``z = |a|^2 (cos t, -sin t)``. With Fourier (cos, sin) filter pairs, ``a`` is the complex
    conjugate of the DFT coefficient of the moving patch, so ``atan2(z_1, z_0)`` is the phase of the
    classical cross-power spectrum ``conj(X) Y``.

    Args:
        a: moving responses, size 2 along ``pair_dim``.
        b: fixed responses, same shape as ``a``.
    Returns:
        ``z`` with the same shape as ``a``.
    """
    a0, a1 = a.unbind(pair_dim)
    b0, b1 = b.unbind(pair_dim)
    return torch.stack([a0 * b0 + a1 * b1, a1 * b0 - a0 * b1], pair_dim)


def polar_features(z: torch.Tensor, pair_dim: int = 2, eps: float = 1e-8) -> torch.Tensor:
    """``(cos theta_k, sin theta_k, |z_k|)`` of an interaction ``z``; size 3 along ``pair_dim``.

    ``|z| = sqrt(z_0^2 + z_1^2 + eps)``, so a zero interaction (flat patch) gives direction ``(0, 0)``
    and finite gradients instead of NaN.
    """
    z0, z1 = z.unbind(pair_dim)
    mag = torch.sqrt(z0 * z0 + z1 * z1 + eps)
    return torch.stack([z0 / mag, z1 / mag, mag], pair_dim)


def pair_residual(
    a: torch.Tensor, b: torch.Tensor, pair_dim: int = 2, eps: float = 1e-6
) -> Tuple[torch.Tensor, torch.Tensor]:
    """Invariance residual ``r_k^2 = (||b|| - ||a||)^2`` and its normalised form ``r_k^2 / (||a|| ||b||)``.

    Norms are ``sqrt(||.||^2 + eps)``, so the normalised residual is finite (and 0 when both
    responses vanish) with finite gradients everywhere. ``r_k^2 = 0`` for every input exactly when
    the span of the pair is invariant under the (orthogonal) local operator (paper Appendix B).

    Returns:
        ``(r2, r2_normalized)``, each with ``pair_dim`` removed.
    """
    na = torch.sqrt((a * a).sum(pair_dim) + eps)
    nb = torch.sqrt((b * b).sum(pair_dim) + eps)
    r2 = (nb - na) ** 2
    return r2, r2 / (na * nb)


def interaction_features(
    a: torch.Tensor, b: torch.Tensor, pair_dim: int = 1, eps: float = 1e-6, b_norm: Optional[torch.Tensor] = None
) -> Tuple[torch.Tensor, torch.Tensor]:
    """Polar features and normalised residual in one pass, sharing the response norms.

    Uses the identity ``|z_k| = ||a_k|| ||b_k||`` (Lagrange's identity for 2-vectors), with
    ``||v|| = sqrt(||v||^2 + eps)``: ``features = (z_0, z_1) / |z|`` and ``|z|`` stacked along
    ``pair_dim`` (size 3), and ``r_bar^2 = (||b|| - ||a||)^2 / |z|`` with ``pair_dim`` removed.
    Equal to :func:`polar_features` of :func:`pair_interaction` and :func:`pair_residual` up to
    where ``eps`` enters. ``b_norm`` may pass ``sqrt(||b||^2 + eps)`` precomputed (the fixed
    image's responses do not change across ODE steps).
    """
    a0, a1 = a.unbind(pair_dim)
    b0, b1 = b.unbind(pair_dim)
    # pair_interaction's z without stacking it (fused multiply-adds; the stack and unbind cost as much as the arithmetic)
    z0 = torch.addcmul(a0 * b0, a1, b1)
    z1 = torch.addcmul(a1 * b0, a0, b1, value=-1.0)
    na = torch.sqrt(torch.addcmul(a1 * a1, a0, a0) + eps)
    nb = b_norm if b_norm is not None else torch.sqrt((b * b).sum(pair_dim) + eps)
    mag = na * nb
    inv = torch.reciprocal(mag)
    diff = nb - na
    return torch.stack([z0 * inv, z1 * inv, mag], pair_dim), diff * diff * inv
