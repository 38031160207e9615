"""repair_folds: the folds of a field smoothed away where they are, the rest of the field untouched."""

import numpy as np
import pytest

from monai_npc.functional.fold_repair import field_determinant, repair_folds


def _folded_2d(size: int = 64, amplitude: float = 3.0) -> np.ndarray:
    """``(2, H, W)``: a step of ``amplitude`` voxels along W, steep enough to fold (det J about -1 at its centre),
    windowed in H; zero far from the middle."""
    y, x = np.mgrid[0:size, 0:size].astype(np.float64)
    c = size / 2
    ddf = np.zeros((2, size, size))
    ddf[1] = -amplitude * np.tanh((x - c) / 1.5) * np.exp(-((y - c) ** 2 + (x - c) ** 2) / (2 * 6.0**2))
    return ddf


def test_a_folded_field_is_repaired_locally():
    ddf = _folded_2d()
    det = field_determinant(ddf)
    assert det.shape == (1, 64, 64) and (det <= 0).sum() >= 10
    out, info = repair_folds(ddf)
    assert field_determinant(out).min() > 0
    assert info["folding_percent_before"] == pytest.approx(100 * (det <= 0).mean())
    assert info["folding_percent_after"] == 0.0 and 1 <= info["rounds"] <= 30
    changed = np.any(out != ddf, axis=0)
    assert 0 < changed.sum() <= info["voxels_changed"] < 0.2 * changed.size  # only near the fold
    rows, cols = np.nonzero(changed)
    assert rows.min() > 15 and rows.max() < 49 and cols.min() > 15 and cols.max() < 49
    assert ddf is not out and np.array_equal(ddf, _folded_2d())  # the input is not changed


def test_a_field_without_folds_comes_back_as_it_is():
    ddf = 0.3 * _folded_2d(amplitude=1.0)  # gentle: det J > 0 everywhere
    assert field_determinant(ddf).min() > 0
    out, info = repair_folds(ddf)
    assert np.array_equal(out, ddf) and info["rounds"] == 0 and info["voxels_changed"] == 0


def test_the_determinant_of_the_repaired_field_comes_back():
    """``return_determinant`` (register writes the repaired field's det J as ``jacobian.nii.gz`` and its summary's
    folding without computing it again): :func:`field_determinant` of the returned field exactly, repaired or not; for a
    field moving through the plane that the rounds changed, ``None`` (they recompute it on slabs of slices)."""
    for ddf in (_folded_2d(), 0.3 * _folded_2d(amplitude=1.0)):
        out, info, det = repair_folds(ddf, return_determinant=True)
        assert np.array_equal(det, field_determinant(out)) and (out, info)[1] == repair_folds(ddf)[1]
    stack = np.zeros((3, 3, 64, 64))
    stack[1:, 1] = _folded_2d()
    assert np.array_equal(repair_folds(stack, return_determinant=True)[2], field_determinant(repair_folds(stack)[0]))  # in-plane
    stack[0] = 0.2  # and through the plane: changed by the rounds, so not told
    out, info, det = repair_folds(stack, return_determinant=True)
    assert info["rounds"] >= 1 and det is None

def test_a_stack_field_with_a_through_plane_channel():
    """(3, Z, H, W): the 3-D determinant is used once channel 0 moves; the fold on slice 2 is repaired (its neighbours
    in the slices beside it smoothed too), the slices beyond keep their field bit for bit. Without a through-plane part
    only the folded slice changes."""
    stack = np.zeros((3, 5, 64, 64))
    stack[2, 2] = _folded_2d()[1]
    stack[0] = 0.05  # a small uniform through-plane shift: the full 3-D determinant applies
    assert (field_determinant(stack) <= 0).any()
    out, info = repair_folds(stack)
    assert field_determinant(out).min() > 0 and info["folding_percent_after"] == 0.0
    np.testing.assert_array_equal(out[:, [0, 4]], stack[:, [0, 4]])
    stack[0] = 0.0
    out, _ = repair_folds(stack)
    assert field_determinant(out).min() > 0
    np.testing.assert_array_equal(out[:, [0, 1, 3, 4]], stack[:, [0, 1, 3, 4]])


def test_a_repair_cut_short_reports_what_it_returns():
    """One round is not enough for this fold: the folding reported is the returned field's, and no more than before."""
    ddf = _folded_2d(amplitude=8.0)
    out, info = repair_folds(ddf, max_rounds=1)
    assert info["folding_percent_after"] <= info["folding_percent_before"]
    assert 100 * (field_determinant(out) <= 0).mean() == pytest.approx(info["folding_percent_after"])


def test_rounds_that_fold_more_give_back_the_field_as_it_was(monkeypatch):
    """Were the smoothing to make things worse (here a stand-in that flips and stretches the field), the field given is
    returned unchanged and the report says nothing was changed."""
    import monai_npc.functional.fold_repair as fold_repair

    monkeypatch.setattr(fold_repair, "gaussian_filter_nearest", lambda x, sigma: -5.0 * x)
    ddf = _folded_2d()
    out, info = fold_repair.repair_folds(ddf, max_rounds=3)
    assert np.array_equal(out, ddf) and info["voxels_changed"] == 0
    assert info["folding_percent_after"] == info["folding_percent_before"] > 0


def test_max_rounds_zero_and_bad_input():
    ddf = _folded_2d()
    out, info = repair_folds(ddf, max_rounds=0)
    assert np.array_equal(out, ddf) and info["folding_percent_after"] == info["folding_percent_before"] > 0
    with pytest.raises(ValueError, match="shape"):
        repair_folds(np.zeros((3, 8, 8)))
    bad = ddf.copy()
    bad[0, 3, 3] = np.nan
    with pytest.raises(ValueError, match="NaN"):
        repair_folds(bad)
    with pytest.raises(ValueError, match="sigma"):
        repair_folds(ddf, sigma=0.0)


def test_register_writes_the_repaired_field_and_says_so():
    """A model whose field folds on a quarter of the voxels (a tiny network with a wild output layer): ``register``
    writes the field with its folds smoothed away, ``summary["fold_repair"]`` says how much folded before, the summary's
    folding is the written field's (0), and a warning says the field was far from a trained model's."""
    import torch

    import monai_npc
    from monai_npc.data.phantoms import cardiac_pair
    from monai_npc.networks.nets import NPCNet

    torch.manual_seed(0)
    net = NPCNet(kernel_size=8, stride=4, num_pairs=8, top_k=4, gate_dim=8, hidden_dim=8, num_pe=8, num_steps=2)
    with torch.no_grad():
        torch.nn.init.normal_(net.ode.stages[0].decoder.head.out.weight, std=15.0)
    pair = cardiac_pair(size=96, seed=1)
    with pytest.warns(RuntimeWarning, match="folded on"):
        reg = monai_npc.register(pair["moving"] * 300, pair["fixed"] * 300, moving_label=pair["moving_label"], model=net, threads=1)
    repair = reg.summary["fold_repair"]
    assert repair["folding_percent_before"] > 5.0 and repair["folding_percent_after"] == 0.0 and repair["rounds"] >= 1
    assert reg.summary["folding_percent"] == 0.0 and field_determinant(reg.ddf_array).min() > 0
    assert any("folded on" in w for w in reg.summary["warnings"])


def test_register_writes_the_determinant_of_the_field_it_writes():
    """register takes the written field's det J from its fold repair: the same as computing it from that field."""
    import SimpleITK as sitk

    import monai_npc
    from monai_npc.data.phantom_cine import cardiac_cine

    c = cardiac_cine(frames=4, size=64, levels=(0.4,), spacing=(8.0, 2.0, 2.0), seed=3)
    reg = monai_npc.register(c["image"][0], c["image"][2], moving_label=c["label"][0], spacing=c["spacing"], threads=1)
    assert np.array_equal(sitk.GetArrayFromImage(reg.jacobian), field_determinant(reg.ddf_array))
    assert reg.summary["jacobian_min"] == float(field_determinant(reg.ddf_array).min())
