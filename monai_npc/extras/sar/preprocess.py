"""SAR-aware intensity preprocessing: log-amplitude, speckle smoothing, robust rescaling to ``[0, 1]``.

Amplitude SAR images carry multiplicative speckle and a heavy-tailed dynamic range (point
scatterers tens of times brighter than fields). The log turns the speckle into an additive,
signal-independent noise (for ``L`` looks its variance is ``psi'(L) / 4`` in log-amplitude), a
small Gaussian in the log domain reduces it, and percentile (not min-max) rescaling keeps a few
bright scatterers from squashing the rest of the scene into a handful of grey values.
"""

from __future__ import annotations

from typing import Any, Mapping, Optional

import numpy as np
from scipy import ndimage

__all__ = ["PREPROCESSING", "DEFAULT_SIGMA", "log_amplitude", "sar_normalize", "preprocess_slices"]

#: the ``meta["preprocessing"]`` value of models that expect :func:`sar_normalize` inputs
PREPROCESSING = "sar"
#: default speckle-smoothing width (pixels, Gaussian sigma in the log domain)
DEFAULT_SIGMA = 1.0


def log_amplitude(amplitude: np.ndarray, floor: float = 1e-3) -> np.ndarray:
    """``log(max(A, floor * median(A > 0)))`` of an amplitude image; non-finite pixels stay NaN.

    Args:
        amplitude: ``(..., H, W)`` amplitude (linear units, >= 0; intensity images: pass ``sqrt``).
        floor: clamp relative to the median positive amplitude, so zero (no-data) pixels stay finite.
    Returns:
        float64 array of the same shape (natural log).
    """
    a = np.asarray(amplitude, dtype=np.float64)
    finite = np.isfinite(a)
    if np.any(finite & (a < 0)):
        raise ValueError("log_amplitude: amplitude must be >= 0 (got negative values; pass |complex| or sqrt(intensity)).")
    positive = a[finite & (a > 0)]
    ref = float(np.median(positive)) if positive.size else 1.0
    out = np.full(a.shape, np.nan)
    out[finite] = np.log(np.maximum(a[finite], floor * ref))
    return out


def sar_normalize(
    amplitude: np.ndarray, sigma: float = DEFAULT_SIGMA, low: float = 1.0, high: float = 99.0, floor: float = 1e-3
) -> np.ndarray:
    """Speckle-robust normalisation of one amplitude image ``(H, W)`` to float32 ``[0, 1]``.

    Steps: :func:`log_amplitude`; Gaussian smoothing of width ``sigma`` pixels (0: none) in the log
    domain; percentiles ``low`` / ``high`` (of the finite pixels) mapped to 0 / 1 and clipped.
    Non-finite pixels (no data) become 0. This is the input the shipped ``sar`` model expects
    (``meta["preprocessing"] == "sar"``, ``meta["sigma"]``).
    """
    a = np.asarray(amplitude)
    if a.ndim != 2:
        raise ValueError(f"sar_normalize expects one (H, W) amplitude image, got shape {a.shape}.")
    if not 0.0 <= low < high <= 100.0:
        raise ValueError(f"need 0 <= low < high <= 100, got low={low}, high={high}.")
    x = log_amplitude(a, floor)
    finite = np.isfinite(x)
    if not finite.any():
        return np.zeros(a.shape, np.float32)
    if sigma > 0:  # normalised convolution, so that no-data pixels do not bleed in
        w = ndimage.gaussian_filter(finite.astype(np.float64), sigma, mode="reflect")
        x = ndimage.gaussian_filter(np.where(finite, x, 0.0), sigma, mode="reflect") / np.maximum(w, 1e-6)
    lo, hi = np.percentile(x[finite], [low, high])
    scaled = (x - lo) / (hi - lo) if hi > lo else np.zeros_like(x)
    return np.where(finite, np.clip(scaled, 0.0, 1.0), 0.0).astype(np.float32)


def preprocess_slices(array: np.ndarray, sigma: Optional[float] = None) -> np.ndarray:
    """:func:`sar_normalize` each slice of ``(Z, H, W)`` (NaN = outside the image -> 0); float32.

    :func:`model_inputs` is the form :data:`monai_npc.apps.registration.models.PREPROCESSING` calls for
    models whose meta says ``preprocessing: "sar"`` (instead of per-slice min-max).
    """
    arr = np.asarray(array)
    if arr.ndim != 3:
        raise ValueError(f"preprocess_slices expects (Z, H, W), got shape {arr.shape}.")
    s = DEFAULT_SIGMA if sigma is None else float(sigma)
    return np.stack([sar_normalize(np.where(np.isfinite(sl), np.abs(sl), np.nan), s) for sl in arr]).astype(np.float32)


def model_inputs(array: np.ndarray, meta: Mapping[str, Any]) -> np.ndarray:
    """``PREPROCESSING["sar"]`` of :mod:`monai_npc.apps.registration`: :func:`preprocess_slices` with the weights' ``meta["sigma"]``."""
    return preprocess_slices(array, meta.get("sigma"))
