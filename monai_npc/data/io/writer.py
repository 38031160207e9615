"""Writing array-order images with SimpleITK (NIfTI, MetaImage, NRRD, ...)."""

from __future__ import annotations

from pathlib import Path
from typing import Optional, Sequence

import numpy as np

from .formats import PathLike, image_suffix

__all__ = ["write_image"]


def write_image(
    array: np.ndarray,
    path: PathLike,
    spacing: Optional[Sequence[float]] = None,
    origin: Optional[Sequence[float]] = None,
    direction: Optional[Sequence[float]] = None,
    vector: bool = False,
) -> Path:
    """Write an array-order array (``(Z, H, W)`` / ``(H, W)``; with ``vector``: components last)
    with SimpleITK; the format follows the suffix (``.nii.gz``, ``.mhd`` + ``.raw``, ``.nrrd``, ...).

    ``spacing`` (mm) and ``origin`` are given in array order, like the array (they are
    reversed to ITK's ``x, y, z`` order here); ``direction`` is ITK's flattened matrix.
    ``.mhd`` files are written uncompressed with a ``.raw`` file beside them, as in CAMUS.
    """
    import SimpleITK as sitk

    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    image = sitk.GetImageFromArray(np.ascontiguousarray(array), isVector=vector)
    dim = image.GetDimension()
    if spacing is not None:
        if len(spacing) != dim:
            raise ValueError(f"spacing {tuple(spacing)} has {len(spacing)} values for a {dim}-D image ({path}).")
        image.SetSpacing([float(s) for s in spacing][::-1])
    if origin is not None:
        image.SetOrigin([float(o) for o in origin][::-1])
    if direction is not None:
        image.SetDirection([float(v) for v in direction])
    use_compression = image_suffix(path) in (".nii.gz",)
    sitk.WriteImage(image, str(path), use_compression)
    return path
