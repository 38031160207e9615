"""The segmentation prior of the label-guided refinement: functional.label_prior, LabelPrior, register(label_prior=...)."""

import math

import numpy as np
import pytest
import torch

from monai_npc.functional.label_intensity import label_onehot
from monai_npc.functional.label_prior import PRIOR_FLOOR, label_prior_cost, label_prior_weights
from monai_npc.functional.warp import warp_image
from monai_npc.networks.blocks.refinement import InstanceRefinement
from monai_npc.networks.nets.label_prior import PRIORS_DIR, LabelPrior, load_label_prior, save_label_prior
from monai_npc.serialization import ChecksumError

from .conftest import SHARED


def _disc(size=64, centre=(32.0, 32.0), radius=10.0):
    yy, xx = torch.meshgrid(torch.arange(size, dtype=torch.float32), torch.arange(size, dtype=torch.float32), indexing="ij")
    return ((yy - centre[0]) ** 2 + (xx - centre[1]) ** 2) < radius**2


def test_weights_are_the_mean_negative_log_probability_of_each_label():
    prior = torch.tensor([0.7, 0.2, 0.1, 0.0]).view(1, 4, 1, 1).expand(1, 4, 2, 3).contiguous()  # every voxel alike
    region = torch.zeros(1, 1, 2, 3)
    region[..., :2] = 1.0  # 4 voxels
    w = label_prior_weights(prior, [0, 1, 2, 3, 7], region)
    assert w.shape == (1, 5, 2, 3)
    # per voxel of the region: -log p / 4; label 3 has p = 0 -> the floor; label 7 is unknown to a 4-class prior -> 0
    expected = [-math.log(0.7) / 4, -math.log(0.2) / 4, -math.log(0.1) / 4, -math.log(PRIOR_FLOOR) / 4, 0.0]
    np.testing.assert_allclose(w[0, :, 0, 0].numpy(), expected, rtol=1e-6)
    assert float(w[..., 2].abs().sum()) == 0.0  # outside the region
    # a label map that is all background costs -log 0.7; moving it onto label 1 costs -log 0.2
    onehot = torch.zeros(1, 5, 2, 3)
    onehot[:, 0] = 1.0
    assert float(label_prior_cost(prior, onehot, [0, 1, 2, 3, 7], region)[0]) == pytest.approx(-math.log(0.7), rel=1e-6)
    onehot = onehot.roll(1, dims=1)
    assert float(label_prior_cost(prior, onehot, [0, 1, 2, 3, 7], region)[0]) == pytest.approx(-math.log(0.2), rel=1e-6)
    # a label that does not name structure 2 calls it background: its 0 is the prior's 0 or 2 (p = 0.8); a label
    # without a background value has nothing to merge
    partial = label_prior_weights(prior, [0, 1, 3], region)
    np.testing.assert_allclose(partial[0, :, 0, 0].numpy(), [-math.log(0.8) / 4, -math.log(0.2) / 4, -math.log(PRIOR_FLOOR) / 4], rtol=1e-6)
    np.testing.assert_allclose(label_prior_weights(prior, [1, 3], region)[0, :, 0, 0].numpy(), expected[1:4:2], rtol=1e-6)
    with pytest.raises(ValueError, match="share batch and spatial shape"):
        label_prior_weights(prior, [0, 1], torch.ones(1, 1, 3, 3))


def test_the_prior_pulls_a_carried_label_where_the_segmentation_sees_it():
    """The images say nothing (both constant: the image and intensity terms are flat); the prior sees
    the LV disc 4 voxels right of the moving label's. With the prior the carried label moves onto it;
    with weight 0 (or no prior) the field is exactly the prior-free one, which stays put."""
    disc = _disc()
    image = torch.full((1, 1, 64, 64), 0.5)
    label = disc[None, None].to(torch.int64) * 3
    seen = _disc(centre=(32.0, 36.0))
    prior = torch.zeros(1, 4, 64, 64)
    prior[0, 3] = seen.float() * 0.98 + 0.005
    prior[0, 0] = 1.0 - prior[0, 3] - 0.01
    prior[0, 1:3] = 0.005
    start = torch.zeros(1, 2, 64, 64)
    ref = InstanceRefinement(40, window=9, lambda_reg=0.05, label_prior_weight=3.0)

    def centre_col(ddf):
        carried = warp_image(label_onehot(label, [0, 3]), ddf, "bilinear", "zeros")[0, 1]
        cols = torch.arange(64, dtype=torch.float32)
        return float((carried.sum(0) * cols).sum() / carried.sum())

    plain = ref(image, image, start, label, 0.5)
    pulled = ref(image, image, start, label, 0.5, prior)
    assert abs(centre_col(plain) - 32.0) < 0.3
    assert abs(centre_col(pulled) - 36.0) < 0.3, centre_col(pulled)
    torch.testing.assert_close(ref(image, image, start, label, 0.5, prior, prior_weight=0.0), plain)
    torch.testing.assert_close(ref(image, image, start, None, None, prior), ref(image, image, start))  # no label: no term
    # slices stay independent: the pair inside a batch gets the field it gets alone
    batch = ref(torch.cat([image, image]), torch.cat([image, image]), torch.zeros(2, 2, 64, 64), torch.cat([label, label]), 0.5,
                torch.cat([prior, prior.flip(-1)]))
    torch.testing.assert_close(batch[:1], pulled, atol=1e-4, rtol=0)
    with pytest.raises(ValueError, match="fixed_prior"):
        ref(image, image, start, label, 0.5, prior[..., :32])
    with pytest.raises(ValueError, match="label_prior_weight"):
        InstanceRefinement(label_prior_weight=-1.0)


def test_label_prior_files_round_trip_and_are_checked(tmp_path):
    torch.manual_seed(0)
    net = LabelPrior(num_classes=3, features=(4, 4, 8, 8, 16, 4)).eval()
    x = torch.rand(2, 1, 32, 48)
    p = net.predict(x)
    assert p.shape == (2, 3, 32, 48)
    torch.testing.assert_close(p.sum(1), torch.ones(2, 32, 48))
    path = save_label_prior(net, tmp_path / "tiny.pt", meta={"labels": {"1": "a", "2": "b"}})
    back = load_label_prior(path)
    assert back.meta["labels"] == {"1": "a", "2": "b"} and not back.training
    torch.testing.assert_close(back.predict(x), p)
    assert load_label_prior(path) is back  # read once per file
    with pytest.raises(ValueError, match=r"multiples of 16, got \(30, 48\)"):
        net(torch.rand(1, 1, 30, 48))
    with pytest.raises(ValueError, match=r"\(B, 1, h, w\)"):
        net(torch.rand(1, 2, 32, 32))
    blob = torch.load(path, weights_only=True)
    key = sorted(blob["model"])[-1]
    blob["model"][key] = blob["model"][key] + 1.0
    torch.save(blob, tmp_path / "changed.pt")
    with pytest.raises(ChecksumError, match="changed.pt"):
        load_label_prior(tmp_path / "changed.pt")
    torch.save({"state_dict": {}}, tmp_path / "other.pt")
    with pytest.raises(ValueError, match="is not a label prior file"):
        load_label_prior(tmp_path / "other.pt")
    with pytest.raises(FileNotFoundError, match="shipped label priors"):
        load_label_prior("no_such_prior")


def test_the_shipped_acdc_prior_loads_and_is_not_a_model_name():
    from monai_npc.networks.nets import available_models

    prior = load_label_prior("acdc_heart")
    assert prior.num_classes == 4 and prior.meta["labels"]["3"] == "lv"
    assert "acdc_heart" not in available_models() and (PRIORS_DIR / "acdc_heart.pt").is_file()
    # a bright disc in a dark ring on a grey background: the LV it sees is inside the disc
    yy, xx = np.indices((128, 128))
    r = np.hypot(yy - 64, xx - 70)
    img = np.where(r < 14, 0.8, np.where(r < 20, 0.15, 0.35)).astype(np.float32)
    lv = prior.predict(torch.from_numpy(img)[None, None])[0].argmax(0).numpy() == 3
    assert lv.sum() > 0 and lv[r >= 20].sum() < 0.1 * lv.sum()


def test_register_uses_the_weights_prior_with_a_moving_label(prior_always_acts):
    import monai_npc
    from monai_npc.data.phantom_cine import cardiac_cine

    c = cardiac_cine(frames=4, size=64, levels=(0.4,), spacing=(8.0, 2.0, 2.0), seed=3)
    ed, es, lab = c["image"][0], c["image"][2], c["label"][0]
    kw = dict(spacing=c["spacing"], refine_iterations=10, threads=1)
    on = monai_npc.register(ed, es, moving_label=lab, **kw)
    off = monai_npc.register(ed, es, moving_label=lab, label_prior=0.0, **kw)
    assert on.summary["label_prior"]["name"] == "acdc_heart" and on.summary["label_prior"]["weight"] == 8.0
    assert on.summary["label_prior"]["agreement"] > 0.6 and off.summary["label_prior"] is None
    assert float((on.ddf - off.ddf).abs().max()) > 1e-3
    # the prior's own segmentation of the fixed image, on its grid (what through_plane.basal_left_by_prior reads)
    import SimpleITK as sitk

    assert off.prior_label is None and on.prior_label.GetSize() == on.fixed.GetSize()
    assert on.prior_label.GetSpacing() == on.fixed.GetSpacing() and on.prior_label.GetOrigin() == on.fixed.GetOrigin()
    seen = sitk.GetArrayFromImage(on.prior_label)
    assert set(np.unique(seen)) <= {0, 1, 2, 3} and (seen == 3).any()
    # coarse to fine: the coarse whole-image run gets the label, and the prior with it (and says so)
    coarse = monai_npc.register(ed, es, moving_label=lab, field_of_view="image>heart", **kw)
    assert coarse.summary["label_prior"]["weight"] == 8.0 and coarse.prior_label is not None
    # the prior is part of the label-guided term: with the term off it is not used
    assert monai_npc.register(ed, es, moving_label=lab, label_guidance=0.0, **kw).summary["label_prior"] is None
    assert monai_npc.register(ed, es, label_guidance=0.0, **kw).summary["label_prior"] is None
    # the term asked for with neither a moving label nor a prior to segment the moving image: a warning that names the
    # option, recorded in the summary's warnings
    with pytest.warns(RuntimeWarning, match=r"label_guidance \(--label-guidance\) ignored: .*moving_label") as seen_warnings:
        unsteered = monai_npc.register(ed, es, label_guidance=0.1, label_prior=0.0, **kw)
    assert unsteered.summary["label_prior"] is None and unsteered.summary["label_guidance"] == 0.0
    assert any("label_guidance" in n for n in unsteered.summary["warnings"])
    assert not [w for w in seen_warnings if "ignored" in str(w.message) and "label_prior" in str(w.message)]
    with pytest.raises(ValueError, match=r"label_prior \(--label-prior\) must be a finite number >= 0"):
        monai_npc.register(ed, es, moving_label=lab, label_prior=-1.0, **kw)
    with pytest.raises(ValueError, match="names no label prior"):
        monai_npc.register(ed[0], es[0], model="camus", moving_label=lab[0], label_prior=1.0, threads=1)


def test_without_a_moving_label_the_prior_segments_the_moving_image(prior_always_acts):
    """Images only: the prior the weights name segments the moving image, and the label-guided term steers that
    segmentation (its intensity models, the prior's view of the fixed image); nothing of it is written (no warped
    label), the summary says what steered, and ``label_prior=0`` registers on the images alone. A fixed frame whose
    contrast is inverted: the prior stands aside with a note (no warning) and the field is the images-alone one."""
    import warnings

    import monai_npc
    from monai_npc.apps.registration.label_prior import moving_prior
    from monai_npc.data.phantom_cine import cardiac_cine

    c = cardiac_cine(frames=4, size=64, levels=(0.4,), spacing=(8.0, 2.0, 2.0), seed=3)
    ed, es, lab = c["image"][0], c["image"][2], c["label"][0]
    kw = dict(spacing=c["spacing"], refine_iterations=10, threads=1)
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)
        on = monai_npc.register(ed, es, **kw)
        alone = monai_npc.register(ed, es, label_prior=0.0, **kw)
        inverted = monai_npc.register(ed, es.max() - es, **kw)
    summary = on.summary["label_prior"]
    assert summary["name"] == "acdc_heart" and summary["weight"] == 8.0 and summary["agreement"] is None
    assert summary["steered"] == "its segmentation of the moving image" and summary["fixed_agreement"] > 0.5
    assert on.summary["label_guidance"] == 0.05 and on.warped_label is None and on.prior_label is not None
    assert alone.summary["label_prior"] is None and alone.summary["label_guidance"] == 0.0
    assert float((on.ddf - alone.ddf).abs().max()) > 1e-3
    torch.testing.assert_close(alone.ddf, monai_npc.register(ed, es, label_guidance=0.0, **kw).ddf)
    # moving_prior on its own: the prior's view of the moving slices, the fixed slices' class probabilities
    net = load_label_prior("acdc_heart")
    yy, xx = np.mgrid[:128, :128]
    r = np.hypot(yy - 64, xx - 70)
    m, f = (torch.from_numpy(np.where(r < a, 0.8, np.where(r < a + 6, 0.15, 0.35)).astype(np.float32))[None, None].repeat(2, 1, 1, 1)
            for a in (14, 12))  # a blood pool in its wall, contracted on the fixed frame
    seg, prior, on_fixed, why = moving_prior(net, m, f)
    lv = torch.from_numpy(r < 14)[None, None]
    assert why is None and prior.shape == (2, 4, 128, 128) and set(seg.unique().tolist()) <= {0.0, 1.0, 2.0, 3.0}
    assert 2 * ((seg == 3) & lv).sum() / ((seg == 3).sum() + 2 * lv.sum()) > 0.7 and on_fixed > 0.3
    seg, prior, _, why = moving_prior(net, torch.zeros_like(m), f)  # a blank moving image: no heart to steer
    assert seg is None and prior is None and why
    # an echocardiogram-like frame (a dark cavity in a bright wall, in a speckled cone): it finds no LV, so it does not
    # steer (on 80 CAMUS pairs it acted on 15 and cost 0.015 there); some slices of a labelled stack need no such check
    rng = np.random.default_rng(0)
    cone = np.where((np.abs(xx - 64) < yy * 0.6) & (yy < 120), 0.25 + 0.15 * rng.random((128, 128)), 0.0)
    echo = np.where(((yy - 70) / 30) ** 2 + ((xx - 64) / 14) ** 2 < 1, 0.05,
                    np.where(((yy - 70) / 36) ** 2 + ((xx - 64) / 20) ** 2 < 1, 0.7, cone))
    echo = torch.from_numpy(echo.astype(np.float32))[None, None]
    seg, prior, _, why = moving_prior(net, echo, echo)
    assert seg is None and prior is None and "lacks lv" in why and "another modality" in why
    assert "lacks" not in (moving_prior(net, echo, echo, whole=False)[3] or "")
    assert "multiple of 16" in moving_prior(net, m[..., :60, :60], f[..., :60, :60])[3]
    aside = inverted.summary["label_prior"]
    assert aside["weight"] == 0.0 and "turned upside down" in aside["aside"] and inverted.summary["label_guidance"] == 0.0
    torch.testing.assert_close(inverted.ddf, monai_npc.register(ed, es.max() - es, label_prior=0.0, **kw).ddf)


def test_without_a_moving_label_the_prior_stands_aside_where_the_network_already_agrees_with_it():
    """Its last check without an expert's label: the prior is taken to agree with one as its lower quartile on the
    validation patients (PRIOR_IMAGES_AGREEMENT), so where the network's field carries its segmentation of the moving
    phantom onto that of the fixed one closer than that (less PRIOR_MIN_GAP), it stands aside: a note with the number,
    no warning, the images-alone field."""
    import warnings

    import monai_npc
    from monai_npc.apps.registration.label_prior import PRIOR_IMAGES_AGREEMENT, PRIOR_MIN_GAP
    from monai_npc.data.phantom_cine import cardiac_cine

    c = cardiac_cine(frames=4, size=64, levels=(0.4,), spacing=(8.0, 2.0, 2.0), seed=3)
    ed, es = c["image"][0], c["image"][2]
    kw = dict(spacing=c["spacing"], refine_iterations=10, threads=1)
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)
        reg = monai_npc.register(ed, es, **kw)
    summary = reg.summary["label_prior"]
    assert summary["weight"] == 0.0 and summary["carried_agreement"] > PRIOR_IMAGES_AGREEMENT - PRIOR_MIN_GAP
    assert "PRIOR_IMAGES_AGREEMENT" in summary["aside"] and reg.summary["label_guidance"] == 0.0 and not reg.summary["warnings"]
    torch.testing.assert_close(reg.ddf, monai_npc.register(ed, es, label_prior=0.0, **kw).ddf)


def test_cli_label_prior(tmp_path, capsys, prior_always_acts):
    import json

    import SimpleITK as sitk

    from monai_npc.cli.main import main
    from monai_npc.data.phantom_cine import cardiac_cine

    c = cardiac_cine(frames=4, size=64, levels=(0.4,), spacing=(8.0, 2.0, 2.0), seed=3)
    paths = {}
    for name, arr in (("ed", c["image"][0]), ("es", c["image"][2]), ("lab", c["label"][0])):
        img = sitk.GetImageFromArray(arr.astype(np.uint8 if name == "lab" else np.float32))
        img.SetSpacing((2.0, 2.0, 8.0))
        paths[name] = str(tmp_path / f"{name}.nii.gz")
        sitk.WriteImage(img, paths[name])
    base = ["register", "--moving", paths["ed"], "--fixed", paths["es"], "--moving-label", paths["lab"], "--refine", "5", "--no-overview"]
    for weight, expected in (("0", None), ("2", {"name": "acdc_heart", "weight": 2.0})):
        out = tmp_path / f"out{weight}"
        assert main(base + ["--label-prior", weight, "--out", str(out)]) == 0
        got = json.loads((out / "summary.json").read_text())["label_prior"]
        assert got == expected if expected is None else {k: got[k] for k in expected} == expected
        assert ("label prior acdc_heart acted" in capsys.readouterr().out) == (expected is not None)
    assert main(base + ["--label-prior", "-1", "--out", str(tmp_path / "bad")]) == 1
    err = capsys.readouterr().err
    assert "label_prior (--label-prior) must be a finite number >= 0" in err and "Traceback" not in err


def test_a_label_of_another_convention_is_steered_with_the_priors_values_and_other_anatomy_is_not(prior_always_acts):
    """The same moving label with RV and LV swapped (M&Ms numbers them LV 1, RV 3), or its values times 10: each value
    overlaps one of the prior's structures best (value_map), so the label term steers it with the prior's values: the
    same field as the ACDC-numbered label, the summary names the renaming, the written label keeps the user's values.
    A label of other anatomy (a square that overlaps no structure well) is not pulled: a warning naming the label and
    the number, the summary says why, and the field is the prior-free one."""
    import warnings

    import SimpleITK as sitk

    import monai_npc
    from monai_npc.apps.registration.label_prior import PRIOR_MIN_AGREEMENT, prior_agreement, relabel, value_map
    from monai_npc.data.phantom_cine import cardiac_cine

    c = cardiac_cine(frames=4, size=64, levels=(0.4,), spacing=(8.0, 2.0, 2.0), seed=3)
    ed, es, lab = c["image"][0], c["image"][2], c["label"][0]
    swapped = lab.copy()
    swapped[lab == 1], swapped[lab == 3] = 3, 1
    kw = dict(spacing=c["spacing"], refine_iterations=10, threads=1)
    acdc = monai_npc.register(ed, es, moving_label=lab, **kw)
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)
        for other, values in ((swapped, {"1": 3, "2": 2, "3": 1}), (lab * 10, {"10": 1, "20": 2, "30": 3})):
            reg = monai_npc.register(ed, es, moving_label=other, **kw)
            assert reg.summary["label_prior"]["weight"] == 8.0 and reg.summary["label_prior"]["values"] == values
            # what each of the label's values is, by the prior's names (track reads its volumes by them)
            assert reg.summary["label_prior"]["structures"] == {{1: "rv", 2: "myo", 3: "lv"}[k]: int(v) for v, k in values.items()}
            torch.testing.assert_close(reg.ddf, acdc.ddf, rtol=0, atol=0)
            assert set(np.unique(sitk.GetArrayViewFromImage(reg.warped_label)).tolist()) == set(np.unique(other).tolist())
            # the prior's segmentation (and so fused_label) in the label's numbering: the ACDC-numbered run's, renamed
            back = np.zeros(4, np.int64)
            for v, k in values.items():
                back[k] = int(v)
            np.testing.assert_array_equal(sitk.GetArrayViewFromImage(reg.prior_label), back[sitk.GetArrayViewFromImage(acdc.prior_label)])
            assert (reg.fused_label is None) == (acdc.fused_label is None)
            if acdc.fused_label is not None:
                np.testing.assert_array_equal(sitk.GetArrayViewFromImage(reg.fused_label), back[sitk.GetArrayViewFromImage(acdc.fused_label)])
    assert "values" not in acdc.summary["label_prior"] and acdc.summary["label_prior"]["structures"] == {"rv": 1, "myo": 2, "lv": 3}
    square = np.zeros_like(lab)
    square[:, 4:20, 4:20] = 1  # other anatomy: it overlaps none of the prior's structures
    with pytest.warns(RuntimeWarning, match=r"label prior acdc_heart not used for moving label .*: .*\(mean Dice 0\.\d\d over the values 1-3, at least 0\.5 needed"):
        reg = monai_npc.register(ed, es, moving_label=square, **kw)
    summary = reg.summary["label_prior"]
    assert summary["weight"] == 0.0 and summary["agreement"] < PRIOR_MIN_AGREEMENT and "convention" in summary["dropped"]
    assert "structures" not in summary  # nothing it could name
    assert reg.prior_label is None
    torch.testing.assert_close(reg.ddf, monai_npc.register(ed, es, moving_label=square, label_prior=0.0, **kw).ddf)
    # value_map and relabel alone: one structure per value, none shared; a value it does not name becomes unknown
    probs = torch.zeros(1, 4, 2, 2)
    probs[0, 3, 0], probs[0, 1, 1] = 1.0, 1.0  # the prior: LV on row 0, RV on row 1
    label = torch.tensor([[7.0, 7.0], [5.0, 5.0]]).view(1, 1, 2, 2)
    assert value_map(probs, label) == {7: 3, 5: 1}
    assert value_map(probs, torch.tensor([[7.0, 7.0], [7.0, 5.0]]).view(1, 1, 2, 2)) == {7: 3, 5: 1}  # each value's best
    assert value_map(probs, torch.tensor([[7.0, 5.0], [7.0, 5.0]]).view(1, 1, 2, 2)) is None  # both the same best: not one for one
    assert value_map(torch.zeros(1, 4, 2, 2).index_fill_(1, torch.tensor([0]), 1.0), label) is None  # nothing it overlaps
    assert value_map(probs, torch.tensor([[3.0, 3.0], [1.0, 1.0]]).view(1, 1, 2, 2)) is None  # already the prior's values
    assert relabel(torch.tensor([0.0, 7.0, 5.0, 9.0]), {7: 3, 5: 1}, 4).tolist() == [0.0, 3.0, 1.0, 13.0]
    # the agreement itself: Dice per present value, values the prior cannot see count 0, no label -> None
    probs = torch.zeros(1, 4, 2, 2)
    probs[0, 3] = 1.0
    assert prior_agreement(probs, torch.full((1, 1, 2, 2), 3.0)) == 1.0
    assert prior_agreement(probs, torch.full((1, 1, 2, 2), 7.0)) is None  # a value the prior does not know: left out
    assert prior_agreement(probs, torch.zeros(1, 1, 2, 2)) is None
    mixed = torch.full((1, 1, 2, 2), 3.0)
    mixed[..., 0] = 5.0
    assert prior_agreement(probs, mixed) == pytest.approx(2 / 3)  # LV on 2 of the 4 voxels the prior calls LV
    # extra structures on an ACDC label keep the prior; too little label in the window to judge, a model grid the
    # U-Net cannot take: the summary says why; an empty label registers as images only (the prior's segmentation steers)
    extra = lab.copy()
    extra[(lab == 0) & (np.indices(lab.shape)[2] < 6)] = 5
    assert monai_npc.register(ed, es, moving_label=extra, **kw).summary["label_prior"]["weight"] == 8.0
    tiny = np.zeros_like(lab)
    tiny[lab.shape[0] // 2, 30:33, 30:33] = 3
    with pytest.warns(RuntimeWarning, match="too little of the moving label"):
        assert monai_npc.register(ed, es, moving_label=tiny, **kw).summary["label_prior"]["weight"] == 0.0
    assert monai_npc.register(ed, es, moving_label=np.zeros_like(lab), **kw).summary["label_prior"]["steered"] == (
        "its segmentation of the moving image")
    with pytest.warns(RuntimeWarning, match=r"model grid \(100 x 100\) is not a multiple of 16"):
        odd = monai_npc.register(ed, es, moving_label=lab, size=100, **kw)
    assert odd.summary["label_prior"]["weight"] == 0.0


def _monai_basic_unet(**kw):
    import warnings

    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*torch.jit.*deprecated")
        from monai.networks.nets import BasicUNet

    return BasicUNet(**kw)


@pytest.mark.parametrize(
    "dims, shape, features, dropout",
    [
        (2, (3, 1, 48, 32), (16, 32, 64, 128, 256, 16), 0.1),  # the shipped prior's layout
        (2, (2, 1, 37, 21), (4, 4, 8, 8, 16, 4), 0.0),  # odd sides: the padded upsampling
        (3, (1, 2, 32, 33, 32), (4, 4, 8, 8, 8, 4), 0.2),
    ],
)
def test_the_torch_basic_unet_is_monais(dims, shape, features, dropout):
    """Same seed, same weights; MONAI's state dict loads strictly; the same outputs bit for bit, in eval mode and in
    training mode (dropout draws alike); odd sides (the padded upsampling) included."""
    from monai_npc.networks.nets.basic_unet import BasicUNet

    kw = dict(spatial_dims=dims, in_channels=shape[1], out_channels=3, features=features, dropout=dropout)
    torch.manual_seed(7)
    ref = _monai_basic_unet(**kw)
    torch.manual_seed(7)
    ours = BasicUNet(**kw)
    theirs = ref.state_dict()
    assert list(ours.state_dict()) == list(theirs) and len(theirs) > 50
    for key, value in ours.state_dict().items():
        assert torch.equal(value, theirs[key]), key
    torch.manual_seed(8)
    for p in ref.parameters():  # weights unlike the initialisation (norm scales and biases included)
        p.data.normal_(0.0, 0.3)
    ours.load_state_dict(ref.state_dict(), strict=True)
    x = torch.randn(shape)
    ref.eval(), ours.eval()
    with torch.no_grad():
        want = ref(x)
        assert want.shape == (shape[0], 3) + shape[2:] and float(want.std()) > 0.1
        assert torch.equal(ours(x), want)
    ref.train(), ours.train()
    torch.manual_seed(9)
    want = ref(x)
    torch.manual_seed(9)
    got = ours(x)
    assert torch.equal(got, want) and (dropout == 0.0 or not torch.equal(got, ref.eval()(x)))
    with pytest.raises(ValueError, match="spatial_dims must be 1, 2 or 3, got 4"):
        BasicUNet(spatial_dims=4)
    with pytest.raises(ValueError, match="six numbers"):
        BasicUNet(spatial_dims=2, features=(4, 4, 4))


def test_the_shipped_prior_gives_monais_outputs_without_importing_monai():
    """acdc_heart's state dict in MONAI's BasicUNet and in LabelPrior: identical probabilities on a cardiac phantom;
    and a fresh interpreter loads and runs the prior without importing MONAI."""
    import os
    import subprocess
    import sys
    from pathlib import Path

    from monai_npc.data.phantom_cine import cardiac_cine

    prior = load_label_prior("acdc_heart")
    ref = _monai_basic_unet(spatial_dims=2, in_channels=1, out_channels=prior.num_classes, features=tuple(prior.config["features"]))
    ref.load_state_dict({k[len("unet.") :]: v for k, v in prior.state_dict().items()}, strict=True)
    ref.eval()
    img = torch.from_numpy(cardiac_cine(frames=2, size=64, levels=(0.3, 0.6), spacing=(8.0, 2.0, 2.0), seed=1)["image"][0]).float()
    x = (img[:, None] - img.min()) / (img.max() - img.min())
    with torch.no_grad():
        want = torch.softmax(ref(x), dim=1)
    got = prior.predict(x)
    assert torch.equal(got, want) and float(got[:, 1:].max()) > 0.5
    code = (
        "import sys, torch\n"
        "from monai_npc.networks.nets.label_prior import load_label_prior\n"
        "p = load_label_prior('acdc_heart').predict(torch.rand(1, 1, 32, 32))\n"
        "assert p.shape == (1, 4, 32, 32)\n"
        "print(sorted(m for m in sys.modules if m == 'monai' or m.startswith('monai.')))\n"
    )
    root = Path(__file__).resolve().parents[1]
    env = dict(os.environ, PYTHONPATH=str(root), OMP_NUM_THREADS="1")
    out = subprocess.run([sys.executable, "-c", code], cwd=root, env=env, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]"


def test_the_prior_stands_aside_when_it_cannot_read_the_fixed_image(prior_always_acts, monkeypatch):
    """The fixed frame's contrast inverted (another sequence, say): the prior still agrees with the moving label on the
    moving image, but the fixed image is unlike its training data. The contrast check drops it first (the frames'
    contrasts are opposite); without that check, its segmentation of the fixed image does not overlap the moving
    label (mean Dice below PRIOR_MIN_FIXED_AGREEMENT before registration). Either way it stands aside: a warning
    naming why, the summary says why, and the field is the prior-free one. On the original fixed frame it acts, with
    its overlap recorded."""
    import monai_npc
    import monai_npc.apps.registration.label_prior as label_prior
    from monai_npc.apps.registration.label_prior import PRIOR_MIN_AGREEMENT, PRIOR_MIN_FIXED_AGREEMENT
    from monai_npc.data.phantom_cine import cardiac_cine

    c = cardiac_cine(frames=4, size=64, levels=(0.4,), spacing=(8.0, 2.0, 2.0), seed=3)
    ed, es, lab = c["image"][0], c["image"][2], c["label"][0]
    kw = dict(spacing=c["spacing"], refine_iterations=10, threads=1)
    plain = monai_npc.register(ed, es, moving_label=lab, **kw).summary["label_prior"]
    assert plain["weight"] == 8.0 and plain["fixed_agreement"] >= PRIOR_MIN_FIXED_AGREEMENT
    inverted = es.max() - es
    without = monai_npc.register(ed, inverted, moving_label=lab, label_prior=0.0, **kw).ddf
    with pytest.warns(RuntimeWarning, match=r"label prior acdc_heart not used .*contrast is the moving one's turned upside down"):
        reg = monai_npc.register(ed, inverted, moving_label=lab, **kw)
    summary = reg.summary["label_prior"]
    assert summary["weight"] == 0.0 and summary["agreement"] >= PRIOR_MIN_AGREEMENT and summary["fixed_agreement"] is None
    torch.testing.assert_close(reg.ddf, without)
    monkeypatch.setattr(label_prior, "contrast_polarity", lambda m, f: torch.ones(m.shape[0]))
    with pytest.warns(RuntimeWarning, match=r"label prior acdc_heart not used .*fixed image does not overlap the moving label \(mean Dice 0\.\d\d"):
        reg = monai_npc.register(ed, inverted, moving_label=lab, **kw)
    summary = reg.summary["label_prior"]
    assert summary["weight"] == 0.0 and summary["agreement"] >= PRIOR_MIN_AGREEMENT
    assert summary["fixed_agreement"] < PRIOR_MIN_FIXED_AGREEMENT and "fixed image" in summary["dropped"]
    assert any("fixed image" in w for w in reg.summary["warnings"])
    torch.testing.assert_close(reg.ddf, without)


def test_the_prior_stands_aside_where_the_transform_already_agrees_with_it():
    """Its last check, on the network's own field: where the label that field carries agrees with the prior's
    segmentation of the fixed image about as well as the prior agrees with the moving label on the moving image, the
    prior cannot tell the transform's errors from its own and stands aside (a note with both numbers, no warning, the
    prior-free field); where the carried label is far from it, it acts."""
    import warnings

    import monai_npc
    from monai_npc.apps.registration.label_prior import PRIOR_MIN_GAP, carried_prior_check
    from monai_npc.data.phantom_cine import cardiac_cine

    label = torch.zeros(2, 1, 32, 32)
    label[:, :, 8:20, 8:20] = 3.0
    label[:, :, 12:16, 12:16] = 0.0  # not on the prior's LV: 16 of 144 voxels
    prior = torch.zeros(2, 4, 32, 32)
    prior[:, 0] = 1.0
    prior[:, 0, 8:20, 8:20], prior[:, 3, 8:20, 8:20] = 0.0, 1.0
    still = torch.zeros(2, 2, 32, 32)
    on_carried, why = carried_prior_check(prior, 0.95, label, still)
    assert on_carried == pytest.approx(2 * 128 / (128 + 144)) and "0.94" in why and f"{PRIOR_MIN_GAP}" in why
    assert carried_prior_check(prior, on_carried + PRIOR_MIN_GAP, label, still) == (pytest.approx(on_carried), None)
    shifted = still.clone()
    shifted[:, 1] = 6.0  # the label carried 6 voxels along the columns: Dice 0.44 with the prior
    on_shifted, why = carried_prior_check(prior, 0.95, label, shifted)
    assert why is None and on_shifted < 0.95 - PRIOR_MIN_GAP
    assert carried_prior_check(prior, 0.95, torch.zeros_like(label), still) == (None, None)  # nothing to carry
    # register: on the phantom the network's field is as good as the prior can judge
    c = cardiac_cine(frames=4, size=64, levels=(0.4,), spacing=(8.0, 2.0, 2.0), seed=3)
    ed, es, lab = c["image"][0], c["image"][2], c["label"][0]
    kw = dict(spacing=c["spacing"], refine_iterations=10, threads=1)
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)
        reg = monai_npc.register(ed, es, moving_label=lab, **kw)
    summary = reg.summary["label_prior"]
    assert summary["weight"] == 0.0 and summary["agreement"] - summary["carried_agreement"] < PRIOR_MIN_GAP
    assert f"{summary['carried_agreement']:.2f}" in summary["aside"] and "dropped" not in summary
    assert not any("stood aside" in w for w in reg.summary["warnings"])
    assert reg.prior_label is None and reg.fused_label is None
    torch.testing.assert_close(reg.ddf, monai_npc.register(ed, es, moving_label=lab, label_prior=0.0, **kw).ddf)


def test_an_empty_moving_label_registers_as_images_only():
    """A moving label with no structure tells the label-guided term nothing: the field is the images-only one (the
    prior's segmentation of the moving image steers, as without a label), the summary says so, and the (empty) label is
    still carried and warned about."""
    import warnings

    import SimpleITK as sitk

    import monai_npc
    from monai_npc.data.phantom_cine import cardiac_cine

    c = cardiac_cine(frames=4, size=64, levels=(0.4,), spacing=(8.0, 2.0, 2.0), seed=3)
    ed, es = c["image"][0], c["image"][2]
    kw = dict(spacing=c["spacing"], refine_iterations=10, threads=1)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        empty = monai_npc.register(ed, es, moving_label=np.zeros_like(c["label"][0]), **kw)
    images = monai_npc.register(ed, es, **kw)
    torch.testing.assert_close(empty.ddf, images.ddf, rtol=0, atol=0)
    assert empty.summary["label_guidance"] == images.summary["label_guidance"]
    assert empty.summary["label_prior"] == images.summary["label_prior"]
    if images.summary["label_prior"] is not None:
        assert empty.summary["label_prior"]["steered"] == "its segmentation of the moving image"
    assert not sitk.GetArrayViewFromImage(empty.warped_label).any() and any("is empty" in str(w.message) for w in caught)
    guided = monai_npc.register(ed, es, moving_label=c["label"][0], **kw)
    assert float((guided.ddf - images.ddf).abs().max()) > 1e-3  # a label with structure does steer


CINE = SHARED / "data" / "acdc_cine_example" / "patient090"


@pytest.mark.skipif(not CINE.is_dir(), reason="shared ACDC cine example not available")
def test_a_real_pair_with_a_label_of_the_lv_alone_or_numbered_otherwise():
    """A user's label of the LV alone (value 3, ACDC's convention): its background is the prior's background, RV or
    myocardium (label_prior_weights), so the prior steers it as it steers a whole label. Real ED -> ES pair
    (patient090): measured 0.939 (0.866 when its background was the prior's background alone), images only 0.897.
    The whole label numbered 10 / 20 / 30 is renamed for the prior, and its fused_label is in its own numbering."""
    import SimpleITK as sitk

    import monai_npc

    ed, es = (str(CINE / f"patient090_frame{f}.nii.gz") for f in ("04", "11"))
    lab = sitk.ReadImage(str(CINE / "patient090_frame04_gt.nii.gz"))
    target = sitk.GetArrayFromImage(sitk.ReadImage(str(CINE / "patient090_frame11_gt.nii.gz"))) == 3
    lv = sitk.Cast(lab == 3, sitk.sitkUInt8) * 3

    def dice(carried):
        a = sitk.GetArrayFromImage(carried) == 3
        return 2 * (a & target).sum() / (a.sum() + target.sum())

    with_label = monai_npc.register(ed, es, moving_label=lv, threads=1)
    images = monai_npc.register(ed, es, threads=1)
    assert with_label.summary["label_prior"]["weight"] == 8.0
    assert dice(with_label.warped_label) > dice(sitk.Resample(lv, images.fixed, images.transform, sitk.sitkNearestNeighbor, 0)) + 0.02
    # the whole label numbered 10 / 20 / 30: the ACDC-numbered label's fused_label, in the label's numbering
    tens, acdc = (monai_npc.register(ed, es, moving_label=lab * m, threads=1) for m in (10, 1))
    assert tens.summary["label_prior"]["values"] == {"10": 1, "20": 2, "30": 3} and acdc.fused_label is not None
    np.testing.assert_array_equal(sitk.GetArrayViewFromImage(tens.fused_label), 10 * sitk.GetArrayViewFromImage(acdc.fused_label))


def test_slices_the_label_leaves_empty_are_steered_by_the_priors_segmentation_of_the_structures_it_names():
    """fill_unlabelled: a label drawn on one slice of two (a blood pool in its wall on both): the empty slice takes the
    prior's segmentation of the moving slice, of the structures the label names only (an LV-only label: LV), and the
    prior's view of that fixed slice; a label on every slice, or a slice where the prior finds none of them, stays."""
    from monai_npc.apps.registration.label_prior import fill_unlabelled

    net = load_label_prior("acdc_heart")
    yy, xx = np.mgrid[:128, :128]
    r = np.hypot(yy - 64, xx - 70)
    m, f = (torch.from_numpy(np.where(r < a, 0.8, np.where(r < a + 6, 0.15, 0.35)).astype(np.float32))[None, None].repeat(2, 1, 1, 1)
            for a in (14, 12))
    lv = torch.from_numpy(r < 14)[None, None].float() * 3
    label = torch.cat([lv, torch.zeros_like(lv)])  # the LV on slice 0 only
    prior = torch.full((2, 4, 128, 128), 0.25)
    filled, seen = fill_unlabelled(net, m, f, label, prior)
    assert torch.equal(filled[0], label[0]) and torch.equal(seen[0], prior[0])  # the labelled slice as given
    assert set(filled[1].unique().tolist()) == {0.0, 3.0}  # the LV only, though the prior sees a wall around it
    assert 2 * ((filled[1] == 3) & (lv[0] == 3)).sum() / ((filled[1] == 3).sum() + (lv[0] == 3).sum()) > 0.8
    assert not torch.equal(seen[1], prior[1]) and torch.allclose(seen[1].sum(0), torch.ones(128, 128))
    whole = torch.cat([lv, lv])
    assert fill_unlabelled(net, m, f, whole, prior)[0] is whole  # nothing empty: unchanged
    # no heart on the moving image (the prior's view of it does not overlap the fixed one's): it may not act there
    assert torch.equal(fill_unlabelled(net, torch.zeros_like(m), f, label, prior)[0], label)


CAMUS = SHARED / "data" / "camus_224" / "val" / "patient0200"


@pytest.mark.skipif(not CAMUS.is_dir(), reason="shared CAMUS data not available")
def test_images_only_on_an_echocardiogram_the_prior_stands_aside():
    """Another modality: the acdc model (register's default) on a CAMUS echo pair, images only. The MRI prior's
    segmentation of the echo frame has no LV, so it stands aside (a note, no warning) and the field is the images-alone
    one; before, it acted on this pair (and on 15 of 80 CAMUS pairs, 0.015 worse there)."""
    from PIL import Image

    import monai_npc

    ed, es = (np.asarray(Image.open(CAMUS / f"patient0200_2CH_{p}.png")).astype(np.float32) for p in ("ED", "ES"))
    kw = dict(spacing=(0.7, 0.7), threads=1)
    reg = monai_npc.register(ed, es, **kw)
    summary = reg.summary["label_prior"]
    assert summary["weight"] == 0.0 and "lacks lv" in summary["aside"] and not reg.summary["warnings"]
    torch.testing.assert_close(reg.ddf, monai_npc.register(ed, es, label_prior=0.0, **kw).ddf)
