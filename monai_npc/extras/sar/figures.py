"""SAR figures: the paper's moving / fixed / before / ours / phase-correlation panel, and the filter quads."""

from __future__ import annotations

from pathlib import Path
from typing import Dict, Optional, Sequence

import numpy as np
import torch

from monai_npc.functional.warp import warp_image
from monai_npc.viz.figures import save_figure

__all__ = ["overlay", "sar_panel"]


def overlay(warped: np.ndarray, fixed: np.ndarray) -> np.ndarray:
    """Red = fixed, green/blue = warped moving (``(H, W)`` in ``[0, 1]``): aligned structures grey, misaligned red / cyan."""
    w, f = np.clip(np.asarray(warped), 0, 1), np.clip(np.asarray(fixed), 0, 1)
    return np.stack([f, w, w], -1)


def sar_panel(
    rows: Sequence[Dict[str, object]], path: str | Path, title: Optional[str] = None
) -> Path:
    """One row per pair: moving, fixed, then before / ours (NPC) / phase correlation as red-cyan overlays with NCC under each.

    Each row: ``moving``, ``fixed`` ``(H, W)`` preprocessed images in ``[0, 1]``; ``ddf`` a dict
    ``{"none", "npc", "phase_correlation"}`` of ``(2, H, W)`` fields (pixels); ``ncc`` the same keys
    with floats; optional ``label`` (row title).
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    methods = [("none", "before"), ("npc", "ours (NPC)"), ("phase_correlation", "phase corr.")]
    fig, axes = plt.subplots(len(rows), 5, figsize=(11.5, 2.45 * len(rows)), squeeze=False)
    for r, row in enumerate(rows):
        m = torch.as_tensor(np.asarray(row["moving"]), dtype=torch.float32)
        f = np.asarray(row["fixed"])
        axes[r, 0].imshow(m.numpy(), cmap="gray", vmin=0, vmax=1)
        axes[r, 1].imshow(f, cmap="gray", vmin=0, vmax=1)
        for c, (key, name) in enumerate(methods, start=2):
            ddf = torch.as_tensor(np.asarray(row["ddf"][key]), dtype=torch.float32)  # type: ignore[index]
            warped = warp_image(m[None, None], ddf[None], "bilinear", "border")[0, 0].numpy()
            axes[r, c].imshow(overlay(warped, f))
            axes[r, c].set_xlabel(f"NCC = {row['ncc'][key]:.3f}", fontsize=9)  # type: ignore[index]
            if r == 0:
                axes[r, c].set_title(name, fontsize=10)
        if r == 0:
            axes[r, 0].set_title("moving", fontsize=10)
            axes[r, 1].set_title("fixed", fontsize=10)
        if row.get("label"):
            axes[r, 0].set_ylabel(str(row["label"]), fontsize=8)
    for ax in axes.ravel():
        ax.set_xticks([])
        ax.set_yticks([])
    return save_figure(fig, path, title)
