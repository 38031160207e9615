"""Quantum harmonic oscillator extra: generator, model, losses, evaluation, short training and CLI."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from scipy.linalg import expm

from monai_npc.extras.qho.data import (
    evolve,
    hermite_basis,
    oscillator_energies,
    position_grid,
    sample_pairs,
    truncated_hamiltonian,
)
from monai_npc.extras.qho.evaluate import (
    calibrate_energies,
    evaluate_spectrum,
    ground_state_energy,
    match_filters,
    tau_pearson,
)
from monai_npc.extras.qho.losses import diversity_loss, magnitude_ncc_loss, span_loss
from monai_npc.extras.qho.model import QHOPhaseCorrelator, project, reconstruct
from monai_npc.extras.qho.train import QHOConfig, build_model, train_qho, validate_config

BASIS = hermite_basis()
ENERGIES = oscillator_energies()


def _complex(x: torch.Tensor) -> np.ndarray:
    x = x.double().numpy()
    return x[:, 0] + 1j * x[:, 1]


def test_hermite_basis_orthonormal_and_grid():
    x = position_grid()
    assert x.shape == (128,) and x[0] == -8.0 and x[-1] == 8.0
    assert BASIS.shape == (16, 128)
    assert np.abs(BASIS @ BASIS.T - np.eye(16)).max() < 1e-10
    np.testing.assert_allclose(ENERGIES, np.arange(16) + 0.5)
    # psi_n has n nodes and parity (-1)^n
    assert np.allclose(BASIS[3], -BASIS[3][::-1], atol=1e-12)
    assert np.allclose(BASIS[4], BASIS[4][::-1], atol=1e-12)


def test_generator_is_unitary_and_matches_matrix_exponential():
    gen = torch.Generator().manual_seed(3)
    batch = sample_pairs(8, torch.from_numpy(BASIS), torch.from_numpy(ENERGIES), 1.7, generator=gen, dtype=torch.float64)
    psi0, psit, tau = _complex(batch.psi0), _complex(batch.psit), batch.tau.numpy()
    assert np.all((tau >= 0.05) & (tau <= 1.7))
    np.testing.assert_allclose(np.linalg.norm(psi0, axis=1), 1.0, atol=1e-12)
    np.testing.assert_allclose(np.linalg.norm(psit, axis=1), 1.0, atol=1e-12)
    h = truncated_hamiltonian(BASIS, ENERGIES)
    assert np.abs(h - h.T).max() < 1e-12
    for i in range(len(tau)):
        u = expm(-1j * h * tau[i])
        assert np.abs(u.conj().T @ u - np.eye(128)).max() < 1e-10
        assert np.abs(u @ psi0[i] - psit[i]).max() < 1e-10
    # evolve() is the same operator, also off the span
    rng = np.random.default_rng(0)
    state = rng.normal(size=128) + 1j * rng.normal(size=128)
    np.testing.assert_allclose(evolve(state, 0.37, BASIS, ENERGIES), expm(-0.37j * h) @ state, atol=1e-10)


def test_sampler_seeded_and_float32():
    a = sample_pairs(4, torch.from_numpy(BASIS), torch.from_numpy(ENERGIES), 0.6, generator=torch.Generator().manual_seed(1))
    b = sample_pairs(4, torch.from_numpy(BASIS), torch.from_numpy(ENERGIES), 0.6, generator=torch.Generator().manual_seed(1))
    assert a.psi0.dtype == torch.float32 and a.psi0.shape == (4, 2, 128) and a.coeffs.shape == (4, 2, 16)
    for x, y in zip(a, b):
        assert torch.equal(x, y)


def test_closed_form_reconstruction_is_exact_on_eigenstates():
    batch = sample_pairs(16, torch.from_numpy(BASIS), torch.from_numpy(ENERGIES), 0.6,
                         generator=torch.Generator().manual_seed(2), dtype=torch.float64)
    filters = torch.from_numpy(BASIS)
    coeffs0 = project(filters, batch.psi0)
    torch.testing.assert_close(coeffs0, batch.coeffs, atol=1e-10, rtol=0)
    recon = reconstruct(coeffs0, torch.from_numpy(ENERGIES), batch.tau, filters)
    assert (recon - batch.psit).abs().max() < 1e-10
    # a gauge offset of the rates is a per-pair global phase: magnitude-NCC does not see it
    shifted = reconstruct(coeffs0, torch.from_numpy(ENERGIES) + 2.3, batch.tau, filters)
    assert float(magnitude_ncc_loss(shifted, batch.psit)) < 1e-8
    assert float(magnitude_ncc_loss(recon[torch.randperm(16)], batch.psit)) > 0.1


def test_model_parameters_shapes_and_permutation_invariance():
    model = QHOPhaseCorrelator(tau_max=0.6, generator=torch.Generator().manual_seed(0))
    assert sum(p.numel() for p in model.parameters()) == 2048 + 16 + 3329
    assert sum(p.numel() for p in model.readout.parameters()) == 3329
    batch = sample_pairs(5, torch.from_numpy(BASIS), torch.from_numpy(ENERGIES), 0.6, generator=torch.Generator().manual_seed(0))
    out = model(batch.psi0, batch.psit)
    assert out.tau_hat.shape == (5,) and out.recon.shape == (5, 2, 128) and out.polar.shape == (5, 3, 16)
    tau_hat = out.tau_hat.detach()
    assert float(tau_hat.min()) >= 0.05 and float(tau_hat.max()) <= 0.6
    torch.testing.assert_close(out.filters.norm(dim=1), torch.ones(16))
    torch.testing.assert_close(model.energies, model.phase_angles / 0.25)
    assert float(model.energies.detach().max()) <= 1e-3  # all rates start (almost) equal
    with pytest.raises(ValueError):
        model(batch.psi0, batch.psit[:, :1])
    # permuting the filters (with their rates) leaves tau_hat and the reconstruction unchanged
    perm = torch.randperm(16)
    with torch.no_grad():
        model.filter_weight.copy_(model.filter_weight[perm])
        model.phase_angles.copy_(model.phase_angles[perm])
    out2 = model(batch.psi0, batch.psit)
    torch.testing.assert_close(out2.tau_hat, out.tau_hat, atol=1e-6, rtol=0)
    torch.testing.assert_close(out2.recon, out.recon, atol=1e-6, rtol=0)


def test_losses_vanish_on_the_analytic_solution():
    f = torch.from_numpy(BASIS)
    assert float(diversity_loss(f)) < 1e-20
    assert float(diversity_loss(torch.stack([f[0], f[0]]))) == pytest.approx(2.0)
    batch = sample_pairs(8, f, torch.from_numpy(ENERGIES), 0.6, generator=torch.Generator().manual_seed(4), dtype=torch.float64)
    assert abs(float(span_loss(batch.psi0, project(f, batch.psi0)))) < 1e-12
    assert float(span_loss(batch.psi0, project(f[:8], batch.psi0))) == pytest.approx(0.5, abs=0.25)
    phase = torch.exp(1j * torch.rand(8, dtype=torch.float64) * 6.28)[:, None]
    z = _complex(batch.psit)
    rotated = torch.from_numpy(np.stack([(z * phase.numpy()).real, (z * phase.numpy()).imag], 1))
    assert float(magnitude_ncc_loss(rotated, batch.psit)) < 1e-8


def test_evaluation_perfect_on_analytic_spectrum():
    rng = np.random.default_rng(0)
    tau = rng.uniform(0.05, 0.6, 256)
    # permuted, sign-flipped eigenstates and gauge-shifted energies: still perfect after matching + calibration
    perm = rng.permutation(16)
    signs = rng.choice([-1.0, 1.0], 16)
    filters = BASIS[perm] * signs[:, None]
    learned = ENERGIES[perm] + 4.2
    m = evaluate_spectrum(filters, learned, BASIS, ENERGIES, tau, tau_hat=tau, tau_true=tau)
    assert m["median_overlap"] == pytest.approx(1.0, abs=1e-10)
    assert m["min_overlap"] == pytest.approx(1.0, abs=1e-10)
    assert m["max_energy_error"] < 1e-9
    assert m["ground_energy"] == pytest.approx(0.5, abs=1e-10)
    assert m["tau_pearson"] == pytest.approx(1.0, abs=1e-12)
    assert m["hamiltonian_rel_error"] < 1e-9
    np.testing.assert_array_equal(np.asarray(m["filter_index"]), np.argsort(perm))
    np.testing.assert_array_equal(np.asarray(m["signs"]), signs[np.argsort(perm)])
    json.dumps(m)


def test_evaluation_detects_errors():
    rng = np.random.default_rng(1)
    tau = rng.uniform(0.05, 0.6, 128)
    # rotate psi_2 and psi_3 into each other by 0.1 rad: overlap cos(0.1)
    f = BASIS.copy()
    c, s = np.cos(0.1), np.sin(0.1)
    f[2], f[3] = c * BASIS[2] + s * BASIS[3], -s * BASIS[2] + c * BASIS[3]
    learned = ENERGIES.copy()
    learned[7] += 0.3
    m = evaluate_spectrum(f, learned, BASIS, ENERGIES, tau, tau_hat=tau + rng.normal(0, 0.01, 128), tau_true=tau)
    assert m["min_overlap"] == pytest.approx(np.cos(0.1), abs=1e-10)
    assert m["max_energy_error"] == pytest.approx(0.3, abs=1e-6)
    assert 0.99 < m["tau_pearson"] < 1.0
    assert m["hamiltonian_rel_error"] > 1e-3
    # the ground-state anchor is the first moment <H> for a mixed state
    mixed = (BASIS[0] + 0.1 * BASIS[1]) / np.sqrt(1.01)
    assert ground_state_energy(mixed, np.linspace(0.01, 0.05, 8), BASIS, ENERGIES) == pytest.approx((0.5 + 0.015) / 1.01, abs=1e-3)
    np.testing.assert_allclose(calibrate_energies(np.array([3.0, 4.0]), 0, 0.5), [0.5, 1.5])
    assert np.isnan(tau_pearson(np.ones(3), np.arange(3.0)))
    with pytest.raises(ValueError):
        match_filters(BASIS[:4], BASIS)


def test_short_training_improves_overlaps_and_is_seeded():
    cfg = QHOConfig(tau_max=0.6, steps=200, seed=0, log_every=50)
    before = match_filters(build_model(cfg).filters.detach().numpy(), BASIS).overlaps
    result = train_qho(cfg)
    after = match_filters(result.model.filters.detach().numpy(), BASIS).overlaps
    assert np.median(after) > np.median(before) + 0.1
    assert after.mean() > before.mean() + 0.1
    assert result.history[0]["total"] > result.history[-1]["total"]
    again = train_qho(QHOConfig(tau_max=0.6, steps=20, seed=0))
    again2 = train_qho(QHOConfig(tau_max=0.6, steps=20, seed=0))
    assert torch.equal(again.model.filter_weight, again2.model.filter_weight)


@pytest.mark.parametrize(
    "kwargs",
    [
        dict(tau_max=0.05), dict(tau_max=0.01), dict(steps=0), dict(batch_size=0), dict(lr=0.0),
        dict(tau_max=float("nan")), dict(threads=0), dict(rate_time=0.0), dict(filter_init_norm=-1.0),
    ],
)
def test_bad_config_raises(kwargs):
    with pytest.raises(ValueError):
        validate_config(QHOConfig(**kwargs))


def test_cli_writes_outputs(tmp_path):
    from monai_npc.cli.main import main

    out = tmp_path / "qho"
    rc = main(["qho", "--tau-max", "0.6", "--steps", "30", "--seed", "0", "--out", str(out), "--no-progress", "--eval-pairs", "64"])
    assert rc == 0
    metrics = json.loads((out / "metrics.json").read_text())
    for key in ("median_overlap", "min_overlap", "max_energy_error", "tau_pearson", "seconds", "n_parameters"):
        assert key in metrics
    assert metrics["n_parameters"] == 5393
    assert 0.0 <= metrics["min_overlap"] <= metrics["median_overlap"] <= 1.0
    assert np.load(out / "filters.npy").shape == (16, 128)
    assert np.load(out / "energies.npy").shape == (16,)
    for name in ("qho_filters.png", "qho_energy_ladder.png", "qho_tau.png", "qho_pairs.png"):
        assert (out / name).stat().st_size > 1000
    # a later run can draw the earlier ladder next to its own
    rc = main(["qho", "--tau-max", "1.7", "--steps", "5", "--out", str(tmp_path / "b"), "--no-progress",
               "--eval-pairs", "16", "--compare", str(out)])
    assert rc == 0
    assert main(["qho", "--tau-max", "0.05", "--steps", "5", "--out", str(tmp_path / "c"), "--no-progress"]) == 1
    assert main(["qho", "--steps", "0", "--out", str(tmp_path / "d"), "--no-progress"]) == 1
