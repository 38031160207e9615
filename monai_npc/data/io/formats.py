"""File formats: the image endings the readers know, finding an image by stem, MetaImage data files."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Optional, Sequence, Tuple, Union

__all__ = ["PathLike", "IMAGE_SUFFIXES", "PIL_SUFFIXES", "image_suffix", "find_image", "check_mhd_data_file"]

PathLike = Union[str, os.PathLike]

#: file endings the readers of this package know, longest first (``find_image`` tries them in this order)
IMAGE_SUFFIXES: Tuple[str, ...] = (
    ".nii.gz", ".nii", ".mhd", ".mha", ".nrrd", ".nhdr", ".dcm", ".png", ".jpg", ".jpeg", ".tif", ".tiff",
)
#: endings read with PIL (MONAI's ``PILReader``), converted to grayscale
PIL_SUFFIXES: Tuple[str, ...] = (".png", ".jpg", ".jpeg")


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


def check_mhd_data_file(path: Path) -> None:
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
