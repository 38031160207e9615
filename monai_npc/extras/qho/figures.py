"""Figures of the QHO experiment (matplotlib, Agg backend, PNG).

Every function writes one PNG and returns its path. Inputs are NumPy arrays; energies in units
of ``hbar omega``, times in ``1 / omega``, positions in oscillator lengths.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Dict, Sequence, Union

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

__all__ = ["plot_filters", "plot_energy_ladder", "plot_tau", "plot_pairs"]

PathLike = Union[str, Path]
_TRUE = "tab:blue"
_LEARNED = "tab:orange"


def _save(fig: "plt.Figure", path: PathLike) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=80, bbox_inches="tight")
    plt.close(fig)
    return path


def plot_filters(
    x: np.ndarray,
    basis: np.ndarray,
    filters: np.ndarray,
    filter_index: Sequence[int],
    signs: Sequence[float],
    overlaps: Sequence[float],
    path: PathLike,
    title: str = "",
) -> Path:
    """Learned filters (orange dashed, sign-aligned) over the analytic eigenstates (blue), one panel per ``n``.

    Args:
        x: ``(N,)`` positions; basis: ``(M, N)`` analytic eigenstates; filters: ``(K, N)`` learned.
        filter_index, signs, overlaps: per-``n`` matching (:class:`~monai_npc.extras.qho.evaluate.Matching`).
    """
    m = basis.shape[0]
    cols = int(math.ceil(math.sqrt(m)))
    rows = int(math.ceil(m / cols))
    fig, axes = plt.subplots(rows, cols, figsize=(2.2 * cols, 1.6 * rows), sharex=True, squeeze=False)
    unit = filters / np.linalg.norm(filters, axis=1, keepdims=True)
    for n in range(rows * cols):
        ax = axes[n // cols][n % cols]
        if n >= m:
            ax.axis("off")
            continue
        ax.plot(x, basis[n], color=_TRUE, lw=1.6, label="analytic")
        ax.plot(x, signs[n] * unit[filter_index[n]], color=_LEARNED, lw=1.2, ls="--", label="learned")
        ax.set_title(f"n={n}  |<.|.>|={overlaps[n]:.4f}", fontsize=7)
        ax.tick_params(labelsize=6)
        ax.set_yticks([])
    axes[0][0].legend(fontsize=6, loc="upper left", frameon=False)
    if title:
        fig.suptitle(title, fontsize=9)
    fig.tight_layout()
    return _save(fig, path)


def plot_energy_ladder(runs: Sequence[Dict[str, object]], path: PathLike) -> Path:
    """Calibrated learned energies against ``E_n = n + 1/2``, one panel per run.

    Args:
        runs: dicts with ``tau_max`` (float), ``energies_per_n`` (``(M,)``, calibrated, per ``n``)
            and ``true_energies`` (``(M,)``); e.g. the ``metrics.json`` of ``monai-npc qho`` runs.
            The dashed vertical line marks ``E_n tau_max = 2 pi``, the branch boundary of the paper.
    """
    if not runs:
        raise ValueError("need at least one run to plot.")
    fig, axes = plt.subplots(1, len(runs), figsize=(3.6 * len(runs), 3.2), squeeze=False)
    for ax, run in zip(axes[0], runs):
        learned = np.asarray(run["energies_per_n"], dtype=np.float64)
        true = np.asarray(run["true_energies"], dtype=np.float64)
        n = np.arange(true.size)
        tau_max = float(run["tau_max"])  # type: ignore[arg-type]
        ax.plot(n, true, color=_TRUE, lw=1.2, label="analytic $n+1/2$")
        ax.plot(n, learned, "o", color=_LEARNED, ms=4, label="learned (calibrated)")
        cut = 2 * math.pi / tau_max - 0.5
        if cut < n[-1]:
            ax.axvline(cut, color="grey", ls="--", lw=0.8, label=r"$E_n\tau_{max}=2\pi$")
        err = float(np.max(np.abs(learned - true)))
        seed = run.get("config", {}).get("seed") if isinstance(run.get("config"), dict) else None  # type: ignore[union-attr]
        tag = f", seed {seed}" if seed is not None else ""
        ax.set_title(rf"$\tau_{{max}}$={tau_max:g}{tag}: max |$\Delta E$|={err:.3f}", fontsize=9)
        ax.set_xlabel("n")
        ax.set_ylabel(r"$E_n$ ($\hbar\omega$)")
        ax.legend(fontsize=7, frameon=False)
    fig.tight_layout()
    return _save(fig, path)


def plot_tau(tau: np.ndarray, tau_hat: np.ndarray, path: PathLike, title: str = "") -> Path:
    """Scatter of predicted against true held-out pair times, with the identity line."""
    fig, ax = plt.subplots(figsize=(3.4, 3.2))
    lo, hi = float(min(tau.min(), tau_hat.min())), float(max(tau.max(), tau_hat.max()))
    ax.plot([lo, hi], [lo, hi], color="grey", lw=0.8)
    ax.plot(tau, tau_hat, ".", ms=2, color=_LEARNED, alpha=0.6)
    r = float(np.corrcoef(tau, tau_hat)[0, 1])
    ax.set_title(f"{title}Pearson {r:.5f}", fontsize=9)
    ax.set_xlabel(r"$\tau$")
    ax.set_ylabel(r"$\hat\tau$")
    fig.tight_layout()
    return _save(fig, path)


def plot_pairs(
    x: np.ndarray,
    psi0: np.ndarray,
    psit: np.ndarray,
    recon: np.ndarray,
    tau: np.ndarray,
    tau_hat: np.ndarray,
    path: PathLike,
) -> Path:
    """Example pairs: ``Re``/``Im`` of ``Psi(0)``, ``Psi(tau)`` and the closed-form reconstruction.

    The reconstruction is shown after removing its per-pair global phase relative to ``Psi(tau)``
    (the gauge that the magnitude-NCC loss, and physics, do not see).

    Args:
        x: ``(N,)``; psi0, psit, recon: ``(P, 2, N)`` real/imaginary parts; tau, tau_hat: ``(P,)``.
    """
    p = psi0.shape[0]
    rc = recon[:, 0] + 1j * recon[:, 1]
    tc = psit[:, 0] + 1j * psit[:, 1]
    overlap = np.sum(np.conj(rc) * tc, axis=1, keepdims=True)
    rc = rc * np.exp(1j * np.angle(overlap))
    recon = np.stack([rc.real, rc.imag], 1)
    fig, axes = plt.subplots(p, 2, figsize=(7.0, 1.9 * p), sharex=True, squeeze=False)
    for i in range(p):
        for j, part in enumerate(("Re", "Im")):
            ax = axes[i][j]
            ax.plot(x, psi0[i, j], color="grey", lw=1.0, label=r"$\Psi(0)$")
            ax.plot(x, psit[i, j], color=_TRUE, lw=1.6, label=r"$\Psi(\tau)$")
            ax.plot(x, recon[i, j], color=_LEARNED, lw=1.1, ls="--", label=r"$\hat\Psi(\hat\tau)$ (global phase aligned)")
            ax.set_title(rf"{part}, $\tau$={tau[i]:.3f}, $\hat\tau$={tau_hat[i]:.3f}", fontsize=8)
            ax.tick_params(labelsize=6)
    axes[0][0].legend(fontsize=6, frameon=False, loc="upper left")
    axes[-1][0].set_xlabel("x")
    axes[-1][1].set_xlabel("x")
    fig.tight_layout()
    return _save(fig, path)
