"""The fused label: functional.label_fusion and Registration.fused_label / fused_label.nii.gz."""

import json

import numpy as np
import pytest

from monai_npc.functional.label_fusion import FUSION_MIN_AGREEMENT, fuse_by_slice, slice_agreement


def _square(size, lo, hi, value=1):
    a = np.zeros((size, size), np.int32)
    a[lo:hi, lo:hi] = value
    return a


def test_slice_agreement_is_the_mean_dice_over_the_values_either_holds():
    a, b = _square(20, 5, 15), _square(20, 5, 15)
    assert slice_agreement(a, b) == 1.0 and slice_agreement(np.zeros_like(a), np.zeros_like(a)) == 1.0
    c = b.copy()
    c[5:10, 5:15] = 2  # half of b's square relabelled: value 1 Dice 2*50/(100+50), value 2 Dice 0
    assert slice_agreement(a, c) == pytest.approx(np.mean([2 * 50 / 150, 0.0]))
    assert slice_agreement(a, np.zeros_like(a)) == 0.0


def test_fuse_by_slice_takes_the_segmentation_where_it_agrees_and_the_registration_elsewhere():
    registered = np.stack([_square(20, 5, 15), _square(20, 5, 15), _square(20, 5, 15), np.zeros((20, 20), np.int32)])
    segmented = np.stack([_square(20, 6, 15),        # close: taken (Dice 2 * 81 / 181 = 0.895)
                          _square(20, 5, 15, 2),     # another structure: kept
                          np.zeros((20, 20), np.int32),  # the network sees nothing: kept
                          np.zeros((20, 20), np.int32)])  # both empty: either
    fused, taken = fuse_by_slice(registered, segmented)
    assert taken.tolist() == [True, False, False, True]
    np.testing.assert_array_equal(fused[0], segmented[0])
    np.testing.assert_array_equal(fused[1:3], registered[1:3])
    assert fused.dtype == registered.dtype
    # the threshold decides: at 0.9 the first slice stays the registration's
    assert slice_agreement(registered[0], segmented[0]) == pytest.approx(2 * 81 / 181)
    assert not fuse_by_slice(registered, segmented, 0.9)[1][0]
    assert FUSION_MIN_AGREEMENT == 0.5
    two_d, t = fuse_by_slice(registered[0], segmented[0])
    assert two_d.shape == (20, 20) and t.tolist() == [True]
    with pytest.raises(ValueError, match="one"):
        fuse_by_slice(registered, segmented[:2])
    with pytest.raises(ValueError, match="min_agreement"):
        fuse_by_slice(registered, segmented, 1.5)


def test_register_returns_a_fused_label_of_its_own_when_the_prior_acts(tmp_path, prior_always_acts, monkeypatch):
    import SimpleITK as sitk

    import monai_npc
    import monai_npc.apps.registration.result as result
    from monai_npc.data.phantom_cine import cardiac_cine

    c = cardiac_cine(frames=4, size=64, levels=(0.4,), spacing=(8.0, 2.0, 2.0), seed=3)
    ed, es, lab = c["image"][0], c["image"][2], c["label"][0]
    kw = dict(spacing=c["spacing"], refine_iterations=10, threads=1)
    # the prior reproduces the phantom's own labels less well than FUSION_MIN_PRIOR_AGREEMENT: no fused label, and why
    plain = monai_npc.register(ed, es, moving_label=lab, **kw)
    agreement = plain.summary["label_prior"]["agreement"]
    assert plain.prior_label is not None and agreement < result.FUSION_MIN_PRIOR_AGREEMENT and plain.fused_label is None
    assert plain.summary["fused_label"]["made"] is False and f"{agreement:.2f}" in plain.summary["fused_label"]["why"]
    assert "fused_label" not in plain.save(tmp_path / "plain")["outputs"]
    monkeypatch.setattr(result, "FUSION_MIN_PRIOR_AGREEMENT", agreement - 0.01)
    reg = monai_npc.register(ed, es, moving_label=lab, **kw)
    fused = reg.fused_label
    assert fused is not None and fused.GetSize() == reg.fixed.GetSize() and fused.GetOrigin() == reg.fixed.GetOrigin()
    f, w, p = (sitk.GetArrayFromImage(x) for x in (fused, reg.warped_label, reg.prior_label))
    info = reg.summary["fused_label"]
    taken = info["slices_from_prior"]
    for z in range(f.shape[0]):  # every slice is the prior's (where it agrees with the transform's label) or the transform's
        np.testing.assert_array_equal(f[z], p[z] if z in taken else w[z])
        assert (slice_agreement(w[z], p[z]) >= FUSION_MIN_AGREEMENT) == (z in taken)
    assert info["slices"] == f.shape[0]
    # the warped label stays the transform's: ITK's label-linear resampling through the written transform
    out = reg.save(tmp_path / "out")
    assert out["outputs"]["fused_label"] == "fused_label.nii.gz"
    saved = json.loads((tmp_path / "out" / "summary.json").read_text())
    assert saved["fused_label"]["slices_from_prior"] == taken
    np.testing.assert_array_equal(sitk.GetArrayFromImage(sitk.ReadImage(str(tmp_path / "out" / "fused_label.nii.gz"))), f)
    # no prior, no fused label (and no file)
    off = monai_npc.register(ed, es, moving_label=lab, label_prior=0.0, **kw)
    assert off.fused_label is None and "fused_label" not in off.save(tmp_path / "off")["outputs"]
    assert not (tmp_path / "off" / "fused_label.nii.gz").exists()
