"""NPC for unitary dynamics: learned eigen-filters, per-filter rates and a permutation-equivariant tau readout.

The model sees a pair ``(Psi(0), Psi(tau))`` (each ``(B, 2, N)``, real/imaginary parts) and

1. projects both onto ``K`` unit-normalised real filters ``psi_k`` (the "pair" of filter ``k`` is
   ``(psi_k^T Re Psi, psi_k^T Im Psi)``, i.e. the complex coefficient ``c_k``);
2. forms the bilinear interaction ``z_k`` of the two coefficient pairs with the core
   :func:`~monai_npc.functional.interaction.pair_interaction` (``z_k = |c_k|^2 (cos E tau, sin E tau)``
   on an eigenstate) and its polar features with :func:`~monai_npc.functional.interaction.polar_features`;
3. reads ``tau_hat`` from the per-filter features ``(E_k, cos theta_k, sin theta_k, |z_k|)`` with a
   DeepSets readout (shared per-filter MLP, mean + max pooling over filters, MLP, sigmoid range-scaling);
4. reconstructs ``Psi(tau)`` in closed form, ``c_k_hat = c_k(Psi0) exp(-i E_k tau_hat)``,
   ``Psi_hat = sum_k c_k_hat psi_k``.

The rates are stored as learned phase angles ``delta_k = E_k * rate_time`` (the paper's "learned
phase angles"; see :class:`QHOPhaseCorrelator`). Energies are in units of ``hbar omega``, times in
``1 / omega``.
"""

from __future__ import annotations

from typing import NamedTuple, Optional

import torch
from torch import nn

from monai_npc.functional.filter_pairs import unit_normalize_filters
from monai_npc.functional.interaction import pair_interaction, polar_features

from .data import TAU_MIN, check_tau_range

__all__ = [
    "unit_filters",
    "project",
    "rotate_coefficients",
    "reconstruct",
    "readout_features",
    "PermutationEquivariantReadout",
    "QHOOutput",
    "QHOPhaseCorrelator",
]

PAIR_DIM = 1  # (B, 2, K) coefficient pairs: the pair axis is dim 1


def unit_filters(weight: torch.Tensor, eps: float = 1e-8) -> torch.Tensor:
    """Unit-l2 rows of a ``(K, N)`` filter bank via the core :func:`unit_normalize_filters`."""
    return unit_normalize_filters(weight.unsqueeze(1), eps).squeeze(1)


def project(filters: torch.Tensor, psi: torch.Tensor) -> torch.Tensor:
    """Coefficient pairs ``(psi_k^T Re Psi, psi_k^T Im Psi)``: ``(K, N), (B, 2, N) -> (B, 2, K)``."""
    return psi @ filters.t()


def rotate_coefficients(coeffs: torch.Tensor, phase: torch.Tensor) -> torch.Tensor:
    """``c * exp(-i phase)`` on ``(B, 2, K)`` pairs, ``phase`` broadcastable to ``(B, K)`` (radians)."""
    cos, sin = torch.cos(phase), torch.sin(phase)
    re, im = coeffs[:, 0], coeffs[:, 1]
    return torch.stack([re * cos + im * sin, im * cos - re * sin], PAIR_DIM)


def reconstruct(
    coeffs0: torch.Tensor,
    energies: torch.Tensor,
    tau_hat: torch.Tensor,
    filters: torch.Tensor,
    phase_offsets: Optional[torch.Tensor] = None,
) -> torch.Tensor:
    """Closed-form ``Psi_hat = sum_k c_k(Psi0) exp(-i (E_k tau_hat + phi_k)) psi_k``.

    Args:
        coeffs0: ``(B, 2, K)`` coefficient pairs of ``Psi(0)``.
        energies: ``(K,)`` rates ``E_k``; tau_hat: ``(B,)``; filters: ``(K, N)``.
        phase_offsets: optional ``(K,)`` constant phases ``phi_k`` (radians).
    Returns:
        ``(B, 2, N)``.
    """
    phase = energies[None, :] * tau_hat[:, None]
    if phase_offsets is not None:
        phase = phase + phase_offsets[None, :]
    return rotate_coefficients(coeffs0, phase) @ filters


def readout_features(energies: torch.Tensor, polar: torch.Tensor) -> torch.Tensor:
    """Per-filter readout input ``(E_k, cos theta_k, sin theta_k, |z_k|)``: ``(K,), (B, 3, K) -> (B, K, 4)``."""
    e = energies[None, :, None].expand(polar.shape[0], -1, 1)
    return torch.cat([e, polar.transpose(1, 2)], -1)


class PermutationEquivariantReadout(nn.Module):
    """DeepSets ``tau`` readout: ``rho([mean_k phi(f_k), max_k phi(f_k)])``, range-scaled by a sigmoid.

    ``phi``: ``in -> hidden -> hidden``, ``rho``: ``2 hidden -> hidden -> 1``; with ``in = 4`` and
    ``hidden = 32`` that is 3,329 parameters. The output is invariant to permuting the filters.
    """

    def __init__(self, tau_min: float, tau_max: float, in_features: int = 4, hidden: int = 32) -> None:
        super().__init__()
        check_tau_range(tau_max, tau_min)
        if hidden < 1:
            raise ValueError(f"hidden must be >= 1, got {hidden}.")
        self.tau_min = float(tau_min)
        self.tau_max = float(tau_max)
        self.phi = nn.Sequential(nn.Linear(in_features, hidden), nn.SiLU(), nn.Linear(hidden, hidden), nn.SiLU())
        self.rho = nn.Sequential(nn.Linear(2 * hidden, hidden), nn.SiLU(), nn.Linear(hidden, 1))

    def forward(self, features: torch.Tensor) -> torch.Tensor:
        """``(B, K, in_features) -> (B,)`` ``tau_hat`` in ``[tau_min, tau_max]``."""
        h = self.phi(features)
        pooled = torch.cat([h.mean(1), h.amax(1)], -1)
        s = torch.sigmoid(self.rho(pooled).squeeze(-1))
        return self.tau_min + (self.tau_max - self.tau_min) * s


class QHOOutput(NamedTuple):
    """Forward pass of :class:`QHOPhaseCorrelator` (``B`` pairs, ``K`` filters, ``N`` grid points)."""

    tau_hat: torch.Tensor  #: (B,) predicted pair time
    recon: torch.Tensor  #: (B, 2, N) closed-form Psi_hat(tau_hat)
    coeffs0: torch.Tensor  #: (B, 2, K) c_k(Psi(0))
    coeffst: torch.Tensor  #: (B, 2, K) c_k(Psi(tau))
    polar: torch.Tensor  #: (B, 3, K) (cos theta_k, sin theta_k, |z_k|)
    filters: torch.Tensor  #: (K, N) unit-normalised filters


class QHOPhaseCorrelator(nn.Module):
    """Neural Phase Correlation for unitary time evolution (paper Appendix "Quantum Harmonic Oscillator").

    Learned parameters: the filter bank ``(K, N)``; the phase angles ``delta_k`` ``(K,)`` (radians),
    the rotation of pair ``k`` over the reference time ``rate_time``, which give the rates
    ``E_k = delta_k / rate_time``; the readout (3,329 parameters for hidden 32); and, only if
    ``phase_offsets``, constant reconstruction phases ``(K,)``. That is 5,393 (5,409) parameters for
    ``K = 16, N = 128``.

    Initialisation (measured choices, see ``docs/qho.md``): filters are random directions of l2
    norm ``filter_init_norm`` (they are unit-normalised at use, so the norm only sets how fast Adam
    turns them: small is fast); all rates start at (almost) the same value, uniform on
    ``[0, energy_init_spread]``, so that the bank sorts itself into one energy ladder.

    Args:
        n_points: grid size ``N``; n_filters: ``K``.
        tau_max, tau_min: range of ``tau_hat`` (units of ``1 / omega``).
        hidden: readout width.
        phase_offsets: learn per-filter constant phases in the reconstruction (off: they make the
            energy scale unidentifiable, see ``docs/qho.md``).
        rate_time: reference time of the phase angles (``1 / omega``); Adam moves ``delta_k`` by about
            ``lr`` per step, i.e. ``E_k`` by ``lr / rate_time``.
        energy_init_spread: width of the uniform rate initialisation (``hbar omega``).
        filter_init_norm: l2 norm of the initial raw filters.
        generator: ``torch.Generator`` for the filter / rate initialisation (the readout uses torch's
            global RNG: seed it with ``torch.manual_seed``).
    """

    def __init__(
        self,
        n_points: int = 128,
        n_filters: int = 16,
        tau_max: float = 0.6,
        tau_min: float = TAU_MIN,
        hidden: int = 32,
        phase_offsets: bool = False,
        rate_time: float = 0.25,
        energy_init_spread: float = 1e-3,
        filter_init_norm: float = 0.1,
        generator: Optional[torch.Generator] = None,
    ) -> None:
        super().__init__()
        check_tau_range(tau_max, tau_min)
        if n_points < 1 or n_filters < 1:
            raise ValueError(f"n_points and n_filters must be >= 1, got {n_points} and {n_filters}.")
        if not rate_time > 0 or not filter_init_norm > 0 or not energy_init_spread >= 0:
            raise ValueError(
                f"need rate_time > 0, filter_init_norm > 0 and energy_init_spread >= 0, got "
                f"{rate_time}, {filter_init_norm} and {energy_init_spread}."
            )
        self.rate_time = float(rate_time)
        raw = torch.randn(n_filters, n_points, generator=generator)
        self.filter_weight = nn.Parameter(filter_init_norm * raw / raw.norm(dim=1, keepdim=True))
        init_e = energy_init_spread * torch.rand(n_filters, generator=generator)
        self.phase_angles = nn.Parameter(init_e * self.rate_time)
        self.phase_offsets = nn.Parameter(torch.zeros(n_filters)) if phase_offsets else None
        self.readout = PermutationEquivariantReadout(tau_min, tau_max, 4, hidden)

    @property
    def energies(self) -> torch.Tensor:
        """Rates ``E_k = delta_k / rate_time`` ``(K,)`` (``hbar omega``, up to one global gauge offset)."""
        return self.phase_angles / self.rate_time

    @property
    def filters(self) -> torch.Tensor:
        """Unit-normalised ``(K, N)`` filter bank."""
        return unit_filters(self.filter_weight)

    def forward(self, psi0: torch.Tensor, psit: torch.Tensor) -> QHOOutput:
        """``psi0, psit``: ``(B, 2, N)`` real/imaginary parts of ``Psi(0)`` and ``Psi(tau)``."""
        if psi0.shape != psit.shape or psi0.dim() != 3 or psi0.shape[1] != 2:
            raise ValueError(f"psi0 and psit must both be (B, 2, N), got {tuple(psi0.shape)} and {tuple(psit.shape)}.")
        filters = self.filters
        a = project(filters, psi0)
        b = project(filters, psit)
        polar = polar_features(pair_interaction(a, b, PAIR_DIM), PAIR_DIM)
        tau_hat = self.readout(readout_features(self.energies, polar))
        recon = reconstruct(a, self.energies, tau_hat, filters, self.phase_offsets)
        return QHOOutput(tau_hat, recon, a, b, polar, filters)
