"""Random flips applied identically to every array of a registration pair."""

from __future__ import annotations

from typing import Hashable, Mapping, Optional, Sequence

import numpy as np
import torch
from monai.config import KeysCollection
from monai.transforms import Flip, MapTransform, RandomizableTransform

__all__ = ["flip_ddf", "RandPairFlipd"]


def flip_ddf(ddf, spatial_axis: int):
    """Flip a displacement field ``(D, *S)`` (voxels, channel ``k`` = axis ``k``) along ``spatial_axis``.

    The field is mirrored and its component along that axis changes sign, so that
    ``flip(warp(moving, ddf)) == warp(flip(moving), flip_ddf(ddf))``.
    """
    if ddf.shape[0] != ddf.ndim - 1:
        raise ValueError(f"ddf must be (D, *S) with D = {ddf.ndim - 1} channels, got shape {tuple(ddf.shape)}.")
    out = Flip(spatial_axis=spatial_axis)(ddf)
    sign = [1.0] * ddf.shape[0]
    sign[spatial_axis] = -1.0
    view = (-1,) + (1,) * (ddf.ndim - 1)
    if isinstance(ddf, np.ndarray):
        out = np.asarray(out) * np.asarray(sign, dtype=ddf.dtype).reshape(view)
    else:
        out = out * torch.tensor(sign, dtype=out.dtype, device=out.device).view(view)
    return out


class RandPairFlipd(RandomizableTransform, MapTransform):
    """Flip all keys of an item together, independently per spatial axis with probability ``prob``.

    The ACDC training augmentation (horizontal and vertical flips, ``p = 0.5`` each): both
    images and both labels of a pair get the same flips, so the pair stays aligned.
    Displacement fields listed in ``ddf_keys`` are flipped too and have the flipped component
    negated (see :func:`flip_ddf`), so a true ``ddf`` stays true.

    Args:
        keys: channel-first arrays ``(C, *S)`` to flip.
        prob: probability of a flip, drawn once per axis per call.
        spatial_axes: spatial axes that may flip (``(0, 1)`` = vertical and horizontal in 2-D).
        ddf_keys: displacement fields ``(D, *S)`` (voxels, MONAI ``Warp`` convention).
    """

    def __init__(
        self,
        keys: KeysCollection,
        prob: float = 0.5,
        spatial_axes: Sequence[int] = (0, 1),
        ddf_keys: KeysCollection = (),
        allow_missing_keys: bool = False,
    ) -> None:
        MapTransform.__init__(self, keys, allow_missing_keys)
        RandomizableTransform.__init__(self, prob)
        self.spatial_axes = tuple(int(a) for a in spatial_axes)
        self.ddf_keys = (ddf_keys,) if isinstance(ddf_keys, str) else tuple(ddf_keys)
        self._flips: tuple = ()

    def randomize(self, data: Optional[object] = None) -> None:
        self._flips = tuple(a for a in self.spatial_axes if self.R.rand() < self.prob)

    def __call__(self, data: Mapping[Hashable, object]) -> dict:
        d = dict(data)
        self.randomize()
        for axis in self._flips:
            for key in self.key_iterator(d):
                d[key] = Flip(spatial_axis=axis)(d[key])
                if isinstance(data[key], np.ndarray):
                    d[key] = np.asarray(d[key])
            for key in self.ddf_keys:
                if key in d:
                    d[key] = flip_ddf(d[key], axis)
                elif not self.allow_missing_keys:
                    raise KeyError(f"RandPairFlipd: ddf key '{key}' is not in the item.")
        return d
