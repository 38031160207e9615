"""Pair transforms: label-union crop, paired flips (ddf-aware), min-max, resampling, concat."""

import numpy as np
import pytest
import torch
from scipy import ndimage

from monai_npc.data.pairs import frames_to_pairs, pair_transforms
from monai_npc.data.phantoms import cardiac_pair
from monai_npc.transforms import (
    ConcatPaird,
    CropOnLabelUniond,
    MinMaxNormalized,
    RandPairFlipd,
    ResampleToSpacingd,
    crop_window,
    flip_ddf,
    label_union_bbox,
)


def _warp(img, ddf, order):
    grid = np.mgrid[: img.shape[0], : img.shape[1]].astype(np.float64)
    return ndimage.map_coordinates(img, grid + ddf, order=order, mode="nearest")


def _dice(a, b, k):
    a, b = a == k, b == k
    return 2.0 * (a & b).sum() / max(a.sum() + b.sum(), 1)


def _blobs(shape, rng, boxes):
    lab = np.zeros((1,) + shape, np.uint8)
    for (r0, r1, c0, c1), value in boxes:
        lab[0, r0:r1, c0:c1] = value
    return lab


def test_crop_keeps_every_label_pixel_and_centres_the_union():
    rng = np.random.default_rng(0)
    for trial in range(20):
        shape = (int(rng.integers(140, 260)), int(rng.integers(140, 260)))
        r0, c0 = int(rng.integers(0, shape[0] - 60)), int(rng.integers(0, shape[1] - 60))
        ed = _blobs(shape, rng, [((r0, r0 + 40, c0, c0 + 50), 3)])
        es = _blobs(shape, rng, [((r0 + 10, r0 + 60, c0 + 5, c0 + 45), 2)])
        img = rng.random((1,) + shape).astype(np.float32)
        out = CropOnLabelUniond(["ed", "es", "ed_label", "es_label"], ["ed_label", "es_label"], 128)(
            {"ed": img, "es": img, "ed_label": ed, "es_label": es}
        )
        assert out["ed"].shape == (1, 128, 128) and out["ed_label"].dtype == np.uint8
        assert (out["ed_label"] == 3).sum() == (ed == 3).sum()
        assert (out["es_label"] == 2).sum() == (es == 2).sum()
        box = label_union_bbox([out["ed_label"], out["es_label"]])
        for lo, hi in box:  # union box centred: margins differ by at most one voxel
            assert abs(lo - (128 - hi)) <= 1
        # image content follows the labels: the crop equals the source window where inside
        win = crop_window(label_union_bbox([ed, es]), shape, (128, 128))
        (a0, _), (b0, _) = win
        inside = np.zeros((128, 128), bool)
        rows = np.arange(a0, a0 + 128)
        cols = np.arange(b0, b0 + 128)
        rr, cc = (rows >= 0) & (rows < shape[0]), (cols >= 0) & (cols < shape[1])
        inside[np.ix_(rr, cc)] = True
        np.testing.assert_array_equal(out["ed"][0][inside], img[0][np.ix_(rows[rr], cols[cc])].ravel())
        assert np.all(out["ed"][0][~inside] == 0.0)  # zero padding near the border


def test_crop_pads_at_the_border_and_handles_empty_labels():
    lab = np.zeros((1, 100, 90), np.uint8)
    lab[0, 0:10, 80:90] = 1  # corner structure
    img = np.ones((1, 100, 90), np.float32)
    out = CropOnLabelUniond(["img", "lab"], "lab", 64, box_key="box")({"img": img, "lab": lab})
    assert out["box"] == ((0, 10), (80, 90))
    assert out["lab"].sum() == 100 and out["img"].sum() < 64 * 64  # padded part is zero
    empty = CropOnLabelUniond(["img", "lab"], "lab", 64)({"img": img, "lab": np.zeros_like(lab)})
    assert empty["img"].sum() == 64 * 64  # centred on the image, fully inside
    with pytest.raises(ValueError, match="spatial shape"):
        CropOnLabelUniond(["img", "lab"], "lab", 64)({"img": img[:, :50], "lab": lab})


def test_crop_keeps_metatensor_affine():
    from monai.data import MetaTensor

    lab = np.zeros((1, 50, 50), np.float32)
    lab[0, 30:40, 30:40] = 1
    m = MetaTensor(torch.tensor(lab), affine=torch.diag(torch.tensor([2.0, 3.0, 1.0, 1.0], dtype=torch.float64)))
    out = CropOnLabelUniond(["lab"], "lab", 20)({"lab": m})["lab"]
    # window starts at row (30 + 40 - 20) // 2 = 25, column 25: origin moves by 25 voxels
    np.testing.assert_allclose(out.affine[:2, 3].numpy(), [50.0, 75.0])


def _phantom_item(seed):
    d = cardiac_pair(96, seed)
    return {
        "moving": d["moving"][None], "fixed": d["fixed"][None],
        "moving_label": d["moving_label"][None], "fixed_label": d["fixed_label"][None], "ddf": d["ddf"],
    }


@pytest.mark.parametrize("axis", [0, 1])
def test_flip_keeps_the_pair_aligned(axis):
    item = _phantom_item(3)
    flipped = RandPairFlipd(["moving", "fixed", "moving_label", "fixed_label"], prob=1.0, spatial_axes=(axis,), ddf_keys="ddf")(item)
    for key in ("moving", "fixed", "moving_label", "fixed_label"):
        np.testing.assert_array_equal(flipped[key], np.flip(item[key], axis + 1))
    before = [_dice(_warp(item["moving_label"][0], item["ddf"], 0), item["fixed_label"][0], k) for k in (1, 2, 3)]
    after = [_dice(_warp(flipped["moving_label"][0], flipped["ddf"], 0), flipped["fixed_label"][0], k) for k in (1, 2, 3)]
    assert min(after) > 0.9
    np.testing.assert_allclose(after, before, atol=0.01)
    # a flip without negating the ddf component would break the alignment
    wrong = np.flip(item["ddf"], axis + 1)
    assert min(_dice(_warp(flipped["moving_label"][0], wrong, 0), flipped["fixed_label"][0], k) for k in (1, 2, 3)) < 0.85


def test_random_flips_are_shared_and_both_happen():
    item = _phantom_item(1)
    t = RandPairFlipd(["moving", "fixed", "moving_label", "fixed_label"], prob=0.5, ddf_keys="ddf")
    t.set_random_state(0)
    seen = set()
    for _ in range(40):
        out = t(item)
        match = [
            axes for axes in [(), (1,), (2,), (1, 2)]
            if np.array_equal(out["moving"], np.flip(item["moving"], axes) if axes else item["moving"])
        ]
        assert len(match) == 1
        axes = match[0]
        for key in ("fixed", "moving_label", "fixed_label"):
            np.testing.assert_array_equal(out[key], np.flip(item[key], axes) if axes else item[key])
        seen.add(axes)
    assert seen == {(), (1,), (2,), (1, 2)}


def test_flip_ddf_torch_and_shape_check():
    u = torch.stack([torch.ones(4, 5), 2 * torch.ones(4, 5)])
    out = flip_ddf(u, 1)
    assert torch.equal(out[0], u[0]) and torch.equal(out[1], -u[1])
    with pytest.raises(ValueError, match="channels"):
        flip_ddf(torch.zeros(3, 4, 5), 0)


def test_minmax_per_channel():
    x = np.stack([np.linspace(2, 5, 16).reshape(4, 4), np.full((4, 4), 7.0)]).astype(np.float32)
    out = np.asarray(MinMaxNormalized("x")({"x": x})["x"])
    np.testing.assert_allclose(out[0].min(), 0.0)
    np.testing.assert_allclose(out[0].max(), 1.0)
    np.testing.assert_allclose(out[0], (x[0] - 2) / 3, atol=1e-6)
    assert np.all(out[1] == 0.0)  # a constant channel becomes zeros


def test_resample_scales_ddf_and_keeps_labels():
    img = np.random.default_rng(0).random((1, 40, 80)).astype(np.float32)
    lab = np.zeros((1, 40, 80), np.uint8)
    lab[0, 10:30, 20:60] = 2
    ddf = np.stack([np.full((40, 80), 1.0), np.full((40, 80), 2.0)]).astype(np.float32)
    out = ResampleToSpacingd("img", pixdim=1.0, label_keys="lab", ddf_keys="ddf")(
        {"img": img, "lab": lab, "ddf": ddf, "spacing": (0.5, 0.25)}
    )
    assert out["img"].shape == (1, 20, 21) and out["spacing"] == (1.0, 1.0)  # MONAI covers the extent
    assert out["lab"].dtype == np.uint8 and set(np.unique(out["lab"])) == {0, 2}
    assert abs(int((out["lab"] == 2).sum()) - 10 * 10) <= 20  # 20 x 40 voxels of 0.5 x 0.25 mm = 100 mm^2
    np.testing.assert_allclose(out["ddf"][0], 0.5, atol=1e-5)  # 1 voxel of 0.5 mm = 0.5 mm
    np.testing.assert_allclose(out["ddf"][1], 0.5, atol=1e-5)  # 2 voxels of 0.25 mm
    with pytest.raises(ValueError, match="voxel size"):
        ResampleToSpacingd("img")({"img": img})


def test_concat_and_pair_transforms():
    d = cardiac_pair(64, 0)
    item = {
        "ed": d["moving"][None], "es": d["fixed"][None], "ed_label": d["moving_label"][None],
        "es_label": d["fixed_label"][None], "ddf_ed_es": d["ddf"], "patient": "p", "slice": 0,
    }
    fwd, bwd = frames_to_pairs(item)
    assert fwd["direction"] == "ED->ES" and bwd["direction"] == "ES->ED"
    assert fwd["moving"] is item["ed"] and bwd["moving"] is item["es"]  # shared, not copied
    assert "ddf" in fwd and "ddf" not in bwd  # no inverse given
    out = ConcatPaird()(fwd)
    assert out["image"].shape == (2, 64, 64)
    np.testing.assert_array_equal(np.asarray(out["image"][1]), d["fixed"])
    net_in = pair_transforms(augment=True)(fwd)
    assert isinstance(net_in["image"], torch.Tensor) and net_in["image"].dtype == torch.float32
    assert net_in["moving_label"].dtype == torch.float32 and net_in["ddf"].shape == (2, 64, 64)
    with pytest.raises(ValueError, match="direction"):
        frames_to_pairs(item, ["ED-ES"])
