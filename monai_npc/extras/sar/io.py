"""Single-band SAR amplitude images: GeoTIFF / TIFF (tifffile, else Pillow) and PNG / JPEG / BMP (Pillow). No GDAL.

A complex image (SLC) is read as its modulus. Geo-referencing tags are ignored: the pair is
registered in pixel coordinates, as phase correlation does.
"""

from __future__ import annotations

from pathlib import Path
from typing import Union

import numpy as np

__all__ = ["AMPLITUDE_SUFFIXES", "read_amplitude", "write_amplitude"]

#: file endings :func:`read_amplitude` reads
AMPLITUDE_SUFFIXES = (".tif", ".tiff", ".png", ".jpg", ".jpeg", ".bmp")

PathLike = Union[str, Path]


def _single_band(array: np.ndarray, path: Path) -> np.ndarray:
    a = np.asarray(array)
    a = np.squeeze(a)
    if a.ndim == 3 and a.shape[-1] in (3, 4):  # grey stored as RGB(A): equal colour channels
        rgb = a[..., :3]
        if np.array_equal(rgb[..., 0], rgb[..., 1]) and np.array_equal(rgb[..., 0], rgb[..., 2]):
            a = rgb[..., 0]
    if a.ndim != 2:
        raise ValueError(f"{path}: expected a single-band amplitude image, got an array of shape {np.shape(array)}.")
    return a


def read_amplitude(path: PathLike) -> np.ndarray:
    """Amplitude ``(H, W)`` float32 (>= 0; complex data -> modulus) of a single-band image file.

    Raises:
        FileNotFoundError: ``path`` does not exist.
        ValueError: unknown ending, several bands, or negative values.
    """
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"amplitude image {path} does not exist.")
    suffix = path.suffix.lower()
    if suffix not in AMPLITUDE_SUFFIXES:
        raise ValueError(f"{path}: unsupported ending {suffix!r}; expected one of {AMPLITUDE_SUFFIXES}.")
    array = None
    if suffix in (".tif", ".tiff"):
        try:
            import tifffile

            array = tifffile.imread(str(path))
        except ImportError:
            array = None
    if array is None:
        from PIL import Image

        with Image.open(path) as im:
            array = np.asarray(im)
    a = _single_band(array, path)
    a = np.abs(a) if np.iscomplexobj(a) else a
    a = a.astype(np.float32)
    if np.nanmin(a) < 0:
        raise ValueError(f"{path}: amplitude images must be >= 0 (min {float(np.nanmin(a))}); pass |SLC| or sqrt(intensity).")
    return a


def write_amplitude(path: PathLike, amplitude: np.ndarray) -> Path:
    """Write ``(H, W)`` amplitude: ``.tif``/``.tiff`` as float32 (tifffile, else Pillow mode ``F``);
    ``.png`` as 16-bit, linearly scaled so the maximum maps to 65535 (relative amplitudes kept)."""
    path = Path(path)
    a = np.asarray(amplitude, dtype=np.float32)
    if a.ndim != 2:
        raise ValueError(f"write_amplitude expects (H, W), got shape {a.shape}.")
    path.parent.mkdir(parents=True, exist_ok=True)
    suffix = path.suffix.lower()
    if suffix in (".tif", ".tiff"):
        try:
            import tifffile

            tifffile.imwrite(str(path), a)
            return path
        except ImportError:
            from PIL import Image

            Image.fromarray(a, mode="F").save(path)
            return path
    if suffix == ".png":
        from PIL import Image

        peak = float(a.max()) or 1.0
        Image.fromarray(np.round(a / peak * 65535).astype(np.uint16)).save(path)
        return path
    raise ValueError(f"{path}: write_amplitude writes .tif, .tiff or .png, got {suffix!r}.")
