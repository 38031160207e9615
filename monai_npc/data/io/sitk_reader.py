"""Reading with SimpleITK (no MONAI, no ITK Python): the fast path of ``monai-npc register``.

:func:`read_sitk_image` reads a file or DICOM folder into a ``SimpleITK.Image`` (LPS geometry),
picking one phase, slice or frame; :func:`read_vector_image` reads multi-component images.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Mapping, Tuple, Union

import numpy as np

from .dicom import read_dicom_folder
from .formats import PathLike, check_mhd_data_file
from .selection import parse_select
from .sitk_file import read_sitk_file, to_grayscale

__all__ = ["read_sitk_image", "read_vector_image"]


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
        check_mhd_data_file(path)
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
        check_mhd_data_file(path)
    image = read_sitk_file(path)
    arr = sitk.GetArrayFromImage(image)
    if image.GetNumberOfComponentsPerPixel() == 1:
        arr = arr[..., None]
    return arr, tuple(float(v) for v in image.GetSpacing()[::-1])
