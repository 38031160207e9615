"""Medical image I/O: NIfTI, MHD/MHA, NRRD, PNG/JPEG, DICOM (file, multi-frame, series), HDF5.

Reading goes through MONAI's ``LoadImage`` readers (ITK, NiBabel, PIL) and returns
``MetaTensor`` objects in MONAI's axis order (``x, y[, z[, t]]``, no channel axis) with the
RAS ``affine`` MONAI computes. :func:`load_image` adds three entries to ``meta`` in the file's
own (ITK, LPS) world convention:

- ``spacing``: voxel size per spatial array axis, mm;
- ``origin``: world position of voxel 0, mm (LPS, as ITK/DICOM report it);
- ``direction``: ``(d, d)`` direction cosines, column ``k`` = axis ``k`` (LPS).

The dataset loaders of this package work on plain numpy arrays in *array order*: the order
SimpleITK's ``GetArrayFromImage`` and the SSL4MIS HDF5 files use, ``(Z, H, W)`` / ``(H, W)``
(rows = image ``y``, columns = image ``x``). :func:`to_array_order` converts, and
:func:`write_image` writes array-order data with spacing, origin and direction.
"""

from __future__ import annotations

import os
import warnings
from pathlib import Path
from typing import Dict, Optional, Sequence, Tuple, Union

import numpy as np
import torch

__all__ = [
    "IMAGE_SUFFIXES",
    "image_suffix",
    "find_image",
    "load_image",
    "select_slice",
    "select_frame",
    "to_array_order",
    "read_array",
    "read_h5",
    "read_vector_image",
    "write_image",
]

PathLike = Union[str, os.PathLike]

#: file endings this module reads, longest first (``find_image`` tries them in this order)
IMAGE_SUFFIXES: Tuple[str, ...] = (
    ".nii.gz", ".nii", ".mhd", ".mha", ".nrrd", ".nhdr", ".dcm", ".png", ".jpg", ".jpeg", ".tif", ".tiff",
)
_PIL_SUFFIXES = (".png", ".jpg", ".jpeg")


def image_suffix(path: PathLike) -> str:
    """The recognised ending of ``path`` (``".nii.gz"``, ``".mhd"``, ...), or ``""``."""
    name = Path(path).name.lower()
    for suffix in IMAGE_SUFFIXES:
        if name.endswith(suffix):
            return suffix
    return ""


def find_image(stem: PathLike, suffixes: Sequence[str] = (".nii.gz", ".nii", ".mhd", ".mha", ".nrrd")) -> Optional[Path]:
    """First existing file ``stem + suffix`` over ``suffixes``, else ``None``."""
    for suffix in suffixes:
        candidate = Path(str(stem) + suffix)
        if candidate.is_file():
            return candidate
    return None


def _is_dicom_file(path: Path) -> bool:
    if path.suffix.lower() == ".dcm":
        return True
    try:
        import pydicom.misc

        return bool(pydicom.misc.is_dicom(str(path)))
    except Exception:  # pragma: no cover - unreadable header: let the reader report it
        return False


def _world_meta(affine: np.ndarray) -> Dict[str, np.ndarray]:
    """``spacing``, LPS ``origin`` and ``direction`` from MONAI's RAS ``affine`` ``(r+1, r+1)``."""
    from monai.data.utils import orientation_ras_lps

    lps = np.asarray(orientation_ras_lps(np.asarray(affine, dtype=np.float64)))
    rank = lps.shape[0] - 1
    linear = lps[:rank, :rank]
    spacing = np.linalg.norm(linear, axis=0)
    direction = linear / np.where(spacing > 0, spacing, 1.0)
    return {"spacing": spacing, "origin": lps[:rank, rank].copy(), "direction": direction}


def _reader_for(path: Path, reader):
    if reader is not None:
        return reader
    from monai.data import ITKReader, PILReader

    if path.is_dir():
        return ITKReader()  # DICOM series folder
    suffix = image_suffix(path)
    if suffix in _PIL_SUFFIXES:
        return PILReader(converter=lambda im: im.convert("L") if im.mode not in ("L", "I", "I;16", "F") else im)
    if suffix in (".mhd", ".mha", ".nrrd", ".nhdr", ".dcm", ".tif", ".tiff") or (not suffix and _is_dicom_file(path)):
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
        _check_mhd_data_file(path)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            img = LoadImage(reader=_reader_for(path, reader), image_only=True, dtype=dtype)(str(path))
    except Exception as err:  # MONAI wraps reader failures in RuntimeError / OptionalImportError
        raise ValueError(f"cannot read image {path}: {type(err).__name__}: {err}") from err
    if (
        img.ndim == 3
        and img.shape[-1] == 1
        and path.is_file()
        and (image_suffix(path) == ".dcm" or not image_suffix(path))
    ):  # a single-frame DICOM file: ITK reports a unit third axis; keep its 3-D position
        img = select_frame(img, 0, axis=2)
    img.meta.update(_world_meta(img.affine.numpy()))
    img.meta["spacing"] = img.meta["spacing"][: img.ndim]  # a 2-D image may carry a 4 x 4 affine
    img.meta["filename_or_obj"] = str(path)
    return img


def _check_mhd_data_file(path: Path) -> None:
    """Raise a clear error when an ``.mhd`` header's ``ElementDataFile`` is missing."""
    try:
        text = path.read_text(errors="replace")
    except OSError as err:
        raise ValueError(f"cannot read MetaImage header {path}: {err}") from err
    for line in text.splitlines():
        key, _, value = line.partition("=")
        if key.strip() == "ElementDataFile":
            value = value.strip()
            if value.upper() in ("LOCAL", "LIST") or value.startswith("%"):
                return
            data = path.parent / value
            if not data.is_file():
                raise FileNotFoundError(f"MetaImage {path} names data file {value}, which is missing: {data}")
            return
    raise ValueError(f"MetaImage header {path} has no ElementDataFile entry (corrupt header?)")


def _drop_axis_meta(img, out: torch.Tensor, affine: torch.Tensor, axis: int):
    from monai.data import MetaTensor

    meta = {k: v for k, v in img.meta.items() if k != "affine"}
    meta["spatial_shape"] = np.asarray(out.shape)
    out = MetaTensor(out, affine=affine, meta=meta)
    world = _world_meta(affine.numpy())
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
    result.meta["spacing"] = _world_meta(new.numpy())["spacing"][:2]
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
    result.meta["spacing"] = _world_meta(affine.numpy())["spacing"][: out.ndim]
    return result


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


def read_vector_image(path: PathLike) -> Tuple[np.ndarray, Tuple[float, ...]]:
    """Read a multi-component image (e.g. a displacement field) with SimpleITK.

    Returns the array in array order with components last (``(Z, H, W, C)`` / ``(H, W, C)``)
    and the spacing in array order (mm). ``FileNotFoundError`` / ``ValueError`` name the file.
    """
    import SimpleITK as sitk

    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"image not found: {path}")
    if path.suffix.lower() == ".mhd":
        _check_mhd_data_file(path)
    try:
        image = sitk.ReadImage(str(path))
    except Exception as err:
        raise ValueError(f"cannot read image {path}: {err}") from err
    arr = sitk.GetArrayFromImage(image)
    if image.GetNumberOfComponentsPerPixel() == 1:
        arr = arr[..., None]
    return arr, tuple(float(v) for v in image.GetSpacing()[::-1])


def read_h5(path: PathLike, keys: Sequence[str] = ("image", "label")) -> Dict[str, np.ndarray]:
    """Read datasets ``keys`` of an HDF5 file into numpy arrays.

    Raises ``FileNotFoundError`` for a missing file and ``ValueError`` naming the file for a
    corrupt file or a missing dataset.
    """
    import h5py

    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"HDF5 file not found: {path}")
    try:
        with h5py.File(path, "r") as f:
            missing = [k for k in keys if k not in f]
            if missing:
                raise ValueError(f"HDF5 file {path} lacks dataset(s) {missing}; it has {sorted(f.keys())}")
            return {k: np.asarray(f[k][()]) for k in keys}
    except ValueError:
        raise
    except Exception as err:  # OSError for truncated/corrupt files
        raise ValueError(f"cannot read HDF5 file {path}: {type(err).__name__}: {err}") from err


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
