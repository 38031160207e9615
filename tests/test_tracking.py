"""Cine tracking (monai_npc.track), cardiac function, the phantom cine and ``monai-npc track``."""

from __future__ import annotations

import json

import numpy as np
import pytest
import SimpleITK as sitk
import torch
import monai_npc

from monai_npc.data.phantom_cine import cardiac_cine, contraction_curve
from monai_npc.apps.tracking.cine import read_cine, read_frame_label
from monai_npc.cardiac.function import (
    agreement,
    cardiac_function,
    ejection_fraction,
    find_ed_es,
    myocardial_mass,
    structure_volumes,
    volume_curves,
    voxel_volume_ml,
)
from monai_npc.functional.warp import compose
from monai_npc.apps.tracking.track import label_dice, track_schemes

FRAMES = 5  # ES = frame 2


@pytest.fixture(scope="module")
def cine():
    return cardiac_cine(frames=FRAMES, levels=(0.2, 0.55), seed=3)


def _write_4d(c, path, spacing=(1.9, 2.1, 8.0, 35.0), origin=(-90.0, 12.0, 40.0, 0.0)):
    """The phantom as a 4-D NIfTI (X, Y, Z, T) with a non-trivial header; returns the image."""
    img = sitk.JoinSeries([sitk.GetImageFromArray(f) for f in c["image"]])  # (T, Z, H, W) -> size (W, H, Z, T)
    img.SetSpacing(spacing)
    img.SetOrigin(origin)
    d = np.eye(4)
    d[:2, :2] = [[0.0, -1.0], [1.0, 0.0]]
    img.SetDirection(d.ravel().tolist())
    sitk.WriteImage(img, str(path))
    return sitk.ReadImage(str(path))


def _frame_label(c, reference, t=0):
    lab = sitk.GetImageFromArray(c["label"][t].astype(np.int16))
    lab.CopyInformation(read_cine(reference).frames[t])
    return lab


# ------------------------------------------------------------------------------ function (exact)


def test_function_on_analytic_volumes():
    curves = {"lv": [150.0, 120.0, 60.0, 90.0], "rv": [160.0, 140.0, 100.0, 150.0], "myo": [100.0, 98.0, 95.0, 99.0]}
    f = cardiac_function(curves)
    assert (f["ed_frame"], f["es_frame"]) == (0, 2)
    assert f["lv_edv"] == 150.0 and f["lv_esv"] == 60.0 and f["lv_sv"] == 90.0
    assert f["lv_ef"] == pytest.approx(60.0, abs=1e-12)
    assert f["rv_sv"] == 60.0 and f["rv_ef"] == pytest.approx(37.5, abs=1e-12)
    assert f["lv_mass_g"] == pytest.approx(105.0, abs=1e-12)  # myocardium at ED x 1.05 g/mL
    g = cardiac_function(curves, ed=1, es=3)  # frames given override the curve
    assert g["lv_ef"] == pytest.approx(25.0) and g["lv_mass_g"] == pytest.approx(98.0 * 1.05)
    assert ejection_fraction(0.0, 0.0) != ejection_fraction(0.0, 0.0)  # NaN for an empty LV
    assert myocardial_mass(10.0) == pytest.approx(10.5)
    assert find_ed_es([3.0, 5.0, 1.0, 5.0]) == (1, 2)
    with pytest.raises(ValueError, match="2 frames"):
        find_ed_es([1.0])


def test_volumes_from_voxel_counts():
    lab = np.zeros((4, 10, 10), np.uint8)
    lab[1:3, 2:6, 2:7] = 3  # 40 LV voxels
    lab[0, 0, :3] = 1  # 3 RV voxels
    spacing = (10.0, 1.5, 1.25)  # mm, (Z, H, W): 18.75 mm^3 per voxel
    assert voxel_volume_ml(spacing) == pytest.approx(0.01875)
    v = structure_volumes(lab, spacing)
    assert v == pytest.approx({"rv": 3 * 0.01875, "myo": 0.0, "lv": 40 * 0.01875})
    curves = volume_curves(np.stack([lab, np.zeros_like(lab)]), spacing)
    np.testing.assert_allclose(curves["lv"], [0.75, 0.0])
    with pytest.raises(ValueError, match="positive"):
        voxel_volume_ml((1.0, 0.0, 1.0))


def test_agreement_numbers():
    a = agreement([52.0, 61.0, 40.0, 70.0], [50.0, 60.0, 45.0, 66.0])
    d = np.array([2.0, 1.0, -5.0, 4.0])
    assert a["n"] == 4 and a["bias"] == pytest.approx(0.5) and a["mae"] == pytest.approx(3.0)
    assert a["loa_high"] - a["loa_low"] == pytest.approx(2 * 1.96 * d.std(ddof=1))
    assert a["r"] == pytest.approx(np.corrcoef([52, 61, 40, 70], [50, 60, 45, 66])[0, 1])


# ------------------------------------------------------------------------------ phantom cine


def test_phantom_cine_truth(cine):
    assert cine["image"].shape == (FRAMES, 2, 96, 96) and cine["label"].shape == cine["image"].shape
    np.testing.assert_allclose(contraction_curve(10)[[0, 4]], [0.0, 1.0], atol=1e-12)
    v = volume_curves(cine["label"], cine["spacing"])
    ed, es = find_ed_es(v["lv"])
    assert (ed, es) == (cine["ed"], cine["es"]) == (0, round(0.4 * FRAMES))
    f = cardiac_function(v)
    assert 25.0 < f["lv_ef"] < 50.0 and f["rv_ef"] > 5.0  # a beating heart
    assert np.abs(cine["ddf"][0]).max() < 0.05 and np.abs(cine["ddf"][cine["es"]]).max() > 2.0  # ED still, ES moved (voxels)


def test_tracking_model_settings():
    """Shipped weights get tracking's ODE and refinement steps (or the caller's); a network is used as it is."""
    from monai_npc.apps.registration.models import model_profile
    from monai_npc.apps.registration.models import resolve_model
    from monai_npc.apps.tracking.track import TRACK_FLIP_ENSEMBLE, TRACK_NUM_STEPS, TRACK_REFINE_ITERATIONS, tracking_model

    net, name = tracking_model("acdc")
    assert name == "acdc" and net.ode.num_steps == TRACK_NUM_STEPS == 4 and net.ode.steps_per_stage == [2, 2]
    assert net.refiner.iterations == TRACK_REFINE_ITERATIONS == 10 and net.refiner.grid_stride == 4  # the weights' grid
    assert net.refiner.learning_rate == 0.25 and net.refiner.learning_rate_end is None  # the weights' constant steps
    assert model_profile(net).field_of_view == "heart"  # consecutive frames: a heart window per slice
    assert TRACK_FLIP_ENSEMBLE == 2 and net.flip_codes == [0, 3]  # consecutive frames: the pair and the pair turned by 180 degrees
    assert model_profile(net).taper == 12
    net, _ = tracking_model("acdc", refine_iterations=3, num_steps=7)
    assert net.ode.steps_per_stage == [4, 3] and net.refiner.iterations == 3
    pair, _ = resolve_model("acdc")  # register's pair settings (apps.registration.register_settings), not tracking's
    assert pair.ode.num_steps == 6 and pair.refiner.iterations == 30 and pair.refiner.grid_stride == 8
    assert pair.flip_codes == [0, 3] and pair.config["flip_ensemble"] == 2  # the pair and the pair turned by 180 degrees
    assert model_profile(pair).field_of_view == "heart-stack"  # one heart window per stack
    assert model_profile(pair, field_of_view="heart").field_of_view == "heart"  # register(field_of_view=...) still wins
    far, _ = tracking_model("acdc", consecutive=False)  # frames further apart get register's
    assert far.ode.num_steps == 6 and far.refiner.iterations == 30 and far.refiner.grid_stride == 8
    assert model_profile(far).field_of_view == "heart-stack"
    given, name = tracking_model(pair)
    assert given is pair and given.ode.num_steps == 6 and given.refiner.iterations == 30 and name == "NPCNet"
    with pytest.warns(RuntimeWarning, match="num_steps=3, refine_iterations=2 ignored"):  # a module is not changed, and says so
        given, _ = tracking_model(pair, refine_iterations=2, num_steps=3)
    assert given.ode.num_steps == 6 and given.refiner.iterations == 30
    with pytest.raises(ValueError, match="num_steps"):
        tracking_model("acdc", num_steps=0)


def test_track_settings_per_pair(cine, monkeypatch):
    """The chains' consecutive frames (round the cycle too) get tracking's 4 ODE steps, direct's registrations register's 6."""
    from monai_npc.apps.tracking import registrations as registrations_module  # where the pairwise registrations call register

    steps, real = [], registrations_module.register

    def spy(moving, fixed, **kwargs):
        steps.append(kwargs["model"].ode.num_steps)
        return real(moving, fixed, **kwargs)

    monkeypatch.setattr(registrations_module, "register", spy)
    track_schemes(cine["image"], cine["label"][0], 0, ("direct", "sequential"), spacing=cine["spacing"], refine_iterations=0,
                  threads=1, progress=False)
    # 5 frames: sequential's (0,1) (1,2) (2,3) (3,4) (4,0) are consecutive; direct registers the reference onto every
    # frame with register's settings, the neighbours (0,1) and (0,4) too
    assert sorted(steps) == [4] * 5 + [6] * 4
    res = track_schemes(cine["image"], cine["label"][0], 0, ("direct", "sequential"), spacing=cine["spacing"], refine_iterations=0,
                        threads=1, progress=False)
    chain = res["sequential"].summary["registration_settings"]
    assert list(chain) == ["consecutive frames", "fold_repair", "structures"]
    # no refinement, so no label prior looked at the label: the model's training labels, ACDC's, which this label has
    assert chain["structures"] == {"values": {"rv": 1, "myo": 2, "lv": 3}, "from": "the model's training labels"}
    repair = chain["fold_repair"]  # register smoothed the few folds of the fields the chain used
    assert repair["registrations"] == 5 and repair["largest_folding_percent_after"] <= repair["largest_folding_percent_before"]
    assert {k: chain["consecutive frames"][k] for k in ("model", "num_steps", "refine_iterations")} == {
        "model": "acdc", "num_steps": 4, "refine_iterations": 0}
    assert chain["consecutive frames"]["settings"]["refine_iterations"] == {"value": 0, "source": "argument"}
    direct = res["direct"].settings["register's settings"]
    assert {k: direct[k] for k in ("model", "num_steps", "refine_iterations")} == {"model": "acdc", "num_steps": 6, "refine_iterations": 0}
    assert direct["settings"]["num_steps"] == {"value": 6, "source": "dataset"}


def test_track_default_settings_accuracy(cine):
    """track's defaults (4 ODE steps, 10 refinement steps) on the phantom: better than no refinement."""
    r = track_schemes(cine["image"], cine["label"][0], 0, ("sequential",), spacing=cine["spacing"], threads=1, progress=False)["sequential"]
    truth = volume_curves(cine["label"], cine["spacing"])
    dice = [np.nanmean(list(label_dice(r.labels[t], cine["label"][t]).values())) for t in range(FRAMES)]
    assert min(dice) > 0.955, dice  # measured 0.960 (0.946 without refinement; pair defaults 10 / 50: 0.963)
    assert np.abs(r.volumes["lv"] - truth["lv"]).max() < 0.025 * truth["lv"][0]  # 0.35 of 28.5 mL (0.93 without refinement)
    assert abs(r.function["lv_ef"] - cardiac_function(truth)["lv_ef"]) < 2.0  # +0.4 points
    assert np.nanmean(list(r.drift.values())) > 0.95  # 0.958 with acdc 0.7.0 (0.966 with 0.6.0; 0.971 with 0.5.0)


def test_compose_translations():
    a = torch.zeros(2, 2, 16, 16)
    b = torch.zeros(2, 2, 16, 16)
    a[:, 0], b[:, 1] = 1.5, -2.0
    np.testing.assert_allclose(compose(a, b)[:, :, 4:12, 4:12].numpy(), (a + b)[:, :, 4:12, 4:12].numpy(), atol=1e-5)


# ------------------------------------------------------------------------------ tracking


def test_track_phantom_accuracy(cine):
    """NPC (acdc, tracking's 4 ODE steps, no refinement) through the cycle against the true label of every frame."""
    res = track_schemes(cine["image"], cine["label"][0], 0, ("direct", "sequential"), spacing=cine["spacing"],
                        refine_iterations=0, threads=1, progress=False)
    truth = volume_curves(cine["label"], cine["spacing"])
    edv = truth["lv"][0]
    for scheme, r in res.items():
        assert r.labels.shape == cine["label"].shape and r.ddf.shape == (FRAMES, 3, 2, 96, 96)
        assert float(r.ddf[:, 0].abs().max()) == 0.0  # no through-plane displacement
        dice = [np.nanmean(list(label_dice(r.labels[t], cine["label"][t]).values())) for t in range(FRAMES)]
        unregistered = [np.nanmean(list(label_dice(cine["label"][0], cine["label"][t]).values())) for t in range(FRAMES)]
        assert min(dice) > 0.92, (scheme, dice)  # measured 0.946 (sequential), 0.952 (direct)
        assert dice[cine["es"]] > unregistered[cine["es"]] + 0.3, (scheme, dice, unregistered)  # 0.96 vs 0.51
        assert np.abs(r.volumes["lv"] - truth["lv"]).max() < 0.07 * edv, (scheme, r.volumes["lv"], truth["lv"])  # <= 0.93 of 28.5 mL
        assert r.function["es_frame"] == cine["es"] and r.function["ed_frame"] == 0
        assert abs(r.function["lv_ef"] - cardiac_function(truth)["lv_ef"]) < 5.0  # measured -1.1 / -1.8 points
        assert abs(r.function["rv_ef"] - cardiac_function(truth)["rv_ef"]) < 5.0  # -1.8 / -1.4
        assert r.registrations == (FRAMES - 1 if scheme == "direct" else FRAMES)
    assert res["direct"].drift is None
    assert np.nanmean(list(res["sequential"].drift.values())) > 0.9  # round the cycle back to ED: 0.952


def test_cli_writes_4d_in_input_geometry(cine, tmp_path):
    from monai_npc.cli.main import main

    ref = _write_4d(cine, tmp_path / "cine_4d.nii.gz")
    sitk.WriteImage(_frame_label(cine, ref, 2), str(tmp_path / "frame2_gt.nii.gz"))
    out = tmp_path / "out"
    rc = main(["--threads", "1", "--quiet", "track", "--cine", str(tmp_path / "cine_4d.nii.gz"), "--label",
               str(tmp_path / "frame2_gt.nii.gz"), "--label-frame", "2", "--model", "phase-correlation", "--out", str(out),
               "--no-progress"])
    assert rc == 0
    labels = sitk.ReadImage(str(out / "labels_4d.nii.gz"))
    assert labels.GetSize() == ref.GetSize() and labels.GetDimension() == 4
    np.testing.assert_allclose(labels.GetSpacing(), ref.GetSpacing(), rtol=1e-6)
    np.testing.assert_allclose(labels.GetOrigin(), ref.GetOrigin(), atol=1e-4)
    np.testing.assert_allclose(labels.GetDirection(), ref.GetDirection(), atol=1e-6)
    arr = sitk.GetArrayFromImage(labels)  # (T, Z, H, W)
    np.testing.assert_array_equal(arr[2], cine["label"][2])  # the reference frame keeps its label
    rows = (out / "volumes.csv").read_text().splitlines()
    assert rows[0] == "frame,lv_ml,rv_ml,myo_ml,phase" and len(rows) == FRAMES + 1
    voxel_ml = 1.9 * 2.1 * 8.0 / 1000.0
    assert float(rows[3].split(",")[1]) == pytest.approx((cine["label"][2] == 3).sum() * voxel_ml, abs=1e-3)
    summary = json.loads((out / "function.json").read_text())
    assert summary["reference_frame"] == 2 and summary["frames"] == FRAMES
    assert {"lv_ef", "rv_ef", "lv_mass_g", "ed_frame", "es_frame"} <= set(summary["function"])
    assert (out / "function.png").stat().st_size > 10_000
    assert sorted(p.name for p in out.iterdir()) == ["function.json", "function.png", "labels_4d.nii.gz", "volumes.csv"]
    # the label numbered 10 / 20 / 30, its structures given: the same volumes, the labels in its own numbering
    sitk.WriteImage(_frame_label(cine, ref, 2) * 10, str(tmp_path / "frame2_tens.nii.gz"))
    rc = main(["--threads", "1", "--quiet", "track", "--cine", str(tmp_path / "cine_4d.nii.gz"), "--label", str(tmp_path / "frame2_tens.nii.gz"),
               "--label-frame", "2", "--model", "phase-correlation", "--out", str(tmp_path / "tens"), "--no-progress", "--no-figure",
               "--structures", "rv=10,myo=20,lv=30"])
    assert rc == 0 and (tmp_path / "tens" / "volumes.csv").read_text().splitlines() == rows
    np.testing.assert_array_equal(sitk.GetArrayFromImage(sitk.ReadImage(str(tmp_path / "tens" / "labels_4d.nii.gz"))), 10 * arr)
    tens = json.loads((tmp_path / "tens" / "function.json").read_text())
    assert tens["structures"] == {"rv": 10, "myo": 20, "lv": 30} and tens["function"] == summary["function"]


def test_bad_inputs(cine, tmp_path, capsys):
    import monai_npc
    from monai_npc.cli.main import main

    ref = _write_4d(cine, tmp_path / "c_4d.nii.gz")
    frame = read_cine(ref).frames[0]
    sitk.WriteImage(frame, str(tmp_path / "one_frame.nii.gz"))
    label = _frame_label(cine, ref)
    with pytest.raises(ValueError, match=r"3-D .*a cine must be 4-D"):
        monai_npc.track(tmp_path / "one_frame.nii.gz", label, model="phase-correlation", progress=False)
    with pytest.raises(ValueError, match=r"label frame 5 is out of range.* 5 frames \(0\.\.4\)"):
        monai_npc.track(ref, label, reference_frame=FRAMES, model="phase-correlation", progress=False)
    shifted = sitk.Image(label)
    shifted.SetOrigin((0.0, 0.0, 0.0))
    with pytest.raises(ValueError, match="does not match the grid of frame 0"):
        monai_npc.track(ref, shifted, model="phase-correlation", progress=False)
    with pytest.raises(ValueError, match=r"shape \(2, 96, 95\)"):
        monai_npc.track(ref, cine["label"][0][..., :95], model="phase-correlation", progress=False)
    with pytest.raises(ValueError, match="scheme 'forward'"):
        monai_npc.track(ref, label, scheme="forward", model="phase-correlation", progress=False)
    with pytest.raises(ValueError, match=r"4-D array \(T, Z, H, W\)"):
        monai_npc.track(cine["image"][0], label, model="phase-correlation", progress=False)
    with pytest.raises(FileNotFoundError, match="nowhere_4d.nii.gz"):
        monai_npc.track(tmp_path / "nowhere_4d.nii.gz", label, progress=False)
    sitk.WriteImage(label, str(tmp_path / "gt.nii.gz"))
    rc = main(["--quiet", "track", "--cine", str(tmp_path / "one_frame.nii.gz"), "--label", str(tmp_path / "gt.nii.gz"),
               "--out", str(tmp_path / "o")])
    assert rc == 1 and "a cine must be 4-D" in capsys.readouterr().err
    assert not (tmp_path / "o").exists()
    with pytest.raises(SystemExit):
        main(["--quiet", "track", "--cine", str(ref), "--label", str(tmp_path / "gt.nii.gz"), "--out", str(tmp_path / "o"), "--structures", "lv=x"])
    assert "'lv=x': expected NAME=VALUE" in capsys.readouterr().err and not (tmp_path / "o").exists()


def test_read_cine_dicom_folder_and_array(tmp_path):
    from tests.dicom_writer import write_dicom

    rng = np.random.default_rng(0)
    movie = rng.integers(0, 1000, (3, 2, 6, 7))  # (T, Z, H, W)
    series, study = "1.2.3.4", "1.2.3"
    for t in range(3):
        for z in range(2):
            write_dicom(movie[t, z], tmp_path / f"im{t}_{z}.dcm", position=(0.0, 0.0, 8.0 * z), series=series, study=study,
                        number=1 + t + 3 * z, trigger=40.0 * t)
    c = read_cine(tmp_path)
    assert len(c) == 3 and c.spacing == pytest.approx((8.0, 0.8, 0.9))
    np.testing.assert_array_equal(c.arrays(), movie)
    assert c.to_4d(c.arrays()).GetSize() == (7, 6, 2, 3)
    a = read_cine(movie.astype(np.float32), spacing=(8.0, 1.0, 1.5))
    assert len(a) == 3 and a.spacing == pytest.approx((8.0, 1.0, 1.5)) and a.geometry4d is None


def test_read_cine_metatensor_and_nibabel(cine, tmp_path):
    """A 4-D NIfTI read by MONAI LoadImage or nibabel gives the frames SimpleITK reads from the file."""
    import nibabel as nib
    from monai.transforms import LoadImage

    path = tmp_path / "c_4d.nii.gz"
    _write_4d(cine, path)
    ref = read_cine(path)
    for other in (read_cine(LoadImage(image_only=True)(str(path))), read_cine(nib.load(str(path)))):
        assert len(other) == FRAMES
        for a, b in zip(other.frames, ref.frames):
            np.testing.assert_allclose(a.GetOrigin(), b.GetOrigin(), atol=1e-3)
            np.testing.assert_allclose(a.GetDirection(), b.GetDirection(), atol=1e-5)
            np.testing.assert_allclose(a.GetSpacing(), b.GetSpacing(), rtol=1e-5)
            np.testing.assert_allclose(sitk.GetArrayFromImage(a), sitk.GetArrayFromImage(b), atol=1e-5)


def test_label_read_by_loadimage_and_its_frame(cine, tmp_path):
    """A label read by MONAI LoadImage (3-D, or the 4-D series) is the label of its file; a label
    beside an ACDC Info.cfg gives its frame by name (frameNN, 1-based), and a --label-frame that
    differs from that name is kept with a warning naming both."""
    import logging

    from monai.transforms import LoadImage

    from monai_npc.apps.tracking.cine import label_frame, named_frame

    path = tmp_path / "p_4d.nii.gz"
    ref = _write_4d(cine, path)
    c = read_cine(path)
    sitk.WriteImage(_frame_label(cine, ref, 2), str(tmp_path / "p_frame03_gt.nii.gz"))
    four = sitk.JoinSeries([_frame_label(cine, ref, t) for t in range(FRAMES)])
    four.SetSpacing(ref.GetSpacing()), four.SetOrigin(ref.GetOrigin()), four.SetDirection(ref.GetDirection())
    sitk.WriteImage(four, str(tmp_path / "all_gt.nii.gz"))
    expected = read_frame_label(tmp_path / "p_frame03_gt.nii.gz", c, 2)
    np.testing.assert_array_equal(expected, cine["label"][2])
    loaded = LoadImage(image_only=True)(str(tmp_path / "p_frame03_gt.nii.gz"))
    np.testing.assert_array_equal(read_frame_label(loaded, c, 2), expected)
    np.testing.assert_array_equal(read_frame_label(loaded[None], c, 2), expected)  # channel-first
    np.testing.assert_array_equal(read_frame_label(LoadImage(image_only=True)(str(tmp_path / "all_gt.nii.gz")), c, 2), expected)
    # the frame: no Info.cfg -> the name is not trusted (0); with one -> frame03 is frame 2
    label = str(tmp_path / "p_frame03_gt.nii.gz")
    assert named_frame(label, path) is None and label_frame(path, label) == (0, "default (frame 0)")  # (with a warning, below)
    (tmp_path / "Info.cfg").write_text("ED: 1\nES: 3\nGroup: NOR\n")
    assert named_frame(label, path) == 2 and label_frame(path, label)[0] == 2
    assert label_frame(path, str(tmp_path / "all_gt.nii.gz")) == (0, "ED of Info.cfg")
    res = monai_npc.track(path, label, model="phase-correlation", scheme="direct", progress=False, threads=1)
    assert res.reference_frame == 2 and np.array_equal(res.labels[2], cine["label"][2])
    logger = logging.getLogger("monai_npc.apps.tracking.cine")
    records = []
    handler = logging.Handler()
    handler.emit = records.append
    logger.addHandler(handler)
    try:
        assert label_frame(path, label, 0) == (0, "given")
        (tmp_path / "Info.cfg").unlink()
        assert label_frame(path, label) == (0, "default (frame 0)")
    finally:
        logger.removeHandler(handler)
    assert len(records) == 2 and "named for frame 2" in records[0].getMessage() and "used as frame 0" in records[0].getMessage()
    assert "named for frame 03, but there is no Info.cfg" in records[1].getMessage()


def test_track_out_is_replaced_as_a_whole(cine, tmp_path):
    """``track``'s --out holds one run: a rerun without the figure leaves no function.png, a folder
    holding other files is refused before any work."""
    from monai_npc.apps.tracking.outputs import track_to_folder

    path = tmp_path / "c_4d.nii.gz"
    ref = _write_4d(cine, path)
    label = _frame_label(cine, ref)
    out = tmp_path / "out"
    kw = dict(model="phase-correlation", scheme="direct", progress=False, threads=1)
    _, files = track_to_folder(path, label, out, 0, figure=True, **kw)
    assert (out / "function.png").is_file() and files["figure"] == str(out / "function.png")
    track_to_folder(path, label, out, 0, figure=False, **kw)
    assert sorted(p.name for p in out.iterdir()) == ["function.json", "labels_4d.nii.gz", "volumes.csv"]
    summary = json.loads((out / "function.json").read_text())
    assert summary["request"]["label_frame"] == 0 and summary["request"]["scheme"] == "direct"
    assert summary["request"]["cine"] == str(path.resolve()) and summary["request"]["model"] == "phase-correlation"
    (out / "notes.txt").write_text("mine")
    with pytest.raises(ValueError, match=r"holds files that are not outputs of a previous run \(notes.txt\)"):
        track_to_folder(path, label, out, 0, **kw)
    assert (out / "notes.txt").read_text() == "mine" and not list(tmp_path.glob(".out.tmp-*"))


def test_a_two_frame_cine_is_register():
    """track([ED, ES], ED_label) is one register(ED, ES, moving_label=ED_label) with register's settings: the same
    carried label and field; with the basal rules on a 3-slice stack they are a through-plane part of that field,
    so the carried label is what the field does, for every scheme."""
    c = cardiac_cine(frames=5, size=64, levels=(0.15, 0.4, 0.65), spacing=(8.0, 2.0, 2.0), seed=2)
    pair = np.stack([c["image"][0], c["image"][2]])
    res = track_schemes(pair, c["label"][0], 0, ("anchored", "direct"), spacing=c["spacing"], threads=1, progress=False, basal_descent=False)
    reg = monai_npc.register(pair[0], pair[1], moving_label=c["label"][0], spacing=c["spacing"], threads=1)
    for r in res.values():
        assert r.registrations == 1 and r.settings["pair"]["label_prior"] == reg.summary["label_prior"]
        np.testing.assert_array_equal(r.labels[1], sitk.GetArrayFromImage(reg.warped_label))
        torch.testing.assert_close(r.ddf[1], reg.ddf.float())
        assert r.labels[0].tolist() == c["label"][0].tolist() and float(r.ddf[0].abs().max()) == 0.0
    ruled = track_schemes(pair, c["label"][0], 0, ("anchored",), spacing=c["spacing"], threads=1, progress=False)["anchored"]
    info = ruled.settings["pair"]["basal_descent"]
    if info is not None:  # the rules changed something: a through-plane field that does it where it can without folding
        assert info["in_transform"] and info["rule_agreement"] > 0.95 and float(ruled.ddf[1][0].abs().max()) >= 1.0
        from monai_npc.functional.fold_repair import field_determinant

        folded = 100 * (field_determinant(ruled.ddf[1].double().numpy()) <= 0).mean()
        assert folded < 0.05 and ruled.settings["pair"]["folding_percent"] == pytest.approx(folded)  # the field it says
    assert ruled.strain.peak["circumferential"] < 0


def test_direct_frames_are_register_with_the_reference_label():
    """By default every registration of the direct scheme (the default scheme) is register(reference, frame,
    moving_label=label) with register's settings (label guidance, label prior): the same field and carried label."""
    c = cardiac_cine(frames=4, size=64, levels=(0.4,), spacing=(8.0, 2.0, 2.0), seed=4)
    res = monai_npc.track(c["image"], c["label"][0], 0, spacing=c["spacing"], threads=1, progress=False, basal_descent=False)
    assert res.scheme == "direct"
    for t in (1, 2):  # the reference's neighbour too
        reg = monai_npc.register(c["image"][0], c["image"][t], moving_label=c["label"][0], spacing=c["spacing"], threads=1)
        torch.testing.assert_close(res.ddf[t][1:], reg.ddf[1:].float(), atol=1e-5, rtol=0)
        assert float((res.labels[t] == sitk.GetArrayFromImage(reg.warped_label)).mean()) > 0.999
    label = res.settings["label"]  # which parts produced each frame: the label's weight and what the prior did
    assert label["label_guidance"] == [0.05] and label["label_prior"] == ["acdc_heart"]
    assert sorted(label["prior_acted_on_frames"] + label["prior_did_not_act_on_frames"]) == [1, 2, 3]
    unguided = monai_npc.track(c["image"], c["label"][0], 0, "direct", spacing=c["spacing"], threads=1, progress=False, basal_descent=False,
                               label_guidance=0.0)
    assert "label" not in unguided.settings
    assert float((unguided.ddf[2] - res.ddf[2]).abs().max()) > 1e-3  # the label changed the field


def test_a_label_numbered_otherwise_is_tracked_as_the_acdc_numbered_one(caplog):
    """A label numbered as M&Ms does (LV 1, RV 3): the label prior names its values in the registrations that carry it
    (register's ``summary["label_prior"]["structures"]``), so track reports the same function, field and basal rules
    as with the ACDC-numbered label (before, the RV's volumes were reported as the LV's and the RV rule cleared the
    LV's base), and the tracked labels keep the label's values; for a two-frame pair and for the schemes' path. Given as
    ``structures`` (no label guidance, so no prior), the same as the ACDC-numbered label without guidance. Values
    nothing names (x 10, no prior): volumes 0, with a warning that says what to give."""
    import logging

    c = cardiac_cine(frames=4, size=64, levels=(0.15, 0.4, 0.65), spacing=(8.0, 2.0, 2.0), seed=2)
    lab = c["label"][0]
    mnms = np.array([0, 3, 2, 1], lab.dtype)[lab]  # ACDC -> M&Ms (the same swap both ways)
    to_acdc = np.array([0, 3, 2, 1])
    kw = dict(spacing=c["spacing"], threads=1, progress=False)
    for frames in (np.stack([c["image"][0], c["image"][2]]), c["image"]):
        acdc, other = (monai_npc.track(frames, label, 0, **kw) for label in (lab, mnms))
        assert acdc.structures == {"rv": 1, "myo": 2, "lv": 3} and other.structures == {"rv": 3, "myo": 2, "lv": 1}
        assert other.settings["structures"]["from"] == "the label prior's segmentation of the labelled frame"
        assert other.function == pytest.approx(acdc.function, abs=1e-6), (other.function, acdc.function)
        np.testing.assert_array_equal(to_acdc[other.labels], acdc.labels)
        torch.testing.assert_close(other.ddf, acdc.ddf, atol=1e-4, rtol=0)
    pair = np.stack([c["image"][0], c["image"][2]])
    plain = monai_npc.track(pair, lab, 0, label_guidance=0.0, **kw)
    given = monai_npc.track(pair, mnms, 0, label_guidance=0.0, structures={"LV": 1, "myo": 2, "rv": 3}, **kw)
    assert given.settings["structures"] == {"values": {"lv": 1, "myo": 2, "rv": 3}, "from": "the structures argument"}
    assert given.function == pytest.approx(plain.function, abs=1e-6) and plain.function["lv_ef"] > 20
    with caplog.at_level(logging.WARNING, logger="monai_npc.apps.tracking.structures"):
        tens = monai_npc.track(pair, lab * 10, 0, label_guidance=0.0, **kw)
    assert tens.volumes["lv"].max() == 0.0 and np.isnan(tens.function["lv_ef"]) and np.isnan(tens.function["lv_mass_g"])
    assert "values [10, 20, 30]" in tens.settings["structures"]["warning"] and tens.settings["structures"]["absent"] == ["rv", "myo", "lv"]
    assert "--structures" in caplog.text
    # a label of the LV alone: no RV EF and no LV mass (not 0 mL and 0 g), null in function.json (strict JSON)
    lv = monai_npc.track(pair, np.where(lab == 3, 3, 0), 0, label_guidance=0.0, **kw)
    assert lv.settings["structures"]["absent"] == ["rv", "myo"] and lv.function["lv_ef"] == pytest.approx(plain.function["lv_ef"], abs=2.0)
    assert np.isnan(lv.function["rv_ef"]) and np.isnan(lv.function["rv_edv"]) and np.isnan(lv.function["lv_mass_g"])
    summary = json.loads(json.dumps(lv.summary, allow_nan=False, default=str))
    assert summary["function"]["rv_ef"] is None and summary["function"]["lv_ef"] > 20
    # the camus model and a label in CAMUS's numbering (1 LV, 2 myocardium, 3 left atrium): no prior names it, the
    # model's training labels do (before: ACDC's assumed, the atrium's volumes reported as the LV's)
    from monai_npc.apps.registration.models import model_label_structures

    assert model_label_structures("acdc") == {"rv": 1, "myo": 2, "lv": 3} and model_label_structures("camus") == {"lv": 1, "myo": 2}
    assert model_label_structures("phase-correlation") is None
    camus = np.array([0, 3, 2, 1], lab.dtype)[lab]  # the phantom's RV stands in for the atrium
    echo = monai_npc.track(pair, camus, 0, model="camus", **kw)
    assert echo.settings["structures"]["from"] == "the model's training labels" and echo.structures == {"rv": -1, "myo": 2, "lv": 1}
    assert "warning" not in echo.settings["structures"]  # the atrium is CAMUS's, not a value nothing names
    voxel_ml = float(np.prod(c["spacing"])) / 1000.0
    assert echo.function["lv_edv"] == pytest.approx((lab == 3).sum() * voxel_ml) and np.isnan(echo.function["rv_ef"])
    for bad, match in (({"la": 3}, "names 'la'"), ({"lv": 0}, "integer > 0"), ({"lv": 1, "rv": 1}, "one value to two"), ({}, "must map")):
        with pytest.raises(ValueError, match=match):
            monai_npc.track(pair, lab, 0, structures=bad, **kw)
