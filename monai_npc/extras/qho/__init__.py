"""Quantum harmonic oscillator: recover eigenstates and energies of an unknown Hamiltonian from wavefunction pairs.

Built on the core primitives (:func:`~monai_npc.functional.filter_pairs.unit_normalize_filters`,
:func:`~monai_npc.functional.interaction.pair_interaction`, :func:`~monai_npc.functional.interaction.polar_features`,
:func:`~monai_npc.functional.interaction.pair_residual`). See ``docs/qho.md``.

Modules: ``data`` (Hermite basis, exact pair generator), ``model`` (filters, rates, readout,
closed-form reconstruction), ``losses``, ``train`` (seeded loop), ``evaluate`` (assignment, energy
calibration, metrics), ``figures`` (matplotlib, imported lazily) and ``experiment`` (end to end).
"""

from .data import QHOBatch, evolve, hermite_basis, oscillator_energies, position_grid, sample_pairs, truncated_hamiltonian
from .evaluate import calibrate_energies, evaluate_spectrum, ground_state_energy, match_filters, tau_pearson
from .experiment import evaluate_model, run_qho
from .losses import diversity_loss, magnitude_ncc_loss, qho_loss, residual_loss, span_loss
from .model import QHOPhaseCorrelator
from .train import QHOConfig, train_qho

__all__ = [
    "QHOBatch",
    "evolve",
    "hermite_basis",
    "oscillator_energies",
    "position_grid",
    "sample_pairs",
    "truncated_hamiltonian",
    "calibrate_energies",
    "evaluate_spectrum",
    "ground_state_energy",
    "match_filters",
    "tau_pearson",
    "evaluate_model",
    "run_qho",
    "diversity_loss",
    "magnitude_ncc_loss",
    "qho_loss",
    "residual_loss",
    "span_loss",
    "QHOPhaseCorrelator",
    "QHOConfig",
    "train_qho",
]
