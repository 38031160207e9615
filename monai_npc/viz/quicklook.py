"""A registration overview PNG drawn with PIL: the ``overview.png`` of ``monai-npc register``.

The same five panels as :func:`~monai_npc.viz.figures.registration_panel` (moving, fixed, warped,
warped - fixed, deformed grid), and for a heart window a sixth (the window outlined on the whole
fixed slice), drawn without matplotlib, whose import and rendering would otherwise be a large
part of a single ``register`` call from the shell (docs/design_notes.md, "viz/quicklook.py").
"""

from __future__ import annotations

from pathlib import Path
from typing import Optional, Sequence, Tuple

import numpy as np

from .figures import _np, deformed_grid_lines

__all__ = ["registration_overview"]

#: label contour colours (matplotlib's tab10), label ``v`` gets ``_COLOURS[v % 10]``
_COLOURS = [(31, 119, 180), (255, 127, 14), (44, 160, 44), (214, 39, 40), (148, 103, 189),
            (140, 86, 75), (227, 119, 194), (127, 127, 127), (188, 189, 34), (23, 190, 207)]


def _gray(img: np.ndarray) -> np.ndarray:
    lo, hi = float(img.min()), float(img.max())
    g = (img - lo) / (hi - lo) if hi > lo else np.zeros_like(img)
    return np.repeat((g * 255).astype(np.uint8)[..., None], 3, -1)


def _seismic(diff: np.ndarray) -> np.ndarray:
    """Blue (negative) - white - red (positive), symmetric about 0."""
    lim = float(np.abs(diff).max()) or 1.0
    t = np.clip(diff / lim, -1, 1)[..., None]
    white, red, blue = np.array([255, 255, 255.0]), np.array([178, 24, 43.0]), np.array([33, 102, 172.0])
    rgb = np.where(t >= 0, white + t * (red - white), white - t * (blue - white))
    return rgb.astype(np.uint8)


def _contours(rgb: np.ndarray, label: np.ndarray) -> None:
    """Colour the boundary pixels of each label value in place."""
    lab = np.rint(label).astype(np.int64)
    edge = np.zeros(lab.shape, bool)
    edge[1:, :] |= lab[1:, :] != lab[:-1, :]
    edge[:-1, :] |= lab[1:, :] != lab[:-1, :]
    edge[:, 1:] |= lab[:, 1:] != lab[:, :-1]
    edge[:, :-1] |= lab[:, 1:] != lab[:, :-1]
    for v in np.unique(lab[edge]):
        if v > 0:
            rgb[edge & (lab == v)] = _COLOURS[int(v) % 10]


def registration_overview(
    moving,
    fixed,
    warped,
    ddf,
    path: str | Path,
    title: Optional[str] = None,
    labels: Optional[Sequence] = None,
    captions: Optional[Sequence[str]] = None,
    panel: int = 256,
    context: Optional[Tuple[np.ndarray, np.ndarray]] = None,
) -> Path:
    """Save a 5-panel PNG: moving, fixed, warped, warped - fixed, deformed grid over the warped image.

    Args:
        moving, fixed, warped: ``(H, W)`` images (tensors or arrays).
        ddf: ``(2, H, W)`` displacement in voxels (MONAI ``Warp`` convention).
        path: output PNG (folders created).
        title: text above the panels.
        labels: optional ``(moving_label, fixed_label, warped_label)`` drawn as coloured contours.
        captions: optional text under each of the 5 panels (e.g. Dice).
        panel: panel size in pixels (images are scaled to fit, nearest neighbour).
        context: optional ``(whole fixed slice (H', W'), outline (K, 2) (row, col) voxels of it)``: a
            sixth panel, the registered window (the other panels) drawn on the whole field of view.
    """
    from PIL import Image, ImageDraw

    m, f, wp, d = _np(moving), _np(fixed), _np(warped), _np(ddf)
    tiles = [_gray(m), _gray(f), _gray(wp), _seismic(wp - f), _gray(wp) // 2 + 64]
    if labels is not None:
        for tile, lab in zip(tiles[:3], labels):
            _contours(tile, _np(lab))
    h, w = m.shape
    scale = panel / max(h, w)
    size = (max(1, round(w * scale)), max(1, round(h * scale)))
    top, bottom, gap = (32 if title else 18), 18, 6
    extra = None
    if context is not None:
        whole, outline = _np(context[0]), np.asarray(context[1], dtype=np.float64)
        cs = size[1] / whole.shape[0]  # same height as the other panels
        extra = Image.fromarray(_gray(whole)).resize((max(1, round(whole.shape[1] * cs)), size[1]), Image.BILINEAR)
        ImageDraw.Draw(extra).polygon([((c + 0.5) * cs, (r + 0.5) * cs) for r, c in outline], outline=(255, 215, 0), width=2)
    width = 5 * size[0] + 6 * gap + (extra.size[0] + gap if extra is not None else 0)
    canvas = Image.new("RGB", (width, size[1] + top + bottom), "white")
    draw = ImageDraw.Draw(canvas)
    names = ["moving", "fixed", "warped", "warped - fixed", "deformation"]
    for i, (tile, name) in enumerate(zip(tiles, names)):
        x0 = gap + i * (size[0] + gap)
        image = Image.fromarray(np.ascontiguousarray(tile)).resize(size, Image.NEAREST)
        if i == 4:  # the grid is drawn on the tile, so lines leaving the field of view are cut at its edge
            grid = ImageDraw.Draw(image)
            for r, c in deformed_grid_lines(d, max(4, h // 16)):
                grid.line([((cc + 0.5) * scale, (rr + 0.5) * scale) for rr, cc in zip(r, c)], fill=(255, 127, 14), width=1)
        canvas.paste(image, (x0, top))
        draw.text((x0, top - 12), name, fill="black")
        if captions is not None and i < len(captions) and captions[i]:
            draw.text((x0, top + size[1] + 4), captions[i], fill="black")
    if extra is not None:
        x0 = gap + 5 * (size[0] + gap)
        canvas.paste(extra, (x0, top))
        draw.text((x0, top - 12), "window in the fixed image", fill="black")
    if title:
        draw.text((gap, 2), title, fill="black")
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    canvas.save(path, compress_level=1)  # PNG: faster to write than the default level, slightly larger
    return path
