"""Medical image I/O: NIfTI, MHD/MHA, NRRD, PNG/JPEG, DICOM (file, multi-frame, series), HDF5.

Reading goes through MONAI's ``LoadImage`` readers (ITK, NiBabel, PIL) and returns
``MetaTensor`` objects in MONAI's axis order (``x, y[, z[, t]]``, no channel axis) with the
RAS ``affine`` MONAI computes. :func:`load_image` adds three entries to ``meta`` in the file's
own (ITK, LPS) world convention:

- ``spacing``: voxel size per spatial array axis, mm;
- ``origin``: world position of voxel 0, mm (LPS, as ITK/DICOM report it);
- ``direction``: ``(d, d)`` direction cosines, column ``k`` = axis ``k`` (LPS).

:func:`read_sitk_image` reads the same files straight into a ``SimpleITK.Image`` (LPS geometry)
without importing MONAI or ITK Python (the fast path of ``monai-npc register``); it also picks
one phase, slice or frame out of a cine DICOM folder (:func:`read_dicom_folder`).

The dataset loaders of this package work on plain numpy arrays in *array order*: the order
SimpleITK's ``GetArrayFromImage`` and the SSL4MIS HDF5 files use, ``(Z, H, W)`` / ``(H, W)``
(rows = image ``y``, columns = image ``x``). :func:`to_array_order` converts, and
:func:`write_image` writes array-order data with spacing, origin and direction.
"""

from __future__ import annotations

import os
import warnings
from pathlib import Path
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple, Union

import numpy as np
import torch

__all__ = [
    "IMAGE_SUFFIXES",
    "image_suffix",
    "find_image",
    "load_image",
    "read_sitk_image",
    "read_dicom_folder",
    "parse_select",
    "to_grayscale",
    "read_sitk_file",
    "check_nifti",
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
        if path.is_file() and image_suffix(path) not in _PIL_SUFFIXES:
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
    image = read_sitk_file(path)
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


# --------------------------------------------------------------------------------------------
# SimpleITK reading (no MONAI, no ITK Python): the fast path of ``monai-npc register``

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


def _nifti_layout(header: bytes) -> Optional[Tuple[int, np.dtype, Tuple[int, ...]]]:
    """``(data offset, voxel dtype or None, shape)`` from a NIfTI-1/2 header, or ``None`` when not NIfTI."""
    import struct

    codes = {2: "u1", 4: "i2", 8: "i4", 16: "f4", 64: "f8", 256: "i1", 512: "u2", 768: "u4", 1024: "i8", 1280: "u8"}
    for endian in "<>":
        size = struct.unpack(endian + "i", header[:4])[0] if len(header) >= 4 else 0
        if size == 348 and len(header) >= 112:  # NIfTI-1
            dim = struct.unpack(endian + "8h", header[40:56])
            code, bitpix = struct.unpack(endian + "2h", header[70:74])
            offset = int(struct.unpack(endian + "f", header[108:112])[0])
        elif size == 540 and len(header) >= 176:  # NIfTI-2
            dim = struct.unpack(endian + "8q", header[16:80])
            code, bitpix = struct.unpack(endian + "2h", header[12:16])
            offset = int(struct.unpack(endian + "q", header[168:176])[0])
        else:
            continue
        rank = int(dim[0])
        if not 1 <= rank <= 7 or bitpix <= 0:
            return None
        shape = tuple(max(int(d), 1) for d in dim[1 : rank + 1])
        dtype = np.dtype(endian + codes[code]) if code in codes else None
        if dtype is not None and dtype.itemsize * 8 != bitpix:
            dtype = None
        return max(offset, size), (dtype if dtype is not None else np.dtype(f"V{max(bitpix, 8) // 8}")), shape
    return None


def check_nifti(path: PathLike, what: str = "image") -> None:
    """``ValueError`` naming ``path`` when a ``.nii``/``.nii.gz`` file is truncated or holds NaN/Inf voxels.

    ITK (and so SimpleITK, ANTs) reads a truncated NIfTI file without complaint, filling the
    missing voxels with zeros, and silently replaces NaN/Inf voxels by 0 (NIfTI-lib's rule); this
    check makes both an error. The file is read (and decompressed) once more to check it.
    """
    import gzip
    import zlib

    path = Path(path)
    suffix = image_suffix(path)
    if suffix not in (".nii", ".nii.gz"):
        return
    try:
        if suffix == ".nii":
            data, complete = path.read_bytes(), True
        else:
            inflate, parts = zlib.decompressobj(16 + zlib.MAX_WBITS), []
            with path.open("rb") as f:
                for chunk in iter(lambda: f.read(1 << 22), b""):
                    parts.append(inflate.decompress(chunk))
                    while inflate.eof and inflate.unused_data:  # concatenated gzip members
                        rest, inflate = inflate.unused_data, zlib.decompressobj(16 + zlib.MAX_WBITS)
                        parts.append(inflate.decompress(rest))
            data, complete = b"".join(parts), inflate.eof
    except (OSError, zlib.error, EOFError, gzip.BadGzipFile) as err:
        raise ValueError(f"cannot read {what} {path}: the file is corrupt ({type(err).__name__}: {err}).") from None
    layout = _nifti_layout(data[:540])
    if layout is None:
        return  # not a NIfTI header: let the reader report it
    offset, dtype, shape = layout
    expected = offset + int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
    if not complete or len(data) < expected:
        raise ValueError(
            f"cannot read {what} {path}: the file is truncated ({len(data)} of the {expected} bytes its header needs"
            + ("" if complete else "; the gzip stream ends early") + ")."
        )
    if dtype.kind == "f":
        voxels = np.frombuffer(data, dtype, count=int(np.prod(shape, dtype=np.int64)), offset=offset)
        bad = int(voxels.size - np.count_nonzero(np.isfinite(voxels)))
        if bad:
            raise ValueError(f"{what} {path} contains {bad} non-finite (NaN/Inf) value(s) out of {voxels.size}.")


def _one_line(err: Exception) -> str:
    """The informative line of an ITK exception (its ``ITK ERROR:`` reason), without C++ file names."""
    lines = [ln.strip() for ln in str(err).splitlines() if ln.strip()]
    for ln in lines:
        if "ITK ERROR" in ln:
            return ln.split(":", 2)[-1].strip() if ln.count(":") >= 2 else ln
    return lines[-1] if lines else type(err).__name__


def sform_disagrees(scales: Sequence[float], pixdim: Sequence[float]) -> bool:
    """ITK's rule: a NIfTI sform whose voxel sizes ``scales`` differ from the header's ``pixdim``
    (relative 1e-3) is not used; the qform is. Shared by :func:`sform_mismatch` (files) and
    :func:`monai_npc.interop.images.nibabel_to_sitk` (nibabel images)."""
    return not np.allclose(np.asarray(scales, dtype=np.float64), np.asarray(pixdim, dtype=np.float64), rtol=1e-3)


def sform_mismatch(path: PathLike) -> Optional[Tuple[Tuple[float, ...], Tuple[float, ...]]]:
    """``(sform voxel sizes, pixdim)`` in mm when a NIfTI-1 file's sform scales disagree with its
    pixdim (ITK then reads the qform, and warns), else ``None`` (also for other formats).

    The official ACDC files are like this: a 1 mm sform and the real 1.4-1.7 mm pixdim.
    """
    import gzip
    import struct

    path = Path(path)
    suffix = image_suffix(path)
    if suffix not in (".nii", ".nii.gz"):
        return None
    try:
        with (gzip.open(path, "rb") if suffix == ".nii.gz" else path.open("rb")) as f:
            header = f.read(348)
    except (OSError, EOFError):
        return None  # check_nifti / the reader report unreadable files
    for endian in "<>":
        if len(header) < 348 or struct.unpack(endian + "i", header[:4])[0] != 348:
            continue
        rank = max(1, min(int(struct.unpack(endian + "h", header[40:42])[0]), 3))
        pixdim = np.abs(np.asarray(struct.unpack(endian + "8f", header[76:108])[1 : rank + 1], dtype=np.float64))
        if struct.unpack(endian + "h", header[254:256])[0] <= 0:
            return None  # no sform: ITK reads the qform anyway
        srow = np.asarray(struct.unpack(endian + "12f", header[280:328]), dtype=np.float64).reshape(3, 4)
        scales = np.linalg.norm(srow[:, :rank], axis=0)
        if not sform_disagrees(scales, pixdim):
            return None
        return tuple(round(float(v), 4) for v in scales), tuple(round(float(v), 4) for v in pixdim)
    return None


#: files whose sform / pixdim disagreement :func:`read_sitk_file` has logged in this process
_SFORM_NOTED: set = set()


def read_sitk_file(path: Path, what: str = "image"):
    """``sitk.ReadImage(path)`` with one-line ``ValueError``s naming ``what`` and the file for unreadable,
    truncated or (NIfTI) NaN-holding files (:func:`check_nifti`).

    A NIfTI file whose sform disagrees with its pixdim (:func:`sform_mismatch`) is read as ITK reads
    it (from the qform); ITK's own console warning is replaced by one ``logging`` INFO line naming
    the file and both voxel sizes, once per file and process.
    """
    import logging

    import SimpleITK as sitk

    check_nifti(path, what)
    mismatch = sform_mismatch(path)
    shown = sitk.ProcessObject.GetGlobalWarningDisplay()
    if mismatch:
        sitk.ProcessObject.GlobalWarningDisplayOff()
        if str(path) not in _SFORM_NOTED:  # once per file and process: an evaluation reads each file several times
            _SFORM_NOTED.add(str(path))
            logging.getLogger(__name__).info("%s %s: the sform's voxel sizes %s mm disagree with pixdim %s mm; the qform is used, as ITK does.",
                                             what, path, mismatch[0], mismatch[1])
    reader = sitk.ImageFileReader()
    reader.SetFileName(str(path))
    try:
        try:
            reader.ReadImageInformation()
        except RuntimeError as err:
            raise ValueError(f"cannot read {what} {path}: not a readable image file ({_one_line(err)}).") from None
        try:
            return reader.Execute()
        except RuntimeError:
            raise ValueError(
                f"cannot read {what} {path}: the file is truncated or corrupt: its header is readable but its pixel data is not "
                f"(size {reader.GetSize()}, {sitk.GetPixelIDValueAsString(reader.GetPixelID())})."
            ) from None
    finally:
        if mismatch and shown:
            sitk.ProcessObject.GlobalWarningDisplayOn()


def to_grayscale(image):
    """A colour (RGB/RGBA) 2-D image -> luminance ``0.299 R + 0.587 G + 0.114 B`` (as PIL's ``"L"``), float32."""
    import SimpleITK as sitk

    comps = image.GetNumberOfComponentsPerPixel()
    if comps == 1:
        return image
    if comps not in (3, 4):
        raise ValueError(f"expected a scalar, RGB or RGBA image, got {comps} components per pixel.")
    rgb = sitk.GetArrayFromImage(image).astype(np.float32)
    gray = sitk.GetImageFromArray(rgb[..., 0] * 0.299 + rgb[..., 1] * 0.587 + rgb[..., 2] * 0.114)
    gray.CopyInformation(image)
    return gray


def _extract_slice(image, index: int, what: str):
    """Slice ``index`` (index axis 2) of a 3-D image as a one-slice 3-D image with its own position."""
    import SimpleITK as sitk

    if image.GetDimension() != 3:
        raise ValueError(f"frame={index} needs a 3-D image or a multi-frame file; {what} is {image.GetDimension()}-D.")
    n = image.GetSize()[2]
    if not 0 <= index < n:
        raise ValueError(f"frame={index} is out of range: {what} has {n} frame(s) (0..{n - 1}).")
    size = list(image.GetSize())
    size[2] = 1
    return sitk.RegionOfInterest(image, size, [0, 0, int(index)])


def read_sitk_image(path: PathLike, select: Union[None, str, Mapping[str, Any]] = None, what: str = "image"):
    """Read an image file or DICOM folder into a ``SimpleITK.Image`` with its LPS geometry.

    Same formats as :func:`load_image` (NIfTI, MHD/MHA, NRRD, DICOM file or folder, PNG/JPEG,
    TIFF) and the same geometry (ITK's), without MONAI. Colour PNG/JPEG/TIFF become grayscale
    (PIL's ``"L"`` weights). A single-frame DICOM file is a one-slice 3-D image (it keeps its
    position in the scanner).

    Args:
        path: file or DICOM folder.
        select: pick part of the input (:func:`parse_select`, :data:`SELECT_KEYS`): a phase,
            slice or instance of a DICOM folder (:func:`read_dicom_folder`) or ``frame=K`` of a
            multi-frame file / volume.
        what: how errors name the input (``"moving image"``...).

    Raises:
        FileNotFoundError: ``path`` (or a MetaImage's data file) does not exist.
        ValueError: unreadable, truncated or corrupt files, 4-D images, bad selections; one line
            naming the file.
    """
    path = Path(path)
    select = parse_select(select)
    if not path.exists():
        raise FileNotFoundError(f"{what} not found: {path}")
    if path.is_dir():
        return read_dicom_folder(path, select, what)
    folder_keys = sorted(set(select) - {"frame"})
    if folder_keys:
        raise ValueError(f"{what} {path}: selection {folder_keys} applies to DICOM folders; a file takes frame=K only.")
    if path.suffix.lower() == ".mhd":
        _check_mhd_data_file(path)
    image = to_grayscale(read_sitk_file(path, what))
    if image.GetDimension() == 4:
        if "frame" not in select:
            raise ValueError(
                f"{what} {path} is 4-D (size {image.GetSize()}): a time series? pick a frame with frame=K "
                f"(e.g. --moving-select frame=0)."
            )
        import SimpleITK as sitk

        n = image.GetSize()[3]
        if not 0 <= select["frame"] < n:
            raise ValueError(f"frame={select['frame']} is out of range: {what} {path} has {n} frames (0..{n - 1}).")
        size = list(image.GetSize())
        size[3] = 0
        return sitk.Extract(image, size, [0, 0, 0, select["frame"]])
    if "frame" in select:
        return _extract_slice(image, select["frame"], f"{what} {path}")
    return image


def _dicom_headers(folder: Path) -> List[Tuple[Path, Any]]:
    """``(file, pydicom dataset without pixels)`` for every DICOM file directly in ``folder``."""
    import pydicom
    from pydicom.errors import InvalidDicomError

    out = []
    for f in sorted(p for p in folder.iterdir() if p.is_file()):
        try:
            ds = pydicom.dcmread(str(f), stop_before_pixels=True)
        except (InvalidDicomError, OSError, EOFError, ValueError):
            continue
        if "PixelData" in ds or getattr(ds, "Rows", None):
            out.append((f, ds))
    return out


def _position_along_normal(ds) -> Optional[float]:
    iop, ipp = getattr(ds, "ImageOrientationPatient", None), getattr(ds, "ImagePositionPatient", None)
    if iop is None or ipp is None:
        return None
    normal = np.cross(np.asarray(iop[:3], float), np.asarray(iop[3:], float))
    return float(np.dot(normal, np.asarray(ipp, float)))


def _phase_key(ds) -> Tuple[float, int]:
    trigger = getattr(ds, "TriggerTime", None)
    return (float(trigger) if trigger not in (None, "") else float("nan"), int(getattr(ds, "InstanceNumber", 0) or 0))


def read_dicom_folder(folder: PathLike, select: Union[None, str, Mapping[str, Any]] = None, what: str = "image"):
    """Read a DICOM folder with SimpleITK, picking one series, phase, slice or instance.

    A plain series (one file per slice position) is read as a volume ``(x, y, slice)``, slices
    sorted along the slice normal. A cine series (several files per position: cardiac phases,
    as scanners store short-axis cines in one series) must be narrowed with ``select``:
    ``phase=K`` (0-based, trigger-time order) or ``trigger_time=MS`` -> the volume of that phase;
    add ``slice=K`` for one slice; ``instance=N`` -> the one file with that InstanceNumber. A
    single file or slice is a one-slice 3-D image at its position.

    Raises:
        FileNotFoundError: an empty folder or one without DICOM files.
        ValueError: several series without ``series=UID``, a cine without a phase, positions
            that are not equally spaced, a selection that matches nothing; each names the folder
            and lists what it holds.
    """
    import SimpleITK as sitk

    folder = Path(folder)
    select = parse_select(select)
    where = f"{what} {folder}"
    files = _dicom_headers(folder)
    if not files:
        raise FileNotFoundError(f"{where}: the folder holds no DICOM image files.")
    series: Dict[str, List[Tuple[Path, Any]]] = {}
    for f, ds in files:
        series.setdefault(str(getattr(ds, "SeriesInstanceUID", "")), []).append((f, ds))
    if "series" in select:
        if select["series"] not in series:
            raise ValueError(f"{where} has no series {select['series']}; it holds {sorted(series)}.")
        files = series[select["series"]]
    elif len(series) > 1:
        listing = "; ".join(
            f"{uid} ({len(v)} files, {getattr(v[0][1], 'SeriesDescription', '') or 'no description'})" for uid, v in series.items()
        )
        raise ValueError(f"{where} holds {len(series)} series: {listing}. Pick one with series=UID.")
    if "frame" in select:
        raise ValueError(f"{where}: frame=K applies to a file; in a folder use phase=K, slice=K or instance=N.")
    if "instance" in select:
        match = [f for f, ds in files if int(getattr(ds, "InstanceNumber", -1) or -1) == select["instance"]]
        if len(match) != 1:
            numbers = sorted(int(getattr(ds, "InstanceNumber", 0) or 0) for _, ds in files)
            raise ValueError(
                f"{where}: {len(match)} files have InstanceNumber {select['instance']} "
                f"(it holds instance numbers {numbers[0]}..{numbers[-1]})."
            )
        return to_grayscale(read_sitk_file(match[0], what))
    # group by slice position; within a position, files are phases in trigger-time order
    positions: Dict[float, List[Tuple[Path, Any]]] = {}
    for f, ds in files:
        z = _position_along_normal(ds)
        if z is None:
            raise ValueError(f"{where}: {f.name} lacks ImagePositionPatient/ImageOrientationPatient; pick a file with instance=N.")
        positions.setdefault(round(z, 3), []).append((f, ds))
    zs = sorted(positions)
    for z in zs:
        positions[z].sort(key=lambda item: _phase_key(item[1]))
    phases = {len(v) for v in positions.values()}
    n_phases = max(phases)
    if n_phases > 1:
        if len(phases) > 1:
            raise ValueError(f"{where}: slice positions hold different numbers of files ({sorted(phases)}); pick one with instance=N.")
        times = [_phase_key(ds)[0] for _, ds in positions[zs[0]]]
        if "phase" in select:
            k = select["phase"]
            if not 0 <= k < n_phases:
                raise ValueError(f"{where}: phase={k} is out of range; the cine has {n_phases} phases (0..{n_phases - 1}).")
        elif "trigger_time" in select:
            if np.isnan(times).all():
                raise ValueError(f"{where}: its files carry no TriggerTime; use phase=K or instance=N.")
            k = int(np.nanargmin(np.abs(np.asarray(times) - select["trigger_time"])))
        else:
            span = f"trigger times {np.nanmin(times):g}..{np.nanmax(times):g} ms" if not np.isnan(times).all() else "no trigger times"
            raise ValueError(
                f"{where} holds a cine series: {n_phases} phases x {len(zs)} slice position(s) in one series ({span}). "
                f"Pick one phase with phase=K (0..{n_phases - 1}) or trigger_time=MS, optionally slice=K "
                f"(0..{len(zs) - 1}), or one file with instance=N (command line: --moving-select / --fixed-select)."
            )
        chosen = [positions[z][k] for z in zs]
    else:
        if "phase" in select and select["phase"] != 0 or "trigger_time" in select:
            raise ValueError(f"{where} is not a cine series (one file per slice position); drop phase/trigger_time.")
        chosen = [positions[z][0] for z in zs]
    if "slice" in select:
        k = select["slice"]
        if not 0 <= k < len(chosen):
            raise ValueError(f"{where}: slice={k} is out of range; it has {len(chosen)} slice position(s) (0..{len(chosen) - 1}).")
        chosen = [chosen[k]]
    if len(chosen) == 1:
        return to_grayscale(read_sitk_file(chosen[0][0], what))
    gaps = np.diff(sorted(positions))
    if np.ptp(gaps) > 1e-2 * max(abs(float(gaps.mean())), 1e-6):
        raise ValueError(
            f"{where}: slice positions are not equally spaced (gaps {', '.join(f'{g:.2f}' for g in gaps)} mm): "
            f"missing slices? Pick one slice with slice=K."
        )
    reader = sitk.ImageSeriesReader()
    reader.SetFileNames([str(f) for f, _ in chosen])
    try:
        return reader.Execute()
    except RuntimeError as err:
        raise ValueError(f"cannot read {where}: {_one_line(err)}") from None
