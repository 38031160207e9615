"""The ACDC bundle's ``configs/train.json`` (whole-stack training: the data packed on first use, ``models/model.pt``
in the shipped weights format, resume) and ``configs/multi_gpu_train.json`` (``torchrun``, DistributedDataParallel)
on phantom data with a tiny network."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from monai.bundle import ConfigWorkflow

ROOT = Path(__file__).resolve().parents[1]
BUNDLE = ROOT / "bundles" / "npc_acdc"
CONFIGS = BUNDLE / "configs"
#: a network small enough for a few CPU steps (tests/test_stack_training.py)
TINY = dict(kernel_size=8, stride=4, num_pairs=8, top_k=4, gate_dim=8, hidden_dim=8, num_pe=16, num_steps=2, head_channels=4,
            stages=None)
#: 4 phantom patients of 2 slices (2 train, 1 val, 1 test), 64 x 64 windows, one epoch
SMALL = dict(phantom_patients=4, phantom_max_slices=2, image_size=64, network_args=TINY, max_epochs=1, val_every=1,
             timing_steps=1, minutes=2)

pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.fixture(scope="module")
def phantom_dir(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("phantoms")


def _train(tmp_path: Path, phantom_dir: Path, **override) -> ConfigWorkflow:
    wf = ConfigWorkflow(config_file=str(CONFIGS / "train.json"), meta_file=str(CONFIGS / "metadata.json"), logging_file=False,
                        workflow_type=None, bundle_root=str(BUNDLE), output_dir=str(tmp_path / "out"),
                        ckpt_dir=str(tmp_path / "models"), phantom_dir=str(phantom_dir), **{**SMALL, **override})
    wf.initialize()
    wf.run()
    return wf


def _weights(path: Path) -> dict:
    return torch.load(path, map_location="cpu", weights_only=True)["model"]


def test_train_json_trains_whole_stacks_ships_model_pt_and_resumes(tmp_path, phantom_dir):
    wf = _train(tmp_path, phantom_dir, stacks_per_batch=2)
    summary = wf.parser.get_parsed_content("trainer").summary
    out, model = tmp_path / "out", tmp_path / "models" / "model.pt"
    assert summary["epoch"] == 1 and summary["step"] == 1 and summary["model"] == str(model)
    assert {p.name for p in out.iterdir()} >= {"checkpoint.pt", "best.pt", "train_log.jsonl", "train.log", "curve.png", "cache"}
    (pack,) = (out / "cache").glob("acdc_stacks_64_motion_*.npz")
    blob = torch.load(model, map_location="cpu", weights_only=True)
    assert sorted(blob) == ["config", "meta", "model"] and blob["meta"]["field_of_view"] == "heart-stack"
    for k, v in _weights(out / "best.pt").items():  # model.pt is the best validation state
        torch.testing.assert_close(blob["model"][k], v)

    from monai_npc import register
    from monai_npc.data.acdc import find_acdc_patients, load_acdc_patient

    (root,) = phantom_dir.iterdir()
    stacks = load_acdc_patient(find_acdc_patients(root)[0])
    reg = register(stacks["ed_image"], stacks["es_image"], model=str(model), spacing=stacks["spacing"], threads=1)
    assert reg.ddf_array.shape[1:] == stacks["ed_image"].shape and np.isfinite(reg.ddf_array).all()
    settings = reg.summary["settings"]  # model.pt names the bundle: register runs it with the bundle's register settings
    from monai_npc.apps.registration.models import register_settings
    from monai_npc.networks.nets import load_pretrained

    shipped = register_settings(load_pretrained("acdc"))
    assert settings["refine_iterations"] == {"value": shipped["refine_iterations"], "source": "dataset"}
    assert settings["num_steps"] == {"value": shipped["num_steps"], "source": "dataset"}

    with pytest.raises(RuntimeError) as err:  # a second run does not write over the first one's checkpoint
        _train(tmp_path, phantom_dir, stacks_per_batch=2)
    assert "--resume true" in str(err.value.__cause__)
    wf = _train(tmp_path, phantom_dir, stacks_per_batch=2, max_epochs=2, resume=True)
    state = torch.load(out / "checkpoint.pt", map_location="cpu", weights_only=True)
    assert (state["epoch"], state["step"]) == (2, 2) and [r["epoch"] for r in state["curve"]] == [1, 2]
    assert state["train_config"]["pack"] == str(pack)  # the pack of the first run, reused
    assert "resumed from" in (out / "train.log").read_text()


def test_multi_gpu_train_json_equals_one_process_with_twice_the_stacks(tmp_path, phantom_dir):
    """``torchrun --nproc_per_node=2`` (gloo) with 1 stack per rank and step ends with the weights of one process
    with 2 stacks per step: the same epoch order, the same augmentation, the gradients of the whole step averaged."""
    _train(tmp_path / "one", phantom_dir, stacks_per_batch=2)
    (pack,) = (tmp_path / "one" / "out" / "cache").glob("*.npz")
    overrides = {**SMALL, "stacks_per_batch": 1, "pack": str(pack), "output_dir": str(tmp_path / "two" / "out"),
                 "ckpt_dir": str(tmp_path / "two" / "models"), "phantom_dir": str(tmp_path / "unused")}
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2", "-m", "monai.bundle", "run",
           "--config_file", str([str(CONFIGS / "train.json"), str(CONFIGS / "multi_gpu_train.json")]),
           "--meta_file", str(CONFIGS / "metadata.json"), "--bundle_root", str(BUNDLE)]
    for key, value in overrides.items():
        cmd += [f"--{key}", str(value)]
    env = dict(os.environ, OMP_NUM_THREADS="1", CUDA_VISIBLE_DEVICES="", PYTHONPATH=str(ROOT))
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=300)
    log = proc.stdout + proc.stderr
    assert proc.returncode == 0, log[-4000:]
    assert not (tmp_path / "unused").exists()  # a given pack: no phantom data written
    two = tmp_path / "two" / "out"
    assert "and 1 more processes" in (two / "train.log").read_text() and len((two / "train_log.jsonl").read_text().splitlines()) == 1
    one_state = torch.load(tmp_path / "one" / "out" / "checkpoint.pt", map_location="cpu", weights_only=True)
    two_state = torch.load(two / "checkpoint.pt", map_location="cpu", weights_only=True)
    assert (two_state["epoch"], two_state["step"]) == (1, 1)
    for k, v in one_state["model"].items():
        torch.testing.assert_close(two_state["model"][k], v, rtol=1e-4, atol=1e-6, msg=f"the 2-process run differs at {k}")
    assert two_state["curve"][0]["loss"] == pytest.approx(one_state["curve"][0]["loss"], abs=1e-5)
    assert sorted(_weights(tmp_path / "two" / "models" / "model.pt")) == sorted(one_state["model"])


def test_train_json_trains_the_crop_recipe_network_with_the_trainer_defaults():
    """train.json's network is train_crops.json's (the shipped weights' architecture) and its settings are checked
    before any work, naming the setting."""
    from monai.bundle import ConfigParser

    from monai_npc.apps.stacks import check_stack_training
    from monai_npc.engines.stack_training import DEFAULT_NETWORK

    crops = json.loads((CONFIGS / "train_crops.json").read_text())
    net = {k: v for k, v in crops["network_def"].items() if k not in ("_target_", "spatial_dims", "detach_steps")}
    assert {**net, "num_steps": crops["num_steps"], "stages": crops["stages"], "refine_iterations": 0} == DEFAULT_NETWORK
    parser = ConfigParser()
    parser.read_config(str(CONFIGS / "train.json"))
    config = check_stack_training(parser.get_parsed_content("training_settings"))
    assert (config.architecture, config.stacks_per_batch, config.learning_rate, config.label_weight) == ("npc2d", 4, 1e-3, 1.0)
    assert "check_stack_training(" in json.loads((CONFIGS / "multi_gpu_train.json").read_text())["initialize"][-1]
    parser["minutes"] = 0
    with pytest.raises(ValueError, match="minutes must be in"):
        check_stack_training(parser.get_parsed_content("training_settings"))
    with pytest.raises(ValueError, match=r"unknown or misplaced entries \['out_dir'\]"):
        check_stack_training({"out_dir": "x"})
