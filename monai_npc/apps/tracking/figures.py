"""Figures of cine tracking and cardiac function (matplotlib, imported on call).

- :func:`function_figure`: the LV/RV volume curves with ED and ES marked, above a strip of frames
  with the tracked contours.
- :func:`bland_altman_figure`: Bland-Altman panels (difference against mean, bias and limits of
  agreement) of measured against reference values, one panel per quantity.
"""

from __future__ import annotations

from pathlib import Path
from typing import Mapping, Optional, Sequence, Union

import numpy as np

from monai_npc.viz.figures import save_figure

from monai_npc.cardiac.function import ACDC_STRUCTURES, agreement

__all__ = ["function_figure", "bland_altman_figure"]

#: colour per structure (curves and contours; contours drawn in this order, the LV's last, over the myocardium's)
_COLOURS = {"rv": "tab:blue", "myo": "tab:green", "lv": "tab:red"}


def _heart_box(labels: np.ndarray, margin: int = 12) -> tuple:
    """Row and column slices of the labelled region of ``labels`` ``(T, H, W)`` over all frames, plus ``margin`` pixels."""
    rows, cols = np.nonzero((labels > 0).any(0))
    if rows.size == 0:
        return slice(None), slice(None)
    h, w = labels.shape[1:]
    return (slice(max(rows.min() - margin, 0), min(rows.max() + margin + 1, h)),
            slice(max(cols.min() - margin, 0), min(cols.max() + margin + 1, w)))


def function_figure(
    curves: Mapping[str, Sequence[float]],
    ed: int,
    es: int,
    images: np.ndarray,
    labels: np.ndarray,
    path: Union[str, Path],
    title: Optional[str] = None,
    max_frames: int = 8,
    slice_index: Optional[int] = None,
    structures: Mapping[str, int] = ACDC_STRUCTURES,
) -> Path:
    """Write the volume curves and a strip of frames with contours as a PNG.

    Args:
        curves: ``{"lv": (T,), "rv": (T,)[, "myo": (T,)]}`` volumes in mL.
        ed, es: 0-based frames marked on the curve (and always shown in the strip).
        images: ``(T, Z, H, W)`` cine intensities; labels: ``(T, Z, H, W)`` integer labels.
        path: PNG file; folders are created.
        max_frames: frames in the strip (evenly spaced, ED and ES included).
        slice_index: slice shown (default: the slice with the largest LV cavity at ED).
        structures: the value of each structure in ``labels`` (default ACDC's: 1 RV, 2 myocardium, 3 LV).
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    n = images.shape[0]
    if slice_index is None:
        slice_index = int(np.argmax((labels[ed] == structures.get("lv", 3)).reshape(labels.shape[1], -1).sum(1)))
    shown = sorted(set(np.linspace(0, n - 1, min(max_frames, n)).round().astype(int).tolist()) | {ed, es})
    fig = plt.figure(figsize=(max(1.6 * len(shown), 8.0), 6.0))
    grid = fig.add_gridspec(2, len(shown), height_ratios=[1.2, 1.0])
    ax = fig.add_subplot(grid[0, :])
    frames = np.arange(n)
    for name in ("lv", "rv", "myo"):
        colour = _COLOURS[name]
        if name in curves:
            ax.plot(frames, np.asarray(curves[name]), "o-", color=colour, label="LV myocardium" if name == "myo" else f"{name.upper()} cavity")
    ax.axvline(ed, color="k", ls="--", lw=1)
    ax.axvline(es, color="k", ls=":", lw=1)
    ax.text(ed, ax.get_ylim()[1], " ED", va="top")
    ax.text(es, ax.get_ylim()[1], " ES", va="top")
    ax.set_xlabel("frame (0-based)")
    ax.set_ylabel("volume (mL)")
    ax.legend(loc="best", fontsize=8)
    rows, cols = _heart_box(labels[:, slice_index])
    for k, t in enumerate(shown):
        a = fig.add_subplot(grid[1, k])
        a.imshow(images[t, slice_index][rows, cols], cmap="gray")
        for name, colour in _COLOURS.items():
            mask = labels[t, slice_index][rows, cols] == structures.get(name)
            if mask.any():
                a.contour(mask.astype(float), levels=[0.5], colors=colour, linewidths=0.8)
        a.set_title(f"{t}" + (" ED" if t == ed else " ES" if t == es else ""), fontsize=9)
        a.axis("off")
    return save_figure(fig, path, title)


def bland_altman_figure(
    panels: Mapping[str, Mapping[str, Sequence[float]]],
    reference: Mapping[str, Sequence[float]],
    path: Union[str, Path],
    units: str = "%",
    title: Optional[str] = None,
) -> Path:
    """Bland-Altman plots: one column per quantity, one colour per method.

    Args:
        panels: ``{quantity: {method: (N,) measured values}}``.
        reference: ``{quantity: (N,) reference values}`` (e.g. from expert labels).
        path: PNG file.
        units: axis units.
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(panels), figsize=(5.0 * len(panels), 4.2), squeeze=False)
    colours = ["tab:red", "tab:blue", "tab:green", "tab:purple"]
    for ax, (quantity, methods) in zip(axes[0], panels.items()):
        ref = np.asarray(reference[quantity], dtype=np.float64)
        for colour, (method, values) in zip(colours, methods.items()):
            m = np.asarray(values, dtype=np.float64)
            stats = agreement(m, ref)
            ax.scatter((m + ref) / 2, m - ref, s=12, color=colour, alpha=0.7,
                       label=f"{method}: bias {stats['bias']:+.1f}, LoA [{stats['loa_low']:.1f}, {stats['loa_high']:.1f}]")
            ax.axhline(stats["bias"], color=colour, lw=1)
            for lim in (stats["loa_low"], stats["loa_high"]):
                ax.axhline(lim, color=colour, lw=0.8, ls="--")
        ax.axhline(0, color="k", lw=0.6)
        ax.set_title(quantity)
        ax.set_xlabel(f"mean of method and reference ({units})")
        ax.set_ylabel(f"method - reference ({units})")
        ax.legend(fontsize=7, loc="lower left")
    return save_figure(fig, path, title)
