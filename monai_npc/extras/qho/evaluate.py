"""Evaluation of a learned spectrum against the analytic oscillator.

* eigenstates: optimal one-to-one assignment of learned filters to analytic eigenstates on
  ``|overlap|`` (``scipy.optimize.linear_sum_assignment``), sign-aligned;
* energies: the learned rates ``E_k`` carry one global gauge offset (the magnitude-NCC loss does
  not see a per-pair global phase). It is closed by the paper's one-scalar anchor: the ground-state
  energy ``<psi_0|H|psi_0>`` of the learned ground state, read from the phase of
  ``<psi_0|U(tau)|psi_0>`` across the held-out pair times (a single-frequency oscillation
  ``exp(-i E_0 tau)`` when ``psi_0`` is an eigenstate); then ``E_k <- E_k - E_{k0} + E_0``;
* time: Pearson correlation of ``tau_hat`` with the true ``tau`` on held-out pairs;
* Hamiltonian: ``H_hat = sum_k E_k |psi_k><psi_k|`` against the analytic truncated ``H``.

Energies in units of ``hbar omega``, times in ``1 / omega``. All functions take NumPy arrays.
"""

from __future__ import annotations

from typing import Any, Dict, NamedTuple, Optional

import numpy as np
from scipy.optimize import linear_sum_assignment

from .data import evolve, truncated_hamiltonian

__all__ = [
    "Matching",
    "overlap_matrix",
    "match_filters",
    "ground_state_energy",
    "calibrate_energies",
    "tau_pearson",
    "hamiltonian_error",
    "evaluate_spectrum",
]


def _unit_rows(a: np.ndarray) -> np.ndarray:
    a = np.asarray(a, dtype=np.float64)
    if a.ndim != 2:
        raise ValueError(f"expected a (K, N) array, got shape {a.shape}.")
    norm = np.linalg.norm(a, axis=1, keepdims=True)
    if np.any(norm == 0):
        raise ValueError("a filter or eigenstate is identically zero.")
    return a / norm


class Matching(NamedTuple):
    """Assignment of learned filters to analytic eigenstates ``n = 0 .. M-1``.

    Attributes:
        filter_index: ``(M,)`` learned filter ``k(n)`` matched to eigenstate ``n``.
        overlaps: ``(M,)`` ``|<psi_k(n)|psi_n>|`` of unit-normalised vectors, in ``[0, 1]``.
        signs: ``(M,)`` ``+-1``; ``signs[n] * filters[k(n)]`` is sign-aligned with ``psi_n``.
    """

    filter_index: np.ndarray
    overlaps: np.ndarray
    signs: np.ndarray


def overlap_matrix(filters: np.ndarray, basis: np.ndarray) -> np.ndarray:
    """Signed overlaps ``<f_k|psi_n>`` of unit-normalised rows: ``(K, N), (M, N) -> (K, M)``."""
    f, b = _unit_rows(filters), _unit_rows(basis)
    if f.shape[1] != b.shape[1]:
        raise ValueError(f"filters and basis must share N, got {f.shape} and {b.shape}.")
    return f @ b.T


def match_filters(filters: np.ndarray, basis: np.ndarray) -> Matching:
    """Maximum-total-``|overlap|`` assignment of filters (``K >= M``) to eigenstates."""
    signed = overlap_matrix(filters, basis)
    if signed.shape[0] < signed.shape[1]:
        raise ValueError(f"need at least as many filters as eigenstates, got {signed.shape[0]} < {signed.shape[1]}.")
    rows, cols = linear_sum_assignment(-np.abs(signed))
    order = np.argsort(cols)
    k = rows[order]
    values = signed[k, np.arange(signed.shape[1])]
    signs = np.where(values < 0, -1.0, 1.0)
    return Matching(k, np.abs(values), signs)


def ground_state_energy(state: np.ndarray, taus: np.ndarray, basis: np.ndarray, energies: np.ndarray) -> float:
    """``<psi|H|psi>`` from the phase of ``g(tau) = <psi|U(tau)|psi>`` across pair times.

    ``U(tau)`` is applied by the (analytic) system, :func:`~monai_npc.extras.qho.data.evolve`; the
    model's parameters are not used. The unwrapped phase of ``g`` (with ``g(0) = 1``) is fitted by a
    line through the origin, ``arg g = -E_0 tau``, which is exact for an eigenstate and gives the
    first moment ``<H>`` to ``O(tau^2)`` otherwise.

    Args:
        state: ``(N,)`` real (unit-normalised here).
        taus: ``(T,)`` pair times ``> 0``.
        basis, energies: the system's ``(M, N)`` eigenstates and ``(M,)`` energies.
    """
    psi = _unit_rows(np.asarray(state)[None])[0]
    taus = np.sort(np.asarray(taus, dtype=np.float64).ravel())
    if taus.size == 0 or np.any(taus <= 0):
        raise ValueError("taus must be a non-empty array of positive times.")
    evolved = evolve(np.broadcast_to(psi, (taus.size, psi.size)), taus, basis, energies)
    g = evolved @ psi  # <psi|U(tau)|psi>, psi real
    phase = np.unwrap(np.concatenate([[0.0], np.angle(g)]))[1:]
    return float(-(taus @ phase) / (taus @ taus))


def calibrate_energies(energies: np.ndarray, ground_index: int, ground_energy: float) -> np.ndarray:
    """Remove the global gauge offset: ``E_k - E_{ground_index} + ground_energy``."""
    energies = np.asarray(energies, dtype=np.float64)
    return energies - energies[ground_index] + ground_energy


def tau_pearson(tau_hat: np.ndarray, tau: np.ndarray) -> float:
    """Pearson correlation of predicted and true pair times (``nan`` if either is constant)."""
    tau_hat = np.asarray(tau_hat, dtype=np.float64).ravel()
    tau = np.asarray(tau, dtype=np.float64).ravel()
    if tau_hat.shape != tau.shape or tau.size < 2:
        raise ValueError(f"tau_hat and tau must have the same size >= 2, got {tau_hat.shape} and {tau.shape}.")
    if np.std(tau_hat) == 0 or np.std(tau) == 0:
        return float("nan")
    return float(np.corrcoef(tau_hat, tau)[0, 1])


def hamiltonian_error(filters: np.ndarray, energies: np.ndarray, basis: np.ndarray, true_energies: np.ndarray) -> Dict[str, float]:
    """Distance of ``H_hat = sum_k E_k |f_k><f_k|`` (unit filters) from the analytic truncated ``H``.

    Returns ``{"rel_fro": ||H_hat - H||_F / ||H||_F, "spectral": ||H_hat - H||_2}`` (``hbar omega``).
    """
    h_hat = truncated_hamiltonian(_unit_rows(filters), energies)
    h = truncated_hamiltonian(_unit_rows(basis), true_energies)
    diff = h_hat - h
    return {
        "rel_fro": float(np.linalg.norm(diff) / np.linalg.norm(h)),
        "spectral": float(np.linalg.norm(diff, 2)),
    }


def evaluate_spectrum(
    filters: np.ndarray,
    energies: np.ndarray,
    basis: np.ndarray,
    true_energies: np.ndarray,
    taus: np.ndarray,
    tau_hat: Optional[np.ndarray] = None,
    tau_true: Optional[np.ndarray] = None,
) -> Dict[str, Any]:
    """All metrics of a learned spectrum (JSON-serialisable).

    Args:
        filters: ``(K, N)`` learned filters; energies: ``(K,)`` learned (uncalibrated) rates.
        basis, true_energies: analytic ``(M, N)`` eigenstates and ``(M,)`` energies.
        taus: pair times used by the ground-state calibration.
        tau_hat, tau_true: optional held-out predictions and truths for ``tau_pearson``.

    Returns:
        ``median_overlap``, ``min_overlap``, ``overlaps`` (per ``n``), ``filter_index`` (``k(n)``),
        ``signs``, ``ground_energy`` (measured ``E_0``), ``energies_calibrated`` (per filter ``k``),
        ``energies_per_n`` (``E_k(n)``), ``energy_errors`` (per ``n``), ``max_energy_error``,
        ``median_energy_error``, ``hamiltonian_rel_error``, ``hamiltonian_spectral_error`` and, if
        given, ``tau_pearson``.
    """
    energies = np.asarray(energies, dtype=np.float64)
    true_energies = np.asarray(true_energies, dtype=np.float64)
    if energies.shape != (np.asarray(filters).shape[0],):
        raise ValueError(f"energies must be (K,) for K filters, got {energies.shape}.")
    match = match_filters(filters, basis)
    ground = int(match.filter_index[int(np.argmin(true_energies))])
    e0 = ground_state_energy(np.asarray(filters)[ground], taus, basis, true_energies)
    calibrated = calibrate_energies(energies, ground, e0)
    per_n = calibrated[match.filter_index]
    errors = np.abs(per_n - true_energies)
    aligned = np.asarray(filters, dtype=np.float64)[match.filter_index] * match.signs[:, None]
    h_err = hamiltonian_error(aligned, per_n, basis, true_energies)
    out: Dict[str, Any] = {
        "median_overlap": float(np.median(match.overlaps)),
        "min_overlap": float(np.min(match.overlaps)),
        "overlaps": match.overlaps.tolist(),
        "filter_index": match.filter_index.tolist(),
        "signs": match.signs.tolist(),
        "ground_energy": e0,
        "energies_calibrated": calibrated.tolist(),
        "energies_per_n": per_n.tolist(),
        "energy_errors": errors.tolist(),
        "max_energy_error": float(errors.max()),
        "median_energy_error": float(np.median(errors)),
        "hamiltonian_rel_error": h_err["rel_fro"],
        "hamiltonian_spectral_error": h_err["spectral"],
    }
    if tau_hat is not None and tau_true is not None:
        out["tau_pearson"] = tau_pearson(tau_hat, tau_true)
    return out
