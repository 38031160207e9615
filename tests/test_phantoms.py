"""Phantoms: format, realistic motion, exact ground truth, speed, and the on-disk layouts."""


import numpy as np
import pytest
import torch
from scipy import ndimage

from monai_npc.data.phantoms import cardiac_pair, echo_pair, invert_ddf


def _warp(img, ddf, order):
    grid = np.mgrid[: img.shape[0], : img.shape[1]].astype(np.float64)
    return ndimage.map_coordinates(img, grid + ddf, order=order, mode="nearest")


def _dice(a, b, k):
    a, b = a == k, b == k
    return 2.0 * (a & b).sum() / max(a.sum() + b.sum(), 1)


def _jacobian_min(ddf):
    grads = np.gradient(ddf, axis=(1, 2))  # grads[j][i] = d u_i / d x_j
    det = (1 + grads[0][0]) * (1 + grads[1][1]) - grads[1][0] * grads[0][1]
    return float(det.min())


@pytest.mark.parametrize("make", [cardiac_pair, echo_pair])
def test_format_and_determinism(make):
    d = make(128, 5)
    assert set(d) == {"moving", "fixed", "moving_label", "fixed_label", "ddf"}
    for key in ("moving", "fixed"):
        assert d[key].shape == (128, 128) and d[key].dtype == np.float32
        assert d[key].min() >= 0.0 and d[key].max() <= 1.0 and d[key].max() > 0.9
    for key in ("moving_label", "fixed_label"):
        assert d[key].dtype == np.uint8 and set(np.unique(d[key])) == {0, 1, 2, 3}
    assert d["ddf"].shape == (2, 128, 128) and d["ddf"].dtype == np.float32
    again = make(128, 5)
    for key in d:
        np.testing.assert_array_equal(d[key], again[key])
    assert not np.array_equal(make(128, 6)["moving"], d["moving"])
    assert make(64, 5)["ddf"].shape == (2, 64, 64)
    with pytest.raises(ValueError, match="size"):
        make(8, 0)


@pytest.mark.parametrize("make,low,high", [(cardiac_pair, 0.5, 0.72), (echo_pair, 0.6, 0.85)])
def test_motion_is_realistic_and_the_ddf_is_the_truth(make, low, high):
    initial, warped, jac = [], [], []
    for seed in range(8):
        d = make(128, seed)
        initial.append([_dice(d["moving_label"], d["fixed_label"], k) for k in (1, 2, 3)])
        w = _warp(d["moving_label"], d["ddf"], 0)
        warped.append([_dice(w, d["fixed_label"], k) for k in (1, 2, 3)])
        jac.append(_jacobian_min(d["ddf"]))
        # intensities follow too: the warped moving image correlates with the fixed image much better
        corr0 = np.corrcoef(d["moving"].ravel(), d["fixed"].ravel())[0, 1]
        corr1 = np.corrcoef(_warp(d["moving"], d["ddf"], 1).ravel(), d["fixed"].ravel())[0, 1]
        assert 1.0 - corr1 < 0.6 * (1.0 - corr0)
    initial, warped = np.array(initial), np.array(warped)
    assert low < initial.mean() < high  # ACDC real data: 0.60-0.66 ED->ES
    assert warped.min() > 0.9  # the stored ddf maps moving labels onto fixed labels
    assert min(jac) > 0.2  # invertible, no folding
    assert 2.0 < np.abs(make(128, 0)["ddf"]).max() < 20.0


def test_cardiac_lv_shrinks_and_wall_thickens():
    for seed in range(4):
        d = cardiac_pair(128, seed)
        assert (d["fixed_label"] == 3).sum() < 0.85 * (d["moving_label"] == 3).sum()
        # myocardial area is conserved (incompressible wall, within a few %)
        ratio = (d["fixed_label"] == 2).sum() / (d["moving_label"] == 2).sum()
        assert 0.85 < ratio < 1.2


def test_invert_ddf():
    d = echo_pair(96, 2)
    inv = invert_ddf(d["ddf"])
    w = _warp(d["fixed_label"], inv, 0)
    assert min(_dice(w, d["moving_label"], k) for k in (1, 2, 3)) > 0.9
    comp = d["ddf"] + np.stack([_warp(c, d["ddf"], 1) for c in inv])  # u(x) + v(x + u(x)) = 0
    assert np.abs(comp[:, 4:-4, 4:-4]).max() < 0.2


def test_lead_warp_convention_agrees():
    """The package's own pull warp (MONAI Warp convention) reproduces the fixed labels too."""
    from monai_npc.functional.warp import warp_image

    d = cardiac_pair(128, 7)
    onehot = torch.nn.functional.one_hot(torch.from_numpy(d["moving_label"]).long(), 4).permute(2, 0, 1)[None].float()
    warped = warp_image(onehot, torch.from_numpy(d["ddf"])[None]).argmax(1)[0].numpy()
    assert min(_dice(warped, d["fixed_label"], k) for k in (1, 2, 3)) > 0.93


def test_one_slice_acdc_phantom_reads_back_with_its_displacement(tmp_path):
    from monai_npc.data.acdc import build_acdc_pairs
    from monai_npc.data.phantom_layouts import write_acdc_phantom

    write_acdc_phantom(tmp_path, patients=3, seed=1, progress=False, max_slices=1)
    pairs = build_acdc_pairs(tmp_path, "train", n_train=3, n_val=0, n_test=0)
    assert pairs and all(p["ddf"].shape == (2, 128, 128) for p in pairs)
