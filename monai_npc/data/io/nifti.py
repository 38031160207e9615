"""NIfTI header checks ITK does not make: truncated files, NaN/Inf voxels, an sform that disagrees with pixdim."""

from __future__ import annotations

from pathlib import Path
from typing import Optional, Sequence, Tuple

import numpy as np

from .formats import PathLike, image_suffix

__all__ = ["check_nifti", "sform_disagrees", "sform_mismatch"]


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
