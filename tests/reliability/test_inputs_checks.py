"""Every bad input gets one clear line: tiny and strip-shaped images, tensors without data or with
complex values, NaN voxels, low overlap, very different spacing or orientation, empty or misplaced labels."""

import warnings

import numpy as np
import pytest
import SimpleITK as sitk
import torch

import monai_npc
from monai_npc.cli.main import main
from monai_npc.data.phantoms import cardiac_pair
from monai_npc.interop import checks

PC = "phase-correlation"


def _save(arr, path, spacing=(1.0, 1.0), origin=(0.0, 0.0), angle=0.0, pixel=sitk.sitkFloat32):
    image = sitk.Cast(sitk.GetImageFromArray(np.asarray(arr, np.float32)), pixel)
    image.SetSpacing(spacing)
    image.SetOrigin(origin)
    c, s = np.cos(angle), np.sin(angle)
    image.SetDirection((c, -s, s, c))
    sitk.WriteImage(image, str(path))
    return path


def _texture(shape, seed=0):
    return np.random.default_rng(seed).random(shape).astype(np.float32)


@pytest.mark.parametrize("shape", [(1, 1), (1, 128), (3, 500), (15, 15)])
def test_tiny_images_are_rejected_naming_file_and_size(shape, tmp_path, capsys):
    small = _save(_texture(shape), tmp_path / "small.nii.gz")
    good = _save(_texture((64, 64)), tmp_path / "good.nii.gz")
    with pytest.raises(ValueError, match=rf"small.nii.gz is {shape[1]} x {shape[0]} pixels.*at least 16 x 16"):
        monai_npc.register(small, good, PC)
    assert main(["register", "--moving", str(good), "--fixed", str(small), "--model", PC, "--out", str(tmp_path / "o")]) == 1
    err = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    assert len(err) == 1 and "fixed image" in err[0] and "small.nii.gz" in err[0] and "Traceback" not in err[0]
    assert not (tmp_path / "o").exists()


def test_smallest_accepted_size_registers():
    image = _texture((16, 16))
    reg = monai_npc.register(image, image, PC)
    assert reg.warped.GetSize() == (16, 16)


def test_extreme_aspect_ratio_is_rejected_unless_stretched(tmp_path):
    strip = _save(_texture((20, 400)), tmp_path / "strip.nii.gz")
    with pytest.raises(ValueError, match=r"strip.nii.gz is 400 x 20 pixels.*aspect ratio 20.0:1.*--stretch"):
        monai_npc.register(strip, strip, PC)
    assert monai_npc.register(strip, strip, PC, keep_aspect=False).warped.GetSize() == (400, 20)


@pytest.mark.parametrize("tensor, words", [
    (torch.zeros(32, 32, device="meta"), "'meta' device"),
    (torch.zeros(32, 32, dtype=torch.complex64), "complex tensor"),
])
def test_tensors_without_real_values_get_one_line(tensor, words):
    with pytest.raises(ValueError, match=rf"moving image: .*{words}"):
        monai_npc.register(tensor, torch.zeros(32, 32), PC)


def test_nan_voxels_are_an_error_on_every_path(tmp_path):
    arr = _texture((32, 32))
    arr[3, 4] = np.nan
    path = _save(arr, tmp_path / "nan.nii.gz")
    good = _texture((32, 32), 1)
    for moving in (path, arr, torch.from_numpy(arr), sitk.GetImageFromArray(arr)):
        with pytest.raises(ValueError, match="1 non-finite"):
            monai_npc.register(moving, good, PC)
    with pytest.raises(ValueError, match="nan.nii.gz.*non-finite"):
        monai_npc.register(good, good, PC, moving_label=path)


@pytest.mark.parametrize("width, shift, percent", [(64, 48, 25.0), (128, 127, 0.8)])
def test_low_overlap_warns_with_both_names_and_percent(width, shift, percent, tmp_path):
    image = _texture((64, width))
    moving = _save(image, tmp_path / "moving.nii.gz", origin=(float(shift), 0.0))
    fixed = _save(image, tmp_path / "fixed.nii.gz")
    with pytest.warns(RuntimeWarning, match=rf"moving.nii.gz.*fixed.nii.gz.*only {percent:.1f} %") as record:
        reg = monai_npc.register(moving, fixed, PC)
    assert any(f"{percent:.1f} %" in note for note in reg.summary["warnings"])
    assert len([w for w in record if "overlap" in str(w.message)]) == 1


def test_no_overlap_stays_an_error(tmp_path):
    image = _texture((64, 64))
    far = _save(image, tmp_path / "far.nii.gz", origin=(500.0, 0.0))
    with pytest.raises(ValueError, match="far.nii.gz does not overlap"):
        monai_npc.register(far, _save(image, tmp_path / "f.nii.gz"), PC)


def test_good_pair_gives_no_warning():
    p = cardiac_pair(size=48, seed=1)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        reg = monai_npc.register(p["moving"], p["fixed"], PC, moving_label=p["moving_label"], fixed_label=p["fixed_label"])
    assert reg.summary["warnings"] == []


def test_very_different_spacing_and_orientation_warn(tmp_path):
    image = _texture((64, 64))
    fixed = _save(image, tmp_path / "fixed.nii.gz", spacing=(1.0, 1.0))
    fine = _save(np.kron(image, np.ones((3, 3))), tmp_path / "fine.nii.gz", spacing=(1 / 3, 1 / 3))
    with pytest.warns(RuntimeWarning, match=r"fine.nii.gz has pixel spacing \(0.3333, 0.3333\) mm.*fixed.nii.gz \(1.0, 1.0\) mm: 3.0x"):
        monai_npc.register(fine, fixed, PC)
    turned = _save(image, tmp_path / "turned.nii.gz", angle=np.radians(30), origin=(10.0, -20.0))
    with pytest.warns(RuntimeWarning, match=r"turned.nii.gz and fixed image .*fixed.nii.gz differ in orientation by 30.0 degrees"):
        monai_npc.register(turned, fixed, PC)


def test_empty_label_warns_and_misplaced_label_names_both(tmp_path):
    image = _save(_texture((48, 48)), tmp_path / "img.nii.gz")
    empty = _save(np.zeros((48, 48)), tmp_path / "empty.nii.gz", pixel=sitk.sitkUInt8)
    with pytest.warns(RuntimeWarning, match=r"moving label .*empty.nii.gz is empty"):
        monai_npc.register(image, image, PC, moving_label=empty)
    shifted = _save(np.ones((48, 48)), tmp_path / "lab.nii.gz", origin=(5.0, 0.0), pixel=sitk.sitkUInt8)
    with pytest.raises(ValueError, match=r"fixed label .*lab.nii.gz does not match the grid of its image .*img.nii.gz: origin"):
        monai_npc.register(image, image, PC, fixed_label=shifted)


def test_check_functions_are_pure():
    a = sitk.GetImageFromArray(np.zeros((40, 40), np.float32))
    b = sitk.GetImageFromArray(np.zeros((40, 40), np.float32))
    b.SetOrigin((20.0, 0.0))
    assert checks.overlap_percent(a, a) == 100.0 and checks.overlap_percent(a, b) == pytest.approx(50.0, abs=3.0)
    assert checks.overlap_warning(50.0, "m", "f") is None and checks.overlap_warning(0.0, "m", "f") is None
    assert checks.spacing_warning(a, a, "m", "f") is None and checks.orientation_warning(a, a, "m", "f") is None
    checks.check_inputs(a, b, "m", "f")  # no error
    checks.check_tensor(np.zeros(3))  # not a tensor: nothing to check
