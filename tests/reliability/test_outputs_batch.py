"""Runs over many files: duplicate outputs refused up front, one bad input reported while the good
ones finish, no stale ``batch_summary.csv`` / ``metrics.json`` left as if current, ``strict`` stops."""

import csv
import errno
import json
import os

import numpy as np
import pytest
import SimpleITK as sitk
import torch
from ignite.engine import Engine

from monai_npc.cli.main import main
from monai_npc.data.phantoms import cardiac_pair
from monai_npc.handlers import RegistrationMetricsWriter, RegistrationWriter
from monai_npc.apps.registration import files as registration_files
from monai_npc.apps.registration.files import register_batch
from monai_npc.io_safety import OutputError


def _write_pair(folder, seed=5):
    p = cardiac_pair(size=48, seed=seed)
    sitk.WriteImage(sitk.GetImageFromArray(p["moving"].astype(np.float32)), str(folder / "m.nii.gz"))
    sitk.WriteImage(sitk.GetImageFromArray(p["fixed"].astype(np.float32)), str(folder / "f.nii.gz"))
    (folder / "bad.nii.gz").write_bytes(os.urandom(300))  # corrupt
    nan = p["moving"].astype(np.float32)
    nan[10, 10] = np.nan
    sitk.WriteImage(sitk.GetImageFromArray(nan), str(folder / "nan.nii.gz"))


def _csv(folder, rows):
    (folder / "pairs.csv").write_text("moving,fixed,out\n" + "".join(f"{m},{f},{o}\n" for m, f, o in rows))
    return folder / "pairs.csv"


def test_duplicate_outs_are_an_error_before_any_work(tmp_path):
    _write_pair(tmp_path)
    pairs = _csv(tmp_path, [("m.nii.gz", "f.nii.gz", "same"), ("f.nii.gz", "m.nii.gz", "other"), ("f.nii.gz", "m.nii.gz", "./same")])
    with pytest.raises(ValueError, match=r"rows 2 and 4 write the same output folder"):
        register_batch(pairs, model="phase-correlation", out=tmp_path / "report", progress=False)
    assert not (tmp_path / "same").exists() and not (tmp_path / "other").exists() and not (tmp_path / "report").exists()


def test_one_bad_file_among_good_ones(tmp_path, capsys):
    _write_pair(tmp_path)
    pairs = _csv(tmp_path, [("m.nii.gz", "f.nii.gz", "a"), ("bad.nii.gz", "f.nii.gz", "b"),
                            ("nan.nii.gz", "f.nii.gz", "c"), ("f.nii.gz", "m.nii.gz", "d")])
    (tmp_path / "report").mkdir()
    (tmp_path / "report" / "batch_summary.csv").write_text("stale\n")
    results = register_batch(pairs, model="phase-correlation", out=tmp_path / "report", progress=False, overview=False)
    assert [r["status"] for r in results] == ["ok", "failed", "failed", "ok"]
    assert "bad.nii.gz" in results[1]["error"] and "nan.nii.gz" in results[2]["error"] and "non-finite" in results[2]["error"]
    assert all("\n" not in r.get("error", "") for r in results)
    assert (tmp_path / "a" / "summary.json").is_file() and (tmp_path / "d" / "summary.json").is_file()
    assert not (tmp_path / "b").exists() and not (tmp_path / "c").exists()
    with (tmp_path / "report" / "batch_summary.csv").open() as f:
        rows = list(csv.DictReader(f))
    assert [r["status"] for r in rows] == ["ok", "failed", "failed", "ok"] and "bad.nii.gz" in rows[1]["error"]

    # --strict: the first bad pair is fatal (one line), after the table of the pairs so far replaces the earlier run's
    args = ["register", "--batch", str(pairs), "--model", "phase-correlation", "--out", str(tmp_path / "report"),
            "--no-overview", "--no-progress"]
    capsys.readouterr()
    assert main(args + ["--strict"]) == 1
    err = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    assert len(err) == 1 and "bad.nii.gz" in err[0]
    with (tmp_path / "report" / "batch_summary.csv").open() as f:  # the earlier run's table replaced by this run's rows so far
        assert [r["status"] for r in csv.DictReader(f)] == ["skipped", "failed"]
    with pytest.raises(ValueError, match="bad.nii.gz"):
        register_batch(pairs, model="phase-correlation", progress=False, strict=True, overview=False)


def _engine(batches, fail_at=None):
    def step(engine, batch):
        if fail_at is not None and engine.state.iteration == fail_at:
            raise RuntimeError("corrupt batch")
        return batch

    return Engine(step), batches


def _batch(dice, patients, nan_at=None):
    moving = torch.rand(len(dice), 1, 8, 8)
    if nan_at is not None:
        moving[nan_at, 0, 2, 2] = float("nan")
    return {"metrics": {"dice_mean": torch.tensor(dice)}, "meta": {"patient": patients, "direction": ["ED->ES"] * len(dice)},
            "moving": moving, "fixed": torch.rand(len(dice), 1, 8, 8), "seconds": 0.1}


def test_metrics_writer_skips_nan_pairs_and_never_leaves_stale_metrics(tmp_path):
    (tmp_path / "metrics.json").write_text('{"n_pairs": 99}')
    engine, data = _engine([_batch([0.8, 0.0], ["p1", "p2"], nan_at=1), _batch([0.6], ["p3"])])
    writer = RegistrationMetricsWriter(tmp_path)
    writer.attach(engine)
    engine.state.skipped = [{"item": "p4_ED.nii.gz", "reason": "unreadable (truncated gzip)"}]  # from a data stage
    engine.run(data)
    metrics = json.loads((tmp_path / "metrics.json").read_text())
    assert metrics["n_pairs"] == 2 and metrics["dice_mean"] == pytest.approx(0.7)  # the NaN pair is not averaged in
    assert metrics["n_skipped"] == 2
    assert metrics["skipped"][0]["item"].startswith("p2") and "non-finite" in metrics["skipped"][0]["reason"]
    assert metrics["skipped"][1]["item"] == "p4_ED.nii.gz"
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == []

    # a run that fails half-way leaves no metrics.json of the previous run
    engine, data = _engine([_batch([0.8], ["p1"]), _batch([0.6], ["p3"])], fail_at=2)
    RegistrationMetricsWriter(tmp_path).attach(engine)
    with pytest.raises(RuntimeError):
        engine.run(data)
    assert not (tmp_path / "metrics.json").exists() and not (tmp_path / "metrics_per_pair.csv").exists()

    engine, data = _engine([_batch([0.8, 0.5], ["p1", "p2"], nan_at=1)])
    RegistrationMetricsWriter(tmp_path, strict=True).attach(engine)
    with pytest.raises(ValueError, match="p2.*non-finite"):
        engine.run(data)


def test_registration_writer_leaves_no_partial_file(tmp_path, monkeypatch):
    import nibabel as nib

    out = {"ddf": torch.zeros(1, 2, 8, 8), "moving": torch.rand(1, 1, 8, 8), "fixed": torch.rand(1, 1, 8, 8),
           "warped": torch.rand(1, 1, 8, 8), "meta": {"patient": ["p1"]}}
    engine = Engine(lambda e, b: out)
    RegistrationWriter(tmp_path, panels=False).attach(engine)
    engine.run([0])
    before = {p.name: p.read_bytes() for p in tmp_path.iterdir()}
    assert sorted(before) == ["p1_ddf.nii.gz", "p1_fixed.nii.gz", "p1_moving.nii.gz", "p1_warped.nii.gz"]
    save = nib.save

    def full_disk(img, path):
        save(img, path)
        with open(path, "r+b") as f:
            f.truncate(20)
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), path)

    monkeypatch.setattr(nib, "save", full_disk)
    out["moving"] = torch.rand(1, 1, 8, 8)
    engine = Engine(lambda e, b: out)
    RegistrationWriter(tmp_path, panels=False).attach(engine)
    with pytest.raises(OutputError, match=r"p1_moving.nii.gz: disk full \(ENOSPC\)"):
        engine.run([0])
    assert {p.name: p.read_bytes() for p in tmp_path.iterdir()} == before  # previous files, no partial ones


def test_quickstart_removes_stale_metrics_and_fails_in_one_line(tmp_path, monkeypatch, capsys):
    out = tmp_path / "qs"
    args = ["quickstart", "--out", str(out), "--pairs", "2", "--model", "phase-correlation"]
    assert main(args) == 0
    assert json.loads((out / "metrics.json").read_text())["n_pairs"] == 2
    real = registration_files.register_files
    calls = []

    def second_fails(*a, **k):
        calls.append(1)
        if len(calls) == 2:
            raise OutputError(f"cannot write {out / 'registered' / 'pair01'}: disk full (ENOSPC)")
        return real(*a, **k)

    monkeypatch.setattr(registration_files, "register_files", second_fails)
    capsys.readouterr()
    assert main(args) == 1
    err = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    assert len(err) == 1 and "pair01" in err[0] and "disk full" in err[0]
    assert not (out / "metrics.json").exists() and not (out / "overview.png").exists()
