"""Fixed-size crop centred on the union of label bounding boxes (ACDC protocol).

Arrays are channel-first ``(C, *S)``; centres and sizes are in voxels of the spatial axes.
"""

from __future__ import annotations

from typing import Hashable, Mapping, Optional, Sequence, Tuple, Union

import numpy as np
import torch
from monai.config import KeysCollection
from monai.transforms import MapTransform, Pad, SpatialCrop
from monai.utils import convert_to_dst_type, ensure_tuple_rep

__all__ = ["label_union_bbox", "crop_window", "crop_or_pad", "CropOnLabelUniond"]

ArrayLike = Union[np.ndarray, torch.Tensor]


def label_union_bbox(labels: Sequence[ArrayLike]) -> Optional[Tuple[Tuple[int, int], ...]]:
    """Bounding box ``((lo_0, hi_0), ...)`` (``hi`` exclusive) of ``label > 0`` over all ``labels``.

    Each label is ``(C, *S)``; all must share ``S``. Returns ``None`` when every label is empty.
    """
    if not labels:
        raise ValueError("label_union_bbox needs at least one label array.")
    shapes = {tuple(lab.shape[1:]) for lab in labels}
    if len(shapes) != 1:
        raise ValueError(f"labels have different spatial shapes {sorted(shapes)}; cannot take their union.")
    union = None
    for lab in labels:
        fg = np.asarray(lab.detach().cpu() if isinstance(lab, torch.Tensor) else lab) > 0
        fg = fg.any(0)
        union = fg if union is None else (union | fg)
    if not union.any():
        return None
    box = []
    for axis in range(union.ndim):
        hit = np.flatnonzero(union.any(tuple(a for a in range(union.ndim) if a != axis)))
        box.append((int(hit[0]), int(hit[-1]) + 1))
    return tuple(box)


def crop_window(
    box: Optional[Sequence[Tuple[int, int]]], spatial_shape: Sequence[int], roi_size: Sequence[int]
) -> Tuple[Tuple[int, int], ...]:
    """Window ``((start_k, end_k), ...)`` of size ``roi_size`` centred on ``box``.

    The window may extend past the image (negative start, end beyond the size): those parts are
    padded by :func:`crop_or_pad`. With ``box=None`` the window is centred on the image.
    When the box and window sizes have different parities the extra voxel goes after the box.
    """
    window = []
    for k, (n, size) in enumerate(zip(spatial_shape, roi_size)):
        lo, hi = box[k] if box is not None else (0, n)
        start = (lo + hi - size) // 2  # floor of (centre - size / 2), centre = (lo + hi) / 2
        window.append((start, start + size))
    return tuple(window)


def crop_or_pad(img: ArrayLike, window: Sequence[Tuple[int, int]], value: float = 0.0) -> ArrayLike:
    """Crop ``img`` ``(C, *S)`` to ``window`` (see :func:`crop_window`), padding with ``value``.

    Uses MONAI's ``Pad`` and ``SpatialCrop`` so a ``MetaTensor``'s affine follows the crop;
    returns the input's type (numpy in, numpy out).
    """
    spatial = img.shape[1:]
    if len(window) != len(spatial):
        raise ValueError(f"window has {len(window)} axes, image has {len(spatial)} spatial axes.")
    to_pad = [(0, 0)] + [(max(0, -s), max(0, e - n)) for (s, e), n in zip(window, spatial)]
    out = img
    if any(b or a for b, a in to_pad):
        out = Pad(to_pad=to_pad, mode="constant", value=value)(out)
    start = [s + b for (s, _), (b, _) in zip(window, to_pad[1:])]
    end = [st + (e - s) for st, (s, e) in zip(start, window)]
    out = SpatialCrop(roi_start=start, roi_end=end)(out)
    if isinstance(img, np.ndarray):
        out = convert_to_dst_type(out, dst=img)[0]
    return out


class CropOnLabelUniond(MapTransform):
    """Crop every key to ``roi_size`` centred on the union of the ``label_keys`` bounding boxes.

    The ACDC protocol: a 128x128 window centred on the union of the ED and ES label boxes, so
    both frames of a pair are cropped identically; parts of the window outside the image are
    padded with ``pad_value`` (0 for images, labels and displacement fields alike). Every label
    voxel stays inside the crop whenever the union box fits into ``roi_size``.

    Args:
        keys: arrays ``(C, *S)`` to crop (images, labels, displacement fields); all share ``S``.
        label_keys: labels whose foreground (``> 0``) defines the centre; with no foreground at
            all the window is centred on the image.
        roi_size: output spatial size in voxels (an int is repeated over the spatial axes).
        pad_value: value for voxels outside the input image.
        box_key: if given, the union box (input voxel coordinates) is stored under this key.
    """

    def __init__(
        self,
        keys: KeysCollection,
        label_keys: KeysCollection,
        roi_size: Union[int, Sequence[int]] = 128,
        pad_value: float = 0.0,
        box_key: Optional[str] = None,
        allow_missing_keys: bool = False,
    ) -> None:
        super().__init__(keys, allow_missing_keys)
        self.label_keys = tuple(label_keys) if not isinstance(label_keys, str) else (label_keys,)
        self.roi_size = roi_size
        self.pad_value = float(pad_value)
        self.box_key = box_key

    def __call__(self, data: Mapping[Hashable, ArrayLike]) -> dict:
        d = dict(data)
        labels = [d[k] for k in self.label_keys if k in d]
        if not labels:
            raise ValueError(f"CropOnLabelUniond: none of the label keys {self.label_keys} is in the item.")
        spatial = labels[0].shape[1:]
        roi = ensure_tuple_rep(self.roi_size, len(spatial))
        box = label_union_bbox(labels)
        window = crop_window(box, spatial, roi)
        for key in self.key_iterator(d):
            if tuple(d[key].shape[1:]) != tuple(spatial):
                raise ValueError(
                    f"CropOnLabelUniond: '{key}' has spatial shape {tuple(d[key].shape[1:])}, "
                    f"the labels {tuple(spatial)}."
                )
            d[key] = crop_or_pad(d[key], window, self.pad_value)
        if self.box_key is not None:
            d[self.box_key] = box
        return d
