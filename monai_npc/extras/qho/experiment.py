"""End-to-end QHO experiment: train, evaluate on held-out pairs, write metrics, arrays and figures."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any, Dict, Optional, Sequence, Union

import numpy as np
import torch

from .data import hermite_basis, oscillator_energies, position_grid, sample_pairs
from .evaluate import evaluate_spectrum
from .model import QHOPhaseCorrelator
from .train import QHOConfig, train_qho, validate_config

__all__ = ["predict", "evaluate_model", "run_qho"]

PathLike = Union[str, Path]

#: seed offset of the held-out evaluation pairs (never drawn during training)
EVAL_SEED_OFFSET = 7_777_777


def predict(model: QHOPhaseCorrelator, psi0: torch.Tensor, psit: torch.Tensor) -> Dict[str, np.ndarray]:
    """``tau_hat (B,)`` and ``recon (B, 2, N)`` of a trained model, as float64 NumPy arrays."""
    model.eval()
    with torch.no_grad():
        out = model(psi0, psit)
    return {"tau_hat": out.tau_hat.double().numpy(), "recon": out.recon.double().numpy()}


def evaluate_model(model: QHOPhaseCorrelator, cfg: QHOConfig, n_pairs: int = 2048) -> Dict[str, Any]:
    """Metrics of :func:`~monai_npc.extras.qho.evaluate.evaluate_spectrum` on ``n_pairs`` held-out pairs.

    The held-out pair times drive both ``tau_pearson`` and the ground-state calibration.
    Also returns ``_arrays`` (not JSON): filters, raw energies and the held-out batch with predictions.
    """
    if n_pairs < 2:
        raise ValueError(f"n_pairs must be >= 2, got {n_pairs}.")
    basis = hermite_basis(cfg.n_states, cfg.n_points, cfg.x_max)
    true_e = oscillator_energies(cfg.n_states)
    gen = torch.Generator().manual_seed(cfg.seed + EVAL_SEED_OFFSET)
    batch = sample_pairs(n_pairs, torch.from_numpy(basis), torch.from_numpy(true_e), cfg.tau_max, cfg.tau_min, gen)
    pred = predict(model, batch.psi0, batch.psit)
    filters = model.filters.detach().double().numpy()
    energies = model.energies.detach().double().numpy()
    tau = batch.tau.double().numpy()
    metrics = evaluate_spectrum(filters, energies, basis, true_e, tau, pred["tau_hat"], tau)
    metrics["true_energies"] = true_e.tolist()
    metrics["energies_raw"] = energies.tolist()
    metrics["tau_mae"] = float(np.mean(np.abs(pred["tau_hat"] - tau)))
    metrics["_arrays"] = {
        "filters": filters,
        "energies_raw": energies,
        "basis": basis,
        "psi0": batch.psi0.double().numpy(),
        "psit": batch.psit.double().numpy(),
        "tau": tau,
        **pred,
    }
    return metrics


def run_qho(
    cfg: QHOConfig,
    out_dir: Optional[PathLike] = None,
    progress: bool = False,
    compare: Sequence[PathLike] = (),
    figures: bool = True,
    n_eval_pairs: int = 2048,
) -> Dict[str, Any]:
    """Train, evaluate and (if ``out_dir``) write ``metrics.json``, ``filters.npy``, ``energies.npy`` and figures.

    Files: ``filters.npy`` ``(K, N)`` unit-normalised learned filters in model order ``k``;
    ``energies.npy`` ``(K,)`` calibrated ``E_k`` in the same order (``metrics["filter_index"][n]``
    is the filter matched to eigenstate ``n``); ``qho_filters.png``, ``qho_energy_ladder.png`` (this
    run, plus the runs in ``compare``: directories holding an earlier ``metrics.json``),
    ``qho_tau.png`` and ``qho_pairs.png``.

    Returns:
        The metrics (JSON-serialisable), including ``seconds`` (whole run) and ``train_seconds``.
    """
    validate_config(cfg)
    if n_eval_pairs < 2:
        raise ValueError(f"n_eval_pairs must be >= 2, got {n_eval_pairs}.")
    earlier = []
    for d in compare:
        path = Path(d) / "metrics.json"
        if not path.is_file():
            raise FileNotFoundError(f"--compare: no metrics.json in {d}")
        earlier.append(json.loads(path.read_text()))
    start = time.perf_counter()
    result = train_qho(cfg, progress=progress)
    metrics = evaluate_model(result.model, cfg, n_eval_pairs)
    arrays = metrics.pop("_arrays")
    metrics["train_seconds"] = result.seconds
    metrics["seconds"] = time.perf_counter() - start
    metrics["n_parameters"] = int(sum(p.numel() for p in result.model.parameters()))
    metrics["tau_max"] = cfg.tau_max
    metrics["config"] = cfg.to_dict()
    metrics["final_losses"] = result.history[-1] if result.history else {}
    metrics["torch_threads"] = torch.get_num_threads()
    if out_dir is None:
        return metrics
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    np.save(out / "filters.npy", arrays["filters"])
    np.save(out / "energies.npy", np.asarray(metrics["energies_calibrated"]))
    (out / "history.json").write_text(json.dumps(result.history))
    if figures:
        from . import figures as fig

        x = position_grid(cfg.n_points, cfg.x_max)
        fig.plot_filters(
            x,
            arrays["basis"],
            arrays["filters"],
            metrics["filter_index"],
            metrics["signs"],
            metrics["overlaps"],
            out / "qho_filters.png",
            title=f"learned filters vs Hermite functions, tau_max={cfg.tau_max:g}",
        )
        runs = sorted(earlier + [metrics], key=lambda m: (float(m["tau_max"]), int(m.get("config", {}).get("seed", 0))))
        fig.plot_energy_ladder(runs, out / "qho_energy_ladder.png")
        fig.plot_tau(arrays["tau"], arrays["tau_hat"], out / "qho_tau.png", title=f"tau_max={cfg.tau_max:g}: ")
        sel = np.argsort(arrays["tau"])[np.linspace(0, arrays["tau"].size - 1, 3).astype(int)]
        fig.plot_pairs(
            x, arrays["psi0"][sel], arrays["psit"][sel], arrays["recon"][sel], arrays["tau"][sel],
            arrays["tau_hat"][sel], out / "qho_pairs.png",
        )
    (out / "metrics.json").write_text(json.dumps(metrics, indent=2))
    return metrics
