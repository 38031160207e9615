"""Strain figures (matplotlib, headless): curves over the cycle and the AHA bull's-eye.

Plain arrays in, a PNG out; nothing here computes strain (:mod:`monai_npc.cardiac.strain` does).
The bull's-eye follows the AHA layout seen from the apex: basal segments (1-6) on the outer ring,
mid (7-12) inside it, apical (13-16) innermost, the apex cap blank; segment 1 (anterior) at the
top, the septum (2-3, 8-9, 14) on the left, the inferior wall at the bottom.
"""

from __future__ import annotations

from pathlib import Path
from typing import Mapping, Optional, Sequence, Union

import numpy as np

from .figures import save_figure

__all__ = ["bullseye_axes", "strain_bullseye_figure", "strain_curves_figure"]

#: AHA level of each segment: (first segment, count, inner radius) of the bull's-eye rings
_RINGS = ((1, 6, 3.0), (7, 6, 2.0), (13, 4, 1.0))


def _segment_wedges():
    """``(segment, centre angle (radians, counterclockwise from the right), width, inner radius)`` of the 16 segments."""
    out = []
    for first, count, inner in _RINGS:
        width = 2 * np.pi / count
        for k in range(count):
            out.append((first + k, np.pi / 2 + k * width, width, inner))
    return out


def bullseye_axes(ax, values: Sequence[float], vmin: float, vmax: float, cmap: str = "RdBu_r", fmt: str = "{:.1f}"):
    """Draw the 16 segments of ``values`` ``(16,)`` (segment ``s`` at index ``s - 1``; NaN grey) on a polar
    axis ``ax``; returns the ``ScalarMappable`` for a colour bar."""
    import matplotlib as mpl

    vals = np.asarray(values, dtype=np.float64)
    if vals.shape != (16,):
        raise ValueError(f"values must hold 16 segments, got shape {vals.shape}.")
    norm = mpl.colors.Normalize(vmin=vmin, vmax=vmax)
    colormap = mpl.colormaps[cmap]
    for seg, centre, width, inner in _segment_wedges():
        v = vals[seg - 1]
        colour = (0.8, 0.8, 0.8, 1.0) if not np.isfinite(v) else colormap(norm(v))
        ax.bar(centre, 1.0, width=width, bottom=inner, color=colour, edgecolor="white", linewidth=1.5, align="center")
        text = "-" if not np.isfinite(v) else fmt.format(v)
        ax.text(centre, inner + 0.5, f"{seg}\n{text}", ha="center", va="center", fontsize=7)
    ax.set_ylim(0, 4.0)
    ax.set_axis_off()
    return mpl.cm.ScalarMappable(norm=norm, cmap=colormap)


def strain_bullseye_figure(values: Mapping[str, Sequence[float]], path: Union[str, Path], title: Optional[str] = None,
                           unit: str = "%") -> Path:
    """One bull's-eye per component: ``values`` ``{name: (16,)}`` (peak strain per segment); each colour scale is
    symmetric around 0. Written to ``path``."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = list(values)
    fig = plt.figure(figsize=(4.2 * len(names), 4.4))
    for i, name in enumerate(names):
        ax = fig.add_subplot(1, len(names), i + 1, projection="polar")
        vals = np.asarray(values[name], dtype=np.float64)
        top = float(np.nanmax(np.abs(vals))) if np.isfinite(vals).any() else 1.0
        top = top if top > 0 else 1.0
        mappable = bullseye_axes(ax, vals, -top, top)
        fig.colorbar(mappable, ax=ax, shrink=0.7, pad=0.08, label=f"{name} ({unit})")
        ax.set_title(f"peak {name}", fontsize=10)
    return save_figure(fig, path, title)


def strain_curves_figure(
    times: Sequence[float], curves: Mapping[str, Sequence[float]], path: Union[str, Path],
    segment_curves: Optional[Mapping[str, np.ndarray]] = None, reference_frame: int = 0, time_label: str = "frame",
    title: Optional[str] = None, unit: str = "%",
) -> Path:
    """Global strain over the cycle, one panel per component (``curves`` ``{name: (T,)}``), with the 16
    regional curves (``segment_curves`` ``{name: (T, 16)}``) faint behind, the reference frame and the
    peak marked (most negative circumferential, most positive otherwise). Written to ``path``."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    t = np.asarray(times, dtype=np.float64)
    names = list(curves)
    fig, axes = plt.subplots(1, len(names), figsize=(5.0 * len(names), 3.8), squeeze=False)
    level_colours = ("tab:blue", "tab:green", "tab:orange")
    for ax, name in zip(axes[0], names):
        y = np.asarray(curves[name], dtype=np.float64)
        if segment_curves is not None and name in segment_curves:
            seg = np.asarray(segment_curves[name], dtype=np.float64)
            for s in range(seg.shape[1]):
                colour = level_colours[0 if s < 6 else 1 if s < 12 else 2]
                ax.plot(t, seg[:, s], color=colour, alpha=0.3, linewidth=0.8)
            for colour, level in zip(level_colours, ("basal", "mid", "apical")):
                ax.plot([], [], color=colour, alpha=0.5, linewidth=0.8, label=f"{level} segments")
        ax.plot(t, y, color="k", linewidth=2.0, marker="o", markersize=3, label="global")
        if np.isfinite(y).any():
            i = int(np.nanargmin(y)) if name == "circumferential" else int(np.nanargmax(y))
            ax.plot(t[i], y[i], "r*", markersize=12, label=f"peak {y[i]:.1f} {unit}")
        ax.axvline(t[reference_frame], color="grey", linestyle="--", linewidth=1.0, label="reference frame")
        ax.axhline(0.0, color="grey", linewidth=0.5)
        ax.set_xlabel(time_label)
        ax.set_ylabel(f"{name} strain ({unit})")
        ax.legend(fontsize=7, loc="best")
    return save_figure(fig, path, title)
