"""Cohorts on ``torch.distributed``: ``monai-npc register --batch`` and the npc_acdc bundle's
``configs/multi_gpu_inference.json`` under ``torchrun --nproc_per_node 2`` (gloo, CPU processes)
write the same files and the same merged table as one process; the rank-sharding helpers of
:mod:`monai_npc.runtime`; a rerun of a batch skips the pairs already done.
(``track --batch`` under torchrun: tests/test_tracking_cohort.py.)"""

from __future__ import annotations

import csv
import json
import logging
import os
import socket
import subprocess
import sys
from pathlib import Path
from typing import List

import numpy as np
import pytest
import SimpleITK as sitk

from monai_npc.apps.registration.files import BATCH_COLUMNS, pair_done, register_batch
from monai_npc.data.phantoms import cardiac_pair
from monai_npc.runtime import gather_shards, rank_device, shard, unshard

ROOT = Path(__file__).resolve().parents[1]
BUNDLE = ROOT / "bundles" / "npc_acdc"
#: the shipped ACDC network without test-time refinement, at its trained grid
FAST = {"refine_iterations": 0, "threads": 1, "overview": False}
pytestmark = pytest.mark.usefixtures("one_thread")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _torchrun(*args: str, timeout: int = 240) -> subprocess.CompletedProcess:
    """``python -m torch.distributed.run --nproc_per_node 2`` on CPUs (gloo), one thread per rank."""
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nnodes", "1", "--nproc_per_node", "2", "--master_addr", "127.0.0.1",
           "--master_port", str(_free_port()), *args]
    env = dict(os.environ, OMP_NUM_THREADS="1", CUDA_VISIBLE_DEVICES="", PYTHONPATH=str(ROOT))
    return subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=timeout)


def _array(path: Path) -> np.ndarray:
    return sitk.GetArrayFromImage(sitk.ReadImage(str(path)))


def _table(path: Path) -> List[dict]:
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def test_shard_and_unshard():
    items = list(range(7))
    parts = [shard(items, r, 3) for r in range(3)]
    assert parts == [[0, 3, 6], [1, 4], [2, 5]]
    assert unshard(parts) == items and unshard([[0, 3], [1], [2, 5]]) == [0, 1, 2, 3, 5]  # a rank stopped early
    assert gather_shards(["a", "b"], 1) == ["a", "b"]
    assert rank_device("cpu") == "cpu" and rank_device(None) == "cpu"  # no CUDA here
    with pytest.raises(ValueError, match=r"rank 3 is not in \[0, world_size=3\)"):
        shard(items, 3, 3)
    with pytest.raises(ValueError, match=r"device .cuda.: CUDA is not available on this machine \(use --device cpu"):
        rank_device("cuda")


@pytest.fixture(scope="module")
def pairs(tmp_path_factory) -> Path:
    """``pairs.csv``: five 2-D phantom pairs (64 px, ED/ES labels) and a missing file (the fourth row)."""
    d = tmp_path_factory.mktemp("pairs")
    rows = ["moving,fixed,moving_label,fixed_label,out"]
    for k in range(5):
        p = cardiac_pair(size=64, seed=10 + k)
        for key in ("moving", "fixed", "moving_label", "fixed_label"):
            image = sitk.GetImageFromArray(np.asarray(p[key], np.uint8 if "label" in key else np.float32))
            image.SetSpacing((1.4, 1.4))
            sitk.WriteImage(image, str(d / f"p{k}_{key}.nii.gz"))
        rows.append(f"p{k}_moving.nii.gz,p{k}_fixed.nii.gz,p{k}_moving_label.nii.gz,p{k}_fixed_label.nii.gz,one/p{k}")
    rows.insert(4, "missing.nii.gz,p0_fixed.nii.gz,,,one/bad")
    (d / "pairs.csv").write_text("\n".join(rows) + "\n")
    return d


def test_register_batch_two_ranks_same_as_one(pairs, tmp_path):
    """``torchrun --nproc_per_node 2 -m monai_npc.cli.main register --batch``: each rank registers its
    pairs; the files and batch_summary.csv equal one process's (but for seconds)."""
    one = register_batch(pairs / "pairs.csv", model="acdc", out=tmp_path / "one", progress=False, **FAST)
    assert [r["status"] for r in one] == ["ok", "ok", "ok", "failed", "ok", "ok"]
    two_csv = pairs / "two.csv"  # the same pairs, written into other folders
    two_csv.write_text((pairs / "pairs.csv").read_text().replace(",one/", "," + str(tmp_path / "two") + "/"))
    proc = _torchrun("-m", "monai_npc.cli.main", "register", "--batch", str(two_csv), "--out", str(tmp_path / "two"),
                     "--refine", "0", "--threads", "1", "--no-overview", "--device", "cpu")
    log = proc.stdout + proc.stderr
    assert proc.returncode == 1, log[-3000:]  # the missing file: exit status 1, the others done
    assert log.count("registered 5 of 6 pair(s)") == 1 and log.count("failed: ") == 1, log[-3000:]  # rank 0 prints
    assert "register (rank 0/2): 100%|" in log and "register (rank 1/2): 100%|" in log  # both ranks worked: 3 + 3 pairs
    a, b = _table(tmp_path / "one" / "batch_summary.csv"), _table(tmp_path / "two" / "batch_summary.csv")
    assert list(b[0]) == list(BATCH_COLUMNS) and len(a) == len(b) == 6
    keep = [c for c in BATCH_COLUMNS if c not in ("seconds", "out")]
    assert [{c: r[c] for c in keep} for r in b] == [{c: r[c] for c in keep} for r in a]
    assert 0.5 < float(b[0]["dice_mean"]) <= 1.0 and "missing.nii.gz" in b[3]["error"]
    for k in range(5):
        for name in ("warped_label.nii.gz", "displacement.nii.gz", "warped.nii.gz"):
            np.testing.assert_array_equal(_array(tmp_path / "two" / f"p{k}" / name), _array(pairs / "one" / f"p{k}" / name))


def test_register_batch_resumes(pairs, tmp_path, caplog):
    """A rerun skips the pairs whose folder holds the same request; another setting registers them again."""
    csv_path = pairs / "resume.csv"
    csv_path.write_text((pairs / "pairs.csv").read_text().replace(",one/", "," + str(tmp_path / "r") + "/").replace(
        "missing.nii.gz,p0_fixed.nii.gz,,,", f"{pairs / 'p0_moving.nii.gz'},{pairs / 'p0_fixed.nii.gz'},,,"))
    first = register_batch(csv_path, model="phase-correlation", out=tmp_path / "r", progress=False, **FAST)
    assert [r["status"] for r in first] == ["ok"] * 6
    (tmp_path / "r" / "p2" / "warped.nii.gz").unlink()  # an incomplete folder: registered again
    with caplog.at_level(logging.INFO, logger="monai_npc.apps.registration.files"):
        again = register_batch(csv_path, model="phase-correlation", out=tmp_path / "r", progress=False, **FAST)
    assert [r["status"] for r in again] == ["skipped", "skipped", "ok", "skipped", "skipped", "skipped"]
    assert "pair " in caplog.text and "skipped, already done" in caplog.text
    assert [r["folding_percent"] for r in again] == [r["folding_percent"] for r in first]
    assert [t["status"] for t in _table(tmp_path / "r" / "batch_summary.csv")] == [r["status"] for r in again]
    assert pair_done(tmp_path / "r" / "p0")["request"]["model"] == "phase-correlation"
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="monai_npc.apps.registration.files"):
        other = register_batch(csv_path, model="phase-correlation", out=tmp_path / "r", progress=False, **dict(FAST, size=64))
    assert [r["status"] for r in other] == ["ok"] * 6 and "(settings.size None -> 64)" in caplog.text


def test_bundle_multi_gpu_inference_two_ranks(tmp_path):
    """npc_acdc ``inference.json`` + ``multi_gpu_inference.json`` under torchrun (gloo): each rank
    registers its studies; summary.json and every pair's files equal one process's run of ``inference.json``."""
    from monai.bundle import ConfigWorkflow

    configs = BUNDLE / "configs"
    data = {"phantom_patients": 3, "phantom_max_slices": 2, "refine_iterations": 0, "overview": False, "progress": False}
    wf = ConfigWorkflow(config_file=str(configs / "inference.json"), meta_file=str(configs / "metadata.json"), logging_file=False,
                        workflow_type="inference", bundle_root=str(BUNDLE), output_dir=str(tmp_path / "one"),
                        phantom_dir=str(tmp_path / "phantoms"), **data)
    wf.initialize()
    wf.run()
    args = ["-m", "monai.bundle", "run", "--config_file", str([str(configs / "inference.json"), str(configs / "multi_gpu_inference.json")]),
            "--meta_file", str(configs / "metadata.json"), "--logging_file", str(configs / "logging.conf"), "--bundle_root", str(BUNDLE),
            "--output_dir", str(tmp_path / "two"), "--phantom_dir", str(tmp_path / "phantoms")]
    for key, value in dict(data, progress=True).items():
        args += [f"--{key}", str(value)]
    proc = _torchrun(*args)
    log = proc.stdout + proc.stderr
    assert proc.returncode == 0, log[-4000:]
    assert "register (rank 0/2): 100%|" in log and "register (rank 1/2): 100%|" in log, log[-4000:]  # 2 + 1 studies
    one, two = (json.loads((tmp_path / d / "summary.json").read_text()) for d in ("one", "two"))

    def strip(summary: dict) -> list:
        return [{**s, "pairs": {k: sorted(v["files"]) for k, v in s["pairs"].items()}} for s in summary["studies"]]

    assert two["n_done"] == one["n_done"] == 3 and strip(two) == strip(one)
    for study in one["studies"]:
        for direction, pair in study["pairs"].items():
            folder = Path(pair["folder"]).relative_to(tmp_path / "one")
            for name in ("warped_label.nii.gz", "displacement.nii.gz"):
                np.testing.assert_array_equal(_array(tmp_path / "two" / folder / name), _array(tmp_path / "one" / folder / name))
