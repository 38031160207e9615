"""Registration figures like the paper's registration-examples figure."""

from __future__ import annotations

from pathlib import Path
from typing import List, Optional, Sequence, Tuple

import numpy as np

__all__ = ["deformed_grid_lines", "registration_panel", "save_figure"]


def _np(x) -> np.ndarray:
    if hasattr(x, "detach"):
        x = x.detach().cpu().numpy()
    return np.asarray(x, dtype=np.float32)


def save_figure(fig, path: str | Path, title: Optional[str] = None, tight: bool = True) -> Path:
    """Add ``title``, lay out, write ``fig`` as a PNG at ``path`` (folders created) and close it."""
    import matplotlib.pyplot as plt

    if title:
        fig.suptitle(title)
    if tight:
        fig.tight_layout()
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110, bbox_inches=None if tight else "tight")
    plt.close(fig)
    return path


def deformed_grid_lines(ddf, spacing: int = 8) -> List[Tuple[np.ndarray, np.ndarray]]:
    """Polylines ``(rows, cols)`` of a regular grid moved by ``x -> x + ddf(x)``; ``ddf`` ``(2, H, W)`` in voxels."""
    d = _np(ddf)
    h, w = d.shape[1:]
    rows, cols = np.meshgrid(np.arange(h), np.arange(w), indexing="ij")
    r, c = rows + d[0], cols + d[1]
    lines = [(r[i, :], c[i, :]) for i in range(0, h, spacing)]
    lines += [(r[:, j], c[:, j]) for j in range(0, w, spacing)]
    return lines


def registration_panel(
    moving,
    fixed,
    warped,
    ddf,
    path: str | Path,
    title: Optional[str] = None,
    labels: Optional[Sequence] = None,
    captions: Optional[Sequence[str]] = None,
) -> Path:
    """Save a 5-panel PNG: moving, fixed, warped, warped - fixed, deformed grid over the warped image.

    Args:
        moving, fixed, warped: ``(H, W)`` images (tensors or arrays).
        ddf: ``(2, H, W)`` displacement in voxels (MONAI ``Warp`` convention).
        path: output PNG.
        title: figure title.
        labels: optional ``(moving_label, fixed_label, warped_label)`` drawn as contours.
        captions: optional text under each of the 5 panels (e.g. NCC or Dice).
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    m, f, wp = _np(moving), _np(fixed), _np(warped)
    diff = wp - f
    lim = float(np.abs(diff).max()) or 1.0
    fig, axes = plt.subplots(1, 5, figsize=(15, 3.4))
    names = ["moving", "fixed", "warped", "warped - fixed", "deformation"]
    for ax, img, name in zip(axes[:3], (m, f, wp), names):
        ax.imshow(img, cmap="gray")
    axes[3].imshow(diff, cmap="seismic", vmin=-lim, vmax=lim)
    axes[4].imshow(wp, cmap="gray", alpha=0.5)
    for r, c in deformed_grid_lines(ddf, max(4, m.shape[0] // 16)):
        axes[4].plot(c, r, color="tab:orange", lw=0.6)
    axes[4].set_xlim(-0.5, m.shape[1] - 0.5)
    axes[4].set_ylim(m.shape[0] - 0.5, -0.5)
    if labels is not None:
        for ax, lab in zip(axes[:3], labels):
            lab = _np(lab)
            for v in np.unique(lab)[1:]:
                ax.contour(lab == v, levels=[0.5], linewidths=0.7, colors=[plt.cm.tab10(int(v) % 10)])
    for i, (ax, name) in enumerate(zip(axes, names)):
        ax.set_title(name)
        ax.set_xticks([])
        ax.set_yticks([])
        if captions is not None and i < len(captions) and captions[i]:
            ax.set_xlabel(captions[i])
    return save_figure(fig, path, title)
