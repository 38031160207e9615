"""Cohorts of cines (``monai-npc track --batch``, :func:`monai_npc.apps.tracking.cohort.track_cohort`):
resumable, a bad study reported while the others finish, one merged ``cohort.csv``, and the
studies shared between two ``torchrun`` processes (gloo) with the same merged table."""

from __future__ import annotations

import csv
import logging
import os
import socket
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import SimpleITK as sitk

import monai_npc
from monai_npc.data.phantom_cine import write_cardiac_cine
from monai_npc.apps.tracking.cohort import COHORT_COLUMNS, FUNCTION_COLUMNS, read_cohort, shard, study_done, track_cohort

ROOT = Path(__file__).resolve().parents[1]
#: fast settings: the shipped ACDC network without test-time refinement, one thread, no figure
FAST = {"model": "acdc", "refine_iterations": 0, "figure": False, "progress": False, "threads": 1}
GOOD = ("s0_4d", "s1_4d", "s2_4d")


@pytest.fixture(scope="module")
def data(tmp_path_factory) -> Path:
    """Three tiny phantom cines (2 slices, 4 or 5 frames, 64 px) with their ED labels, a corrupt
    cine, and ``cohort.csv`` listing them (relative paths; the corrupt study second)."""
    d = tmp_path_factory.mktemp("cohort_data")
    rows = ["cine,label,label_frame"]
    for i in range(3):
        write_cardiac_cine(d, f"s{i}", frames=4 + i % 2, size=64, levels=(0.2, 0.55), seed=i)
        rows.append(f"s{i}_4d.nii.gz,s{i}_ed_gt.nii.gz,0")
    (d / "bad_4d.nii.gz").write_bytes(b"not a NIfTI file")
    rows.insert(2, "bad_4d.nii.gz,s0_ed_gt.nii.gz,")
    (d / "cohort.csv").write_text("\n".join(rows) + "\n")
    return d


@pytest.fixture(scope="module")
def single(data, tmp_path_factory):
    """One in-process run of the cohort: ``(rows, output folder)``."""
    out = tmp_path_factory.mktemp("cohort_single")
    return track_cohort(data / "cohort.csv", out, **FAST), out


def _read(path: Path):
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def test_read_cohort_and_shard(data, tmp_path):
    studies = read_cohort(data / "cohort.csv", tmp_path)
    assert [s.name for s in studies] == ["s0_4d", "bad_4d", "s1_4d", "s2_4d"]
    assert studies[0].cine == str(data / "s0_4d.nii.gz") and studies[0].label_frame == 0 and studies[1].label_frame is None
    assert studies[2].out == str(tmp_path / "s1_4d") and studies[2].row == 4
    assert shard(list(range(7)), 1, 3) == [1, 4] and shard(list(range(7)), 0, 3) == [0, 3, 6]
    bad = tmp_path / "bad.csv"
    for text, match in [("movie,label\na,b\n", "lacks column"), ("cine,label,label_frame\na,b,x\n", "row 2: label_frame 'x'"),
                        ("cine,label\na.nii.gz,b\nsub/a.nii.gz,c\n", "rows 2 and 3 are both study 'a'"), ("cine,label\n", "no rows")]:
        bad.write_text(text)
        with pytest.raises(ValueError, match=match):
            read_cohort(bad, tmp_path)
    with pytest.raises(FileNotFoundError, match="cohort CSV not found"):
        read_cohort(tmp_path / "none.csv", tmp_path)


def test_cohort_single_process(data, single):
    rows, out = single
    assert [(r["name"], r["status"]) for r in rows] == [("s0_4d", "ok"), ("bad_4d", "failed"), ("s1_4d", "ok"), ("s2_4d", "ok")]
    assert "bad_4d.nii.gz" in rows[1]["error"] and "corrupt" in rows[1]["error"] and rows[1]["lv_ef"] is None
    table = _read(out / "cohort.csv")
    assert tuple(table[0]) == COHORT_COLUMNS and [t["name"] for t in table] == [r["name"] for r in rows]
    for name in GOOD:
        assert study_done(out / name) is not None and (out / name / "labels_4d.nii.gz").is_file()
    assert not (out / "bad_4d").exists() or study_done(out / "bad_4d") is None
    # the merged numbers are monai_npc.track's on the same study
    ref = monai_npc.track(str(data / "s1_4d.nii.gz"), str(data / "s1_ed_gt.nii.gz"), 0, model="acdc",
                          refine_iterations=0, progress=False, threads=1).function
    row = table[2]
    assert row["name"] == "s1_4d" and int(row["frames"]) == 5
    for key in FUNCTION_COLUMNS:
        assert float(row[key]) == pytest.approx(ref[key], rel=1e-9, abs=1e-9), key
    # a beating phantom: ES at frame 2 (round(0.4 T)), an LV that ejects
    assert (int(row["ed_frame"]), int(row["es_frame"])) == (0, 2) and 25.0 < float(row["lv_ef"]) < 60.0


def test_rerun_skips_done_studies(data, single, caplog):
    rows, out = single
    (out / "s2_4d" / "function.json").unlink()  # an interrupted study: redone
    with caplog.at_level(logging.INFO, logger="monai_npc.apps.tracking.cohort"):
        again = track_cohort(data / "cohort.csv", out, **FAST)
    assert [r["status"] for r in again] == ["skipped", "failed", "skipped", "ok"]
    assert "study s0_4d: skipped, already done" in caplog.text and "study s2_4d: skipped" not in caplog.text
    assert "study bad_4d (cohort CSV row 3) failed" in caplog.text
    for before, after in zip(rows, again):
        assert {k: before[k] for k in FUNCTION_COLUMNS} == {k: after[k] for k in FUNCTION_COLUMNS}
    assert [t["status"] for t in _read(out / "cohort.csv")] == ["skipped", "failed", "skipped", "ok"]


def test_changed_row_is_tracked_again(data, single, tmp_path, caplog):
    """A study done with other inputs (here its label frame) is not skipped: tracked again, with a warning naming the change."""
    rows, out = single
    changed = tmp_path / "changed.csv"
    changed.write_text(f"cine,label,label_frame\n{data / 's0_4d.nii.gz'},{data / 's0_ed_gt.nii.gz'},1\n"
                       f"{data / 's1_4d.nii.gz'},{data / 's1_ed_gt.nii.gz'},0\n")
    with caplog.at_level(logging.WARNING, logger="monai_npc.apps.tracking.cohort"):
        again = track_cohort(changed, out, **FAST)
    assert [(r["name"], r["status"], r["reference_frame"]) for r in again] == [("s0_4d", "ok", 1), ("s1_4d", "skipped", 0)]
    assert "holds a run of other inputs or settings (label_frame 0 -> 1)" in caplog.text
    assert study_done(out / "s0_4d")["request"]["label_frame"] == 1
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="monai_npc.apps.tracking.cohort"):  # another setting: tracked again too
        other = track_cohort(changed, out, **dict(FAST, scheme="anchored"))
    assert [r["status"] for r in other] == ["ok", "ok"] and "scheme 'direct' -> 'anchored'" in caplog.text
    track_cohort(data / "cohort.csv", out, **FAST)  # back to the module's state for the tests below


def test_strict_stops_at_bad_study(data, tmp_path):
    (tmp_path / "c.csv").write_text(f"cine,label\n{data / 'bad_4d.nii.gz'},{data / 's0_ed_gt.nii.gz'}\n{data / 's0_4d.nii.gz'},x.nii.gz\n")
    with pytest.raises(ValueError, match=r"study bad_4d \(cohort CSV .*c.csv, row 2\) failed: .*corrupt"):
        track_cohort(tmp_path / "c.csv", tmp_path / "out", strict=True, **FAST)
    table = _read(tmp_path / "out" / "cohort.csv")  # written before raising, the rest not attempted
    assert [(t["name"], t["status"]) for t in table] == [("bad_4d", "failed")]
    with pytest.raises(ValueError, match="is the merged table this run writes"):
        track_cohort(tmp_path / "out" / "cohort.csv", tmp_path / "out", **FAST)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_torchrun_two_ranks_same_table(data, single, tmp_path):
    """``torchrun --nproc_per_node 2 ... track --batch``: gloo, each rank 2 studies, the merged table
    equals the single-process one (statuses and figures; seconds and folders differ)."""
    out = tmp_path / "ranks"
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nnodes", "1", "--nproc_per_node", "2", "--master_addr", "127.0.0.1",
           "--master_port", str(_free_port()), "-m", "monai_npc.cli.main", "track", "--batch", str(data / "cohort.csv"),
           "--out", str(out), "--refine", "0", "--no-figure", "--no-progress", "--device", "cpu"]
    env = dict(os.environ, OMP_NUM_THREADS="1", CUDA_VISIBLE_DEVICES="", PYTHONPATH=str(ROOT))
    proc = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=240)
    log = proc.stdout + proc.stderr
    assert proc.returncode != 0, log[-3000:]  # one study failed -> exit status 1 (as register --batch)
    assert log.count("tracked 4 studies: 3 ok, 0 skipped (already done), 1 failed") == 1, log[-3000:]  # rank 0 only
    table = _read(out / "cohort.csv")
    reference = _read(single[1] / "cohort.csv")
    keep = [c for c in COHORT_COLUMNS if c not in ("seconds", "out", "status")]
    assert [{c: t[c] for c in keep} for t in table] == [{c: t[c] for c in keep} for t in reference]
    assert [t["status"] for t in table] == ["ok", "failed", "ok", "ok"]
    assert all(study_done(out / name) is not None for name in GOOD)
    assert np.isfinite([float(t["seconds"]) for t in table]).all()
    for name in GOOD:  # each rank's studies: the same labels and volumes as one process's
        np.testing.assert_array_equal(*(sitk.GetArrayFromImage(sitk.ReadImage(str(d / name / "labels_4d.nii.gz"))) for d in (out, single[1])))
        assert (out / name / "volumes.csv").read_text() == (single[1] / name / "volumes.csv").read_text()
