"""Wavefunction pairs of the 1-D quantum harmonic oscillator (hbar = omega = m = 1).

Complex wavefunctions are stored as real tensors of shape ``(B, 2, N)``: axis 1 holds
``(Re Psi, Im Psi)``. Applying a real filter ``psi_k`` to both channels gives the 2-vector
``(psi_k^T Re Psi, psi_k^T Im Psi)``, the complex coefficient ``c_k`` as a filter-pair response
with the pair axis at dim 1 (``pair_dim=1`` of :mod:`monai_npc.functional.interaction`).

Positions and times are in oscillator units (length ``sqrt(hbar / (m omega))``, time ``1 / omega``),
energies in units of ``hbar omega``.
"""

from __future__ import annotations

from typing import NamedTuple, Optional

import numpy as np
import torch
from scipy.special import eval_hermite

__all__ = [
    "TAU_MIN",
    "position_grid",
    "hermite_basis",
    "oscillator_energies",
    "truncated_hamiltonian",
    "evolve",
    "QHOBatch",
    "sample_pairs",
    "check_tau_range",
]

#: smallest pair time of the sampler (the paper's ``tau_min``)
TAU_MIN: float = 0.05


def check_tau_range(tau_max: float, tau_min: float = TAU_MIN) -> None:
    """Raise ``ValueError`` unless ``0 <= tau_min < tau_max`` (finite)."""
    if not (np.isfinite(tau_min) and np.isfinite(tau_max)):
        raise ValueError(f"tau_min ({tau_min}) and tau_max ({tau_max}) must be finite.")
    if tau_min < 0:
        raise ValueError(f"tau_min must be >= 0, got {tau_min}.")
    if tau_max <= tau_min:
        raise ValueError(f"tau_max must be > tau_min = {tau_min}, got {tau_max}.")


def position_grid(n_points: int = 128, x_max: float = 8.0) -> np.ndarray:
    """``n_points`` equally spaced positions on ``[-x_max, x_max]`` (end points included), float64."""
    if n_points < 2:
        raise ValueError(f"n_points must be >= 2, got {n_points}.")
    if not x_max > 0:
        raise ValueError(f"x_max must be > 0, got {x_max}.")
    return np.linspace(-x_max, x_max, n_points)


def hermite_basis(n_states: int = 16, n_points: int = 128, x_max: float = 8.0) -> np.ndarray:
    """The first ``n_states`` Hermite functions on :func:`position_grid`, each of unit discrete l2 norm.

    ``psi_n(x) ~ H_n(x) exp(-x^2 / 2)`` (physicists' Hermite polynomials, ``scipy.special``), then
    divided by its l2 norm over the grid points, so that ``sum_x psi_n(x)^2 = 1``. On the default
    grid the rows are orthonormal to ~1e-11.

    Returns:
        ``(n_states, n_points)`` float64, row ``n`` is ``psi_n`` (sign: ``H_n`` has a positive leading coefficient).
    """
    if n_states < 1:
        raise ValueError(f"n_states must be >= 1, got {n_states}.")
    x = position_grid(n_points, x_max)
    rows = [eval_hermite(n, x) * np.exp(-0.5 * x * x) for n in range(n_states)]
    basis = np.stack(rows, 0)
    return basis / np.linalg.norm(basis, axis=1, keepdims=True)


def oscillator_energies(n_states: int = 16) -> np.ndarray:
    """Analytic energies ``E_n = n + 1/2`` (units of ``hbar omega``), float64 ``(n_states,)``."""
    return np.arange(n_states, dtype=np.float64) + 0.5


def truncated_hamiltonian(basis: np.ndarray, energies: np.ndarray) -> np.ndarray:
    """Spectral sum ``H = sum_n E_n |psi_n><psi_n|``: ``(N, N)`` from ``basis (K, N)`` and ``energies (K,)``."""
    basis = np.asarray(basis, dtype=np.float64)
    energies = np.asarray(energies, dtype=np.float64)
    if basis.ndim != 2 or energies.shape != (basis.shape[0],):
        raise ValueError(f"basis must be (K, N) and energies (K,), got {basis.shape} and {energies.shape}.")
    return (basis.T * energies) @ basis


def evolve(psi: np.ndarray, tau: np.ndarray, basis: np.ndarray, energies: np.ndarray) -> np.ndarray:
    """Apply ``U(tau) = exp(-i H tau)`` of the truncated Hamiltonian to complex wavefunctions.

    ``U(tau) psi = psi + sum_n (exp(-i E_n tau) - 1) <psi_n|psi> psi_n``, exactly the matrix
    exponential of :func:`truncated_hamiltonian` (the part of ``psi`` outside the span has energy 0).

    Args:
        psi: complex ``(..., N)``.
        tau: times broadcastable against ``psi.shape[:-1]``.
        basis: ``(K, N)`` orthonormal eigenstates; energies: ``(K,)``.
    Returns:
        complex128 ``(..., N)``.
    """
    psi = np.asarray(psi, dtype=np.complex128)
    tau = np.asarray(tau, dtype=np.float64)[..., None]
    coeffs = psi @ basis.T  # (..., K)
    phase = np.exp(-1j * energies * tau) - 1.0
    return psi + (coeffs * phase) @ basis


class QHOBatch(NamedTuple):
    """A batch of wavefunction pairs; only ``psi0`` and ``psit`` are shown to the model.

    Attributes:
        psi0: ``(B, 2, N)`` real/imaginary parts of ``Psi(0)``.
        psit: ``(B, 2, N)`` real/imaginary parts of ``Psi(tau)``.
        tau: ``(B,)`` pair times (units of ``1 / omega``).
        coeffs: ``(B, 2, K)`` real/imaginary parts of the eigen-coefficients ``c`` of ``Psi(0)``.
    """

    psi0: torch.Tensor
    psit: torch.Tensor
    tau: torch.Tensor
    coeffs: torch.Tensor


def sample_pairs(
    batch_size: int,
    basis: torch.Tensor,
    energies: torch.Tensor,
    tau_max: float,
    tau_min: float = TAU_MIN,
    generator: Optional[torch.Generator] = None,
    dtype: torch.dtype = torch.float32,
) -> QHOBatch:
    """Random pairs ``Psi(0) = sum_n c_n psi_n``, ``Psi(tau) = sum_n c_n exp(-i E_n tau) psi_n``.

    ``c`` is complex standard normal, rescaled to unit norm; ``tau ~ U[tau_min, tau_max]``. Sampling
    and evolution are done in float64 (then cast to ``dtype``), so for an orthonormal basis the norms
    are kept to float64 round-off.

    Args:
        batch_size: number of pairs ``B``.
        basis: ``(K, N)`` eigenstates (rows), e.g. ``torch.from_numpy(hermite_basis())``.
        energies: ``(K,)`` eigenvalues.
        tau_max, tau_min: time range (``0 <= tau_min < tau_max``).
        generator: ``torch.Generator`` for reproducible draws (CPU).
    """
    if batch_size < 1:
        raise ValueError(f"batch_size must be >= 1, got {batch_size}.")
    check_tau_range(tau_max, tau_min)
    basis64 = basis.to(torch.float64)
    energies64 = energies.to(torch.float64)
    k = basis64.shape[0]
    c = torch.randn(batch_size, 2, k, generator=generator, dtype=torch.float64)
    c = c / torch.sqrt((c * c).sum(dim=(1, 2), keepdim=True))
    tau = tau_min + (tau_max - tau_min) * torch.rand(batch_size, generator=generator, dtype=torch.float64)
    phase = energies64[None, :] * tau[:, None]  # (B, K)
    cos, sin = torch.cos(phase), torch.sin(phase)
    # c * exp(-i phase): (re, im) -> (re cos + im sin, im cos - re sin)
    ct = torch.stack([c[:, 0] * cos + c[:, 1] * sin, c[:, 1] * cos - c[:, 0] * sin], 1)
    psi0 = c @ basis64
    psit = ct @ basis64
    return QHOBatch(psi0.to(dtype), psit.to(dtype), tau.to(dtype), c.to(dtype))
