"""Picking part of an image: the ``select`` specification of files and DICOM folders
(:func:`parse_select`) and one slice or frame of a ``MetaTensor`` (:func:`select_slice`, :func:`select_frame`)."""

from __future__ import annotations

from typing import Any, Dict, Mapping, Union

import numpy as np
import torch

from .geometry import world_meta

__all__ = ["SELECT_KEYS", "parse_select", "select_slice", "select_frame"]

#: keys of a ``select`` mapping (:func:`parse_select`) and what they pick
SELECT_KEYS: Dict[str, str] = {
    "instance": "the DICOM file with this InstanceNumber (one frame)",
    "phase": "the K-th cardiac phase of a cine folder (0-based, in trigger-time order)",
    "trigger_time": "the phase whose TriggerTime (ms) is closest to this value",
    "slice": "the K-th slice position (0-based, along the slice normal) of a DICOM folder",
    "frame": "the K-th frame (0-based) of a multi-frame file or the K-th slice of a volume",
    "series": "the SeriesInstanceUID to read when a folder holds several series",
}


def parse_select(spec: Union[None, str, Mapping[str, Any]]) -> Dict[str, Any]:
    """``"phase=3,slice=5"`` (or a mapping) -> ``{"phase": 3, "slice": 5}``; keys in :data:`SELECT_KEYS`.

    ``trigger_time`` is a float (ms), ``series`` a string, the others integers.
    """
    if not spec:
        return {}
    items = dict(spec) if isinstance(spec, Mapping) else {}
    if isinstance(spec, str):
        for part in spec.split(","):
            key, sep, value = part.partition("=")
            if not sep or not key.strip() or not value.strip():
                raise ValueError(f"cannot parse selection {spec!r}: expected KEY=VALUE[,KEY=VALUE] with KEY in {sorted(SELECT_KEYS)}.")
            items[key.strip().replace("-", "_")] = value.strip()
    out: Dict[str, Any] = {}
    for key, value in items.items():
        if key not in SELECT_KEYS:
            raise ValueError(f"unknown selection key {key!r} in {spec!r}; use one of {sorted(SELECT_KEYS)}.")
        try:
            out[key] = float(value) if key == "trigger_time" else str(value) if key == "series" else int(value)
        except (TypeError, ValueError):
            raise ValueError(f"selection {key}={value!r}: expected {'a number' if key == 'trigger_time' else 'an integer'}.") from None
    return out


def _drop_axis_meta(img, out: torch.Tensor, affine: torch.Tensor, axis: int):
    from monai.data import MetaTensor

    meta = {k: v for k, v in img.meta.items() if k != "affine"}
    meta["spatial_shape"] = np.asarray(out.shape)
    out = MetaTensor(out, affine=affine, meta=meta)
    world = world_meta(affine.numpy())
    out.meta["spacing"] = np.delete(world["spacing"], axis) if out.ndim < world["spacing"].size else world["spacing"]
    out.meta["origin"] = world["origin"]
    out.meta["direction"] = world["direction"]
    return out


def select_slice(img, index: int, axis: int = 2):
    """One slice of a 3-D ``MetaTensor`` ``(x, y, z)`` -> 2-D ``MetaTensor``.

    ``axis`` is a spatial axis (``2`` = ``z`` for a stack of short-axis slices). The affine
    stays ``4 x 4``: the remaining axes keep their columns, the sliced axis' column moves last,
    and the origin moves to the slice, so the slice keeps its 3-D position and orientation.
    ``meta["spacing"]`` lists the two in-plane spacings.
    """
    if img.ndim != 3:
        raise ValueError(f"select_slice expects a 3-D image (x, y, z), got shape {tuple(img.shape)}.")
    axis = axis % 3
    n = img.shape[axis]
    if not -n <= index < n:
        raise ValueError(f"slice index {index} is out of range for axis {axis} of size {n}.")
    index = index % n
    affine = img.affine.clone().to(torch.float64)
    if affine.shape != (4, 4):
        raise ValueError(f"select_slice needs a 4x4 affine, got {tuple(affine.shape)}.")
    origin = affine[:3, 3] + affine[:3, axis] * index
    keep = [a for a in range(3) if a != axis] + [axis]
    new = torch.eye(4, dtype=torch.float64)
    new[:3, :3] = affine[:3, keep]
    new[:3, 3] = origin
    out = img.as_tensor().select(axis, index).clone()
    result = _drop_axis_meta(img, out, new, 2)
    result.meta["spacing"] = world_meta(new.numpy())["spacing"][:2]
    return result


def select_frame(img, index: int, axis: int = -1):
    """One frame of a time series: ``(x, y, z, t)`` -> ``(x, y, z)`` or ``(x, y, t)`` -> ``(x, y)``.

    The affine (which only describes space) is kept; for a 2-D cine read by ITK (whose third
    "spatial" axis is time) the affine keeps its ``4 x 4`` form and the frame's position.
    """
    axis = axis % img.ndim
    n = img.shape[axis]
    if not -n <= index < n:
        raise ValueError(f"frame index {index} is out of range for axis {axis} of size {n}.")
    out = img.as_tensor().select(axis, index % n).clone()
    affine = img.affine.clone().to(torch.float64)
    result = _drop_axis_meta(img, out, affine, axis)
    result.meta["spacing"] = world_meta(affine.numpy())["spacing"][: out.ndim]
    return result
