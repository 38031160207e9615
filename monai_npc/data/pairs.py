"""Registration pair items shared by the ACDC, CAMUS and phantom datasets.

A *frame item* holds both frames of one slice/view: ``ed``, ``es`` ``(1, H, W)`` float32,
``ed_label``, ``es_label`` ``(1, H, W)`` uint8 and optionally the true displacements
``ddf_ed_es``, ``ddf_es_ed`` ``(2, H, W)`` float32 (voxels, MONAI ``Warp`` convention).

A *pair item* (what the builders return and the bundles consume) holds

- ``moving``, ``fixed``: ``(1, H, W)`` float32 in ``[0, 1]``;
- ``moving_label``, ``fixed_label``: ``(1, H, W)`` uint8 label maps;
- ``patient`` (str), ``slice`` (int), ``direction`` (``"ED->ES"`` or ``"ES->ED"``), plus
  dataset-specific metadata (``view`` for CAMUS, ``spacing`` ``(h, w)`` in mm when the
  layout stores it);
- ``ddf`` ``(2, H, W)`` float32 when the truth is known (phantoms): channel ``k`` is the
  displacement along axis ``k`` in voxels and ``warp(moving, ddf) == fixed``.

For ``"ED->ES"`` the moving image is ED and the fixed image ES; ``"ES->ED"`` swaps them.
The two directions of one slice share the same arrays (no copy).
"""

from __future__ import annotations

from typing import Dict, Hashable, List, Mapping, Sequence

import numpy as np
from monai.transforms import Compose, EnsureTyped

from monai_npc.transforms import ConcatPaird, RandPairFlipd

__all__ = ["DIRECTIONS", "IMAGE_KEYS", "LABEL_KEYS", "frame_item_to_numpy", "frames_to_pairs", "pair_transforms", "make_dataset"]

DIRECTIONS = ("ED->ES", "ES->ED")
IMAGE_KEYS = ("moving", "fixed")
LABEL_KEYS = ("moving_label", "fixed_label")
_FRAME_KEYS = {"ED->ES": ("ed", "es", "ddf_ed_es"), "ES->ED": ("es", "ed", "ddf_es_ed")}


def frame_item_to_numpy(item: Mapping[Hashable, object]) -> Dict:
    """A preprocessed frame item back to numpy: labels ``uint8``, other arrays ``float32``, the rest as is."""
    out = {}
    for k, v in item.items():
        if hasattr(v, "detach"):
            v = v.detach().cpu().numpy()
        if k in ("ed_label", "es_label"):
            v = np.asarray(v).astype(np.uint8)
        elif isinstance(v, np.ndarray):
            v = v.astype(np.float32, copy=False)
        out[k] = v
    return out


def frames_to_pairs(item: Mapping[Hashable, object], directions: Sequence[str] = DIRECTIONS) -> List[Dict]:
    """One pair item per direction from a frame item (see the module docstring).

    Keys other than the frame arrays (``patient``, ``slice``, ``view``, ``spacing``, ...) are
    copied into every pair.
    """
    frame_keys = {"ed", "es", "ed_label", "es_label", "ddf_ed_es", "ddf_es_ed"}
    pairs = []
    for direction in directions:
        if direction not in _FRAME_KEYS:
            raise ValueError(f"direction must be one of {DIRECTIONS}, got {direction!r}.")
        mov, fix, ddf_key = _FRAME_KEYS[direction]
        pair = {k: v for k, v in item.items() if k not in frame_keys}
        pair.update(
            moving=item[mov],
            fixed=item[fix],
            moving_label=item[f"{mov}_label"],
            fixed_label=item[f"{fix}_label"],
            direction=direction,
        )
        if ddf_key in item:
            pair["ddf"] = item[ddf_key]
        pairs.append(pair)
    return pairs


def pair_transforms(augment: bool = False, flip_prob: float = 0.5, concat: bool = True) -> Compose:
    """Transforms from pair items to network input.

    ``augment``: random h/v flips (``flip_prob`` each) shared by both images, both labels and
    the ``ddf`` (ACDC training). Then images, labels and ``ddf`` become float32 tensors and, with
    ``concat``, ``moving`` + ``fixed`` are stacked into ``image`` ``(2, H, W)``.
    """
    keys = list(IMAGE_KEYS + LABEL_KEYS)
    steps = []
    if augment:
        steps.append(RandPairFlipd(keys=keys, prob=flip_prob, ddf_keys=("ddf",), allow_missing_keys=True))
    steps.append(EnsureTyped(keys=keys + ["ddf"], dtype="float32", allow_missing_keys=True))
    if concat:
        steps.append(ConcatPaird())
    return Compose(steps)


def make_dataset(pairs: Sequence[Mapping], transform=None, cache: bool = False):
    """``monai.data.Dataset`` (or ``CacheDataset`` with ``cache``) over ``pairs``.

    ``transform`` defaults to :func:`pair_transforms` without augmentation.
    """
    from monai.data import CacheDataset, Dataset

    transform = pair_transforms() if transform is None else transform
    if cache:
        return CacheDataset(list(pairs), transform=transform, progress=False)
    return Dataset(list(pairs), transform=transform)
