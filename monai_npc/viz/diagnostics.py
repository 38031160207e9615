"""Diagnostic figures of a trained NPC model: sorted per-pair residuals (paper Figs. 3, 5) and filter quads (Fig. 6)."""

from __future__ import annotations

from pathlib import Path
from typing import Dict, List, Optional, Sequence

import numpy as np
import torch

from .figures import save_figure

__all__ = ["per_pair_residual_stats", "residual_per_pair_figure", "filter_quads_figure"]


def per_pair_residual_stats(step: Dict[str, torch.Tensor]) -> Dict[str, np.ndarray]:
    """Per-pair mean normalised residual and selection frequency of one ODE step's diagnostics.

    Returns ``residual`` ``(C,)`` (mean of ``r_bar^2`` over batch and grid) and ``selected``
    ``(C,)`` (mean of the mask over batch and grid, in ``[0, 1]``).
    """
    res = step["residual"].float()
    mask = step["mask"].float()
    dims = [0] + list(range(2, res.dim()))
    return {"residual": res.mean(dims).cpu().numpy(), "selected": mask.mean(dims).cpu().numpy()}


def residual_per_pair_figure(
    diagnostics: Sequence[Dict[str, torch.Tensor]], top_k: int, path: str | Path, steps: Optional[Sequence[int]] = None, title: Optional[str] = None
) -> Path:
    """Sorted per-pair residuals at the first, middle and last ODE step.

    Black curve: per-pair mean ``r_bar^2`` sorted ascending; blue bars: the ``top_k`` pairs most
    often selected by the mask at that step; red dashed line: the ``K`` cutoff. Each panel has its
    own y scale.
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    n = len(diagnostics)
    if n == 0:
        raise ValueError("residual_per_pair_figure: no diagnostics (run register(..., return_diagnostics=True)).")
    steps = list(steps) if steps is not None else sorted({0, (n - 1) // 2, n - 1})
    fig, axes = plt.subplots(1, len(steps), figsize=(4.2 * len(steps), 3.2), squeeze=False)
    for ax, s in zip(axes[0], steps):
        stats = per_pair_residual_stats(diagnostics[s])
        order = np.argsort(stats["residual"])
        res = stats["residual"][order]
        chosen = set(np.argsort(-stats["selected"])[:top_k].tolist())
        x = np.arange(len(res))
        active = np.array([k in chosen for k in order])
        ax.bar(x[active], res[active], width=1.0, color="tab:blue", alpha=0.35, label=f"{top_k} most selected")
        ax.plot(x, res, color="k", lw=1.2, label=r"mean $\bar r_k^2$ (sorted)")
        ax.axvline(top_k - 0.5, color="tab:red", ls="--", lw=1, label=f"K = {top_k}")
        ax.set_title(f"ODE step {s + 1} / {n}")
        ax.set_xlabel("filter pair (sorted)")
    axes[0][0].set_ylabel(r"$\bar r_k^2$")
    axes[0][0].legend(fontsize=7, loc="upper left")
    return save_figure(fig, path, title)


def filter_quads_figure(
    psi: torch.Tensor, phi: torch.Tensor, path: str | Path, pairs: Optional[Sequence[int]] = None, columns: int = 8, title: Optional[str] = None
) -> Path:
    """Filter pairs as 2 x 2 quads: top row the moving pair ``psi_k``, bottom row the fixed pair ``phi_k``.

    ``psi``, ``phi``: ``(C, 2, k, k)`` banks (e.g. ``net.ode.stages[0].filters.psi``). ``pairs``
    selects which pairs to show (default: the first 32).
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    psi = psi.detach().float().cpu().numpy()
    phi = phi.detach().float().cpu().numpy()
    pairs: List[int] = list(pairs) if pairs is not None else list(range(min(32, psi.shape[0])))
    rows = (len(pairs) + columns - 1) // columns
    fig = plt.figure(figsize=(1.6 * columns, 1.6 * rows))
    outer = fig.add_gridspec(rows, columns, wspace=0.15, hspace=0.25)
    for i, k in enumerate(pairs):
        inner = outer[i // columns, i % columns].subgridspec(2, 2, wspace=0.03, hspace=0.03)
        quad = [psi[k, 0], psi[k, 1], phi[k, 0], phi[k, 1]]
        lim = max(float(np.abs(q).max()) for q in quad) or 1.0
        for j, q in enumerate(quad):
            ax = fig.add_subplot(inner[j // 2, j % 2])
            ax.imshow(q, cmap="RdBu_r", vmin=-lim, vmax=lim)
            ax.set_xticks([])
            ax.set_yticks([])
            if j == 0:
                ax.set_title(f"{k}", fontsize=7, loc="left")
    return save_figure(fig, path, title, tight=False)
