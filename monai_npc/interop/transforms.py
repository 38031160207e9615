"""Voxel displacement fields <-> ITK / ANTs / 3D Slicer transforms.

Inside the package a ddf is ``(D, *S)`` in voxels, *array order* (channel ``k`` along array
axis ``k``; for a 2-D image channel 0 is along rows ``y``, channel 1 along columns ``x``), with
``warped(i) = moving(i + ddf(i))`` on the fixed image's voxel grid (MONAI ``Warp``).

ITK, SimpleITK, ANTs and 3D Slicer store a *displacement field transform*: at each fixed-image
point ``p`` (LPS, mm) a vector ``u(p)`` (LPS, mm, components ``x, y[, z]``) such that
``T(p) = p + u(p)`` is the corresponding point of the moving image (the resampling direction:
fixed -> moving). With the fixed grid's ``spacing`` ``S`` and ``direction`` ``D`` (ITK index order)::

    u = D @ (S * ddf_itk),   ddf_itk = ddf[::-1]   (array order -> ITK index order x, y[, z])

which is what :func:`ddf_to_physical` computes and :func:`physical_to_ddf` inverts. Resampling
the moving image with ``T`` on the fixed grid (``sitk.Resample``, ``antsApplyTransforms``,
Slicer's *Harden transform*) reproduces ``warped``.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Tuple, Union

import numpy as np
import SimpleITK as sitk

from monai_npc.io_safety import HDF5_LOCK

__all__ = [
    "ddf_to_physical",
    "physical_to_ddf",
    "displacement_field_image",
    "displacement_field_transform",
    "embed_in_3d",
    "write_itk_transform",
    "write_ants_warp",
    "write_slicer_transform",
    "read_displacement_field",
]

PathLike = Union[str, os.PathLike]


def _np(x) -> np.ndarray:
    if hasattr(x, "detach"):
        x = x.detach().cpu().numpy()
    return np.asarray(x, dtype=np.float64)


def ddf_to_physical(ddf, spacing, direction) -> np.ndarray:
    """Voxel ddf ``(D, *S)`` (array order) -> physical displacement ``(*S, D)`` (mm, world ``x, y[, z]``).

    Args:
        ddf: displacement in voxels, channel ``k`` along array axis ``k``.
        spacing: ``(D,)`` voxel size in mm, ITK index order ``(x, y[, z])``.
        direction: ``(D, D)`` (or flattened) direction cosines, column ``k`` = index axis ``k``.
    """
    d = _np(ddf)
    dims = d.shape[0]
    if d.ndim != dims + 1:
        raise ValueError(f"ddf must be (D, *S) with D spatial axes, got shape {d.shape}.")
    sp = np.asarray(spacing, dtype=np.float64).reshape(dims, 1)
    mat = np.asarray(direction, dtype=np.float64).reshape(dims, dims)
    itk = d[::-1].reshape(dims, -1)  # array order -> index order (x first)
    u = mat @ (sp * itk)
    return np.moveaxis(u.reshape(d.shape), 0, -1)


def physical_to_ddf(field, spacing, direction) -> np.ndarray:
    """Inverse of :func:`ddf_to_physical`: ``(*S, D)`` mm (world) -> ``(D, *S)`` voxels (array order)."""
    u = _np(field)
    dims = u.shape[-1]
    sp = np.asarray(spacing, dtype=np.float64).reshape(dims, 1)
    mat = np.asarray(direction, dtype=np.float64).reshape(dims, dims)
    itk = np.linalg.solve(mat, np.moveaxis(u, -1, 0).reshape(dims, -1)) / sp
    return itk[::-1].reshape((dims,) + u.shape[:-1])


def _match_reference(ddf, reference: sitk.Image) -> np.ndarray:
    """Return the ddf as ``(d, *array_shape)`` of ``reference`` (a 2-D ddf on a one-slice 3-D grid gains a zero z channel)."""
    d = _np(ddf)
    shape = tuple(reversed(reference.GetSize()))
    dims = reference.GetDimension()
    if dims == 3 and d.shape[0] == 2 and d.ndim == 3 and shape[0] == 1:
        d = np.concatenate([np.zeros((1, 1) + d.shape[1:]), d[:, None]], 0)
    if d.shape != (dims,) + shape:
        raise ValueError(f"ddf of shape {d.shape} does not fit a {dims}-D reference grid of array shape {shape}.")
    return d


def displacement_field_image(ddf, reference: sitk.Image, pixel_type: int = sitk.sitkVectorFloat64) -> sitk.Image:
    """The ddf as a vector image on ``reference``'s grid, vectors in LPS mm (ITK's displacement field)."""
    d = _match_reference(ddf, reference)
    field = ddf_to_physical(d, reference.GetSpacing(), reference.GetDirection())
    image = sitk.GetImageFromArray(field, isVector=True)
    image.CopyInformation(reference)
    return sitk.Cast(image, pixel_type)


def displacement_field_transform(ddf, reference: sitk.Image) -> sitk.DisplacementFieldTransform:
    """``sitk.DisplacementFieldTransform`` mapping fixed points to moving points (linear interpolation)."""
    tx = sitk.DisplacementFieldTransform(displacement_field_image(ddf, reference))
    tx.SetInterpolator(sitk.sitkLinear)
    return tx


def embed_in_3d(image: sitk.Image, slice_spacing: float = 1.0) -> sitk.Image:
    """A 2-D image as a one-slice 3-D image at ``z = 0`` (direction ``[[D, 0], [0, 1]]``).

    Vector images gain a third, zero component. This is how 3D Slicer places 2-D files.
    """
    if image.GetDimension() != 2:
        raise ValueError(f"embed_in_3d expects a 2-D image, got {image.GetDimension()}-D.")
    arr = sitk.GetArrayFromImage(image)
    vector = image.GetNumberOfComponentsPerPixel() > 1
    if vector:
        arr = np.concatenate([arr, np.zeros(arr.shape[:-1] + (1,), arr.dtype)], -1)
    out = sitk.GetImageFromArray(arr[None], isVector=vector)
    out.SetSpacing(tuple(image.GetSpacing()) + (float(slice_spacing),))
    out.SetOrigin(tuple(image.GetOrigin()) + (0.0,))
    d = np.asarray(image.GetDirection()).reshape(2, 2)
    out.SetDirection([d[0, 0], d[0, 1], 0.0, d[1, 0], d[1, 1], 0.0, 0.0, 0.0, 1.0])
    return out


def write_itk_transform(ddf, reference: sitk.Image, path: PathLike) -> Path:
    """Write ``transform.h5`` (or ``.tfm``/``.txt``): an ITK ``DisplacementFieldTransform_double_D_D``."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with HDF5_LOCK:
        sitk.WriteTransform(displacement_field_transform(ddf, reference), str(path))
    return path


def write_ants_warp(ddf, reference: sitk.Image, path: PathLike) -> Path:
    """Write the field as ANTs writes ``*Warp.nii.gz``: NIfTI ``(X, Y, Z, 1, D)``, intent vector, LPS mm, float32.

    ITK's NIfTI writer (which ANTs uses) stores the vectors unchanged, in LPS, while the header
    geometry is converted to RAS; ``antsApplyTransforms -t`` and ``ants.apply_transforms`` read it.
    A one-slice 3-D reference (a single DICOM frame) is written with its slice repeated one slice
    spacing further: NIfTI readers drop a unit third axis, which would turn the 3-D field into a
    2-D image with 3 components that is no displacement field. Evaluated on the reference's slice
    the two-slice field is the same.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    field = displacement_field_image(ddf, reference, sitk.sitkVectorFloat32)
    if field.GetDimension() == 3 and field.GetSize()[2] == 1:
        field = sitk.JoinSeries([field[:, :, 0], field[:, :, 0]], field.GetOrigin()[2], field.GetSpacing()[2])
        origin, direction = reference.GetOrigin(), reference.GetDirection()
        field.SetOrigin(origin)
        field.SetDirection(direction)
    sitk.WriteImage(field, str(path), True)
    return path


def write_slicer_transform(ddf, reference: sitk.Image, path: PathLike, slice_spacing: float = 1.0) -> Path:
    """Write a 3-D ``DisplacementFieldTransform`` 3D Slicer reads: a 2-D field becomes one slice at ``z = 0``.

    3-D references are written unchanged (same as :func:`write_itk_transform`).
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    field = displacement_field_image(ddf, reference)
    if reference.GetDimension() == 2:
        field = sitk.Cast(embed_in_3d(field, slice_spacing), sitk.sitkVectorFloat64)
    tx = sitk.DisplacementFieldTransform(field)
    with HDF5_LOCK:
        sitk.WriteTransform(tx, str(path))
    return path


def read_displacement_field(path: PathLike) -> Tuple[np.ndarray, sitk.Image]:
    """Read a displacement field transform (``.h5``, ``.tfm``) or vector image (``.nii.gz``, ANTs warp).

    Returns ``(ddf, reference)``: the ddf in voxels of the field's grid, array order
    ``(D, *S)``, and a scalar image with the grid's geometry.
    """
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"displacement field not found: {path}")
    try:
        if path.suffix.lower() in (".h5", ".hdf5", ".tfm", ".txt", ".mat"):
            with HDF5_LOCK:
                tx = sitk.ReadTransform(str(path))
            tx = tx.Downcast() if hasattr(tx, "Downcast") else tx
            if not isinstance(tx, sitk.DisplacementFieldTransform):
                raise ValueError(f"{path} holds a {tx.GetName()}, not a DisplacementFieldTransform.")
            field = tx.GetDisplacementField()
        else:
            from monai_npc.data.io import read_sitk_file

            field = read_sitk_file(path, "displacement field")
    except RuntimeError as err:
        raise ValueError(f"cannot read displacement field {path}: {err}") from err
    dims = field.GetDimension()
    if field.GetNumberOfComponentsPerPixel() != dims:
        raise ValueError(f"{path}: expected {dims} vector components, got {field.GetNumberOfComponentsPerPixel()}.")
    ddf = physical_to_ddf(sitk.GetArrayFromImage(field), field.GetSpacing(), field.GetDirection())
    reference = sitk.Image(field.GetSize(), sitk.sitkFloat32)
    reference.CopyInformation(field)
    return ddf, reference
