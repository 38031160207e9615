"""Reading images with MONAI's ``LoadImage`` readers (ITK, NiBabel, PIL) into ``MetaTensor`` objects.

:func:`load_image` returns MONAI's axis order (``x, y[, z[, t]]``, no channel axis) with the RAS
``affine`` MONAI computes and adds ``spacing``, ``origin`` and ``direction`` (ITK's LPS world) to
``meta`` (:func:`~monai_npc.data.io.geometry.world_meta`). :func:`to_array_order` converts to the
array order of the dataset loaders.
"""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import Tuple

import numpy as np
import torch

from .dicom import is_dicom_file
from .formats import PIL_SUFFIXES, PathLike, check_mhd_data_file, image_suffix
from .geometry import world_meta
from .selection import select_frame
from .sitk_file import read_sitk_file

__all__ = ["load_image", "to_array_order", "read_array"]


def _reader_for(path: Path, reader):
    if reader is not None:
        return reader
    from monai.data import ITKReader, PILReader

    if path.is_dir():
        return ITKReader()  # DICOM series folder
    suffix = image_suffix(path)
    if suffix in PIL_SUFFIXES:
        return PILReader(converter=lambda im: im.convert("L") if im.mode not in ("L", "I", "I;16", "F") else im)
    if suffix in (".mhd", ".mha", ".nrrd", ".nhdr", ".dcm", ".tif", ".tiff") or (not suffix and is_dicom_file(path)):
        return ITKReader()
    return None  # MONAI's default choice (NiBabel for NIfTI)


def load_image(path: PathLike, reader=None, dtype=np.float32):
    """Read one image into a ``MetaTensor`` ``(*S)`` (MONAI axis order, no channel axis).

    Args:
        path: NIfTI (``.nii``, ``.nii.gz``), MetaImage (``.mhd`` + ``.raw``, ``.mha``), NRRD,
            PNG/JPEG (converted to grayscale), a DICOM file (single frame -> 2-D ``(x, y)``;
            multi-frame cine -> ``(x, y, frame)``) or a folder holding one DICOM series
            (-> ``(x, y, slice)``).
        reader: a MONAI reader instance or name to force one (e.g. ``"PydicomReader"``).
        dtype: output dtype (``None`` keeps the file's).

    Returns:
        ``MetaTensor`` with ``affine`` (RAS, as MONAI) and ``meta["spacing"]`` (mm per axis),
        ``meta["origin"]`` and ``meta["direction"]`` (LPS), ``meta["filename_or_obj"]``.

    Raises:
        FileNotFoundError: ``path`` does not exist.
        ValueError: the file cannot be read (corrupt, unsupported), naming the file.
    """
    from monai.transforms import LoadImage

    path = Path(path)
    if not path.exists():
        raise FileNotFoundError(f"image not found: {path}")
    if path.is_dir() and not any(p.is_file() for p in path.iterdir()):
        raise FileNotFoundError(f"DICOM series folder is empty: {path}")
    if path.suffix.lower() == ".mhd":
        check_mhd_data_file(path)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            img = LoadImage(reader=_reader_for(path, reader), image_only=True, dtype=dtype)(str(path))
    except Exception as err:  # MONAI wraps reader failures in RuntimeError / OptionalImportError
        if path.is_file() and image_suffix(path) not in PIL_SUFFIXES:
            read_sitk_file(path)  # a one-line reason (truncated, corrupt) instead of MONAI's "install the reader libraries"
        first = str(err).strip().splitlines()[0] if str(err).strip() else ""
        raise ValueError(f"cannot read image {path}: {type(err).__name__}: {first}") from None
    if (
        img.ndim == 3
        and img.shape[-1] == 1
        and path.is_file()
        and (image_suffix(path) == ".dcm" or not image_suffix(path))
    ):  # a single-frame DICOM file: ITK reports a unit third axis; keep its 3-D position
        img = select_frame(img, 0, axis=2)
    img.meta.update(world_meta(img.affine.numpy()))
    img.meta["spacing"] = img.meta["spacing"][: img.ndim]  # a 2-D image may carry a 4 x 4 affine
    img.meta["filename_or_obj"] = str(path)
    return img


def to_array_order(img) -> Tuple[np.ndarray, Tuple[float, ...]]:
    """``MetaTensor`` ``(x, y[, z])`` -> numpy array ``([z,] y, x)`` and spacing in that order (mm).

    This is the order of SimpleITK's ``GetArrayFromImage`` and of the SSL4MIS HDF5 files.
    """
    arr = np.asarray(img.detach().cpu() if isinstance(img, torch.Tensor) else img)
    spacing = img.meta.get("spacing") if hasattr(img, "meta") else None
    if spacing is None:
        spacing = np.ones(arr.ndim)
    spacing = tuple(float(s) for s in np.asarray(spacing)[: arr.ndim][::-1])
    return np.ascontiguousarray(arr.transpose(tuple(range(arr.ndim))[::-1])), spacing


def read_array(path: PathLike, dtype=np.float32) -> Tuple[np.ndarray, Tuple[float, ...]]:
    """:func:`load_image` then :func:`to_array_order`: ``(array, spacing)`` in array order."""
    return to_array_order(load_image(path, dtype=dtype))
