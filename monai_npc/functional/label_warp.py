"""Label maps carried through a displacement field: each value's indicator (optionally smoothed in-plane)
interpolated linearly, the largest wins (ITK's ``sitkLabelLinear``, ANTs ``-n GenericLabel``).

Fields are in voxels, MONAI ``Warp`` convention: ``out(x) = label(x + ddf(x))``, channel ``k`` along axis ``k``.
"""

from __future__ import annotations

from typing import Sequence, Tuple

import numpy as np
import torch

from .gaussian import gaussian_filter_nearest
from .warp import warp_image

__all__ = ["label_indicators", "indicator_tensor", "warp_indicators", "warp_indicators_volume", "warp_label"]


def label_indicators(label: np.ndarray, values: Sequence[int], sigma: float = 0.0) -> Tuple[np.ndarray, np.ndarray]:
    """``(values, indicators)``: background and each non-zero value of ``values`` (``(C,)`` int32) and
    their indicators ``(C, *label.shape)`` float32 of the label map ``label`` (``(H, W)`` or ``(Z, H, W)``),
    each smoothed by a Gaussian of ``sigma`` voxels along the last two (in-plane) axes when
    ``sigma > 0``, never across slices; they still sum to 1 at every voxel."""
    label = np.asarray(label)
    kept = [0] + [int(v) for v in values if int(v) != 0]
    widths = [0.0] * (label.ndim - 2) + [float(sigma)] * min(2, label.ndim)
    channels = [(label == v).astype(np.float32) for v in kept[1:]]
    if sigma > 0:
        channels = [gaussian_filter_nearest(c, widths) for c in channels]
    background = 1.0 - np.sum(channels, 0) if channels else np.ones(label.shape, np.float32)
    return np.asarray(kept, np.int32), np.stack([background.astype(np.float32)] + channels)



def indicator_tensor(label: np.ndarray, values: Sequence[int], sigma: float = 0.0) -> Tuple[np.ndarray, torch.Tensor]:
    """:func:`label_indicators` of ``label`` ``(Z, H, W)`` (``register``'s
    smoothing of ``warped_label``) as ``(values (C,), indicators (Z, C, H, W) tensor)``: computed once,
    they carry the same label to every frame (:func:`warp_indicators`)."""
    kept, indicators = label_indicators(label, values, sigma)  # (C, Z, H, W)
    return kept, torch.from_numpy(indicators).transpose(0, 1).contiguous()


def warp_indicators(values: np.ndarray, indicators: torch.Tensor, ddf: torch.Tensor) -> np.ndarray:
    """The label of :func:`indicator_tensor` sampled at ``x + ddf(x)`` (``ddf`` ``(Z, 2, H, W)`` voxels):
    each indicator interpolated linearly, the largest wins; 0 outside."""
    prob = warp_image(indicators, ddf.float(), "bilinear", "zeros")
    prob[:, 0] += 1e-3  # ties (outside the image: all 0) go to background
    # max's index: the first largest, as argmax's, several times faster on the CPU over a middle axis
    return values[prob.max(1).indices.numpy()]


def warp_indicators_volume(values: np.ndarray, indicators: torch.Tensor, ddf: torch.Tensor) -> np.ndarray:
    """The label of :func:`indicator_tensor` (``indicators`` ``(Z, C, H, W)``) sampled at ``x + ddf(x)`` with a field
    that also moves through the slices (``ddf`` ``(3, Z, H, W)`` voxels, channel 0 along Z): each indicator
    interpolated trilinearly, the largest wins, as ITK resamples each indicator linearly through the written transform
    (:func:`~monai_npc.interop.label_resample.resample_label`): within half a voxel outside the grid the edge value,
    beyond it 0 (a label carried more than half a slice past the stack's first or last slice is gone). Where channel 0
    is 0 it equals :func:`warp_indicators` of the in-plane channels (away from the image's in-plane edge)."""
    ddf = ddf.float()
    prob = warp_image(indicators.transpose(0, 1)[None], ddf[None], "bilinear", "border")[0]  # (C, Z, H, W)
    for axis, n in enumerate(ddf.shape[1:]):  # ITK's buffer: continuous index within [-0.5, n - 0.5] on every axis
        at = ddf[axis] + torch.arange(n, dtype=ddf.dtype, device=ddf.device).view([-1 if a == axis else 1 for a in range(3)])
        prob = prob * ((at >= -0.5) & (at <= n - 0.5)).to(prob.dtype)
    prob[0] += 1e-3  # ties (outside the image: all 0) go to background
    return values[prob.max(0).indices.numpy()]


def warp_label(label: np.ndarray, ddf: torch.Tensor, values: Sequence[int], sigma: float = 0.0) -> np.ndarray:
    """``label`` ``(Z, H, W)`` sampled at ``x + ddf(x)`` (``ddf`` ``(Z, 2, H, W)`` voxels): one-hot
    linear interpolation of each value in ``values`` (and background), each first smoothed in-plane
    by a Gaussian of ``sigma`` voxels when ``sigma > 0`` (as ``register``'s ``label_sigma``), then
    ``argmax``; 0 outside."""
    return warp_indicators(*indicator_tensor(label, values, sigma), ddf)
