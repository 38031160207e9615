"""One image file into a ``SimpleITK.Image`` with one-line errors naming the file, and colour to grayscale."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from .nifti import check_nifti, sform_mismatch

__all__ = ["read_sitk_file", "to_grayscale", "itk_error_line"]


def itk_error_line(err: Exception) -> str:
    """The informative line of an ITK exception (its ``ITK ERROR:`` reason), without C++ file names."""
    lines = [ln.strip() for ln in str(err).splitlines() if ln.strip()]
    for ln in lines:
        if "ITK ERROR" in ln:
            return ln.split(":", 2)[-1].strip() if ln.count(":") >= 2 else ln
    return lines[-1] if lines else type(err).__name__


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
            # logged as the package, monai_npc.data.io
            logging.getLogger(__package__).info("%s %s: the sform's voxel sizes %s mm disagree with pixdim %s mm; the qform is used, as ITK does.",
                                                what, path, mismatch[0], mismatch[1])
    reader = sitk.ImageFileReader()
    reader.SetFileName(str(path))
    try:
        try:
            reader.ReadImageInformation()
        except RuntimeError as err:
            raise ValueError(f"cannot read {what} {path}: not a readable image file ({itk_error_line(err)}).") from None
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
