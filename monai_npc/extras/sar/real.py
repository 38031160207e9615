"""Real SAR scenes (the ``sar_real`` collection, :data:`SCENES`) turned into registration pairs with a known field.

Protocol (``monai-npc sar bench-real``): a ``size x size`` crop of one date, resampled through a known displacement
(a global shift uniform in ``[-max_shift, max_shift]`` per axis plus a smooth non-rigid field:
Gaussian-smoothed white noise, sigma 24 px, scaled to a peak magnitude drawn from
``[nonrigid / 4, nonrigid]``), is the moving image; the same crop of another date is the fixed
image, so the real speckle and the real changes between the dates remain. The stacks are
distributed co-registered (phase correlation between the dates finds shifts <= 0.4 px), so the
known field is the true displacement, in the MONAI ``Warp`` convention
``moving(x + ddf(x)) = date_a(x)``, with ``date_b(x)`` as the fixed image.

Splits (no pixel of a test pair is used for training or tuning):

- ``train``: ``farmland`` (single- vs four-look), ``wenchuan``, and ``jeddah_s1`` crops within columns
  ``0..627`` with the date pairs among dates 1-4;
- ``test``: the scenes ``ottawa`` and ``yellow_river`` (never seen), and ``jeddah_s1`` crops within
  columns ``656..1029`` with the date pairs ``(k, 5)``: date 5 is never seen in training, and the
  28-px gap is more than a warped crop reads beyond its edges (13 px).

Change maps (``<scene>_gt``, 255 = changed) are on the common grid of the dates, i.e. on the fixed
image's grid, and split the endpoint error into changed and unchanged areas.
"""

from __future__ import annotations

from dataclasses import dataclass
from itertools import combinations
from pathlib import Path
from typing import Dict, List, Optional, Sequence, Tuple, Union

import numpy as np
import torch
from scipy import ndimage

from monai_npc.functional.warp import warp_image

from .io import read_amplitude

__all__ = [
    "SCENES", "DEFAULT_ROOT", "Source", "read_scene", "read_scenes", "random_displacement", "invert_displacement",
    "resample_date", "make_real_pair", "split_sources", "benchmark_pairs", "RealPairSampler",
]

#: scene -> (date files, change map or None, True when the files hold linear intensity)
SCENES: Dict[str, Tuple[Tuple[str, ...], Optional[str], bool]] = {
    "ottawa": (("ottawa_1.bmp", "ottawa_2.bmp"), "ottawa_gt.bmp", False),
    "farmland": (("farmland_1.bmp", "farmland_2.bmp"), "farmland_gt.bmp", False),
    "yellow_river": (("yellow_river_1.bmp", "yellow_river_2.bmp"), "yellow_river_gt.bmp", False),
    "wenchuan": (("wenchuan_1.tif", "wenchuan_2.tif"), "wenchuan_gt.png", True),
    "jeddah_s1": (tuple(f"jeddah_s1_{k}.tif" for k in range(1, 6)), None, True),
}

#: ``<repository>/../shared/data/sar_real``, where the project's shared data lives
DEFAULT_ROOT = Path(__file__).resolve().parents[3].parent / "shared" / "data" / "sar_real"

#: column ranges (half-open) of ``jeddah_s1`` crops per split. A moving crop reads up to 13 px beyond its crop
#: (8 px shift + 3 px non-rigid + the cubic spline's support), so training reads columns <= 640 and test
#: pairs read columns >= 643: no pixel is shared.
JEDDAH_COLUMNS = {"train": (0, 628), "test": (656, 1030)}


def read_scene(name: str, root: Union[str, Path] = DEFAULT_ROOT) -> Dict[str, object]:
    """One scene: ``{"name", "dates": [amplitude (H, W) float32], "change": bool (H, W) or None}``.

    Intensity files are turned into amplitude (``sqrt``); RGB BMPs with equal channels are read as grey.

    Raises:
        KeyError: unknown scene name. FileNotFoundError: a missing file (the error names it).
    """
    if name not in SCENES:
        raise KeyError(f"unknown SAR scene {name!r}; known: {sorted(SCENES)}.")
    files, gt, intensity = SCENES[name]
    folder = Path(root) / name
    dates = [read_amplitude(folder / f) for f in files]
    if intensity:
        dates = [np.sqrt(d) for d in dates]
    change = None
    if gt is not None:
        change = read_amplitude(folder / gt) > 127
    shapes = {d.shape for d in dates} | ({change.shape} if change is not None else set())
    if len(shapes) != 1:
        raise ValueError(f"scene {name} in {folder}: dates / change map have different shapes {sorted(shapes)}.")
    return {"name": name, "dates": dates, "change": change}


def read_scenes(root: Union[str, Path] = DEFAULT_ROOT, names: Optional[Sequence[str]] = None) -> Dict[str, Dict[str, object]]:
    """:func:`read_scene` for ``names`` (default: all of :data:`SCENES`); a clear error when ``root`` is missing."""
    root = Path(root)
    if not root.is_dir():
        raise FileNotFoundError(f"SAR scene folder {root} does not exist (expected ../shared/data/sar_real, see its README).")
    return {n: read_scene(n, root) for n in (names or SCENES)}


def random_displacement(
    shape: Tuple[int, int], rng: np.random.Generator, max_shift: float = 6.0, nonrigid: float = 3.0, sigma: float = 24.0
) -> np.ndarray:
    """Known field ``(2, H, W)`` (pixels): shift ``U(-max_shift, max_shift)`` per axis + smooth non-rigid part.

    The non-rigid part is white noise smoothed by a Gaussian of ``sigma`` pixels, scaled so that its
    largest magnitude is drawn from ``U(nonrigid / 4, nonrigid)`` (0 when ``nonrigid == 0``).
    """
    shift = rng.uniform(-max_shift, max_shift, 2)
    noise = ndimage.gaussian_filter(rng.standard_normal((2,) + tuple(shape)), (0, sigma, sigma), mode="reflect")
    peak = float(np.sqrt((noise**2).sum(0)).max())
    scale = rng.uniform(nonrigid / 4, nonrigid) / peak if nonrigid > 0 and peak > 0 else 0.0
    return (noise * scale + shift[:, None, None]).astype(np.float32)


def invert_displacement(ddf: np.ndarray, iterations: int = 30) -> np.ndarray:
    """``w`` ``(2, H, W)`` with ``y + w(y) + ddf(y + w(y)) = y``: fixed-point iteration ``w = -ddf(y + w)``.

    Converges for smooth fields whose gradient is well below 1 (here: sigma 24 px, a few pixels).
    """
    d = torch.from_numpy(np.ascontiguousarray(ddf, dtype=np.float64))[None]
    w = -d.clone()
    for _ in range(iterations):
        w = -warp_image(d, w, "bilinear", "border")
    return w[0].numpy()


def resample_date(image: np.ndarray, origin: Tuple[int, int], ddf: np.ndarray) -> np.ndarray:
    """Moving crop ``m`` ``(h, w)`` of a whole date with ``m(x + ddf(x)) = image(origin + x)``.

    Cubic-spline interpolation of the amplitude at ``origin + y + w(y)`` (``w`` the inverse field),
    mirrored outside the scene, clipped at 0 (a spline can undershoot next to bright scatterers).
    """
    h, w = ddf.shape[1:]
    inv = invert_displacement(ddf)
    yy, xx = np.meshgrid(np.arange(h, dtype=np.float64), np.arange(w, dtype=np.float64), indexing="ij")
    coords = [origin[0] + yy + inv[0], origin[1] + xx + inv[1]]
    out = ndimage.map_coordinates(np.asarray(image, np.float64), coords, order=3, mode="mirror")
    return np.maximum(out, 0.0).astype(np.float32)


@dataclass(frozen=True)
class Source:
    """Where a pair comes from: ``scene``, moving date ``a``, fixed date ``b`` (0-based), crop ``origin``."""

    scene: str
    a: int
    b: int
    origin: Tuple[int, int]

    @property
    def name(self) -> str:
        return f"{self.scene}_d{self.a + 1}to{self.b + 1}_r{self.origin[0]}c{self.origin[1]}"


def make_real_pair(
    scene: Dict[str, object], source: Source, rng: np.random.Generator, max_shift: float = 6.0, nonrigid: float = 3.0,
    size: int = 256,
) -> Dict[str, object]:
    """A pair ``{"moving", "fixed", "ddf", "change", "name", "scene", "shift"}`` from ``source`` with a random known field.

    ``fixed`` is the ``size x size`` crop of date ``b`` at ``origin``; ``moving`` is date ``a``
    resampled through the field (:func:`resample_date`); ``change`` the crop of the change map
    (bool, ``None`` without one); ``shift`` the field's global part.
    """
    dates = scene["dates"]
    r0, c0 = source.origin
    h, w = dates[source.b].shape
    if r0 < 0 or c0 < 0 or r0 + size > h or c0 + size > w:
        raise ValueError(f"crop {size} at {source.origin} does not fit scene {source.scene} ({h} x {w}).")
    ddf = random_displacement((size, size), rng, max_shift, nonrigid)
    change = scene["change"]
    return {
        "name": source.name,
        "scene": source.scene,
        "moving": resample_date(dates[source.a], source.origin, ddf),
        "fixed": np.ascontiguousarray(dates[source.b][r0 : r0 + size, c0 : c0 + size], dtype=np.float32),
        "ddf": ddf,
        "change": None if change is None else np.ascontiguousarray(change[r0 : r0 + size, c0 : c0 + size]),
        "shift": ddf.reshape(2, -1).mean(1),
    }


def _both_ways(scene: str, pairs: Sequence[Tuple[int, int]], origins: Sequence[Tuple[int, int]]) -> List[Source]:
    return [Source(scene, a, b, o) for o in origins for (i, j) in pairs for (a, b) in ((i, j), (j, i))]


def split_sources(split: str, scenes: Dict[str, Dict[str, object]], size: int = 256) -> List[Source]:
    """The benchmark's pair sources of ``split`` (``"test"`` or ``"train"``), deterministic.

    ``test`` (40 pairs): ottawa and yellow_river at 6 crop origins each, both directions of their date
    pair; jeddah_s1 test columns at 4 origins x the date pairs ``(k, 5)``, alternating direction. ``train``
    (40 pairs, the same protocol on the training pixels, to compare with the test figures): farmland and
    wenchuan at 4 origins both ways, jeddah_s1 training columns at 4 origins x 6 date pairs.
    """
    def corners(name: str, cols: Tuple[int, int] = (0, 10**9)) -> List[Tuple[int, int]]:
        h, w = scenes[name]["dates"][0].shape
        c_lo, c_hi = cols[0], min(cols[1], w) - size
        return sorted({(r, c) for r in (0, h - size) for c in (c_lo, c_hi)})

    if split == "test":
        oh, ow = scenes["ottawa"]["dates"][0].shape
        ottawa = [(r, c) for r in (0, (oh - size) // 2, oh - size) for c in (0, ow - size)]
        yh, yw = scenes["yellow_river"]["dates"][0].shape
        yellow = [(r, c) for r in (0, (yh - size) // 2, yh - size) for c in (0, yw - size)]
        jeddah = [Source("jeddah_s1", *((k, 4) if (i + k) % 2 == 0 else (4, k)), o)
                  for i, o in enumerate(corners("jeddah_s1", JEDDAH_COLUMNS["test"])) for k in range(4)]
        return _both_ways("ottawa", [(0, 1)], ottawa) + _both_ways("yellow_river", [(0, 1)], yellow) + jeddah
    if split == "train":
        jeddah = [Source("jeddah_s1", *((i, j) if n % 2 == 0 else (j, i)), o)
                  for n, (o, (i, j)) in enumerate((o, p) for o in corners("jeddah_s1", JEDDAH_COLUMNS["train"])
                                                   for p in combinations(range(4), 2))]
        return _both_ways("farmland", [(0, 1)], corners("farmland")) + _both_ways("wenchuan", [(0, 1)], corners("wenchuan")) + jeddah
    raise ValueError(f"split must be 'test' or 'train', got {split!r}.")


def benchmark_pairs(
    split: str, scenes: Dict[str, Dict[str, object]], max_shift: float = 6.0, nonrigid: float = 3.0, seed: int = 0, size: int = 256
) -> List[Dict[str, object]]:
    """The pairs of :func:`split_sources`, pair ``i`` with the field of ``default_rng([seed, i])``."""
    return [make_real_pair(scenes[s.scene], s, np.random.default_rng([seed, i]), max_shift, nonrigid, size)
            for i, s in enumerate(split_sources(split, scenes, size))]


def _add_looks(amplitude: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """Look augmentation: more speckle (x sqrt Gamma(L, 1/L), L in 1..3) or fewer (2 x 2 box average)."""
    if rng.random() < 0.6:
        looks = int(rng.integers(1, 4))
        return (amplitude * np.sqrt(rng.gamma(looks, 1.0 / looks, amplitude.shape))).astype(np.float32)
    return ndimage.uniform_filter(amplitude, 2, mode="mirror").astype(np.float32)


class RealPairSampler:
    """Random training pairs from the ``train`` pixels of :func:`split_sources` (any crop origin, any order
    of a training date pair, shift up to ``max_shift``), with a look augmentation of one date in
    ``look_probability`` of the pairs (:func:`_add_looks`, for single- vs multi-look dates).

    Scenes are drawn with ``weights`` (default: jeddah_s1 0.5, farmland 0.25, wenchuan 0.25).
    """

    def __init__(
        self, scenes: Dict[str, Dict[str, object]], max_shift: float = 8.0, nonrigid: float = 3.0, size: int = 256,
        look_probability: float = 0.3, weights: Optional[Dict[str, float]] = None,
    ) -> None:
        self.scenes, self.max_shift, self.nonrigid, self.size = scenes, max_shift, nonrigid, size
        self.look_probability = look_probability
        self.weights = weights or {"jeddah_s1": 0.5, "farmland": 0.25, "wenchuan": 0.25}
        missing = set(self.weights) - set(scenes)
        if missing:
            raise KeyError(f"RealPairSampler: scenes {sorted(missing)} were not read.")

    def source(self, rng: np.random.Generator) -> Source:
        names = sorted(self.weights)
        p = np.array([self.weights[n] for n in names], np.float64)
        name = names[int(rng.choice(len(names), p=p / p.sum()))]
        h, w = self.scenes[name]["dates"][0].shape
        c_lo, c_hi = JEDDAH_COLUMNS["train"] if name == "jeddah_s1" else (0, w)
        origin = (int(rng.integers(0, h - self.size + 1)), int(rng.integers(c_lo, c_hi - self.size + 1)))
        n_dates = 4 if name == "jeddah_s1" else len(self.scenes[name]["dates"])
        a, b = (int(v) for v in rng.choice(n_dates, 2, replace=False))
        return Source(name, a, b, origin)

    def __call__(self, rng: np.random.Generator) -> Dict[str, object]:
        s = self.source(rng)
        pair = make_real_pair(self.scenes[s.scene], s, rng, self.max_shift, self.nonrigid, self.size)
        if rng.random() < self.look_probability:
            key = "moving" if rng.random() < 0.5 else "fixed"
            pair[key] = _add_looks(pair[key], rng)
        return pair
