"""Brain breadth figures: the registration timelapse (paper Fig. oasis_timelapse) and landmark overlays."""

from __future__ import annotations

from pathlib import Path
from typing import Dict, List, Optional, Sequence

import numpy as np
import torch

from monai_npc.functional.warp import warp_image
from monai_npc.viz.figures import deformed_grid_lines, save_figure

__all__ = ["timelapse_figure", "landmark_figure"]


def timelapse_figure(
    rows: Sequence[Dict[str, object]], path: str | Path, steps: Sequence[int] = (1, 8, 15), grid_spacing: int = 8
) -> Path:
    """Rows of moving, the warp after ODE steps ``steps`` (1-based) with the deformed grid, fixed.

    Each row is a dict with ``moving`` and ``fixed`` ``(H, W)``, ``ddfs`` (the field after every
    ODE step, each ``(2, H, W)`` in pixels, e.g. ``[d["ddf"][0] for d in diagnostics]``) and an
    optional ``title``.
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    cols = 2 + len(steps)
    fig, axes = plt.subplots(len(rows), cols, figsize=(2.1 * cols, 2.2 * len(rows)), squeeze=False)
    for r, row in enumerate(rows):
        moving = torch.as_tensor(np.asarray(row["moving"]), dtype=torch.float32)
        ddfs: List[torch.Tensor] = [torch.as_tensor(d, dtype=torch.float32) for d in row["ddfs"]]  # type: ignore[union-attr]
        h, w = moving.shape
        axes[r, 0].imshow(moving, cmap="gray", vmin=0, vmax=1)
        axes[r, -1].imshow(np.asarray(row["fixed"]), cmap="gray", vmin=0, vmax=1)
        for c, s in enumerate(steps, start=1):
            if not 1 <= s <= len(ddfs):
                raise ValueError(f"step {s} outside 1..{len(ddfs)} (the model integrates {len(ddfs)} steps).")
            d = ddfs[s - 1]
            warped = warp_image(moving[None, None], d[None], "bilinear", "border")[0, 0]
            ax = axes[r, c]
            ax.imshow(warped, cmap="gray", vmin=0, vmax=1)
            for ly, lx in deformed_grid_lines(d, grid_spacing):
                ax.plot(lx, ly, color="tab:orange", lw=0.45)
            ax.set_xlim(-0.5, w - 0.5)
            ax.set_ylim(h - 0.5, -0.5)
        if row.get("title"):
            axes[r, 0].set_ylabel(str(row["title"]), fontsize=8)
    for c, name in enumerate(["moving"] + [f"t = {s}" for s in steps] + ["fixed"]):
        axes[0, c].set_title(name, fontsize=9)
    for ax in axes.ravel():
        ax.set_xticks([])
        ax.set_yticks([])
    return save_figure(fig, path)


def landmark_figure(
    fixed: np.ndarray,
    curves: Dict[str, np.ndarray],
    path: str | Path,
    title: Optional[str] = None,
) -> Path:
    """Curves ``{name: (N, 2) points (row, col)}`` drawn over ``fixed`` ``(H, W)`` (same pixel grid)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(4.2, 4.2))
    ax.imshow(np.asarray(fixed), cmap="gray")
    colours = ["tab:cyan", "tab:red", "tab:orange", "tab:green"]
    for k, (name, pts) in enumerate(curves.items()):
        ax.scatter(pts[:, 1], pts[:, 0], s=1.0, color=colours[k % len(colours)], label=name)
    ax.legend(fontsize=7, loc="lower right", markerscale=5)
    ax.set_xticks([])
    ax.set_yticks([])
    if title:
        ax.set_title(title, fontsize=9)
    return save_figure(fig, path)
