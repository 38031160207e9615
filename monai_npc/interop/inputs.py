"""Images as the registration takes them: a SimpleITK image from whatever a user hands in (a file, a DICOM
folder, an array with its spacing, a MONAI ``MetaTensor``, a nibabel image), and how messages name it."""

from __future__ import annotations

import os
from typing import Any, Mapping, Optional, Sequence, Union

import numpy as np
import SimpleITK as sitk
import torch

from .checks import check_tensor
from .images import check_image, read_image

__all__ = ["PathLike", "ImageLike", "as_image", "in_pixel_space", "describe_input", "image_like"]


PathLike = Union[str, os.PathLike]


#: what :func:`register` accepts as an image
ImageLike = Union[sitk.Image, str, os.PathLike, np.ndarray, torch.Tensor]


def as_image(image: ImageLike, what: str = "image", spacing: Optional[Sequence[float]] = None, select=None) -> sitk.Image:
    """A float32 ``sitk.Image`` from a SimpleITK image, a file/DICOM folder path or an array.

    Args:
        image: ``sitk.Image`` (geometry kept), path (:func:`~monai_npc.interop.images.read_image`),
            numpy array or torch tensor in array order ``([Z,] H, W)`` (origin 0, identity direction),
            a ``MetaTensor`` from MONAI ``LoadImage`` (channel-first or not) or
            :func:`monai_npc.data.io.load_image`, or a nibabel image (their geometry, as ITK reads
            the same file).
        what: how errors name it.
        spacing: mm per array axis (array order, like the array) for arrays; default 1 mm.
        select: for paths, a phase/slice/instance/frame (:func:`~monai_npc.data.io.parse_select`).
    """
    if isinstance(image, sitk.Image):
        from monai_npc.data.io import to_grayscale

        return check_image(to_grayscale(image) if image.GetNumberOfComponentsPerPixel() in (3, 4) else image, what)
    if isinstance(image, (str, os.PathLike)):
        return read_image(image, what, select)
    check_tensor(image, what)
    if isinstance(image, torch.Tensor) and "direction" in (getattr(image, "meta", None) or {}):
        from .images import to_sitk

        return check_image(to_sitk(image), what)
    if isinstance(image, torch.Tensor) and getattr(image, "affine", None) is not None:  # MONAI LoadImage MetaTensor
        from .images import meta_tensor_to_sitk

        return check_image(meta_tensor_to_sitk(image), what)
    if hasattr(image, "affine") and hasattr(image, "header") and hasattr(image, "dataobj"):  # nibabel image
        from .images import nibabel_to_sitk

        return check_image(nibabel_to_sitk(image), what)
    if isinstance(image, torch.Tensor):
        image = image.detach().cpu().numpy()
    if isinstance(image, np.ndarray):
        array = np.asarray(image)
        if array.dtype.kind not in "biuf":
            raise ValueError(f"{what}: arrays of dtype {array.dtype} are not images; pass real numbers (float, int or bool).")
        if array.ndim not in (2, 3):
            raise ValueError(f"{what}: expected a 2-D (H, W) or 3-D (Z, H, W) array, got shape {array.shape}.")
        out = sitk.GetImageFromArray(np.ascontiguousarray(array, dtype=np.float32))
        if spacing is not None:
            sp = [float(s) for s in np.atleast_1d(spacing)]
            if len(sp) != array.ndim or min(sp) <= 0:
                raise ValueError(f"{what}: spacing {tuple(sp)} must give {array.ndim} positive values (mm, array order).")
            out.SetSpacing(sp[::-1])
        return check_image(out, what)
    raise TypeError(f"{what}: expected a SimpleITK image, a path or an array, got {type(image).__name__}.")


def in_pixel_space(image: sitk.Image, reference: sitk.Image, what: str) -> sitk.Image:
    """``image``'s pixels placed on ``reference``'s geometry (pixel ``i`` of one = pixel ``i`` of the other)."""
    arr = sitk.GetArrayFromImage(image)
    if image.GetDimension() == 3 and arr.shape[0] == 1 and reference.GetDimension() == 2:
        arr = arr[0]
    elif image.GetDimension() == 2 and reference.GetDimension() == 3 and reference.GetSize()[2] == 1:
        arr = arr[None]
    if arr.ndim != reference.GetDimension() or (arr.ndim == 3 and arr.shape[0] != reference.GetSize()[2]):
        raise ValueError(
            f"pixel space needs images with the same number of slices: {what} has size {image.GetSize()}, "
            f"the fixed image {reference.GetSize()}."
        )
    out = sitk.GetImageFromArray(arr)
    out.SetSpacing(reference.GetSpacing())
    out.SetOrigin(reference.GetOrigin())
    out.SetDirection(reference.GetDirection())
    return out


def describe_input(x: Any) -> Optional[str]:
    """How messages and summaries name an input: its path; for an in-memory image its type, and the
    file it was read from when it says so (a MONAI ``MetaTensor``'s ``filename_or_obj``, a nibabel
    image's file name)."""
    if x is None:
        return None
    if isinstance(x, (str, os.PathLike)):
        return str(x)
    source = getattr(x, "meta", {}).get("filename_or_obj") if isinstance(getattr(x, "meta", None), Mapping) else None
    if source is None and callable(getattr(x, "get_filename", None)):
        source = x.get_filename()
    if isinstance(source, (list, tuple)):  # a batch's list of names
        source = source[0] if len(source) == 1 else None
    return f"<in-memory {type(x).__name__}" + (f" of {source}>" if isinstance(source, (str, os.PathLike)) and str(source) else ">")


def image_like(array: np.ndarray, reference: sitk.Image, dtype: type = np.float32) -> sitk.Image:
    """A ``(Z, H, W)`` array as a ``dtype`` ``sitk.Image`` on ``reference``'s grid (2-D drops ``Z``)."""
    arr = array[0] if reference.GetDimension() == 2 else array
    image = sitk.GetImageFromArray(np.ascontiguousarray(arr, dtype=dtype))
    image.CopyInformation(reference)
    return image
