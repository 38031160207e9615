"""Voxel ddf <-> ITK / ANTs / Slicer displacement fields, checked with SimpleITK and ITK themselves."""

import numpy as np
import pytest
import SimpleITK as sitk
import torch

from monai_npc.functional import warp_image
from monai_npc.interop import (
    ddf_to_physical,
    displacement_field_transform,
    embed_in_3d,
    model_grid,
    physical_to_ddf,
    read_displacement_field,
    resample_model_field,
    to_sitk,
    write_ants_warp,
    write_itk_transform,
    write_slicer_transform,
)


def _rotation(dims, angle=0.5):
    c, s = np.cos(angle), np.sin(angle)
    if dims == 2:
        return np.array([[c, -s], [s, c]])
    rz = np.array([[c, -s, 0], [s, c, 0], [0, 0, 1]])
    rx = np.array([[1, 0, 0], [0, np.cos(0.3), -np.sin(0.3)], [0, np.sin(0.3), np.cos(0.3)]])
    return rz @ rx


def _grid(shape, spacing, origin, direction):
    """Reference image: ``shape`` in array order, geometry in ITK order."""
    image = sitk.GetImageFromArray(np.zeros(shape, np.float32))
    image.SetSpacing(spacing)
    image.SetOrigin(origin)
    image.SetDirection(np.asarray(direction).ravel().tolist())
    return image


def _smooth(shape, seed, scale=1.0):
    """Smooth random array (array order) from a few low-frequency cosines."""
    rng = np.random.default_rng(seed)
    axes = np.meshgrid(*[np.linspace(0, 1, n) for n in shape], indexing="ij")
    out = np.zeros(shape)
    for _ in range(4):
        phase = sum(rng.uniform(0.5, 2.5) * a for a in axes)
        out += rng.normal() * np.cos(2 * np.pi * phase + rng.uniform(0, 6))
    return scale * out


def test_ddf_to_physical_by_hand():
    # 2-D, identity direction: channel 0 (rows = y) of 1 voxel with y spacing 2 mm is u = (0, 2) mm
    ddf = np.zeros((2, 3, 4))
    ddf[0] = 1.0
    u = ddf_to_physical(ddf, spacing=(0.5, 2.0), direction=np.eye(2))
    assert u.shape == (3, 4, 2)
    np.testing.assert_allclose(u[1, 2], [0.0, 2.0])
    # a 90-degree direction turns index x into world y
    ddf = np.zeros((2, 1, 1))
    ddf[1] = 3.0  # 3 voxels along columns (index x), 0.5 mm each
    np.testing.assert_allclose(ddf_to_physical(ddf, (0.5, 2.0), [[0, -1], [1, 0]])[0, 0], [0.0, 1.5], atol=1e-12)


@pytest.mark.parametrize("dims", [2, 3])
def test_physical_roundtrip(dims):
    shape = (4, 5, 6)[:dims]
    ddf = np.random.default_rng(0).normal(size=(dims,) + shape)
    spacing, direction = (0.7, 1.9, 3.0)[:dims], _rotation(dims)
    back = physical_to_ddf(ddf_to_physical(ddf, spacing, direction), spacing, direction)
    np.testing.assert_allclose(back, ddf, atol=1e-12)


@pytest.mark.parametrize("dims", [2, 3])
def test_sitk_resample_equals_warp_image(dims):
    """SimpleITK resampling with our DisplacementFieldTransform = warp_image with the voxel ddf,
    on an anisotropic, shifted, oblique grid (axis order, sign, spacing and direction at once)."""
    shape = (24, 28) if dims == 2 else (6, 14, 16)
    spacing = (0.8, 1.7) if dims == 2 else (0.9, 1.3, 2.5)
    origin = (-31.0, 12.5) if dims == 2 else (-31.0, 12.5, 40.0)
    ref = _grid(shape, spacing, origin, _rotation(dims))
    moving = np.stack([_smooth(shape, 1, 100.0)]).astype(np.float32)  # (1, *shape)
    ddf = np.stack([_smooth(shape, 10 + k, 1.5) for k in range(dims)])  # up to ~4 voxels
    ours = warp_image(torch.from_numpy(moving)[None].double(), torch.from_numpy(ddf)[None], "bilinear", "zeros")[0, 0].numpy()
    image = sitk.GetImageFromArray(moving[0])
    image.CopyInformation(ref)
    theirs = sitk.GetArrayFromImage(sitk.Resample(image, ref, displacement_field_transform(ddf, ref), sitk.sitkLinear, 0.0))
    idx = np.stack(np.meshgrid(*[np.arange(n) for n in shape], indexing="ij")) + ddf
    inside = np.all([(idx[k] >= 0) & (idx[k] <= shape[k] - 1) for k in range(dims)], 0)
    assert inside.mean() > 0.6
    diff = np.abs(ours - theirs)[inside]
    assert diff.max() < 1e-3, diff.max()  # 100-unit image: float precision only


def test_files_read_back(tmp_path):
    import nibabel as nib

    ref = _grid((20, 30), (0.7, 1.3), (5.0, -7.0), _rotation(2))
    ddf = np.stack([_smooth((20, 30), 3, 2.0), _smooth((20, 30), 4, 2.0)])
    for path in (write_itk_transform(ddf, ref, tmp_path / "t.h5"), write_ants_warp(ddf, ref, tmp_path / "w.nii.gz")):
        back, grid = read_displacement_field(path)
        assert grid.GetSize() == ref.GetSize()
        np.testing.assert_allclose(grid.GetOrigin(), ref.GetOrigin(), atol=1e-4)
        np.testing.assert_allclose(back, ddf, atol=1e-4)  # the NIfTI is float32
    nii = nib.load(tmp_path / "w.nii.gz")
    assert nii.shape == (30, 20, 1, 1, 2) and nii.header.get_intent()[0] == "vector"
    # vectors stay in LPS, as ITK/ANTs write them: component 0 = world x
    u = ddf_to_physical(ddf, ref.GetSpacing(), ref.GetDirection())
    np.testing.assert_allclose(nii.get_fdata()[4, 7, 0, 0], u[7, 4], atol=1e-4)


def test_slicer_transform_is_3d_and_agrees_in_plane(tmp_path):
    ref = _grid((20, 30), (0.7, 1.3), (5.0, -7.0), _rotation(2))
    ddf = np.stack([_smooth((20, 30), 5, 2.0), _smooth((20, 30), 6, 2.0)])
    t2 = sitk.ReadTransform(str(write_itk_transform(ddf, ref, tmp_path / "t2.h5")))
    path = write_slicer_transform(ddf, ref, tmp_path / "t3.h5")
    t3 = sitk.ReadTransform(str(path))
    assert t3.GetDimension() == 3 and t3.GetName() == "DisplacementFieldTransform"
    rng = np.random.default_rng(0)
    worst = 0.0
    for _ in range(40):
        p = ref.TransformContinuousIndexToPhysicalPoint(rng.uniform(1, 18, 2).tolist())
        a, b = np.array(t2.TransformPoint(p)), np.array(t3.TransformPoint(tuple(p) + (0.0,)))
        worst = max(worst, float(np.abs(a - b[:2]).max()))
        assert b[2] == 0.0
    assert worst < 1e-9
    flat = embed_in_3d(ref)
    assert flat.GetSize() == (30, 20, 1) and flat.GetOrigin()[2] == 0.0


def test_model_grid_covers_the_field_of_view():
    ref = _grid((40, 100), (0.6, 1.25), (10.0, 20.0), _rotation(2, 0.2))  # 50 mm (y) x 60 mm (x)
    grid = model_grid(ref, 128)
    assert grid.GetSize() == (128, 128)
    np.testing.assert_allclose(grid.GetSpacing(), [60 / 128] * 2)
    centre = lambda im: np.array(im.TransformContinuousIndexToPhysicalPoint([(n - 1) / 2 for n in im.GetSize()]))
    np.testing.assert_allclose(centre(grid), centre(ref), atol=1e-9)
    stretched = model_grid(ref, 64, keep_aspect=False)
    np.testing.assert_allclose(stretched.GetSpacing(), [60 / 64, 50 / 64])  # ITK order (x, y)
    # a ddf that is affine in space is resampled exactly and converted to the target's voxels
    gm = np.stack(np.meshgrid(np.arange(128.0), np.arange(128.0), indexing="ij"))  # model (row, col)
    ddf_m = torch.from_numpy(np.stack([0.1 * gm[1] + 2.0, -0.05 * gm[0] + 1.0]))[None]
    ddf_t = resample_model_field(ddf_m, grid, ref, displacement=True)[0].numpy()
    assert ddf_t.shape == (2, 40, 100)
    r, c = 20, 30  # target voxel -> model index, then scale the displacement by model/target spacing
    sp = 60 / 128
    mr, mc = (r - 19.5) * 1.25 / sp + 63.5, (c - 49.5) * 0.6 / sp + 63.5
    np.testing.assert_allclose(ddf_t[:, r, c], [(0.1 * mc + 2.0) * sp / 1.25, (-0.05 * mr + 1.0) * sp / 0.6], rtol=1e-9)


def test_to_sitk_geometry(tmp_path):
    from PIL import Image

    from monai_npc.data.io import load_image

    arr = (np.arange(20 * 30) % 251).reshape(20, 30).astype(np.uint8)
    Image.fromarray(arr).save(tmp_path / "a.png")
    png = to_sitk(load_image(tmp_path / "a.png"))
    itk_png = sitk.ReadImage(str(tmp_path / "a.png"))
    assert png.GetDirection() == itk_png.GetDirection() and png.GetOrigin() == itk_png.GetOrigin()
    np.testing.assert_array_equal(sitk.GetArrayFromImage(png), arr)
    ref = _grid((20, 30), (0.7, 1.3), (5.0, -7.0), _rotation(2))
    image = sitk.GetImageFromArray(arr.astype(np.float32))
    image.CopyInformation(ref)
    for suffix in (".nii.gz", ".mha", ".nrrd"):
        sitk.WriteImage(image, str(tmp_path / f"b{suffix}"))
        back = to_sitk(load_image(tmp_path / f"b{suffix}"))
        assert back.GetDimension() == 2 and back.GetSize() == (30, 20)
        np.testing.assert_allclose(back.GetSpacing(), ref.GetSpacing(), rtol=1e-6)
        np.testing.assert_allclose(back.GetOrigin(), ref.GetOrigin(), atol=1e-5)
        np.testing.assert_allclose(back.GetDirection(), ref.GetDirection(), atol=1e-6)
