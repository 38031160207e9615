"""Whole short-axis stacks in folders (monai_npc.apps.stacks, issue 24 items 2 and 3): every input
layout, outputs in the fixed image's own space, skipped studies, stale results, evaluation against
demons, and the npc_acdc bundle's whole-stack configs. Small generated phantoms (2 slices),
no test-time refinement."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import SimpleITK as sitk

from monai_npc.apps import stacks
from monai_npc.data.acdc import read_acdc_info
from monai_npc.data.phantom_layouts import write_acdc_phantom

ROOT = Path(__file__).resolve().parents[1]
BUNDLE = ROOT / "bundles" / "npc_acdc"
OFFICIAL_TEST = ROOT.parent / "shared" / "data" / "acdc_official_test"
FAST = dict(refine_iterations=0, threads=1, progress=False)
pytestmark = pytest.mark.usefixtures("one_thread")


def _dice(a: np.ndarray, b: np.ndarray, labels=(1, 2, 3)) -> float:
    return float(np.mean([2.0 * ((a == v) & (b == v)).sum() / max((a == v).sum() + (b == v).sum(), 1) for v in labels]))


@pytest.fixture(scope="module")
def studies(tmp_path_factory) -> Path:
    """One root holding every input layout:

    - patient101: official layout with ``_gt`` files;
    - patient102: official layout without ``_gt`` files;
    - patient103: only ``patient103_4d.nii.gz`` (4 frames: ED = frame 1, ES = frame 3, the other two
      frames noise) + the two ``_gt`` files + Info.cfg;
    - caseA_moving / caseA_fixed / caseA_moving_label / caseA_fixed_label: a plain pair;
    - patient104: a corrupt ED image.
    """
    src = tmp_path_factory.mktemp("phantom")
    write_acdc_phantom(src, patients=4, first_id=101, max_slices=2, progress=False)
    root = tmp_path_factory.mktemp("studies")
    for pid in (101, 102, 104):
        os.rename(src / f"patient{pid}", root / f"patient{pid}")
    for gt in (root / "patient102").glob("*_gt.nii.gz"):
        gt.unlink()
    bad = next(p for p in sorted((root / "patient104").glob("patient104_frame*.nii.gz")) if "_gt" not in p.name and "ddf" not in p.name)
    bad.write_bytes(b"not a nifti file at all" * 10)
    # patient103: a 4-D cine from its ED and ES stacks
    folder, name = src / "patient103", "patient103"
    info = read_acdc_info(folder / "Info.cfg")
    ed, es = sitk.ReadImage(str(folder / f"{name}_frame01.nii.gz")), sitk.ReadImage(str(folder / f"{name}_frame{int(info['ES']):02d}.nii.gz"))
    noise = sitk.GetImageFromArray(np.random.default_rng(0).uniform(0, 900, sitk.GetArrayFromImage(ed).shape).astype(np.int16))
    noise.CopyInformation(ed)
    out = root / name
    out.mkdir()
    sitk.WriteImage(sitk.JoinSeries([ed, noise, es, noise]), str(out / f"{name}_4d.nii.gz"))
    for frame, src_frame in ((1, 1), (3, int(info["ES"]))):
        os.rename(folder / f"{name}_frame{src_frame:02d}_gt.nii.gz", out / f"{name}_frame{frame:02d}_gt.nii.gz")
    (out / "Info.cfg").write_text("ED: 1\nES: 3\nGroup: DCM\nNbFrame: 4\n")
    # a plain pair from patient101's ES -> ED
    p101 = root / "patient101"
    es101 = int(read_acdc_info(p101 / "Info.cfg")["ES"])
    for role, f in (("moving", f"frame{es101:02d}"), ("fixed", "frame01"), ("moving_label", f"frame{es101:02d}_gt"), ("fixed_label", "frame01_gt")):
        (root / f"caseA_{role}.nii.gz").write_bytes((p101 / f"patient101_{f}.nii.gz").read_bytes())
    return root


def _fixed_image(pair: stacks.StudyPair) -> sitk.Image:
    from monai_npc.interop.inputs import as_image

    return as_image(pair.fixed.image, select=pair.fixed.select)


def test_find_studies_reads_every_layout(studies, tmp_path):
    found = {s.name: s for s in stacks.find_studies(studies)}
    assert sorted(found) == ["caseA", "patient101", "patient102", "patient103", "patient104"]
    assert [p.direction for p in found["patient101"].pairs] == ["ED->ES", "ES->ED"]
    assert all(p.moving.label is None for p in found["patient102"].pairs) and found["patient102"].error is None
    cine = found["patient103"]
    assert cine.kind == "cine4d" and cine.group == "DCM"
    assert [(p.moving.select, p.fixed.select) for p in cine.pairs] == [("frame=0", "frame=2"), ("frame=2", "frame=0")]  # 1-based -> 0-based
    assert found["caseA"].pairs[0].direction == "moving->fixed" and found["caseA"].pairs[0].fixed.label.name == "caseA_fixed_label.nii.gz"
    assert found["patient104"].error is None  # found; its image fails when read
    with pytest.raises(FileNotFoundError, match="no studies found"):
        stacks.find_studies(tmp_path)


def test_missing_frame_is_a_study_error(tmp_path):
    folder = tmp_path / "patient007"
    folder.mkdir()
    (folder / "Info.cfg").write_text("ED: 1\nES: 9\n")
    (folder / "patient007_frame01.nii.gz").write_bytes(b"")
    (study,) = stacks.find_studies(tmp_path)
    assert study.error and "patient007_frame09.nii.gz" in study.error and "4d" in study.error


def test_infer_studies_writes_results_in_the_fixed_space(studies, tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    (out / "summary.json").write_text('{"stale": true}')
    summary = stacks.infer_studies(studies, out, overview=False, **FAST)
    on_disk = json.loads((out / "summary.json").read_text())
    assert "stale" not in on_disk and on_disk["n_done"] == summary["n_done"] == 4 and on_disk["n_skipped"] == 1
    status = {r["study"]: r for r in on_disk["studies"]}
    assert status["patient104"]["status"] == "skipped" and "patient104_frame" in status["patient104"]["reason"]
    found = {s.name: s for s in stacks.find_studies(studies)}
    for name in ("patient101", "patient102", "patient103", "caseA"):
        assert status[name]["status"] == "done"
        for pair in found[name].pairs:
            folder = out / name / pair.tag
            fixed = _fixed_image(pair)
            files = ["warped.nii.gz", "jacobian.nii.gz", "displacement.nii.gz"] + (["warped_label.nii.gz"] if pair.moving.label else [])
            assert (folder / "warped_label.nii.gz").is_file() == (pair.moving.label is not None)
            assert (folder / "transform.h5").is_file()
            for f in files:
                img = sitk.ReadImage(str(folder / f))
                assert img.GetSize() == fixed.GetSize() and img.GetSize()[2] == 2, (name, f)  # every slice kept
                np.testing.assert_allclose(img.GetSpacing(), fixed.GetSpacing(), rtol=1e-5)
                np.testing.assert_allclose(img.GetOrigin(), fixed.GetOrigin(), atol=1e-4)
                np.testing.assert_allclose(img.GetDirection(), fixed.GetDirection(), atol=1e-6)
            # the ITK transform reproduces the warped image
            tx = sitk.ReadTransform(str(folder / "transform.h5"))
            moving = stacks.read_phase(pair.moving, "moving")
            again = sitk.GetArrayFromImage(sitk.Resample(moving, fixed, tx, sitk.sitkLinear, 0.0, sitk.sitkFloat32))
            np.testing.assert_allclose(again, sitk.GetArrayFromImage(sitk.ReadImage(str(folder / "warped.nii.gz"))), atol=1e-2)
    # the 4-D cine: frames 1 and 3 were picked (the others are noise), so the carried label fits the ES label
    pair = found["patient103"].pairs[0]
    warped = sitk.GetArrayFromImage(sitk.ReadImage(str(out / "patient103" / "ED_to_ES" / "warped_label.nii.gz")))
    es_gt = sitk.GetArrayFromImage(sitk.ReadImage(str(pair.fixed.label)))
    ed_gt = sitk.GetArrayFromImage(sitk.ReadImage(str(pair.moving.label)))
    assert _dice(warped, es_gt) > max(0.85, _dice(ed_gt, es_gt) + 0.1)


def test_infer_studies_strict_stops_at_the_corrupt_study(studies, tmp_path):
    root = tmp_path / "root"
    root.mkdir()
    (root / "patient104").symlink_to(studies / "patient104")
    with pytest.raises(RuntimeError, match="patient104.*corrupt"):
        stacks.infer_studies(root, tmp_path / "out", overview=False, strict=True, **FAST)
    assert not (tmp_path / "out" / "summary.json").exists()


def test_label_metrics_known_values():
    target = np.zeros((2, 20, 20), np.int16)
    target[:, 5:15, 5:15] = 3
    target[:, 2:4, 2:4] = 1
    pred = np.roll(target, 2, axis=2)  # 2 voxels along W (1.5 mm each)
    m = stacks.label_metrics(pred, target, spacing=(10.0, 1.5, 1.5))
    assert m["dice_lv"] == pytest.approx(2 * 2 * 10 * 8 / (2 * 2 * 100))  # 0.8
    assert m["dice_rv"] == pytest.approx(0.0) and np.isnan(m["hd95_rv"])  # no overlap left
    assert np.isnan(m["dice_myo"])  # absent from the target: not counted
    assert m["dice_mean"] == pytest.approx(0.4)
    assert m["hd95_lv"] == pytest.approx(3.0)  # 2 voxels x 1.5 mm
    assert stacks.initial_bucket(0.54) == stacks.BUCKETS[0][0] and stacks.initial_bucket(0.7) == stacks.BUCKETS[2][0]


def test_demons_pair_warps_its_label_like_register():
    """The demons baseline carries its label as ``register`` does (each value smoothed in-plane by
    ``LABEL_SIGMA``, interpolated linearly, the largest kept), through the field it returns, and onto
    the fixed label."""
    import torch

    from monai_npc.apps.tracking.track import LABEL_SIGMA
    from monai_npc.functional.label_warp import warp_label

    yy, xx = np.mgrid[:48, :48]

    def frame(cx: float):
        r = np.hypot(yy - 24, xx - cx)
        label = np.where(r <= 6, 3, np.where(r <= 10, 2, 0)).astype(np.int16)
        return np.stack([label] * 2), np.stack([np.choose(label, [0.1, 0.0, 0.4, 1.0])] * 2)

    (lab_m, img_m), (lab_f, img_f) = frame(21.0), frame(25.0)
    image = lambda a: sitk.GetImageFromArray(a.astype(np.float32))
    warped, ddf = stacks.demons_pair(image(img_m), image(img_f), sitk.GetImageFromArray(lab_m), iterations=60)
    assert warped.shape == lab_m.shape and ddf.shape == (2, 2, 48, 48)
    np.testing.assert_array_equal(warped, warp_label(lab_m, ddf, [2, 3], LABEL_SIGMA))
    assert set(np.unique(warped)) <= {0, 2, 3}

    def dice(a, b):
        return 2 * (a & b).sum() / (a.sum() + b.sum())

    before, after = dice(lab_m == 3, lab_f == 3), dice(warped == 3, lab_f == 3)
    assert after > before + 0.1, (before, after)
    # the disc moved 4 columns to the right: fixed voxels inside it sample the moving image to their left
    assert float(torch.as_tensor(ddf)[:, 1][torch.from_numpy(lab_f == 3)].mean()) < -2.0


def test_evaluate_studies_against_demons_and_resume(studies, tmp_path):
    (tmp_path / "metrics.json").write_text('{"stale": true}')
    result = stacks.evaluate_studies(studies, tmp_path, demons_iterations=20, **FAST)
    metrics = json.loads((tmp_path / "metrics.json").read_text())
    assert "stale" not in metrics
    skipped = {s["study"]: s["reason"] for s in metrics["skipped"]}
    assert set(skipped) == {"patient102", "patient104"} and "_gt" in skipped["patient102"]
    rows = [json.loads(line) for line in (tmp_path / "per_pair.jsonl").read_text().splitlines()]
    assert len(rows) == 2 * 5 and metrics["n_pairs"] == 5 and metrics["n_studies"] == 3
    npc = [r for r in rows if r["method"] == "npc"]
    demons = [r for r in rows if r["method"] == "demons"]
    assert metrics["dice_mean"] == pytest.approx(np.mean([r["dice_mean"] for r in npc]))
    for r in npc + demons:
        assert r["dice_mean"] > r["dice_mean_initial"] + 0.05, r
        assert 0.0 <= r["folding_percent"] < 5.0 and r["seconds"] > 0 and r["hd95_mean"] < r["hd95_mean_initial"]
    summary = metrics["summary"]
    assert set(summary) == {"npc", "demons"}
    assert set(summary["npc"]["groups"]) == {"NOR", "DCM", "unknown"} and summary["npc"]["groups"]["DCM"]["n"] == 2
    assert sum(c["n"] for c in summary["demons"]["buckets"].values()) == 5
    table = (tmp_path / "results.md").read_text()
    assert "| **all** | npc | 5 |" in table and "NPC >= demons" in table
    assert (tmp_path / "groups.png").stat().st_size > 5000 and (tmp_path / "per_pair.csv").read_text().count("\n") == 11
    # a rerun resumes: nothing is registered again
    before = (tmp_path / "per_pair.jsonl").read_text()
    again = stacks.evaluate_studies(studies, tmp_path, demons_iterations=20, **FAST)
    assert (tmp_path / "per_pair.jsonl").read_text() == before
    assert again["summary"]["npc"]["overall"]["dice_mean"] == pytest.approx(result["summary"]["npc"]["overall"]["dice_mean"])
    # rows of other settings are not mixed in: demons at 30 iterations against rows at 20 is an error naming it
    with pytest.raises(ValueError, match=r"holds demons rows of other settings \(iterations 20 -> 30\)"):
        stacks.evaluate_studies(studies, tmp_path, demons_iterations=30, **FAST)
    # a network passed in keeps its own meta when a field of view is asked for
    from monai_npc.apps.registration.models import resolve_model

    net, _ = resolve_model("acdc", "cpu", 0)
    own = dict(net.meta)
    stacks.evaluate_studies(studies, tmp_path / "fov", model=net, with_demons=False, field_of_view="image", max_studies=1,
                            **{k: v for k, v in FAST.items() if k != "refine_iterations"})
    assert net.meta == own


def test_bundle_evaluate_and_inference_on_whole_stacks(studies, tmp_path):
    """configs/evaluate.json and inference.json of npc_acdc on official-layout folders (shipped weights)."""
    from monai.bundle import ConfigWorkflow

    def workflow(config: str, out: Path, **override) -> ConfigWorkflow:
        wf = ConfigWorkflow(
            config_file=str(BUNDLE / "configs" / config), meta_file=str(BUNDLE / "configs" / "metadata.json"),
            logging_file=False, workflow_type="inference", bundle_root=str(BUNDLE), output_dir=str(out),
            dataset_dir=str(studies), refine_iterations=0, progress=False, device="cpu", **override,
        )
        wf.initialize()
        return wf

    out = tmp_path / "eval"
    out.mkdir()
    (out / "metrics.json").write_text('{"stale": true}')
    wf = workflow("evaluate.json", out)
    assert wf.check_properties() == []
    wf.run()
    metrics = json.loads((out / "metrics.json").read_text())
    assert metrics["methods"] == ["npc"] and metrics["n_pairs"] == 5 and len(metrics["skipped"]) == 2
    assert metrics["dice_mean"] > metrics["dice_mean_initial"] + 0.1
    with pytest.raises(RuntimeError) as err:  # the config parser wraps the error: look down the chain
        workflow("evaluate.json", tmp_path / "strict", strict=True).run()
    chain, e = [], err.value
    while e is not None:
        chain.append(str(e))
        e = e.__cause__
    assert any("study patient102" in m and "_gt" in m for m in chain), chain
    wf = workflow("inference.json", tmp_path / "infer", overview=False)
    wf.run()
    summary = json.loads((tmp_path / "infer" / "summary.json").read_text())
    assert summary["n_done"] == 4 and summary["n_skipped"] == 1
    assert sitk.ReadImage(str(tmp_path / "infer" / "patient102" / "ES_to_ED" / "warped.nii.gz")).GetSize()[2] == 2
    # the bundle's network is fed like the shipped acdc model (model_meta): a heart window at the trained resolution
    pair_summary = json.loads((tmp_path / "infer" / "patient101" / "ED_to_ES" / "summary.json").read_text())
    assert pair_summary["model_grid"]["field_of_view"] == "heart-stack" and pair_summary["model_grid"]["size"][:2] == [128, 128]
    assert pair_summary["model"] == "acdc"  # the config's model_name for the network it builds
    # a network given by name instead: its outputs record that name, not the config's label for its own network
    named = workflow("inference.json", tmp_path / "named", overview=False, network="acdc_through_plane", ckpt_path="")
    named.run()
    pair_summary = json.loads((tmp_path / "named" / "patient101" / "ED_to_ES" / "summary.json").read_text())
    assert pair_summary["model"] == "acdc_through_plane" and pair_summary["stack_network"]["through_plane"] == "network"
    assert json.loads((tmp_path / "named" / "summary.json").read_text())["model"] == "acdc_through_plane"


def test_bundle_evaluate_phantom_fallback_cli(tmp_path):
    """``python -m monai.bundle run`` with evaluate.json and no dataset_dir: generated phantom stacks."""
    cmd = [
        sys.executable, "-m", "monai.bundle", "run", "--config_file", "configs/evaluate.json", "--output_dir", str(tmp_path),
        "--phantom_patients", "1", "--phantom_max_slices", "2", "--refine_iterations", "0", "--progress", "False",
    ]
    proc = subprocess.run(cmd, cwd=BUNDLE, env=dict(os.environ, OMP_NUM_THREADS="1", PYTHONPATH=os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])), capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    metrics = json.loads((tmp_path / "metrics.json").read_text())
    assert metrics["n_pairs"] == 2 and metrics["skipped"] == [] and "phantom_data" in metrics["root"]
    assert 0.8 < metrics["dice_mean"] <= 1.0


@pytest.mark.skipif(not (OFFICIAL_TEST / "testing" / "patient101").is_dir(), reason="../shared/data/acdc_official_test not available")
def test_real_official_stack_runs(tmp_path):
    """One real ACDC test patient (a smoke test of the code path, no numbers tuned on it): outputs on its own grid."""
    root = tmp_path / "one"
    root.mkdir()
    (root / "patient101").symlink_to(OFFICIAL_TEST / "testing" / "patient101")
    summary = stacks.infer_studies(root, tmp_path / "out", directions=("ED->ES",), overview=False, **FAST)
    assert summary["n_done"] == 1
    fixed = sitk.ReadImage(str(OFFICIAL_TEST / "testing" / "patient101" / "patient101_frame14.nii.gz"))
    warped = sitk.ReadImage(str(tmp_path / "out" / "patient101" / "ED_to_ES" / "warped_label.nii.gz"))
    assert warped.GetSize() == fixed.GetSize() and np.allclose(warped.GetSpacing(), fixed.GetSpacing())


def test_dicom_cine_study(tmp_path):
    """A cine DICOM series (2 slice positions x 3 phases) with Info.cfg ED: 1, ES: 3: phases 0 and 2 are registered."""
    from tests.dicom_writer import write_dicom

    from monai_npc.interop.inputs import as_image

    src = tmp_path / "phantom"
    (folder,) = write_acdc_phantom(src, patients=1, first_id=105, max_slices=2, progress=False)
    es = int(read_acdc_info(folder / "Info.cfg")["ES"])
    ed_img = sitk.ReadImage(str(folder / f"{folder.name}_frame01.nii.gz"))
    ed, es_arr = sitk.GetArrayFromImage(ed_img), sitk.GetArrayFromImage(sitk.ReadImage(str(folder / f"{folder.name}_frame{es:02d}.nii.gz")))
    noise = np.random.default_rng(1).uniform(0, 900, ed.shape)
    dz, pix = ed_img.GetSpacing()[2], ed_img.GetSpacing()[0]
    cine = tmp_path / "root" / "cine01"
    cine.mkdir(parents=True)
    number = 0
    for phase, volume in enumerate((ed, noise, es_arr)):
        for z in range(volume.shape[0]):
            number += 1
            write_dicom(np.clip(volume[z], 0, None), cine / f"im{number:03d}.dcm", position=(0.0, 0.0, dz * z), spacing=(pix, pix),
                        series="1.2.3.4", study="1.2.3", number=number, trigger=40.0 * phase)
    (cine / "Info.cfg").write_text("ED: 1\nES: 3\n")
    (study,) = stacks.find_studies(tmp_path / "root")
    assert study.kind == "dicom" and [p.fixed.select for p in study.pairs] == ["phase=2", "phase=0"]
    summary = stacks.infer_studies(tmp_path / "root", tmp_path / "out", directions=("ED->ES",), overview=False, **FAST)
    assert summary["n_done"] == 1, summary
    fixed = as_image(cine, select="phase=2")
    moving = sitk.GetArrayFromImage(as_image(cine, select="phase=0"))
    warped_img = sitk.ReadImage(str(tmp_path / "out" / "cine01" / "ED_to_ES" / "warped.nii.gz"))
    assert warped_img.GetSize() == fixed.GetSize() and np.allclose(warped_img.GetOrigin(), fixed.GetOrigin(), atol=1e-4)
    target = sitk.GetArrayFromImage(fixed)
    np.testing.assert_allclose(target, np.clip(es_arr, 0, None), atol=0.5)  # phase 2 is ES, not the noise
    err_before = np.abs(moving - target).mean()
    assert np.abs(sitk.GetArrayFromImage(warped_img) - target).mean() < 0.8 * err_before


def test_basal_descent_clears_the_basal_rv_slice_of_ed_to_es(tmp_path):
    """infer_studies / evaluate_studies: with basal_descent (default) the ED->ES label loses the RV on the
    basal slice (a 4-slice stack, 7-10 mm apart), every other voxel as without; recorded. ES->ED is
    untouched here: the phantom's ES label keeps every structure on the basal slice, so none re-enters one."""
    src = tmp_path / "src"
    (folder,) = write_acdc_phantom(src, patients=1, first_id=107, max_slices=4, progress=False)
    results = {}
    for flag in (True, False):
        out = tmp_path / f"out_{flag}"
        summary = stacks.infer_studies(src, out, overview=False, basal_descent=flag, **FAST)
        assert summary["n_done"] == 1 and summary["basal_descent"] is flag
        results[flag] = {d: sitk.GetArrayFromImage(sitk.ReadImage(str(out / folder.name / d / "warped_label.nii.gz")))
                         for d in ("ED_to_ES", "ES_to_ED")}
        info = json.loads((out / folder.name / "ED_to_ES" / "summary.json").read_text())
        assert ("basal_descent" in info) is flag
    on, off = results[True]["ED_to_ES"], results[False]["ED_to_ES"]
    ed_label = sitk.GetArrayFromImage(sitk.ReadImage(str(next(folder.glob("*_frame01_gt.nii.gz")))))
    base = 0 if (ed_label[0] > 0).sum() >= (ed_label[-1] > 0).sum() else len(ed_label) - 1
    assert (off[base] == 1).sum() > 0 and (on[base] == 1).sum() == 0
    changed = on != off
    assert changed.any() and (off[changed] == 1).all() and (on[changed] == 0).all() and not changed[np.arange(len(on)) != base].any()
    np.testing.assert_array_equal(results[True]["ES_to_ED"], results[False]["ES_to_ED"])
    # the written label is what the written transform does to the moving label (the rule is a through-plane part of
    # the field, not an edit): ITK's label-linear resampling through transform.h5 agrees on the labelled voxels
    pair_dir = tmp_path / "out_True" / folder.name / "ED_to_ES"
    info = json.loads((pair_dir / "summary.json").read_text())
    assert info["basal_descent"]["in_transform"] and info["basal_descent"]["rule_agreement"] == 1.0
    moving_label = sitk.ReadImage(str(next(folder.glob("*_frame01_gt.nii.gz"))))
    fixed = sitk.ReadImage(str(pair_dir / "warped_label.nii.gz"))
    itk = sitk.GetArrayFromImage(sitk.Resample(moving_label, fixed, sitk.ReadTransform(str(pair_dir / "transform.h5")), sitk.sitkLabelLinear, 0))
    labelled = (on > 0) | (itk > 0)
    assert (itk == on)[labelled].mean() >= 0.97  # measured 0.98-0.99: the rest is the in-plane smoothing of label_sigma
    assert (itk[base] == 1).sum() <= 0.02 * (off[base] == 1).sum()  # the basal RV is gone in ITK's resampling too (but a rim)
    metrics = stacks.evaluate_studies(src, tmp_path / "eval", with_demons=False, figure=False, **FAST)
    assert metrics["basal_descent"] is True


def test_basal_descent_label_both_directions():
    """ED->ES clears the basal RV slice, ES->ED fills the slice a structure re-enters; other pairs and thin stacks as they are."""
    from types import SimpleNamespace

    ed = np.zeros((4, 24, 24), np.int16)
    ed[:, 6:18, 12:20] = 3  # LV on every slice
    ed[:, 8:16, 3:10] = 1  # RV on every slice, slice 0 basal (the widest labels)
    ed[0, 4:20, 10:22] = np.where(ed[0, 4:20, 10:22] == 0, 2, ed[0, 4:20, 10:22])
    fixed = sitk.GetImageFromArray(np.zeros(ed.shape, np.float32))
    fixed.SetSpacing((1.5, 1.5, 10.0))
    es = stacks.basal_descent_label(SimpleNamespace(direction="ED->ES"), ed, ed, fixed)
    assert not (es[0] == 1).any() and (es[1:] == ed[1:]).all() and (es[0] == 3).sum() == (ed[0] == 3).sum()
    # with the label prior's segmentation of the ES frame: the LV still seen there changes nothing, the LV gone from the
    # basal slice takes the LV and myocardium out of it too (the RV as before)
    np.testing.assert_array_equal(stacks.basal_descent_label(SimpleNamespace(direction="ED->ES"), ed, ed, fixed, ed), es)
    gone = ed.copy()
    gone[0][gone[0] == 3] = 0
    left = stacks.basal_descent_label(SimpleNamespace(direction="ED->ES"), ed, ed, fixed, gone)
    assert not left[0].any() and (left[1:] == es[1:]).all()
    back = stacks.basal_descent_label(SimpleNamespace(direction="ES->ED"), es, es, fixed)
    np.testing.assert_array_equal(back, ed)  # the RV outline of slice 1 is that of slice 0 here
    assert stacks.basal_descent_label(SimpleNamespace(direction="moving->fixed"), es, es, fixed) is es
    thin = es[:2].copy()
    assert stacks.basal_descent_label(SimpleNamespace(direction="ES->ED"), thin, thin, fixed[:, :, :2]) is thin  # 2 slices: as is
