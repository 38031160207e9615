"""Synthetic SAR image pairs with a known deformation (the paper's 256 x 256 setting).

A scene is a reflectivity (intensity) function of continuous pixel coordinates, so both dates are
rendered exactly, with no interpolation of the scene:

- fields: a Voronoi partition, each cell with its own mean backscatter and its own mix of three
  stable multiplicative textures (correlation lengths 1.5, 3 and 6 pixels: canopy, crops...);
- linear features: roads / rivers, bright or dark, a few pixels wide (anti-aliased edges);
- buildings: bright rotated rectangles;
- point scatterers: strong returns with a Gaussian point-spread function.

The fixed date is the scene sampled at ``x + ddf(x)``, the moving date at ``x``, so the true
displacement ``ddf`` ``(2, H, W)`` (voxels, rows then columns) satisfies the MONAI ``Warp``
convention ``moving(x + ddf(x)) = fixed(x)`` up to speckle and changes. ``ddf`` is a global shift
plus a smooth non-rigid field (bicubic interpolation of a coarse random grid). Each date gets
independent, fully developed multiplicative speckle: intensity ``I = sigma0 * G`` with
``G ~ Gamma(L, 1/L)`` (``L`` looks, mean 1), amplitude ``sqrt(I)``. Optional changed regions
(ellipses whose reflectivity differs on the fixed date) model real change between acquisitions.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Dict, List, Optional, Tuple

import numpy as np
import torch
import torch.nn.functional as F
from scipy import ndimage

__all__ = ["SARPairConfig", "sample_scene", "render_scene", "smooth_deformation", "speckle", "make_sar_pair", "make_sar_pairs"]


@dataclass(frozen=True)
class SARPairConfig:
    """Parameters of :func:`make_sar_pair` (pixels unless stated).

    Attributes:
        size: image side ``H = W``.
        max_shift: global shift uniform in ``[-max_shift, max_shift]`` per axis.
        nonrigid: largest non-rigid displacement magnitude; each pair draws its peak from
            ``[nonrigid / 4, nonrigid]``.
        control_points: side of the coarse random grid of the non-rigid field (smoothness).
        looks: range ``(L_min, L_max)`` of the (integer) number of looks, drawn per pair.
        change_probability: probability that a pair has changed regions on the fixed date.
    """

    size: int = 256
    max_shift: float = 4.0
    nonrigid: float = 3.0
    control_points: int = 5
    looks: Tuple[int, int] = (2, 6)
    change_probability: float = 0.3

    def __post_init__(self) -> None:
        if self.size < 32:
            raise ValueError(f"size must be >= 32, got {self.size}.")
        if self.max_shift < 0 or self.nonrigid < 0:
            raise ValueError(f"max_shift and nonrigid must be >= 0, got {self.max_shift}, {self.nonrigid}.")
        if self.control_points < 2:
            raise ValueError(f"control_points must be >= 2, got {self.control_points}.")
        if len(self.looks) != 2 or not 1 <= self.looks[0] <= self.looks[1]:
            raise ValueError(f"looks must be (L_min, L_max) with 1 <= L_min <= L_max, got {self.looks}.")
        if not 0.0 <= self.change_probability <= 1.0:
            raise ValueError(f"change_probability must be in [0, 1], got {self.change_probability}.")


def _log_uniform(rng: np.random.Generator, lo: float, hi: float, size=None):
    return np.exp(rng.uniform(np.log(lo), np.log(hi), size))


#: correlation lengths (pixels) of the stable texture layers every field mixes
TEXTURE_SCALES = (1.5, 3.0, 6.0)


def sample_scene(rng: np.random.Generator, size: int, margin: float) -> Dict[str, np.ndarray]:
    """Random scene parameters covering ``[-margin, size + margin]^2`` (pixel coordinates)."""
    lo, hi = -margin, size + margin
    n_fields = int(rng.integers(15, 40))
    n_tex = int(np.ceil(hi - lo)) + 8  # texture grids at 1-pixel resolution over the extent
    layers = []
    for scale in TEXTURE_SCALES:
        t = ndimage.gaussian_filter(rng.standard_normal((n_tex, n_tex)), scale, mode="wrap")
        layers.append(t / t.std())
    scene = {
        "extent": np.array([lo, hi]),
        "seeds": rng.uniform(lo, hi, (n_fields, 2)),
        "field_sigma0": _log_uniform(rng, 0.03, 1.0, n_fields),
        # per field: log-contrast of each stable texture layer (canopy, crops, rubble...); a few fields stay flat
        "field_texture": rng.uniform(0.0, 0.7, (n_fields, len(TEXTURE_SCALES))) * (rng.random((n_fields, 1)) < 0.85),
        "texture": np.stack(layers),
    }
    n_lines = int(rng.integers(2, 7))
    scene["lines"] = np.concatenate(
        [rng.uniform(lo, hi, (n_lines, 4)), rng.uniform(1.5, 5.0, (n_lines, 1)),
         np.where(rng.random((n_lines, 1)) < 0.6, _log_uniform(rng, 0.005, 0.02, (n_lines, 1)), _log_uniform(rng, 1.5, 4.0, (n_lines, 1)))],
        1,
    )  # y0, x0, y1, x1, width, sigma0
    n_build = int(rng.integers(0, 20))
    scene["buildings"] = np.concatenate(
        [rng.uniform(lo, hi, (n_build, 2)), rng.uniform(3, 14, (n_build, 2)), rng.uniform(0, np.pi, (n_build, 1)),
         _log_uniform(rng, 2.0, 8.0, (n_build, 1))],
        1,
    )  # cy, cx, half-height, half-width, angle, sigma0
    n_points = int(rng.integers(20, 120))
    scene["points"] = np.concatenate(
        [rng.uniform(lo, hi, (n_points, 2)), _log_uniform(rng, 5.0, 60.0, (n_points, 1))], 1
    )  # y, x, peak sigma0
    return scene


def _coverage(distance_inside: np.ndarray) -> np.ndarray:
    """Anti-aliased area coverage from a signed distance (positive inside), one-pixel ramp."""
    return np.clip(distance_inside + 0.5, 0.0, 1.0)


def render_scene(scene: Dict[str, np.ndarray], y: np.ndarray, x: np.ndarray) -> np.ndarray:
    """Intensity reflectivity ``sigma0 > 0`` of ``scene`` at coordinates ``(y, x)`` (same shape, pixels)."""
    seeds = scene["seeds"]
    d2 = (y[..., None] - seeds[:, 0]) ** 2 + (x[..., None] - seeds[:, 1]) ** 2
    cell = d2.argmin(-1)
    sigma0 = scene["field_sigma0"][cell]
    lo = scene["extent"][0]
    coords = [(y - lo).ravel(), (x - lo).ravel()]
    log_texture = np.zeros(y.shape)
    for k, layer in enumerate(scene["texture"]):  # cubic interpolation of smooth (>= 1.5 px) layers: exact enough
        log_texture += scene["field_texture"][cell, k] * ndimage.map_coordinates(layer, coords, order=3, mode="wrap").reshape(y.shape)
    sigma0 = sigma0 * np.exp(log_texture)
    for y0, x0, y1, x1, width, s in scene["lines"]:
        d = np.array([y1 - y0, x1 - x0])
        t = np.clip(((y - y0) * d[0] + (x - x0) * d[1]) / max(float(d @ d), 1e-9), 0.0, 1.0)
        dist = np.hypot(y - (y0 + t * d[0]), x - (x0 + t * d[1]))
        cov = _coverage(width / 2 - dist)
        sigma0 = sigma0 * (1 - cov) + s * cov
    for cy, cx, hh, hw, ang, s in scene["buildings"]:
        c, si = np.cos(ang), np.sin(ang)
        u = (y - cy) * c + (x - cx) * si
        v = -(y - cy) * si + (x - cx) * c
        cov = _coverage(np.minimum(hh - np.abs(u), hw - np.abs(v)))
        shadow = _coverage(np.minimum(hh - np.abs(u - 2 * hh), hw - np.abs(v))) * (1 - cov)  # radar shadow behind it
        sigma0 = sigma0 * (1 - cov) * (1 - 0.9 * shadow) + s * cov
    for py, px, s in scene["points"]:
        sigma0 = sigma0 + s * np.exp(-((y - py) ** 2 + (x - px) ** 2) / (2 * 0.7**2))
    return sigma0


def smooth_deformation(rng: np.random.Generator, size: int, magnitude: float, control_points: int = 5) -> np.ndarray:
    """Smooth random displacement ``(2, size, size)`` (pixels) with largest magnitude ``magnitude``.

    Bicubic interpolation (``align_corners=True``) of a ``control_points^2`` grid of Gaussian vectors.
    """
    coarse = torch.from_numpy(rng.standard_normal((1, 2, control_points, control_points)))
    field = F.interpolate(coarse, size=(size, size), mode="bicubic", align_corners=True)[0].numpy()
    peak = float(np.sqrt((field**2).sum(0)).max())
    return (field * (magnitude / peak if peak > 0 else 0.0)).astype(np.float64)


def speckle(sigma0: np.ndarray, looks: int, rng: np.random.Generator) -> np.ndarray:
    """Amplitude ``sqrt(sigma0 * G)``, ``G ~ Gamma(looks, 1 / looks)`` (fully developed, mean-1 intensity speckle); float32."""
    if looks < 1:
        raise ValueError(f"looks must be >= 1, got {looks}.")
    return np.sqrt(sigma0 * rng.gamma(looks, 1.0 / looks, sigma0.shape)).astype(np.float32)


def make_sar_pair(config: SARPairConfig = SARPairConfig(), seed: Optional[int] = None, rng: Optional[np.random.Generator] = None) -> Dict[str, object]:
    """One synthetic pair.

    Returns a dict with ``moving`` and ``fixed`` amplitudes ``(H, W)`` float32, ``ddf`` ``(2, H, W)``
    float32 (true displacement, pixels, ``moving(x + ddf(x)) = fixed(x)``), ``shift`` ``(2,)``
    (the global part), ``changed`` ``(H, W)`` bool (changed region on the fixed date), ``looks``
    (int) and ``seed``.
    """
    rng = rng if rng is not None else np.random.default_rng(seed)
    n = config.size
    shift = rng.uniform(-config.max_shift, config.max_shift, 2)
    peak = rng.uniform(config.nonrigid / 4, config.nonrigid) if config.nonrigid > 0 else 0.0
    ddf = smooth_deformation(rng, n, peak, config.control_points) + shift[:, None, None]
    margin = config.max_shift + config.nonrigid + 8.0
    scene = sample_scene(rng, n, margin)
    y, x = np.meshgrid(np.arange(n, dtype=np.float64), np.arange(n, dtype=np.float64), indexing="ij")
    moving_sigma0 = render_scene(scene, y, x)
    fy, fx = y + ddf[0], x + ddf[1]
    fixed_sigma0 = render_scene(scene, fy, fx)
    changed = np.zeros((n, n), bool)
    if rng.random() < config.change_probability:
        for _ in range(int(rng.integers(1, 4))):
            cy, cx = rng.uniform(0, n, 2)
            ry, rx = rng.uniform(8, 40, 2)
            inside = ((fy - cy) / ry) ** 2 + ((fx - cx) / rx) ** 2 <= 1.0
            fixed_sigma0 = np.where(inside, _log_uniform(rng, 0.02, 1.5), fixed_sigma0)
            changed |= inside
    looks = int(rng.integers(config.looks[0], config.looks[1] + 1))
    return {
        "moving": speckle(moving_sigma0, looks, rng),
        "fixed": speckle(fixed_sigma0, looks, rng),
        "ddf": ddf.astype(np.float32),
        "shift": shift.astype(np.float32),
        "changed": changed,
        "looks": looks,
        "seed": seed,
    }


def make_sar_pairs(n: int, seed: int = 0, config: SARPairConfig = SARPairConfig(), progress: bool = False) -> List[Dict[str, object]]:
    """``n`` pairs from seeds ``seed, seed + 1, ...`` (each pair reproducible from its own seed)."""
    if n < 1:
        raise ValueError(f"n must be >= 1, got {n}.")
    from tqdm.auto import tqdm

    return [make_sar_pair(config, seed=seed + i) for i in tqdm(range(n), desc="sar pairs", disable=not progress)]


def config_dict(config: SARPairConfig) -> Dict[str, object]:
    """JSON-friendly copy of a :class:`SARPairConfig`."""
    d = asdict(config)
    d["looks"] = list(d["looks"])
    return d
