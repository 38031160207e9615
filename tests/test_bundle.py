"""The MONAI bundles ``bundles/npc_acdc`` and ``bundles/npc_camus``: metadata, config properties,
network I/O and TorchScript export, short training with resume, evaluation, inference and a
2-process gloo ``torchrun`` run, all on phantom data with tiny network overrides where the
shipped weights are not needed."""

from __future__ import annotations

import csv
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

pytest.importorskip("ignite")

from monai.bundle import ConfigWorkflow, ckpt_export, verify_metadata, verify_net_in_out  # noqa: E402

from monai_npc.losses import PRESETS  # noqa: E402
from monai_npc.networks.nets import ACDC_CONFIG, CAMUS_CONFIG, NPCNet  # noqa: E402
from monai_npc.serialization import state_dict_sha256  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
BUNDLES = ROOT / "bundles"
SHARED = Path(__file__).resolve().parents[1].parent / "shared"
SCHEMA = SHARED / "monai" / "meta_schema_20240725.json"
SCHEMA_MD5 = "06954cad2cc5d3784e72077ac76f0fc8"
ACDC_SHARED = SHARED / "data" / "acdc_ssl4mis"
NAMES = ("npc_acdc", "npc_camus")
#: the 128 x 128 crop configs (evaluate, inference): ACDC's main configs take whole stacks (tests/test_stacks.py)
CROPS = {"npc_acdc": ("evaluate_crops.json", "inference_crops.json"), "npc_camus": ("evaluate.json", "inference.json")}
#: the ignite training on 2-D crops and its torchrun override: ACDC's train.json trains whole stacks
#: (tests/test_bundle_stack_training.py)
TRAIN = {"npc_acdc": ("train_crops.json", "multi_gpu_train_crops.json"), "npc_camus": ("train.json", "multi_gpu_train.json")}

#: a tiny NPCNet (about 10 k parameters) on 64 x 64 crops: exercises the real configs quickly
TINY = {
    "network_def#num_pairs": 8,
    "network_def#top_k": 4,
    "network_def#gate_dim": 16,
    "network_def#hidden_dim": 16,
    "network_def#num_pe": 16,
    "network_def#head_channels": 4,
    "num_steps": 2,
    "image_size": 64,
}
#: few, small phantom patients (the train split needs >= 1 patient in train and val)
PHANTOM = {"npc_acdc": {"phantom_patients": 4, "phantom_max_slices": 2}, "npc_camus": {"phantom_patients": 3}}

pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.fixture(scope="module")
def phantom_dir(tmp_path_factory):
    """Phantom patients shared by all tests of this module (written once per config)."""
    return tmp_path_factory.mktemp("phantoms")


def _configs(bundle: str, *names: str):
    files = [str(BUNDLES / bundle / "configs" / n) for n in names]
    return files[0] if len(files) == 1 else files


def _workflow(bundle: str, config, workflow_type: str, **override) -> ConfigWorkflow:
    names = config if isinstance(config, (list, tuple)) else [config]
    return ConfigWorkflow(
        config_file=_configs(bundle, *names),
        meta_file=str(BUNDLES / bundle / "configs" / "metadata.json"),
        logging_file=False,
        workflow_type=workflow_type,
        bundle_root=str(BUNDLES / bundle),
        **override,
    )


def _load(bundle: str, name: str) -> dict:
    return json.loads((BUNDLES / bundle / "configs" / name).read_text())


# ------------------------------------------------------------------------------------------------
# static checks
# ------------------------------------------------------------------------------------------------


def _network_def(bundle: str, **overrides):
    """The bundle's ``network_def`` as ``inference.json`` builds it (references such as ``@stages`` resolved)."""
    from monai.bundle import ConfigParser

    parser = ConfigParser()
    parser.read_config(str(BUNDLES / bundle / "configs" / "inference.json"))
    for key, value in overrides.items():
        parser[key] = value
    return parser.get_parsed_content("network_def", instantiate=True)


@pytest.mark.parametrize("bundle", NAMES)
def test_bundle_layout(bundle):
    root = BUNDLES / bundle
    for rel in (
        "configs/metadata.json", "configs/inference.json", "configs/train.json", "configs/evaluate.json",
        *(f"configs/{c}" for c in CROPS[bundle] + TRAIN[bundle]), "configs/multi_gpu_train.json", "configs/multi_gpu_inference.json",
        "configs/multi_gpu_evaluate.json", "configs/logging.conf", "models/model.pt", "docs/README.md",
        "docs/data_license.txt", "LICENSE",
    ):
        assert (root / rel).is_file(), rel
    if bundle == "npc_acdc":
        assert (root / "configs" / "track.json").is_file()  # cine tracking (test_acdc_track_config)
    meta = _load(bundle, "metadata.json")
    image, pred = meta["network_data_format"]["inputs"]["image"], meta["network_data_format"]["outputs"]["pred"]
    assert image["num_channels"] == 2 and pred["num_channels"] == 2
    assert image["channel_def"] == {"0": "moving image", "1": "fixed image"}
    assert image["spatial_shape"] == pred["spatial_shape"] == [128, 128]
    assert meta["version"] in meta["changelog"]
    # the shipped weights (a file of the bundle's own, byte-identical to the package's copy: tests/test_bundle_travel.py)
    # hold a state dict of network_def
    weights = root / "models" / "model.pt"
    assert not weights.is_symlink() and weights.read_bytes() == (ROOT / "monai_npc" / "weights" / f"{bundle[4:]}.pt").read_bytes()
    blob = torch.load(weights, map_location="cpu", weights_only=True)
    assert sorted(blob) == ["config", "meta", "model"]
    net = _network_def(bundle)
    assert isinstance(net, NPCNet)
    net.load_state_dict(blob["model"])
    assert meta["weights_sha256"] == blob["meta"]["weights_sha256"] == state_dict_sha256(blob["model"])


@pytest.mark.skipif(not SCHEMA.is_file(), reason="../shared/monai schema not available")
@pytest.mark.parametrize("bundle", NAMES)
def test_verify_metadata(bundle):
    verify_metadata(
        meta_file=str(BUNDLES / bundle / "configs" / "metadata.json"), filepath=str(SCHEMA),
        hash_val=SCHEMA_MD5, hash_type="md5",
    )


@pytest.mark.parametrize("bundle", NAMES)
def test_configs_reproduce_paper_recipe(bundle):
    """Network, loss and schedule of the configs are the paper's per-benchmark values."""
    train, evaluate, infer = (_load(bundle, n) for n in (TRAIN[bundle][0], *CROPS[bundle]))
    net = {k: v for k, v in train["network_def"].items() if k not in ("_target_", "detach_steps")}
    # test-time refinement and the ODE steps are inference options (evaluate and inference agree on
    # them; their defaults were chosen on the validation patients); the rest of the network is shared
    assert evaluate.get("refine_iterations", 0) == infer.get("refine_iterations", 0)
    assert evaluate["num_steps"] == infer["num_steps"] in (4, 10)
    assert net == {k: v for k, v in evaluate["network_def"].items() if k not in ("_target_", "refine_iterations")}
    assert net == {k: v for k, v in infer["network_def"].items() if k not in ("_target_", "refine_iterations")}
    from monai_npc.data.datasets import bundle_defaults

    # the whole-stack configs run the same network, with the steps monai_npc.register gives these weights
    base_fov = bundle_defaults(bundle).get("field_of_view", "image")
    crops = {"num_steps": infer["num_steps"], "refine_iterations": infer.get("refine_iterations", 0), "refine_learning_rate": 0.25,
             "refine_learning_rate_end": None, "refine_grid_stride": 4, "field_of_view": base_fov, "flip_ensemble": 1, "label_model_mix": 0.0}
    # label_sigma and the label prior are not network settings: register reads them from the weights' register settings
    # (test_clinical_input, test_label_prior), which the bundle's weights get through their meta's "bundle"
    stacks = {k: v for k, v in {**crops, **bundle_defaults(bundle).get("register_settings", {})}.items()
              if k not in ("label_sigma", "label_prior", "label_prior_weight")}
    for name in ("evaluate.json", "inference.json"):
        other = _load(bundle, name)
        inference_only = ("_target_", "refine_iterations", "refine_options", "flip_ensemble")
        assert net == {k: v for k, v in other["network_def"].items() if k not in inference_only}, name
        options = other["network_def"].get("refine_options") or {}
        stride, mix, rate = options.get("grid_stride", 4), options.get("label_model_mix", 0.0), options.get("learning_rate", 0.25)
        rate_end = options.get("learning_rate_end")
        fov = (other.get("model_meta") or {}).get("field_of_view", base_fov)
        flips = other.get("flip_ensemble", 1) if "flip_ensemble" in other["network_def"] else 1
        assert {"num_steps": other["num_steps"], "refine_iterations": other.get("refine_iterations", 0), "refine_learning_rate": rate,
                "refine_learning_rate_end": rate_end, "refine_grid_stride": stride, "field_of_view": fov, "flip_ensemble": flips, "label_model_mix": mix} == stacks, name
    assert train["num_steps"] == 10  # the paper's recipe
    expected = dict(ACDC_CONFIG if bundle == "npc_acdc" else CAMUS_CONFIG)
    if bundle == "npc_camus":  # the configs let num_steps split 5/5 over the stages
        expected["stages"] = [{k: v for k, v in s.items() if k != "num_steps"} for s in expected["stages"]]
    for key, value in expected.items():
        assert (train["num_steps"] if key == "num_steps" else net[key]) == value, key
    preset = PRESETS["acdc" if bundle == "npc_acdc" else "camus"]
    loss = train["loss"]
    assert (loss["window"], loss["lambda_reg"], loss["lambda_jac"], loss["lambda_logj"]) == (
        preset.window, preset.lambda_reg, preset.lambda_jac, preset.lambda_logj
    )
    assert train["learning_rate"] == 1e-3 and train["batch_size"] == 50 and train["optimizer"]["_target_"] == "torch.optim.Adam"
    if bundle == "npc_acdc":
        assert (train["epochs"], train["lr_decay"], train["weight_decay"], train["flip_prob"]) == (400, 0.997, 0.0, 0.5)
        assert train["bidirectional"] is True and (train["n_train"], train["n_val"], train["n_test"], train["split_seed"]) == (80, 20, 50, 2023)
        assert evaluate["directions"] == ["ED->ES", "ES->ED"]
    else:
        assert (train["epochs"], train["lr_decay"], train["weight_decay"]) == (300, 0.996, 1e-5)
        assert "flip_prob" not in train and train["bidirectional"] is False
        assert not any("RandPairFlipd" in t["_target_"] for t in train["train"]["preprocessing"]["transforms"])
        assert (train["n_train"], train["n_val"], train["n_test"], train["split_seed"], train["pixdim"]) == (300, 100, 100, 42, 1.0)
    assert evaluate["split"] == "all" and evaluate["dataset_dir"] is None and train["dataset_dir"] is None


# ------------------------------------------------------------------------------------------------
# workflows
# ------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("bundle", NAMES)
def test_check_properties(bundle, tmp_path, phantom_dir):
    common = dict(TINY, output_dir=str(tmp_path), phantom_dir=str(phantom_dir))
    train = _workflow(bundle, TRAIN[bundle][0], "train", ckpt_dir=str(tmp_path / "models"), **common, **PHANTOM[bundle])
    train.initialize()
    assert train.check_properties() == []
    assert train.max_epochs == (400 if bundle == "npc_acdc" else 300)
    assert len(train.train_dataset) > 0 and len(train.val_dataset) > 0
    for config in sorted({"inference.json", "evaluate.json", *CROPS[bundle]}):
        small = {"phantom_patients": 1, **({"phantom_max_slices": 2} if bundle == "npc_acdc" else {})}
        infer = _workflow(bundle, config, "inference", **small, **common)
        infer.initialize()
        assert infer.check_properties() == [], config
        assert isinstance(infer.network_def, NPCNet)


def _ckpt_epoch(path: Path) -> dict:
    return torch.load(path, map_location="cpu", weights_only=True)


def test_acdc_train_resume(tmp_path, phantom_dir):
    """Two epochs in two runs: the second resumes network, optimizer, scheduler, epoch and best metric."""
    out, models = tmp_path / "out", tmp_path / "models"
    common = dict(
        TINY, output_dir=str(out), ckpt_dir=str(models), phantom_dir=str(phantom_dir), batch_size=2,
        max_iterations_per_epoch=2, **PHANTOM["npc_acdc"],
    )
    first = _workflow("npc_acdc", "train_crops.json", "train", epochs=1, **common)
    first.initialize()
    first.run()
    trainer, evaluator = first.trainer, first.evaluator
    assert trainer.state.epoch == 1 and trainer.state.iteration == 2
    assert trainer.state.output["pred"].shape[0] == 4  # bidirectional: both directions of 2 pairs
    terms = trainer.state.output["loss_terms"]
    assert set(terms) == {"loss", "similarity", "regularization", "fold", "logj"}
    assert float(terms["loss"]) == pytest.approx(float(sum(terms[k] for k in ("similarity", "regularization", "fold", "logj"))), abs=1e-5)
    best1 = evaluator.state.metrics["val_mean_dice"]
    assert 0.3 < best1 < 1.0
    assert (models / "model.pt").is_file() and (out / "checkpoints" / "checkpoint_epoch=1.pt").is_file()
    assert list(out.glob("events.out.tfevents.*"))  # TensorBoard

    second = _workflow("npc_acdc", "train_crops.json", "train", epochs=2, resume=True, **common)
    second.initialize()
    second.run()
    trainer2 = second.trainer
    handler = [h for h in second.parser.get_parsed_content("train#handlers") if type(h).__name__ == "TrainCheckpoint"][0]
    assert handler.loaded_from == out / "checkpoints" / "checkpoint_epoch=1.pt"
    assert trainer2.state.epoch == 2 and trainer2.state.iteration == 4
    assert not (out / "checkpoints" / "checkpoint_epoch=1.pt").exists()  # n_saved=1 keeps the last
    ckpt = _ckpt_epoch(out / "checkpoints" / "checkpoint_epoch=2.pt")
    assert set(ckpt) == {"model", "optimizer", "lr_scheduler", "trainer", "best", "random"}
    assert ckpt["trainer"]["iteration"] == 4
    # Adam made 4 steps in total and the exponential decay ran for 2 epochs
    assert all(int(s["step"]) == 4 for s in ckpt["optimizer"]["state"].values())
    assert second.parser.get_parsed_content("optimizer").param_groups[0]["lr"] == pytest.approx(1e-3 * 0.997**2)
    # the best metric survived the resume
    assert ckpt["best"]["best_metric"] >= best1 - 1e-9
    assert ckpt["best"]["best_metric_epoch"] in (1, 2)
    # the best model is a plain state dict of network_def
    state = torch.load(models / "model.pt", map_location="cpu", weights_only=True)
    second.parser.get_parsed_content("network_def").load_state_dict(state)


def test_camus_train_unidirectional(tmp_path, phantom_dir):
    wf = _workflow(
        "npc_camus", "train.json", "train", epochs=1, batch_size=2, max_iterations_per_epoch=1, max_val_pairs=2,
        output_dir=str(tmp_path), ckpt_dir=str(tmp_path / "models"), phantom_dir=str(phantom_dir), **TINY, **PHANTOM["npc_camus"],
    )
    wf.initialize()
    wf.run()
    assert wf.trainer.state.output["pred"].shape == (2, 2, 64, 64)  # ED->ES only
    assert np.isfinite(float(wf.trainer.state.output["loss"]))
    assert 0.0 < wf.evaluator.state.metrics["val_dice_myo"] < 1.0
    assert len(wf.parser.get_parsed_content("network_def").ode.stages) == 2
    assert (tmp_path / "models" / "model.pt").is_file()


def _read_csv(path: Path) -> list:
    with open(path) as f:
        return list(csv.DictReader(f))


def _check_metrics(out: Path, directions) -> dict:
    metrics = json.loads((out / "metrics.json").read_text())
    rows = _read_csv(out / "metrics_per_pair.csv")
    assert metrics["n_pairs"] == len(rows) > 0
    assert metrics["dice_mean"] == pytest.approx(np.mean([float(r["dice_mean"]) for r in rows]), abs=1e-5)
    for key in ("dice_mean", "sdlogj", "ndv", "hd95", "folding_percent", "dice_mean_initial"):
        assert metrics[key] is not None and np.isfinite(metrics[key]), key
    assert 0.0 <= metrics["dice_mean"] <= 1.0 and 0.0 <= metrics["folding_percent"] <= 100.0
    for d in directions:
        tag = d.lower().replace("->", "_")
        subset = [r for r in rows if r["direction"] == d]
        assert metrics[f"n_pairs_{tag}"] == len(subset) > 0
        assert metrics[f"dice_{tag}"] == pytest.approx(np.mean([float(r["dice_mean"]) for r in subset]), abs=1e-5)
    return metrics


def test_acdc_evaluate_cli_default_weights(tmp_path, phantom_dir):
    """``python -m monai.bundle run`` with evaluate_crops.json and the shipped models/model.pt."""
    cmd = [
        sys.executable, "-m", "monai.bundle", "run", "--config_file", "configs/evaluate_crops.json",
        "--output_dir", str(tmp_path), "--phantom_dir", str(phantom_dir), "--phantom_patients", "2", "--phantom_max_slices", "2",
    ]
    env = dict(os.environ, OMP_NUM_THREADS="1")
    proc = subprocess.run(cmd, cwd=BUNDLES / "npc_acdc", env=env, capture_output=True, text=True, timeout=240)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    metrics = _check_metrics(tmp_path, ("ED->ES", "ES->ED"))
    for key in ("dice_ed_es", "dice_es_ed", "dice_rv", "dice_myo", "dice_lv", "epe"):
        assert key in metrics
    assert Path(metrics["checkpoint"]).resolve() == (BUNDLES / "npc_acdc" / "models" / "model.pt").resolve()
    assert "patients101-102" in metrics["dataset_dir"]  # held-out phantom ids, not the training ones


def test_acdc_track_config(tmp_path):
    """track.json out of the box (a phantom cine, run as users run it) and on a cohort CSV: the
    bundle's weights give the numbers of ``monai_npc.track`` with the shipped ``acdc`` model."""
    small = {"phantom_frames": 4, "phantom_size": 64, "phantom_levels": "[0.2,0.55]", "refine_iterations": 0, "figure": False,
             "progress": False}
    cmd = [sys.executable, "-m", "monai.bundle", "run", "--config_file", "configs/track.json", "--output_dir", str(tmp_path / "one")]
    for key, value in small.items():
        cmd += [f"--{key}", str(value)]
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONPATH=str(ROOT))
    proc = subprocess.run(cmd, cwd=BUNDLES / "npc_acdc", env=env, capture_output=True, text=True, timeout=240)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    one = json.loads((tmp_path / "one" / "function.json").read_text())
    cine, label = tmp_path / "one_phantom_cine" / "phantom_4d.nii.gz", tmp_path / "one_phantom_cine" / "phantom_ed_gt.nii.gz"
    assert one["frames"] == 4 and one["reference_frame"] == 0 and (tmp_path / "one" / "labels_4d.nii.gz").is_file()
    import monai_npc

    ref = monai_npc.track(str(cine), str(label), 0, model="acdc", refine_iterations=0, progress=False, threads=1).function
    assert one["function"] == pytest.approx(ref, rel=1e-9)
    assert (ref["ed_frame"], ref["es_frame"]) == (0, 2) and 20.0 < ref["lv_ef"] < 60.0
    (tmp_path / "cohort.csv").write_text(f"cine,label,name\n{cine},{label},p1\n")
    wf = ConfigWorkflow(config_file=_configs("npc_acdc", "track.json"), workflow_type=None, logging_file=False,
                        bundle_root=str(BUNDLES / "npc_acdc"), output_dir=str(tmp_path / "cohort"), cohort_csv=str(tmp_path / "cohort.csv"),
                        refine_iterations=0, figure=False, progress=False)
    wf.initialize()
    wf.run()
    with open(tmp_path / "cohort" / "cohort.csv", newline="") as f:
        (row,) = list(csv.DictReader(f))
    assert row["name"] == "p1" and row["status"] == "ok" and float(row["lv_ef"]) == pytest.approx(ref["lv_ef"], rel=1e-9)
    assert not (tmp_path / "cohort" / "phantom_cine").exists()  # no phantom written for a cohort


def test_camus_evaluate_default_weights(tmp_path, phantom_dir):
    wf = _workflow("npc_camus", "evaluate.json", "inference", output_dir=str(tmp_path), phantom_dir=str(phantom_dir), phantom_patients=1)
    wf.initialize()
    wf.run()
    metrics = _check_metrics(tmp_path, ("ED->ES",))
    assert metrics["n_pairs"] == 2  # 2CH and 4CH of one patient
    assert 0.0 < metrics["dice_myo_ed_es"] < 1.0 and "dice_es_ed" not in metrics
    assert wf.evaluator.state.metrics["dice_myo_ed_es"] == pytest.approx(metrics["dice_myo_ed_es"], abs=1e-6)


@pytest.mark.skipif(not ACDC_SHARED.is_dir(), reason="shared ACDC data not available")
def test_acdc_evaluate_real_ssl4mis_layout(tmp_path):
    """evaluate_crops.json reads the SSL4MIS slice layout via --dataset_dir (4 test-split pairs, tiny net)."""
    tiny = {k.split("#")[1]: v for k, v in TINY.items() if k.startswith("network_def#")}
    net = NPCNet(**tiny, num_steps=2, stages=_load("npc_acdc", "evaluate_crops.json")["stages"])
    torch.save(net.state_dict(), tmp_path / "tiny.pt")
    wf = _workflow(
        "npc_acdc", "evaluate_crops.json", "inference", output_dir=str(tmp_path), dataset_dir=str(ACDC_SHARED), split="test",
        max_pairs=4, ckpt_path=str(tmp_path / "tiny.pt"), **TINY,
    )
    wf.initialize()
    wf.run()
    metrics = _check_metrics(tmp_path, ("ED->ES", "ES->ED"))
    assert metrics["n_pairs"] == 4 and "epe" not in metrics  # real data: no true field
    assert metrics["split"] == "test"


@pytest.mark.parametrize("bundle", NAMES)
def test_inference_outputs(bundle, tmp_path, phantom_dir):
    import nibabel as nib

    from monai_npc.functional.warp import warp_image

    wf = _workflow(bundle, CROPS[bundle][1], "inference", output_dir=str(tmp_path), phantom_dir=str(phantom_dir), phantom_patients=1)
    wf.initialize()
    wf.run()
    panels = sorted(tmp_path.glob("*_panel.png"))
    n = json.loads((tmp_path / "metrics.json").read_text())["n_pairs"]
    assert len(panels) == n > 0 and all(p.stat().st_size > 10_000 for p in panels)
    stem = panels[0].name[: -len("_panel.png")]
    files = {s: tmp_path / f"{stem}_{s}.nii.gz" for s in ("moving", "fixed", "warped", "ddf", "warped_label", "reliability")}
    assert all(f.is_file() for f in files.values())
    arrays = {s: np.asarray(nib.load(str(f)).dataobj) for s, f in files.items()}
    assert arrays["ddf"].shape == (128, 128, 1, 1, 2) and nib.load(str(files["ddf"])).header.get_intent()[0] == "vector"
    assert arrays["warped_label"].dtype == np.uint8 and set(np.unique(arrays["warped_label"])) <= {0, 1, 2, 3}
    rel = arrays["reliability"]
    assert rel.shape == (128, 128) and np.isfinite(rel).all() and rel.min() >= 0
    # the saved field (voxels, channel k along array axis k) reproduces the saved warped image
    ddf = torch.from_numpy(arrays["ddf"][:, :, 0, 0, :]).permute(2, 0, 1)[None]
    moving = torch.from_numpy(arrays["moving"])[None, None]
    rewarped = warp_image(moving, ddf, "bilinear", "border")[0, 0].numpy()
    np.testing.assert_allclose(rewarped, arrays["warped"], atol=1e-5)


@pytest.mark.parametrize("bundle", NAMES)
def test_verify_net_in_out_and_torchscript_export(bundle, tmp_path):
    configs = BUNDLES / bundle / "configs"
    meta, infer = str(configs / "metadata.json"), str(configs / "inference.json")
    verify_net_in_out(net_id="network_def", meta_file=meta, config_file=infer, device="cpu")
    ts = tmp_path / "model.ts"
    ckpt_export(
        net_id="network_def", filepath=str(ts), ckpt_file=str(BUNDLES / bundle / "models" / "model.pt"),
        key_in_ckpt="model", meta_file=meta, config_file=infer,
    )
    scripted = torch.jit.load(str(ts))
    # the refinement optimises with autograd, so it runs in eager mode only: the export is the network
    net = _network_def(bundle, num_steps=_load(bundle, "inference.json")["num_steps"], refine_iterations=0)
    net.load_state_dict(torch.load(BUNDLES / bundle / "models" / "model.pt", map_location="cpu", weights_only=True)["model"])
    image = torch.rand(1, 2, 128, 128)
    with torch.no_grad():
        torch.testing.assert_close(scripted(image), net.eval()(image), atol=1e-5, rtol=1e-4)


def test_multi_gpu_config_torchrun_gloo(tmp_path):
    """multi_gpu_train_crops.json under ``torchrun --nproc_per_node=2`` on CPUs (gloo, DDP, DistributedSampler)."""
    configs = BUNDLES / "npc_acdc" / "configs"
    overrides = dict(
        TINY, epochs=1, batch_size=2, max_iterations_per_epoch=2, output_dir=str(tmp_path / "out"),
        ckpt_dir=str(tmp_path / "models"), phantom_dir=str(tmp_path / "phantoms"), **PHANTOM["npc_acdc"],
    )
    cmd = [
        sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2",
        "-m", "monai.bundle", "run", "--config_file", str([str(configs / n) for n in TRAIN["npc_acdc"]]),
        "--meta_file", str(configs / "metadata.json"), "--logging_file", str(configs / "logging.conf"),
        "--bundle_root", str(BUNDLES / "npc_acdc"),
    ]
    for key, value in overrides.items():
        cmd += [f"--{key}", str(value)]
    env = dict(os.environ, OMP_NUM_THREADS="1", CUDA_VISIBLE_DEVICES="")
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=300)
    log = proc.stdout + proc.stderr
    assert proc.returncode == 0, log[-4000:]
    ckpt = _ckpt_epoch(tmp_path / "out" / "checkpoints" / "checkpoint_epoch=1.pt")
    assert ckpt["trainer"]["iteration"] == 2
    assert not any(k.startswith("module.") for k in ckpt["model"])  # saved unwrapped from DDP
    state = torch.load(tmp_path / "models" / "model.pt", map_location="cpu", weights_only=True)
    assert set(state) == set(ckpt["model"])
    # only rank 0 logs the iterations (the other rank never builds the stats handlers, so writes no TensorBoard file)
    assert log.count("Epoch: 1/1, Iter: 2/2") == 1
    events = sorted(p.name for p in (tmp_path / "out").rglob("events.out.tfevents.*"))
    assert len(events) == 2 and all(p.stat().st_size > 100 for p in (tmp_path / "out").rglob("events.out.tfevents.*")), events


def test_training_arguments_are_checked_before_any_work(tmp_path):
    """``--epochs 0``, ``--learning_rate -1``... fail at once, naming the argument (both bundles, both crop training configs)."""
    from monai_npc.engines import check_training_args

    check_training_args(epochs=3, batch_size=2, val_interval=1, max_iterations_per_epoch=None, learning_rate=1e-3, lr_decay=1.0,
                        label_weight=0.0, flip_prob=0.5, deform_prob=0.0)
    with pytest.raises(ValueError, match=r"--epochs must be a whole number >= 1, got 0; --learning_rate must be a number > 0, "
                                         r"got -1; --flip_prob must be a probability in \[0, 1\], got 2"):
        check_training_args(epochs=0, learning_rate=-1, flip_prob=2)
    with pytest.raises(ValueError, match=r"--batch_size must be a whole number >= 1, got 2.5"):
        check_training_args(batch_size=2.5)
    for bundle in ("npc_acdc", "npc_camus"):
        for name in TRAIN[bundle]:
            first = json.loads((BUNDLES / bundle / "configs" / name).read_text())["initialize"]
            assert any("check_training_args(" in line for line in first), (bundle, name)
    wf = ConfigWorkflow(config_file=_configs("npc_acdc", "train_crops.json"), workflow_type=None, logging_file=False,
                        bundle_root=str(BUNDLES / "npc_acdc"), output_dir=str(tmp_path / "o"), ckpt_dir=str(tmp_path / "m"), epochs=0)
    with pytest.raises(RuntimeError) as err:
        wf.initialize()
    assert "--epochs must be a whole number >= 1, got 0" in str(err.value.__cause__) and not (tmp_path / "o").exists()
