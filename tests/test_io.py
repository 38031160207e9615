"""Image I/O: every format into a MetaTensor with spacing/origin/direction; slices and frames."""

import gzip

import numpy as np
import pytest

from monai_npc.data.io import (
    load_image,
    read_array,
    read_h5,
    read_vector_image,
    select_frame,
    select_slice,
    to_array_order,
    write_image,
)
from tests.dicom_writer import write_dicom

ZYX = np.arange(3 * 4 * 5, dtype=np.float32).reshape(3, 4, 5)  # (z, y, x) array order


@pytest.mark.parametrize("suffix", [".nii.gz", ".nii", ".mhd", ".mha", ".nrrd"])
def test_volume_formats_keep_geometry(tmp_path, suffix):
    path = write_image(ZYX, tmp_path / f"v{suffix}", spacing=(2.0, 0.7, 0.5), origin=(30.0, 20.0, 10.0))
    img = load_image(path)
    assert tuple(img.shape) == (5, 4, 3)  # MONAI order x, y, z
    np.testing.assert_allclose(img.meta["spacing"], [0.5, 0.7, 2.0], rtol=1e-6)
    np.testing.assert_allclose(img.meta["origin"], [10.0, 20.0, 30.0], atol=1e-5)  # LPS, as ITK
    np.testing.assert_allclose(img.meta["direction"], np.eye(3), atol=1e-6)
    assert float(img[1, 2, 0]) == ZYX[0, 2, 1]
    arr, spacing = to_array_order(img)
    np.testing.assert_array_equal(arr, ZYX)
    np.testing.assert_allclose(spacing, (2.0, 0.7, 0.5), rtol=1e-6)


def test_direction_is_kept(tmp_path):
    direction = (0.0, 1.0, 0.0, -1.0, 0.0, 0.0, 0.0, 0.0, 1.0)  # rotated 90 degrees in-plane
    path = write_image(ZYX, tmp_path / "r.mha", spacing=(2.0, 1.0, 1.0), direction=direction)
    np.testing.assert_allclose(load_image(path).meta["direction"], np.reshape(direction, (3, 3)), atol=1e-6)


def test_png_and_jpeg_grayscale(tmp_path):
    from PIL import Image

    gray = (np.arange(20 * 30) % 256).astype(np.uint8).reshape(20, 30)
    Image.fromarray(gray).save(tmp_path / "g.png")
    img = load_image(tmp_path / "g.png")
    assert tuple(img.shape) == (30, 20)
    np.testing.assert_array_equal(to_array_order(img)[0], gray)
    rgb = np.stack([gray, gray, gray], -1)
    Image.fromarray(rgb).save(tmp_path / "c.jpg", quality=100)
    arr, spacing = read_array(tmp_path / "c.jpg")
    assert arr.shape == (20, 30) and spacing == (1.0, 1.0)
    assert np.abs(arr - gray).mean() < 3.0  # JPEG is lossy


def _dicom(arr, path, position=(0.0, 0.0, 0.0), frames=False, series=None, study=None, number=1):
    write_dicom(arr, path, position, series=series, study=study, number=number, frames=frames)


def test_dicom_file_cine_and_series(tmp_path):
    from pydicom.uid import generate_uid

    cine = np.arange(4 * 6 * 7).reshape(4, 6, 7)  # (frame, row, col)
    _dicom(cine[2], tmp_path / "one.dcm", position=(5.0, 6.0, 7.0))
    single = load_image(tmp_path / "one.dcm")
    assert tuple(single.shape) == (7, 6)
    np.testing.assert_allclose(single.meta["spacing"], [0.9, 0.8])
    np.testing.assert_allclose(single.meta["origin"], [5.0, 6.0, 7.0])
    np.testing.assert_array_equal(to_array_order(single)[0], cine[2])

    _dicom(cine, tmp_path / "cine.dcm", frames=True)
    movie = load_image(tmp_path / "cine.dcm")
    assert tuple(movie.shape) == (7, 6, 4)
    frame = select_frame(movie, 3)
    np.testing.assert_array_equal(to_array_order(frame)[0], cine[3])

    series, study = generate_uid(), generate_uid()
    (tmp_path / "series").mkdir()
    for k in (2, 0, 3, 1):  # written out of order
        _dicom(cine[k], tmp_path / "series" / f"im{k}.dcm", position=(0.0, 0.0, 5.0 * k), series=series, study=study, number=k + 1)
    vol = load_image(tmp_path / "series")
    assert tuple(vol.shape) == (7, 6, 4)
    np.testing.assert_allclose(vol.meta["spacing"], [0.9, 0.8, 5.0])
    np.testing.assert_array_equal(to_array_order(vol)[0], cine)
    sl = select_slice(vol, 2)
    np.testing.assert_array_equal(to_array_order(sl)[0], cine[2])
    np.testing.assert_allclose(sl.meta["origin"], [0.0, 0.0, 10.0])


def test_select_slice_axes_and_4d_frames(tmp_path):
    img = load_image(write_image(ZYX, tmp_path / "v.nii.gz", spacing=(2.0, 0.7, 0.5), origin=(30.0, 20.0, 10.0)))
    sl = select_slice(img, -1)  # last z slice
    np.testing.assert_array_equal(to_array_order(sl)[0], ZYX[2])
    np.testing.assert_allclose(sl.meta["origin"], [10.0, 20.0, 34.0], atol=1e-5)
    np.testing.assert_allclose(sl.meta["spacing"], [0.5, 0.7], rtol=1e-6)
    side = select_slice(img, 1, axis=0)  # x = 1: a (y, z) plane
    np.testing.assert_array_equal(np.asarray(side), ZYX[:, :, 1].T)
    np.testing.assert_allclose(side.meta["origin"], [10.5, 20.0, 30.0], atol=1e-5)
    with pytest.raises(ValueError, match="out of range"):
        select_slice(img, 3)
    # 4-D NIfTI (x, y, z, t), as the ACDC *_4d.nii.gz cine files
    import nibabel as nib

    cine = np.random.default_rng(0).random((5, 4, 3, 6)).astype(np.float32)
    nib.save(nib.Nifti1Image(cine, np.diag([1.5, 1.5, 8.0, 1.0])), tmp_path / "c_4d.nii.gz")
    movie = load_image(tmp_path / "c_4d.nii.gz")
    assert tuple(movie.shape) == (5, 4, 3, 6)
    frame = select_frame(movie, 4)
    np.testing.assert_allclose(np.asarray(frame), cine[..., 4])
    np.testing.assert_allclose(frame.meta["spacing"], [1.5, 1.5, 8.0])


def test_vector_image_roundtrip(tmp_path):
    field = np.random.default_rng(1).normal(size=(3, 4, 5, 2)).astype(np.float32)
    for suffix in (".nii.gz", ".mhd"):
        path = write_image(field, tmp_path / f"ddf{suffix}", spacing=(8.0, 1.5, 1.5), vector=True)
        arr, spacing = read_vector_image(path)
        np.testing.assert_array_equal(arr, field)
        np.testing.assert_allclose(spacing, (8.0, 1.5, 1.5))


def test_errors_name_the_file(tmp_path):
    with pytest.raises(FileNotFoundError, match="nope.nii.gz"):
        load_image(tmp_path / "nope.nii.gz")
    bad = tmp_path / "bad.nii.gz"
    bad.write_bytes(gzip.compress(b"not a nifti header" * 10))
    with pytest.raises(ValueError, match="bad.nii.gz"):
        load_image(bad)
    write_image(ZYX, tmp_path / "m.mhd")
    (tmp_path / "m.raw").unlink()
    with pytest.raises(FileNotFoundError, match="m.raw"):
        load_image(tmp_path / "m.mhd")
    write_image(ZYX, tmp_path / "t.mhd")
    (tmp_path / "t.raw").write_bytes(b"\x00" * 7)  # truncated data
    with pytest.raises(ValueError, match="t.mhd"):
        load_image(tmp_path / "t.mhd")
    (tmp_path / "empty").mkdir()
    with pytest.raises(FileNotFoundError, match="empty"):
        load_image(tmp_path / "empty")
    h5 = tmp_path / "x.h5"
    h5.write_bytes(b"garbage")
    with pytest.raises(ValueError, match="x.h5"):
        read_h5(h5)


def test_read_h5_missing_dataset(tmp_path):
    import h5py

    with h5py.File(tmp_path / "a.h5", "w") as f:
        f["image"] = np.zeros((2, 2), np.float32)
    assert read_h5(tmp_path / "a.h5", ("image",))["image"].shape == (2, 2)
    with pytest.raises(ValueError, match="lacks dataset"):
        read_h5(tmp_path / "a.h5")


@pytest.mark.parametrize("suffix", [".nii.gz", ".nii", ".mha", ".nrrd"])
def test_truncated_files_one_line(tmp_path, suffix):
    """MONAI's loader and the SimpleITK path both say "truncated", in one line, naming the file."""
    from monai_npc.data.io import read_sitk_image

    data = write_image(np.random.default_rng(0).random((3, 20, 30)).astype(np.float32), tmp_path / f"v{suffix}").read_bytes()
    (tmp_path / f"cut{suffix}").write_bytes(data[: len(data) // 2])
    for read in (load_image, read_sitk_image):
        with pytest.raises(ValueError) as info:
            read(tmp_path / f"cut{suffix}")
        msg = str(info.value)
        assert "truncated" in msg and f"cut{suffix}" in msg and "\n" not in msg and "install" not in msg, msg


def test_sitk_reader_matches_monai_geometry(tmp_path):
    """read_sitk_image (no MONAI) gives the geometry load_image -> to_sitk gives, for each volume format."""
    from monai_npc.data.io import read_sitk_image
    from monai_npc.interop import grid_mismatch, to_sitk

    direction = (0.0, -1.0, 0.0, 1.0, 0.0, 0.0, 0.0, 0.0, 1.0)
    for suffix in (".nii.gz", ".mha", ".nrrd"):
        path = write_image(ZYX, tmp_path / f"g{suffix}", spacing=(2.0, 0.7, 0.5), origin=(30.0, 20.0, 10.0), direction=direction)
        ours, theirs = read_sitk_image(path), to_sitk(load_image(path))
        assert grid_mismatch(ours, theirs) is None, suffix
        import SimpleITK as sitk

        np.testing.assert_array_equal(sitk.GetArrayFromImage(ours), sitk.GetArrayFromImage(theirs))


def test_sform_disagreeing_with_pixdim_reads_the_qform_quietly(tmp_path, caplog, capfd):
    """Official ACDC headers: a 1 mm sform, pixdim 1.6 x 1.6 x 10 mm. ITK reads the qform; we log it, ITK's console warning is gone."""
    import logging

    import nibabel as nib
    import SimpleITK as sitk

    from monai_npc.data.io import read_sitk_file, sform_mismatch

    img = nib.Nifti1Image(np.random.default_rng(0).random((12, 10, 4)).astype(np.float32), np.diag([1.6, 1.6, 10.0, 1.0]))
    img.set_qform(np.diag([1.6, 1.6, 10.0, 1.0]), code=1)
    img.set_sform(np.diag([1.0, 1.0, 1.0, 1.0]), code=1)
    img.header.set_zooms((1.6, 1.6, 10.0))
    path = tmp_path / "acdc_like.nii.gz"
    nib.save(img, str(path))
    assert sform_mismatch(path) == ((1.0, 1.0, 1.0), (1.6, 1.6, 10.0))
    with caplog.at_level(logging.INFO, logger="monai_npc.data.io"):
        image = read_sitk_file(path, "moving image")
    np.testing.assert_allclose(image.GetSpacing(), (1.6, 1.6, 10.0), rtol=1e-5)
    assert "acdc_like.nii.gz" in caplog.text and "pixdim (1.6, 1.6, 10.0)" in caplog.text
    assert "unexpected scales" not in capfd.readouterr().err
    with caplog.at_level(logging.INFO, logger="monai_npc.data.io"):
        read_sitk_file(path, "fixed image")  # the same file again: no second notice
    assert caplog.text.count("acdc_like.nii.gz") == 1
    assert sitk.ProcessObject.GetGlobalWarningDisplay()  # restored
    consistent = tmp_path / "consistent.nii.gz"
    img.set_sform(np.diag([1.6, 1.6, 10.0, 1.0]), code=1)
    nib.save(img, str(consistent))
    assert sform_mismatch(consistent) is None
