"""Images in physical space for the file boundary: ``MetaTensor`` -> SimpleITK, model grids, resampling.

Geometry follows ITK: index order ``(x, y[, z])`` (``x`` = the last array axis), ``spacing`` in
mm per index axis, ``origin`` the LPS position of index 0 and ``direction`` the ``(d, d)``
cosine matrix whose column ``k`` is index axis ``k``; a point is ``origin + direction @ (spacing * index)``.
Arrays handed to the network are in *array order* ``([Z,] H, W)`` as ``sitk.GetArrayFromImage``
returns them. Files are read with :func:`monai_npc.data.io.read_sitk_image` (SimpleITK, no MONAI import).
"""

from __future__ import annotations

import os
from typing import Optional, Tuple, Union

import numpy as np
import SimpleITK as sitk
import torch
import torch.nn.functional as F

__all__ = [
    "to_sitk",
    "from_affine",
    "nibabel_to_sitk",
    "meta_tensor_to_sitk",
    "read_image",
    "check_image",
    "read_label",
    "check_label",
    "grid_mismatch",
    "check_same_dims",
    "model_grid",
    "resample",
    "model_to_target_coordinates",
    "resample_model_field",
]

PathLike = Union[str, os.PathLike]

#: image files MONAI reads with PIL, which carry no geometry: ITK reads them with identity direction
_PIL_SUFFIXES = (".png", ".jpg", ".jpeg")


def to_sitk(img) -> sitk.Image:
    """A ``MetaTensor`` from :func:`~monai_npc.data.io.load_image` -> ``sitk.Image`` with the same geometry.

    A 2-D image keeps 2 dimensions unless it has a 3-D position (a DICOM frame or a slice from
    :func:`~monai_npc.data.io.select_slice` whose origin or plane is not ``z = 0``): it is then a
    3-D image with one slice, so its world position survives. PNG/JPEG files get ITK's geometry
    (identity direction, origin 0, spacing 1) so that every tool places them alike.
    """
    arr = np.asarray(img.detach().cpu() if isinstance(img, torch.Tensor) else img)
    dims = arr.ndim
    if dims not in (2, 3):
        raise ValueError(
            f"{img.meta.get('filename_or_obj', 'image')}: expected a 2-D or 3-D image, got shape {tuple(arr.shape)}"
            + (" (a time series? pick a frame with monai_npc.data.io.select_frame)" if dims == 4 else "")
        )
    meta = img.meta
    spacing = np.asarray(meta["spacing"], dtype=np.float64)[:dims]
    origin = np.asarray(meta["origin"], dtype=np.float64)
    direction = np.asarray(meta["direction"], dtype=np.float64)
    name = str(meta.get("filename_or_obj", "")).lower()
    if dims == 2 and name.endswith(_PIL_SUFFIXES):
        origin, direction = np.zeros(2), np.eye(2)
    array = np.ascontiguousarray(arr.transpose(tuple(range(dims))[::-1]))  # array order
    if dims == 2 and direction.shape == (3, 3):
        planar = np.allclose(direction[2, :2], 0) and np.allclose(direction[:2, 2], 0) and abs(origin[2]) < 1e-6
        if planar:
            origin, direction = origin[:2], direction[:2, :2]
        else:  # a slice with a 3-D position: one-slice 3-D image
            affine = np.asarray(img.affine, dtype=np.float64)
            thick = float(np.linalg.norm(affine[:3, 2])) if affine.shape == (4, 4) else 1.0
            spacing = np.append(spacing, thick if thick > 0 else 1.0)
            array = array[None]
    image = sitk.GetImageFromArray(array)
    image.SetSpacing([float(s) for s in spacing])
    image.SetOrigin([float(o) for o in origin[: image.GetDimension()]])
    image.SetDirection([float(v) for v in direction[: image.GetDimension(), : image.GetDimension()].ravel()])
    return image


def from_affine(array: np.ndarray, affine: np.ndarray, space: str = "RAS") -> sitk.Image:
    """An ``sitk.Image`` from an array in *index order* ``(x, y[, z])`` and its ``(n+1, n+1)`` affine.

    ``affine`` maps ``(i, j[, k], 1)`` to world mm in ``space`` (``"RAS"``, as nibabel and MONAI
    store it, or ``"LPS"``, as ITK does); the result is in ITK's LPS. A 2-D array with a 3-D
    affine keeps its in-plane part (the slice's position along the third axis is dropped).
    """
    arr = np.asarray(array)
    dims = arr.ndim
    a = np.asarray(affine, dtype=np.float64)
    n = a.shape[0] - 1
    if dims not in (2, 3) or a.shape != (n + 1, n + 1) or n < dims:
        raise ValueError(f"expected a 2-D or 3-D index-order array with an (n+1, n+1) affine, got shapes {arr.shape} and {a.shape}.")
    linear, offset = a[:dims, :dims], a[:dims, n]
    if space.upper() == "RAS":
        flip = np.diag([-1.0, -1.0, 1.0][:dims])
        linear, offset = flip @ linear, flip @ offset
    spacing = np.linalg.norm(linear, axis=0)
    if np.any(spacing <= 0):
        raise ValueError(f"the affine has a zero-length axis (spacing {tuple(spacing)}).")
    image = sitk.GetImageFromArray(np.ascontiguousarray(arr.transpose(tuple(range(dims))[::-1]), dtype=np.float32))
    image.SetSpacing([float(v) for v in spacing])
    image.SetOrigin([float(v) for v in offset])
    image.SetDirection([float(v) for v in (linear / spacing).ravel()])
    return image


def nibabel_to_sitk(img) -> sitk.Image:
    """A nibabel image -> ``sitk.Image`` with the geometry ITK reads from the same file.

    nibabel's ``img.affine`` is the sform when one is set; ITK falls back to the qform when the
    sform's scales disagree with the header's voxel sizes (as in the official ACDC files, whose
    sform has 1 mm scales and pixdim the real 1.4-1.7 mm). The same rule is applied here, so a
    nibabel image and its file path register identically.
    """
    from monai_npc.data.io import sform_disagrees

    header = img.header
    affine = np.asarray(img.affine, dtype=np.float64)
    dims = min(len(img.shape), 3)
    zooms = np.asarray(header.get_zooms()[:dims], dtype=np.float64)
    scales = np.linalg.norm(affine[:3, :dims], axis=0)
    if sform_disagrees(scales, zooms) and hasattr(header, "get_qform"):
        affine = np.asarray(header.get_qform(), dtype=np.float64)
    data = np.asanyarray(img.dataobj)
    if data.ndim > dims:
        data = data.reshape(data.shape[:dims]) if int(np.prod(data.shape[dims:])) == 1 else data
    return from_affine(data, affine, "RAS")


def meta_tensor_to_sitk(img) -> sitk.Image:
    """A MONAI ``MetaTensor`` from ``LoadImage`` (channel-first or not) -> ``sitk.Image``.

    The tensor is in index order ``([C,] x, y[, z])`` with ``img.affine`` in RAS (MONAI's
    default ``space``); a single channel is dropped, several are an error.
    """
    arr = np.asarray(img.detach().cpu())
    meta = getattr(img, "meta", {}) or {}
    spatial = len(np.atleast_1d(meta.get("spatial_shape", arr.shape)))
    if arr.ndim == spatial + 1:
        if arr.shape[0] != 1:
            raise ValueError(f"{meta.get('filename_or_obj', 'image')}: expected one channel, got {arr.shape[0]} (shape {arr.shape}).")
        arr = arr[0]
    space = str(meta.get("space", "RAS"))
    return from_affine(arr, np.asarray(img.affine.detach().cpu() if hasattr(img.affine, "detach") else img.affine), space)


def read_image(path: PathLike, what: str = "image", select=None) -> sitk.Image:
    """Read ``path`` (a file or DICOM folder, :func:`~monai_npc.data.io.read_sitk_image`) as a float32 ``sitk.Image``.

    ``select`` picks a phase, slice, instance or frame (``"phase=3"``, :func:`~monai_npc.data.io.parse_select`).
    Raises ``FileNotFoundError`` (missing) or ``ValueError`` (unreadable, truncated, not 2-D/3-D,
    NaN/Inf values), each naming ``what`` and the file. SimpleITK only: no MONAI or ITK import.
    """
    from monai_npc.data.io import read_sitk_image

    return check_image(read_sitk_image(path, select, what), f"{what} {path}")


def check_image(image: sitk.Image, what: str = "image") -> sitk.Image:
    """``image`` as float32 after checking it is a 2-D/3-D scalar image with finite values (``ValueError`` naming ``what``)."""
    if image.GetDimension() not in (2, 3):
        raise ValueError(f"{what}: expected a 2-D or 3-D image, got {image.GetDimension()}-D (size {image.GetSize()}).")
    if image.GetNumberOfComponentsPerPixel() != 1:
        raise ValueError(f"{what}: expected a scalar image, got {image.GetNumberOfComponentsPerPixel()} components per pixel.")
    if image.GetPixelID() in (sitk.sitkComplexFloat32, sitk.sitkComplexFloat64):
        raise ValueError(f"{what}: complex pixels; pass the magnitude (e.g. sitk.ComplexToModulus).")
    image = sitk.Cast(image, sitk.sitkFloat32)
    array = sitk.GetArrayFromImage(image)  # a copy: never a view of a temporary image
    bad = int(array.size - np.isfinite(array).sum())
    if bad:
        raise ValueError(f"{what} contains {bad} non-finite (NaN/Inf) value(s) out of {array.size}.")
    return image


def grid_mismatch(a: sitk.Image, b: sitk.Image, rtol: float = 1e-4, atol_mm: float = 1e-3) -> Optional[str]:
    """``None`` when ``a`` and ``b`` share size, spacing, origin and direction, else what differs."""
    if a.GetDimension() != b.GetDimension():
        return f"dimension {a.GetDimension()} vs {b.GetDimension()}"
    if a.GetSize() != b.GetSize():
        return f"size {a.GetSize()} vs {b.GetSize()}"
    if not np.allclose(a.GetSpacing(), b.GetSpacing(), rtol=rtol, atol=0):
        return f"spacing {tuple(round(s, 6) for s in a.GetSpacing())} vs {tuple(round(s, 6) for s in b.GetSpacing())} mm"
    if not np.allclose(a.GetOrigin(), b.GetOrigin(), rtol=0, atol=atol_mm + rtol * max(a.GetSpacing())):
        return f"origin {tuple(round(o, 4) for o in a.GetOrigin())} vs {tuple(round(o, 4) for o in b.GetOrigin())} mm"
    if not np.allclose(a.GetDirection(), b.GetDirection(), atol=1e-4):
        return f"direction {tuple(round(v, 4) for v in a.GetDirection())} vs {tuple(round(v, 4) for v in b.GetDirection())}"
    return None


def read_label(path: PathLike, image: sitk.Image, image_path: PathLike, what: str = "label", select=None) -> sitk.Image:
    """Read a label map and check it lies on ``image``'s grid (:func:`check_label`); returns an int32 ``sitk.Image``."""
    return check_label(read_image(path, what, select), image, f"{what} {path}", f"its image {image_path}")


def check_label(label: sitk.Image, image: sitk.Image, what: str = "label", image_what: str = "its image") -> sitk.Image:
    """``label`` as int32 after checking it has ``image``'s grid and integer values (``ValueError`` naming both)."""
    problem = grid_mismatch(label, image)
    if problem is not None:
        raise ValueError(
            f"{what} does not match the grid of {image_what}: {problem}. "
            "A label map must have the size, spacing, origin and direction of its image."
        )
    array = sitk.GetArrayFromImage(label).astype(np.float64)
    if not np.isfinite(array).all() or np.abs(array - np.round(array)).max(initial=0.0) > 1e-3:
        raise ValueError(f"{what} has non-integer values; expected a label map (0 = background, 1, 2, ...).")
    out = sitk.GetImageFromArray(np.round(array).astype(np.int32))
    out.CopyInformation(image)
    return out


def model_grid(reference: sitk.Image, size: int = 128, keep_aspect: bool = True) -> sitk.Image:
    """An empty image on the network's grid covering ``reference``'s in-plane field of view.

    The two in-plane axes (index axes 0 and 1, i.e. the array's ``W`` and ``H``) get ``size``
    voxels spanning the same extent (voxel edges) about the same centre; with ``keep_aspect`` the
    spacing is isotropic (the longer side fits, the shorter is padded). A 3-D reference keeps its
    slices (index axis 2). Direction is unchanged, so model and reference axes are parallel.
    """
    dims = reference.GetDimension()
    n = np.asarray(reference.GetSize(), dtype=np.float64)
    sp = np.asarray(reference.GetSpacing(), dtype=np.float64)
    extent = n[:2] * sp[:2]
    new_sp = sp.copy()
    new_sp[:2] = extent.max() / size if keep_aspect else extent / size
    new_n = n.copy()
    new_n[:2] = size
    direction = np.asarray(reference.GetDirection(), dtype=np.float64).reshape(dims, dims)
    centre_ref, centre_new = (n - 1) / 2 * sp, (new_n - 1) / 2 * new_sp
    origin = np.asarray(reference.GetOrigin(), dtype=np.float64) + direction @ (centre_ref - centre_new)
    grid = sitk.Image([int(v) for v in new_n], sitk.sitkFloat32)
    grid.SetSpacing([float(v) for v in new_sp])
    grid.SetOrigin([float(v) for v in origin])
    grid.SetDirection(reference.GetDirection())
    return grid


def resample(
    image: sitk.Image, reference: sitk.Image, interpolator: str = "linear", default: float = 0.0
) -> np.ndarray:
    """``image`` sampled at the voxel centres of ``reference`` (identity transform) -> array order.

    ``interpolator``: ``"linear"`` (images) or ``"nearest"`` (labels). Outside ``image`` the
    value is ``default``.
    """
    interp = {"linear": sitk.sitkLinear, "nearest": sitk.sitkNearestNeighbor}[interpolator]
    out = sitk.Resample(image, reference, sitk.Transform(), interp, float(default), image.GetPixelID())
    return sitk.GetArrayFromImage(out)


def model_to_target_coordinates(model: sitk.Image, target: sitk.Image) -> Tuple[np.ndarray, np.ndarray]:
    """Per in-plane index axis: ``i_model = scale * i_target + offset`` for grids with parallel axes.

    Returns ``(scale, offset)`` of shape ``(2,)`` in index order ``(x, y)``. Raises ``ValueError``
    when the two grids' directions or slices differ (they come from :func:`model_grid`).
    """
    if not np.allclose(model.GetDirection(), target.GetDirection(), atol=1e-6):
        raise ValueError("model and target grids must have the same direction.")
    dims = target.GetDimension()
    direction = np.asarray(target.GetDirection()).reshape(dims, dims)
    sp_m, sp_t = np.asarray(model.GetSpacing()), np.asarray(target.GetSpacing())
    delta = direction.T @ (np.asarray(target.GetOrigin()) - np.asarray(model.GetOrigin()))  # mm along axes
    if dims == 3 and (abs(delta[2]) > 1e-3 * sp_t[2] or model.GetSize()[2] != target.GetSize()[2]):
        raise ValueError("model and target grids must share their slices.")
    return sp_t[:2] / sp_m[:2], delta[:2] / sp_m[:2]


def resample_model_field(
    field: torch.Tensor, model: sitk.Image, target: sitk.Image, displacement: bool = False
) -> torch.Tensor:
    """Linearly resample a model-grid map ``(Z, C, h, w)`` to the target grid ``(Z, C, H, W)``.

    With ``displacement`` the ``C = 2`` channels are a ddf in model voxels (channel 0 along ``H``,
    1 along ``W``) and are rescaled to target voxels. Beyond the model grid's outer voxel centres
    the border value is used.
    """
    scale, offset = model_to_target_coordinates(model, target)
    size = target.GetSize()
    h, w = field.shape[-2:]
    cols = torch.arange(size[0], dtype=torch.float64) * scale[0] + offset[0]  # model x index of each target column
    rows = torch.arange(size[1], dtype=torch.float64) * scale[1] + offset[1]
    gx = (cols * (2.0 / max(w - 1, 1)) - 1.0).to(field.dtype)
    gy = (rows * (2.0 / max(h - 1, 1)) - 1.0).to(field.dtype)
    grid = torch.stack(torch.meshgrid(gy, gx, indexing="ij")[::-1], -1)  # (H, W, 2) as (x, y)
    grid = grid.unsqueeze(0).expand(field.shape[0], -1, -1, -1)
    out = F.grid_sample(field, grid, mode="bilinear", padding_mode="border", align_corners=True)
    if displacement:
        ratio = torch.tensor([1.0 / scale[1], 1.0 / scale[0]], dtype=field.dtype).view(1, 2, 1, 1)
        out = out * ratio  # model voxels -> target voxels (row, col)
    return out


def check_same_dims(moving: sitk.Image, fixed: sitk.Image, moving_path: PathLike, fixed_path: PathLike) -> None:
    """``ValueError`` naming both files when ``moving`` and ``fixed`` differ in dimensionality."""
    if moving.GetDimension() != fixed.GetDimension():
        raise ValueError(
            f"moving image {moving_path} is {moving.GetDimension()}-D (size {moving.GetSize()}) but fixed image "
            f"{fixed_path} is {fixed.GetDimension()}-D (size {fixed.GetSize()}); both must be 2-D, or both 3-D "
            "(a single DICOM frame is a one-slice 3-D image at its scanner position; to register two 2-D pictures "
            "pixel by pixel, e.g. a JPEG against a DICOM frame, use --pixel-space / pixel_space=True)."
        )
