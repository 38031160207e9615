"""Carrying a label map through a transform: label-linear, and label-linear of in-plane smoothed labels."""

import numpy as np
import pytest
import SimpleITK as sitk
import torch

from monai_npc.interop.label_resample import resample_label
from monai_npc.interop.transforms import displacement_field_transform
from monai_npc.functional.label_warp import warp_label


def _rings(n: int = 32, centre: float = 15.5) -> np.ndarray:
    yy, xx = np.mgrid[:n, :n]
    r = np.hypot(yy - centre, xx - centre)
    return np.where(r <= 6, 3, np.where(r <= 10, 2, 0)).astype(np.int32)


def _dice(a: np.ndarray, b: np.ndarray, v: int) -> float:
    return float(2 * ((a == v) & (b == v)).sum() / ((a == v).sum() + (b == v).sum()))


def _swirl(shape, amplitude: float = 2.0) -> np.ndarray:
    """``(3, Z, H, W)`` voxel displacement (array order, channel 0 through-plane = 0): a smooth in-plane swirl."""
    z, h, w = shape
    yy, xx = np.mgrid[:h, :w] / np.array([h, w])[:, None, None]
    ddf = np.zeros((3, z, h, w))
    ddf[1] = amplitude * np.sin(2 * np.pi * xx)
    ddf[2] = amplitude * np.cos(2 * np.pi * yy)
    return ddf


def _stack(label: np.ndarray, slices: int = 3) -> sitk.Image:
    image = sitk.GetImageFromArray(np.stack([label] * slices).astype(np.int32))
    image.SetSpacing((1.5, 1.5, 10.0))
    image.SetOrigin((-20.0, 7.0, 3.0))
    return image


def test_sigma_zero_is_itk_label_linear():
    label = _stack(_rings())
    transform = displacement_field_transform(_swirl(sitk.GetArrayViewFromImage(label).shape), label)
    expected = sitk.Resample(label, label, transform, sitk.sitkLabelLinear, 0, sitk.sitkInt32)
    out = resample_label(label, label, transform, 0.0)
    np.testing.assert_array_equal(sitk.GetArrayFromImage(out), sitk.GetArrayFromImage(expected))


def test_smoothed_labels_follow_the_true_outline_closer():
    """Rings drawn at 2 mm, resampled onto a 0.5 mm grid: smoothing each label by one voxel first gives
    the outline of the true circles better than label-linear's staircase (Dice against the circles
    drawn at 0.5 mm)."""
    label = sitk.GetImageFromArray(_rings())
    label.SetSpacing((2.0, 2.0))
    fine = sitk.Image(128, 128, sitk.sitkFloat32)
    fine.SetSpacing((0.5, 0.5))
    fine.SetOrigin((-0.75, -0.75))
    fy, fx = np.mgrid[:128, :128] * 0.5 - 0.75
    r = np.hypot(fy - 31.0, fx - 31.0)
    truth = np.where(r <= 12, 3, np.where(r <= 20, 2, 0))
    linear = sitk.GetArrayFromImage(resample_label(label, fine, sitk.Transform(), 0.0))
    smooth = sitk.GetArrayFromImage(resample_label(label, fine, sitk.Transform(), 1.0))
    assert _dice(smooth, truth, 2) > _dice(linear, truth, 2) + 0.01  # 0.981 vs 0.961
    assert _dice(smooth, truth, 3) > _dice(linear, truth, 3) + 0.004  # 0.984 vs 0.978
    assert smooth.dtype == np.int32 and set(np.unique(smooth)) == {0, 2, 3}


def test_smoothing_is_in_plane_only_keeps_geometry_and_zero_outside():
    rings = _rings()
    label_array = np.stack([np.zeros_like(rings), rings, np.zeros_like(rings)])
    label = sitk.GetImageFromArray(label_array)
    label.SetSpacing((1.5, 1.5, 10.0))
    # the fixed grid: 8 voxels further along x, so its last 8 columns lie outside the label's grid
    fixed = sitk.Image(32, 32, 3, sitk.sitkFloat32)
    fixed.CopyInformation(label)
    fixed.SetOrigin((12.0, 0.0, 0.0))
    out = resample_label(label, fixed, sitk.Transform(), 1.0)
    assert (out.GetSize(), out.GetSpacing(), out.GetOrigin(), out.GetDirection()) == (
        fixed.GetSize(), fixed.GetSpacing(), fixed.GetOrigin(), fixed.GetDirection())
    arr = sitk.GetArrayFromImage(out)
    assert (arr[0] == 0).all() and (arr[2] == 0).all()  # nothing smoothed across slices
    assert (arr[1, :, -8:] == 0).all() and (arr[1] == 3).sum() > 50


def test_warp_label_smooths_like_resample_label():
    """``track``'s torch path and ``register``'s SimpleITK path carry a label alike (ties and the
    Gaussian's discretisation aside)."""
    label = _stack(_rings(48, 23.5))
    arr = sitk.GetArrayFromImage(label)
    ddf = _swirl(arr.shape)
    itk = sitk.GetArrayFromImage(resample_label(label, label, displacement_field_transform(ddf, label), 1.0))
    torch_ddf = torch.from_numpy(ddf[1:]).permute(1, 0, 2, 3).float()  # (Z, 2, H, W)
    ours = warp_label(arr, torch_ddf, [2, 3], sigma=1.0)
    assert (itk != ours).mean() < 1e-3
    assert (ours != warp_label(arr, torch_ddf, [2, 3])).sum() > 0  # the smoothing changes the outline


@pytest.mark.parametrize("through", [-0.4, -0.6, 0.45, 0.55, 1.3])
def test_a_stack_field_carries_labels_as_itk_does_past_the_stack_ends(through):
    """``track``'s carry of a label by a stack network's 3-D field is what ITK gives through the written transform:
    within half a slice past the first / last slice the end slice's label, beyond it nothing."""
    from monai_npc.functional.label_warp import indicator_tensor, warp_indicators_volume

    rings = _rings(40, 19.5)
    label = _stack(rings, 4)
    arr = sitk.GetArrayFromImage(label)
    ddf = _swirl(arr.shape, 1.5)
    ddf[0] = through * np.linspace(1.0, 0.6, arr.shape[2])[None, :, None]  # slices, varying along the rows
    itk = sitk.GetArrayFromImage(resample_label(label, label, displacement_field_transform(ddf, label), 0.0))
    ours = warp_indicators_volume(*indicator_tensor(arr, [2, 3]), torch.from_numpy(ddf).float())
    assert (itk != ours).mean() < 2e-3
    end = 0 if through < 0 else -1  # the slice that reads past the stack's end
    gone = np.abs(ddf[0, end]) > 0.5
    assert not ours[end][gone].any() and ours[end][~gone].any() == bool((~gone).any())


@pytest.mark.parametrize("sigma", [-1.0, float("nan"), float("inf")])
def test_bad_sigma_is_an_error(sigma):
    label = _stack(_rings())
    with pytest.raises(ValueError, match="label sigma"):
        resample_label(label, label, sitk.Transform(), sigma)


def test_cli_label_sigma_zero_is_what_itk_gives_from_transform_h5(tmp_path):
    """``monai-npc register --label-sigma 0``: ``warped_label.nii.gz`` is ITK's label-linear resampling of
    the moving label through the written ``transform.h5``; the default for ``acdc`` smooths (1 voxel)."""
    from monai_npc.cli.main import main
    from monai_npc.data.phantom_cine import cardiac_cine

    c = cardiac_cine(frames=4, size=64, levels=(0.4,), spacing=(8.0, 2.0, 2.0), seed=3)
    paths = {}
    for name, array in (("moving", c["image"][0]), ("fixed", c["image"][2]), ("label", c["label"][0])):
        image = sitk.GetImageFromArray(np.asarray(array, np.float32 if name != "label" else np.int16))
        image.SetSpacing((2.0, 2.0, 8.0))
        paths[name] = str(tmp_path / f"{name}.nii.gz")
        sitk.WriteImage(image, paths[name])
    common = ["register", "--moving", paths["moving"], "--fixed", paths["fixed"], "--moving-label", paths["label"], "--refine", "2",
              "--no-overview"]
    for sigma, out in (("0", "plain"), (None, "default")):
        assert main(common + (["--label-sigma", sigma] if sigma else []) + ["--out", str(tmp_path / out)]) == 0
    import json

    plain, default = tmp_path / "plain", tmp_path / "default"
    assert json.loads((plain / "summary.json").read_text())["label_sigma"] == 0.0
    assert json.loads((default / "summary.json").read_text())["label_sigma"] == 1.0
    fixed = sitk.ReadImage(paths["fixed"])
    expected = sitk.Resample(sitk.ReadImage(paths["label"]), fixed, sitk.ReadTransform(str(plain / "transform.h5")), sitk.sitkLabelLinear, 0)
    np.testing.assert_array_equal(sitk.GetArrayFromImage(sitk.ReadImage(str(plain / "warped_label.nii.gz"))), sitk.GetArrayFromImage(expected))
