"""Step 0 of the input path: the rigid in-plane pre-alignment (``register(align=...)``) of two acquisitions."""

import math

import numpy as np
import pytest
import SimpleITK as sitk
import torch
from torch import nn

import monai_npc
from monai_npc.apps.registration.align import rigid_in_plane, wants_rigid
from monai_npc.interop.images import grid_mismatch
from monai_npc.data.phantoms import cardiac_pair


class Zero(nn.Module):
    """A network that moves nothing: what is left is the pre-alignment alone."""

    def forward(self, image):
        return torch.zeros(image.shape[0], 2, *image.shape[2:])


def _stack(size=96, slices=3, seed=3):
    pair = cardiac_pair(size=size, seed=seed)
    image = sitk.GetImageFromArray(np.stack([pair["moving"] * (1 + 0.1 * k) for k in range(slices)]).astype(np.float32))
    label = sitk.GetImageFromArray(np.stack([pair["moving_label"]] * slices).astype(np.uint8))
    for im in (image, label):
        im.SetSpacing((1.5, 1.5, 8.0))
        im.SetOrigin((-70.0, -60.0, 0.0))
        im.SetDirection((0.8, -0.6, 0.0, 0.6, 0.8, 0.0, 0.0, 0.0, 1.0))  # turned in-plane: the axes are not LPS
    return image, label


def _turned(image, degrees, shift_mm, interpolator=sitk.sitkLinear):
    """``image`` turned about its slice normal through its centre and shifted in-plane (its grid kept, but
    the origin moved by half a voxel so that the two grids differ as two acquisitions' do)."""
    centre = image.TransformContinuousIndexToPhysicalPoint([(s - 1) / 2 for s in image.GetSize()])
    t = sitk.Euler3DTransform()
    t.SetCenter(centre)
    t.SetRotation(0.0, 0.0, math.radians(degrees))
    t.SetTranslation(tuple(shift_mm) + (0.0,))
    out = sitk.Resample(image, image, t, interpolator, 0.0)
    out.SetOrigin(tuple(np.asarray(image.GetOrigin()) + (0.75 * 0.8, 0.75 * 0.6, 0.0)))
    return out


def _dice(a, b, values=(1, 2, 3)):
    return float(np.mean([2 * ((a == v) & (b == v)).sum() / max(int((a == v).sum() + (b == v).sum()), 1) for v in values]))


def test_rigid_in_plane_finds_a_known_turn_and_shift():
    image, _ = _stack()
    arr = sitk.GetArrayFromImage(image)
    rows, cols = np.indices(arr.shape[1:], dtype=np.float64)
    h, w = arr.shape[1:]
    angle, cr, cc = math.radians(8.0), (h - 1) / 2, (w - 1) / 2

    def src(r, c):  # the moving image at voxel (r, c) shows the fixed image at src(r, c): turned 8 degrees, shifted
        return (cr + math.cos(angle) * (r - cr) + math.sin(angle) * (c - cc) + 3.0,
                cc - math.sin(angle) * (r - cr) + math.cos(angle) * (c - cc) - 2.0)

    from scipy.ndimage import map_coordinates

    moving = np.stack([map_coordinates(s, src(rows, cols), order=1, cval=np.nan) for s in arr]).astype(np.float32)
    fit = rigid_in_plane(moving, arr, (1.5, 1.5, 8.0))
    assert fit.ddf.shape == (3, 2, h, w)
    # the field takes each fixed voxel x to the moving voxel that shows it: src(x + ddf(x)) = x
    back_r, back_c = src(rows + fit.ddf[1, 0], cols + fit.ddf[1, 1])
    err = np.hypot(back_r - rows, back_c - cols)[10:-10, 10:-10]
    assert err.max() < 0.3 and abs(fit.angle_deg + 8.0) < 0.3
    again = rigid_in_plane(moving, arr, (1.5, 1.5, 8.0))  # ITK's sample jitter is seeded: a call repeats itself
    assert abs(again.angle_deg - fit.angle_deg) < 1e-9 and np.abs(again.ddf - fit.ddf).max() < 1e-9  # (threads: float rounding)
    assert np.allclose(fit.ddf[0], fit.ddf[2])  # one transform for the stack


def test_auto_aligns_two_acquisitions_and_leaves_one_series_alone():
    image, label = _stack()
    moved = _turned(image, 10.0, (4.0, -3.0))
    assert grid_mismatch(moved, image) is not None and grid_mismatch(image, image) is None
    assert wants_rigid("auto", moved, image) and not wants_rigid("auto", image, image)
    assert wants_rigid("rigid", image, image) and not wants_rigid("none", moved, image)
    with pytest.raises(ValueError, match="align .* must be one of auto, none, rigid, got 'affine'"):
        monai_npc.register(moved, image, model="phase-correlation", align="affine")
    same = monai_npc.register(image, image, model=Zero())
    assert same.summary["alignment"] == {"method": "none", "align": "auto"}


def test_the_alignment_is_composed_into_every_output():
    """With a network that moves nothing, the result is the rigid transform alone: the moving stack turned
    10 degrees and shifted comes back onto the fixed one (image and label), no folding, det J = 1."""
    fixed, fixed_label = _stack()
    moving, moving_label = _turned(fixed, 10.0, (4.0, -3.0)), _turned(fixed_label, 10.0, (4.0, -3.0), sitk.sitkNearestNeighbor)
    f_arr, f_lab = sitk.GetArrayFromImage(fixed), sitk.GetArrayFromImage(fixed_label)
    plain = monai_npc.register(moving, fixed, model=Zero(), moving_label=moving_label, align="none", label_sigma=0)
    aligned = monai_npc.register(moving, fixed, model=Zero(), moving_label=moving_label, label_sigma=0)
    fit = aligned.summary["alignment"]
    assert fit["method"] == "rigid" and abs(abs(fit["angle_deg"]) - 10.0) < 0.5
    d_plain = _dice(sitk.GetArrayFromImage(plain.warped_label), f_lab)
    d_aligned = _dice(sitk.GetArrayFromImage(aligned.warped_label), f_lab)
    assert d_plain < 0.75 and d_aligned > 0.95, (d_plain, d_aligned)
    err = np.abs(sitk.GetArrayFromImage(aligned.warped) - f_arr)[:, 20:-20, 20:-20]
    assert err.mean() < 0.03 * f_arr.max()
    jac = sitk.GetArrayFromImage(aligned.jacobian)[:, 10:-10, 10:-10]
    assert np.allclose(jac, 1.0, atol=1e-3)
    # the written transform is the same composition (what ITK, ANTs and Slicer apply)
    via_itk = sitk.Resample(moving, fixed, aligned.transform, sitk.sitkLinear, 0.0)
    assert np.abs(sitk.GetArrayFromImage(via_itk) - sitk.GetArrayFromImage(aligned.warped)).max() < 1e-3 * f_arr.max()


def test_a_turned_study_registers_as_well_as_the_untouched_one():
    """The NPC model on a phantom pair whose moving frame comes from another "acquisition" turned by 15
    degrees and shifted by 13 mm: with the default (auto) it carries the label nearly as well as on the untouched pair; without
    the alignment it loses most of it."""
    pair = cardiac_pair(size=128, seed=5)

    def as_image(arr, dtype=np.float32):
        im = sitk.GetImageFromArray(np.stack([arr] * 2).astype(dtype))
        im.SetSpacing((1.5, 1.5, 8.0))
        return im

    moving, label, fixed = as_image(pair["moving"]), as_image(pair["moving_label"], np.uint8), as_image(pair["fixed"])
    truth = np.stack([pair["fixed_label"]] * 2)
    # the label prior off: it pulls even the unaligned label much of the way (0.87 here), this is the alignment alone
    kw = dict(model="acdc", label_prior=0.0)
    base = _dice(sitk.GetArrayFromImage(monai_npc.register(moving, fixed, moving_label=label, **kw).warped_label), truth)
    t_moving, t_label = _turned(moving, 15.0, (10.0, 8.0)), _turned(label, 15.0, (10.0, 8.0), sitk.sitkNearestNeighbor)
    auto = monai_npc.register(t_moving, fixed, moving_label=t_label, **kw)
    none = monai_npc.register(t_moving, fixed, moving_label=t_label, align="none", **kw)
    d_auto, d_none = (_dice(sitk.GetArrayFromImage(r.warped_label), truth) for r in (auto, none))
    assert d_auto > base - 0.03 and d_none < d_auto - 0.1, (base, d_auto, d_none)


def test_cli_align_option_reaches_the_summary(tmp_path, capsys):
    import json

    from monai_npc.cli.main import main

    fixed, _ = _stack()
    sitk.WriteImage(fixed, str(tmp_path / "fixed.nii.gz"))
    sitk.WriteImage(_turned(fixed, 10.0, (4.0, -3.0)), str(tmp_path / "moving.nii.gz"))
    for option, method in ((["--align", "none"], "none"), ([], "rigid")):
        out = tmp_path / f"out_{method}"
        rc = main(["register", "--moving", str(tmp_path / "moving.nii.gz"), "--fixed", str(tmp_path / "fixed.nii.gz"),
                   "--model", "phase-correlation", "--out", str(out), "--no-overview"] + option)
        assert rc == 0
        assert json.loads((out / "summary.json").read_text())["alignment"]["method"] == method
        printed = capsys.readouterr().out
        assert ("moving first turned" in printed) == (method == "rigid"), printed
    with pytest.raises(SystemExit):
        main(["register", "--moving", "m.nii.gz", "--fixed", "f.nii.gz", "--out", str(tmp_path / "x"), "--align", "affine"])
    assert "invalid choice: 'affine'" in capsys.readouterr().err


def test_bundle_inference_aligns_a_plain_pair_of_two_studies(tmp_path):
    """``infer_studies`` (the bundle's ``inference.json``, key ``align``) on a NAME_moving / NAME_fixed pair."""
    import json

    from monai_npc.apps import stacks

    fixed, _ = _stack()
    root = tmp_path / "root"
    root.mkdir()
    sitk.WriteImage(fixed, str(root / "case1_fixed.nii.gz"))
    sitk.WriteImage(_turned(fixed, 10.0, (4.0, -3.0)), str(root / "case1_moving.nii.gz"))
    for align, method in (("auto", "rigid"), ("none", "none")):
        out = tmp_path / align
        summary = stacks.infer_studies(root, out, model="phase-correlation", overview=False, progress=False, align=align)
        assert summary["n_done"] == 1, summary
        (found,) = [p for p in out.rglob("summary.json") if p.parent != out]
        assert json.loads(found.read_text())["alignment"]["method"] == method
    with pytest.raises(ValueError, match="align must be one of auto, none, rigid, got 'affine'"):
        stacks.infer_studies(tmp_path / "nowhere", tmp_path / "x", align="affine")


def test_two_dimensional_images_are_aligned_too():
    """A 2-D pair (an echo frame, a single slice): the same turn found with the 2-D rigid transform."""
    stack, labels = _stack(slices=1)
    fixed, fixed_label = stack[:, :, 0], labels[:, :, 0]
    moving = sitk.Resample(fixed, fixed, _turn_2d(fixed, 12.0, (3.0, -2.0)), sitk.sitkLinear, 0.0)
    moving_label = sitk.Resample(fixed_label, fixed, _turn_2d(fixed, 12.0, (3.0, -2.0)), sitk.sitkNearestNeighbor, 0)
    moving.SetOrigin(tuple(np.asarray(fixed.GetOrigin()) + 0.5))
    moving_label.CopyInformation(moving)
    reg = monai_npc.register(moving, fixed, model=Zero(), moving_label=moving_label, label_sigma=0)
    assert reg.summary["alignment"]["method"] == "rigid" and reg.warped.GetDimension() == 2
    assert _dice(sitk.GetArrayFromImage(reg.warped_label), sitk.GetArrayFromImage(fixed_label)) > 0.95


def _turn_2d(image, degrees, shift_mm):
    t = sitk.Euler2DTransform()
    t.SetCenter(image.TransformContinuousIndexToPhysicalPoint([(s - 1) / 2 for s in image.GetSize()]))
    t.SetAngle(math.radians(degrees))
    t.SetTranslation(shift_mm)
    return t


def test_too_little_overlap_for_the_metric_gives_no_transform_not_an_error():
    image, _ = _stack()
    arr = sitk.GetArrayFromImage(image)
    moving = np.full_like(arr, np.nan)
    moving[:, :3, :3] = arr[:, :3, :3]  # 9 voxels per slice in a corner
    fit = rigid_in_plane(moving, arr, (1.5, 1.5, 8.0))
    assert fit.angle_deg == 0.0 and fit.translation_mm == (0.0, 0.0) and np.abs(fit.ddf).max() < 1e-9
    with pytest.raises(ValueError, match="does not reach the fixed image's grid"):
        rigid_in_plane(np.full_like(arr, np.nan), arr, (1.5, 1.5, 8.0))


def test_unrelated_content_gets_no_turn_by_chance():
    """Noise against a heart: a turn found by chance is dropped (it shares almost none of the fixed image's
    information), and ``summary.json`` says so."""
    image, _ = _stack()
    arr = sitk.GetArrayFromImage(image)
    noise = np.random.default_rng(0).random(arr.shape).astype(np.float32)
    fit = rigid_in_plane(noise, arr, (1.5, 1.5, 8.0))
    assert fit.angle_deg == 0.0 and np.abs(fit.ddf).max() < 1e-9 and "information" in fit.dropped
    moving = sitk.GetImageFromArray(noise)
    moving.CopyInformation(image)
    moving.SetOrigin(tuple(np.asarray(image.GetOrigin()) + 0.3))
    summary = monai_npc.register(moving, image, model=Zero()).summary["alignment"]
    assert summary["method"] == "rigid" and summary["applied"] is False and summary["angle_deg"] == 0.0
    assert "information" in summary["dropped"]
    # the same heart turned by 30 degrees keeps its turn
    turned = _turned(image, 30.0, (2.0, 1.0))
    kept = monai_npc.register(turned, image, model=Zero()).summary["alignment"]
    assert kept["applied"] is True and "dropped" not in kept and abs(abs(kept["angle_deg"]) - 30.0) < 0.5


def test_a_dropped_alignment_leaves_the_registration_as_without_one():
    """Noise as the moving image on another grid: the turn is dropped and the result is exactly ``align="none"``'s."""
    image, _ = _stack()
    noise = sitk.GetImageFromArray(np.random.default_rng(1).random(sitk.GetArrayFromImage(image).shape).astype(np.float32))
    noise.CopyInformation(image)
    noise.SetOrigin(tuple(np.asarray(image.GetOrigin()) + 0.3))
    auto = monai_npc.register(noise, image, model="phase-correlation")
    none = monai_npc.register(noise, image, model="phase-correlation", align="none")
    assert auto.summary["alignment"]["applied"] is False
    assert float((auto.ddf - none.ddf).abs().max()) == 0.0
