"""Resampling to a target voxel size, for images, labels and displacement fields."""

from __future__ import annotations

from typing import Hashable, Mapping, Sequence, Union

import numpy as np
import torch
from monai.config import KeysCollection
from monai.data import MetaTensor
from monai.transforms import MapTransform, Spacing
from monai.utils import ensure_tuple, ensure_tuple_rep

__all__ = ["ResampleToSpacingd"]


class ResampleToSpacingd(MapTransform):
    """Resample channel-first arrays ``(C, *S)`` from the voxel size stored under ``spacing_key``
    to ``pixdim`` (mm), with MONAI's ``Spacing`` (voxel 0 keeps its position).

    ``keys`` are images (bilinear), ``label_keys`` label maps (nearest, dtype kept) and
    ``ddf_keys`` displacement fields in voxels (bilinear, then channel ``k`` is rescaled by
    ``old_spacing[k] / pixdim[k]`` so it stays in voxels of the new grid). The spacing entry is
    updated to ``pixdim``. Outputs are numpy arrays when the inputs were.

    Args:
        keys: image keys.
        pixdim: target voxel size per spatial axis, mm (a float is repeated).
        spacing_key: item key holding the current voxel size per spatial axis (mm).
        label_keys, ddf_keys: see above.
    """

    def __init__(
        self,
        keys: KeysCollection,
        pixdim: Union[float, Sequence[float]] = 1.0,
        spacing_key: str = "spacing",
        label_keys: KeysCollection = (),
        ddf_keys: KeysCollection = (),
        allow_missing_keys: bool = False,
    ) -> None:
        super().__init__(keys, allow_missing_keys)
        self.pixdim = pixdim
        self.spacing_key = spacing_key
        self.label_keys = ensure_tuple(label_keys)
        self.ddf_keys = ensure_tuple(ddf_keys)

    def _resample(self, arr, spacing: np.ndarray, target: Sequence[float], mode: str):
        rank = len(spacing)
        affine = torch.eye(4, dtype=torch.float64)
        affine[range(rank), range(rank)] = torch.as_tensor(spacing, dtype=torch.float64)
        data = torch.as_tensor(np.asarray(arr) if isinstance(arr, np.ndarray) else arr.detach().cpu())
        out = Spacing(pixdim=tuple(target), mode=mode, padding_mode="border")(MetaTensor(data.float(), affine=affine))
        out = out.as_tensor()
        if mode == "nearest":
            out = torch.round(out).to(data.dtype)
        return out.numpy() if isinstance(arr, np.ndarray) else out

    def __call__(self, data: Mapping[Hashable, object]) -> dict:
        d = dict(data)
        if self.spacing_key not in d or d[self.spacing_key] is None:
            raise ValueError(f"ResampleToSpacingd: the item has no voxel size under '{self.spacing_key}'.")
        spacing = np.asarray(d[self.spacing_key], dtype=np.float64)
        target = ensure_tuple_rep(self.pixdim, len(spacing))
        for key in self.key_iterator(d):
            d[key] = self._resample(d[key], spacing, target, "bilinear")
        for key in self.label_keys:
            if key in d:
                d[key] = self._resample(d[key], spacing, target, "nearest")
            elif not self.allow_missing_keys:
                raise KeyError(f"ResampleToSpacingd: label key '{key}' is not in the item.")
        for key in self.ddf_keys:
            if key not in d:
                if not self.allow_missing_keys:
                    raise KeyError(f"ResampleToSpacingd: ddf key '{key}' is not in the item.")
                continue
            out = self._resample(d[key], spacing, target, "bilinear")
            scale = (spacing / np.asarray(target, dtype=np.float64)).reshape((-1,) + (1,) * len(spacing))
            d[key] = (out * scale).astype(np.float32) if isinstance(out, np.ndarray) else out * torch.as_tensor(scale, dtype=out.dtype)
        d[self.spacing_key] = tuple(float(t) for t in target)
        return d
