"""Whole-stack GPU training infrastructure on the CPU: the packer, the device batches and their
augmentation, the per-stack 3-D Dice loss, the fixed-budget loop with its log, curve, resume, bf16 refusal and export."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import h5py
import numpy as np
import pytest
import torch

from monai_npc.data.acdc import find_acdc_patients, load_acdc_patient
from monai_npc.data.stack_pack import crop_stack, load_stack_pack, pack_acdc_stacks
from monai_npc.engines.stack_data import DeviceStacks
from monai_npc.engines.stack_distributed import EpochShares
from monai_npc.engines.stack_training import StackTrainingConfig, export_weights, train_stacks, train_step, validate_stacks
from monai_npc.losses import StackDiceLoss, StackRegistrationLoss, WarpedLabelDiceLoss
from monai_npc.losses.stack import volume_error
from monai_npc.networks.nets import NPCNet, SliceContextNPC, ThroughPlaneNPC, load_pretrained
from monai_npc.transforms.stack_augment import RandStackAugment, StackAugmentConfig, minmax_per_slice

ROOT = Path(__file__).resolve().parents[1]
SHARED_ACDC = ROOT.parent / "shared" / "data" / "acdc_ssl4mis"
#: a network small enough for a few CPU steps in a test
TINY = dict(kernel_size=8, stride=4, num_pairs=8, top_k=4, gate_dim=8, hidden_dim=8, num_pe=16, num_steps=2, head_channels=4,
            stages=None)


def _frame(z: int, size: int, scale: float, rng: np.random.Generator):
    rows, cols = np.mgrid[:size, :size].astype(np.float32)
    c = size / 2 + 3
    r = np.hypot(rows - c, cols - c)
    label = np.zeros((z, size, size), np.uint8)
    for k in range(z):
        lv = scale * (9 - k)
        label[k][r < lv + 3] = 2
        label[k][r < lv] = 3
        label[k][np.hypot(rows - c, cols - c + lv + 7) < 0.8 * lv] = 1
    image = np.choose(label, [0.1, 0.8, 0.35, 0.95]).astype(np.float32) + rng.normal(0, 0.02, label.shape).astype(np.float32)
    return np.clip(image, 0, 1), label


def _write_patients(folder: Path, ids=(1, 2, 3, 4), size: int = 40) -> Path:
    rng = np.random.default_rng(0)
    folder.mkdir(parents=True, exist_ok=True)
    for i in ids:
        z = 3 + i % 2
        for frame, scale in ((1, 1.0), (2, 0.7)):
            image, label = _frame(z, size, scale, rng)
            with h5py.File(folder / f"patient{i:03d}_frame{frame:02d}.h5", "w") as f:
                f["image"], f["label"] = image, label
    return folder


@pytest.fixture(scope="module")
def pack_file(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("stacks")
    data = _write_patients(root / "acdc")
    split = root / "split.json"
    split.write_text(json.dumps({"train": ["patient001", "patient002", "patient003"], "val": ["patient004"]}))
    return pack_acdc_stacks(data, root / "pack.npz", split, size=32)


def _config(pack_file: Path, out: Path, **kw) -> StackTrainingConfig:
    base = dict(pack=str(pack_file), out_dir=str(out), minutes=1.0, device="cpu", stacks_per_batch=2, val_every=1, save_every=1,
                timing_steps=1, network=dict(TINY), learning_rate=5e-3)
    return StackTrainingConfig(**{**base, **kw})


def test_pack_holds_uint8_windows_split_and_offsets(pack_file, tmp_path):
    pack = load_stack_pack(pack_file)
    assert pack.size == 32 and pack.ed_image.dtype == np.uint8 and pack.es_label.dtype == np.uint8
    assert pack.patients == ("patient001", "patient002", "patient003", "patient004")
    assert pack.split == ("train", "train", "train", "val") and pack.indices("val") == [3]
    assert list(np.diff(pack.offsets)) == [4, 3, 4, 3] and pack.ed_image.shape == (14, 32, 32)
    assert set(np.unique(pack.ed_label)) == {0, 1, 2, 3} and pack.ed_image.max() > 200  # labels kept, images scaled to 255
    assert pack.meta["centre"] == "label_union" and pack.meta["size"] == 32
    np.testing.assert_array_equal(crop_stack(np.ones((1, 4, 4)), (0, 0), 4)[0, :2, :2], 0)  # zero outside the image
    with pytest.raises(ValueError, match="patient099"):
        pack_acdc_stacks(pack_file.parent / "acdc", tmp_path / "x.npz", patients=["patient099"])
    (tmp_path / "bad.npz").write_bytes(b"not a pack")
    with pytest.raises(ValueError, match="bad.npz"):
        load_stack_pack(tmp_path / "bad.npz")


@pytest.mark.skipif(not SHARED_ACDC.is_dir(), reason="needs ../shared/data/acdc_ssl4mis")
def test_pack_two_real_patients_in_the_label_free_window(tmp_path):
    sys.path.insert(0, str(ROOT / "examples"))
    from train_stacks_gpu import main

    out = tmp_path / "real.npz"
    assert main(["pack", "--data-dir", str(SHARED_ACDC), "--out", str(out), "--patients", "patient003,patient010"]) == 0
    pack = load_stack_pack(out)
    assert pack.split == ("train", "val") and pack.meta["centre"] == "motion" and pack.size == 128
    found = {p.name: p for p in find_acdc_patients(SHARED_ACDC)}
    for p, name in enumerate(pack.patients):  # the label-free window holds (nearly) all of the heart
        source = load_acdc_patient(found[name])
        assert np.diff(pack.offsets)[p] == source["ed_label"].shape[0]
        for phase in ("ed", "es"):
            kept = int((getattr(pack, f"{phase}_label")[pack.slices(p)] > 0).sum())
            assert kept >= 0.95 * int((source[f"{phase}_label"] > 0).sum()) > 0, (name, phase)


def test_stack_dice_is_one_3d_dice_per_stack():
    label = torch.zeros(4, 1, 16, 16)
    label[:, :, 4:10, 4:10] = 3
    ddf = torch.zeros(4, 2, 16, 16)
    group = torch.tensor([0, 0, 1, 1])
    loss = StackDiceLoss((3,), smooth=0.0)
    assert float(loss(label, label, ddf, group, 2)) == pytest.approx(0.0, abs=1e-6)
    other = label.clone()
    other[2:] = 0
    other[2:, :, 10:14, 10:14] = 3  # stack 1 disjoint: Dice 0; stack 0 perfect: the mean is 0.5
    assert float(loss(label, other, ddf, group, 2)) == pytest.approx(0.5, abs=1e-6)
    one = WarpedLabelDiceLoss((3,), smooth=1.0, batch=True)(label[:2], other[:2], ddf[:2])
    assert float(StackDiceLoss((3,), smooth=1.0)(label[:2], other[:2], ddf[:2], group[:2])) == pytest.approx(float(one), abs=1e-6)


def test_volume_error_is_the_symmetric_relative_error_of_present_structures():
    warped = torch.tensor([[110.0, 0.0, 50.0]])
    fixed = torch.tensor([[90.0, 0.0, 0.0]])  # structure 1 absent from both: no term; structure 2 only warped: 2 at most
    expected = (20 / (100 + 1) + 50 / (25 + 1)) / 2
    assert float(volume_error(warped, fixed)) == pytest.approx(expected, rel=1e-6)
    assert float(volume_error(torch.zeros(1, 3), torch.zeros(1, 3))) == 0.0


def test_volume_term_shrinks_a_warped_label_towards_the_fixed_volume():
    """Gradient steps on the volume term alone pull a too-large warped square's area to the fixed one's."""
    moving = torch.zeros(1, 1, 24, 24)
    moving[..., 4:20, 4:20] = 3  # 256 voxels
    fixed = torch.zeros(1, 1, 24, 24)
    fixed[..., 6:18, 6:18] = 3  # 144 voxels
    rows, cols = torch.meshgrid(torch.arange(24.0), torch.arange(24.0), indexing="ij")
    outward = torch.stack([rows - 11.5, cols - 11.5])[None]  # sampling further out shrinks the warped square
    scale = torch.zeros(1, requires_grad=True)
    loss = StackRegistrationLoss("acdc", label_weight=0.0, volume_weight=1.0)
    group = torch.zeros(1, dtype=torch.int64)
    opt = torch.optim.SGD([scale], lr=0.05)
    first = None
    for _ in range(60):
        terms = loss(moving.clone(), moving.clone(), moving, fixed, scale * outward, group, 1)
        first = float(terms["volume"].detach()) if first is None else first
        opt.zero_grad()
        terms["volume"].backward()
        opt.step()
    assert first == pytest.approx(112 / (200 + 1), rel=1e-3)
    assert float(terms["volume"]) < 0.2 * first and 0.1 < float(scale.detach()) < 0.5  # 16 / (1 + s) = 12: s = 1/3
    assert float(terms["label"]) == 0.0


def test_validation_reports_the_ef_the_ed_to_es_warp_gives(pack_file):
    """A network that does not move: the EF read from its warp is 0, so the error is minus the expert's EF."""
    pack = load_stack_pack(pack_file)
    data = DeviceStacks(pack, pack.indices("val"), torch.device("cpu"))

    class Still(torch.nn.Module):
        def forward(self, pair):
            return pair.new_zeros(pair.shape[0], 2, *pair.shape[2:])

    val = validate_stacks(Still(), data)
    batch = data.batch([0])
    first = batch.group == 0  # the batch's first stack: the ED -> ES registration
    ed, es = batch.moving_label[first], batch.fixed_label[first]
    for name, value in (("lv", 3), ("rv", 1)):
        v_ed, v_es = float((ed == value).sum()), float((es == value).sum())
        assert v_ed > v_es > 0
        assert val[f"val_ef_error_{name}"] == pytest.approx(-100 * (v_ed - v_es) / v_ed, abs=1e-4)
        assert val[f"val_ef_mae_{name}"] == pytest.approx(abs(val[f"val_ef_error_{name}"]), abs=1e-6)
    assert val["val_dice"] == pytest.approx(val["val_dice_initial"], abs=1e-6)


def test_augmentation_is_shared_by_a_stack_and_its_two_frames():
    g = torch.Generator().manual_seed(3)
    image = torch.rand(5, 1, 12, 12)
    label = torch.randint(0, 4, (5, 1, 12, 12)).float()
    group = torch.tensor([0, 0, 0, 1, 1])
    flip = RandStackAugment(StackAugmentConfig(flip_prob=1.0, rotate_deg=0.0, shift=0.0, intensity_prob=0.0, invert_prob=0.0), g)
    ed, es, edl, esl = flip.augment(image, image, label, label, group, 2)
    torch.testing.assert_close(edl, label.flip(-1).flip(-2))  # both axes flipped, labels stay label values
    torch.testing.assert_close(ed, es)
    full = StackAugmentConfig(intensity_prob=1.0, invert_prob=0.0)
    a = RandStackAugment(full, torch.Generator().manual_seed(1)).augment(image, image, label, label, group, 2)
    b = RandStackAugment(full, torch.Generator().manual_seed(1)).augment(image, image, label, label, group, 2)
    torch.testing.assert_close(a[0], b[0])  # one seed, one stream
    assert torch.isfinite(a[0]).all() and a[0].amin() >= 0 and a[0].amax() <= 1
    assert set(torch.unique(a[2]).tolist()) <= {0.0, 1.0, 2.0, 3.0}
    inv = RandStackAugment(StackAugmentConfig(flip_prob=0, rotate_deg=0, shift=0, intensity_prob=0, invert_prob=1.0), g)
    ed, es, _, _ = inv.augment(image, image, label, label, group, 2)
    changed = [(~torch.isclose(x, minmax_per_slice(image), atol=1e-4)).flatten(1).any(1) for x in (ed, es)]
    assert bool((changed[0] ^ changed[1]).all())  # exactly one frame of every stack inverted


def test_spike_stripes_one_frequency_per_slice_in_both_frames_each_frame_its_phase():
    aug = RandStackAugment(StackAugmentConfig(intensity_prob=1.0, spike_amplitude=(1.5, 1.5)), torch.Generator().manual_seed(2))
    n = 32
    flat = torch.zeros(4, 2, n, n)  # (slices, frames, H, W); two stacks of two slices
    group = torch.tensor([0, 0, 1, 1])
    out = aug._spike(flat, group, 2)
    assert float(out.abs().amax()) == pytest.approx(1.5, abs=0.05)  # the amplitude asked for (relative to [0, 1])
    peak = torch.fft.fft2(out).abs().flatten(2).argmax(-1)  # (slices, frames): each image's stripe frequency
    ky, kx = peak // n, peak % n
    peaks = torch.minimum(ky * n + kx, (-ky) % n * n + (-kx) % n)  # f and -f are one real stripe pattern
    assert bool((peaks[:, 0] == peaks[:, 1]).all())  # one frequency in both frames of a slice
    assert len(set(peaks[:, 0].tolist())) > 1  # but the slices differ, as the suite's spike per slice
    assert not torch.allclose(out[0, 0], out[0, 1], atol=0.1)  # and each frame has its own phase
    skip = RandStackAugment(StackAugmentConfig(intensity_prob=0.0), torch.Generator().manual_seed(2))
    assert torch.equal(skip._spike(flat, group, 2), flat)  # a stack not drawn stays as it was


def test_loss_decreases_on_a_fixed_batch(pack_file):
    torch.manual_seed(0)
    data = DeviceStacks(load_stack_pack(pack_file), [0, 1], torch.device("cpu"))
    batch = data.batch([0, 1])
    assert batch.moving.shape == (14, 1, 32, 32) and batch.n_groups == 4 and batch.group.tolist() == [0] * 4 + [1] * 3 + [2] * 4 + [3] * 3
    net = NPCNet(**TINY)
    opt = torch.optim.AdamW(net.parameters(), lr=1e-2)
    loss = StackRegistrationLoss("acdc", label_weight=1.0)
    history = [float(train_step(net, opt, loss, batch)["loss"]) for _ in range(10)]
    assert np.isfinite(history).all()
    assert history[-1] < history[0] - 0.02, history


def test_rank_shares_average_to_the_gradient_of_the_whole_step(pack_file):
    """What DDP averages over 2 ranks is the whole step's gradient: stacks of unequal slice counts (4 + 4 and 3) and
    a step of one stack (rank 1 trains on a weight-0 stand-in); the Dice and volume terms scaled by stack shares."""
    torch.manual_seed(0)
    data = DeviceStacks(load_stack_pack(pack_file), [0, 1, 2], torch.device("cpu"))
    net, loss = NPCNet(**TINY), StackRegistrationLoss("acdc", label_weight=1.0, volume_weight=0.5)
    still = torch.optim.SGD(net.parameters(), lr=0.0)  # gradients only

    def gradients(batch, scale=None):
        terms = train_step(net, still, loss, batch, scale=scale)
        return terms, [p.grad.clone() for p in net.parameters()]

    steps = [[0, 1, 2], [1]]
    shares = [EpochShares(steps, data.counts, rank, 2, torch.device("cpu")) for rank in (0, 1)]
    assert [s.shares[1].image_scale for s in shares] == [2.0, 0.0] and shares[0].shares[0].stacks == (0, 2)
    for step, stacks in enumerate(steps):
        whole = data.batch(stacks)
        want_terms, want = gradients(whole)
        parts = [gradients(*s.take(step, whole)) for s in shares]
        assert [p[0]["loss"].shape for p in parts] == [torch.Size([])] * 2
        # grad_norm: the step's total gradient norm (each share's own here; under DDP every rank's is the averaged one)
        assert float(want_terms["grad_norm"]) == pytest.approx(float(torch.cat([g.flatten() for g in want]).norm()), rel=1e-5)
        for k in (k for k in want_terms if k != "grad_norm"):
            assert float(sum(p[0][k] for p in parts) / 2) == pytest.approx(float(want_terms[k]), abs=1e-6), (step, k)
        for i, g in enumerate(want):
            torch.testing.assert_close((parts[0][1][i] + parts[1][1][i]) / 2, g, rtol=1e-4, atol=1e-7)


def test_grad_clip_bounds_the_step_and_leaves_small_gradients_alone(pack_file):
    data = DeviceStacks(load_stack_pack(pack_file), [0], torch.device("cpu"))
    loss = StackRegistrationLoss("acdc", label_weight=1.0)
    grads = {}
    for clip in (None, 1e-3, 1e6):
        torch.manual_seed(0)
        net = NPCNet(**TINY)
        terms = train_step(net, torch.optim.SGD(net.parameters(), lr=0.0), loss, data.batch([0]), grad_clip=clip)
        grads[clip] = (float(terms["grad_norm"]), float(torch.cat([p.grad.flatten() for p in net.parameters()]).norm()))
    assert grads[None][0] == pytest.approx(grads[None][1], rel=1e-5) and grads[None][0] > 1e-3  # measured, not clipped
    assert grads[1e-3][0] == pytest.approx(grads[None][0], rel=1e-5) and grads[1e-3][1] == pytest.approx(1e-3, rel=1e-3)
    assert grads[1e6] == grads[None]  # a bound above the norm changes nothing
    with pytest.raises(ValueError, match="grad_clip"):
        StackTrainingConfig(pack="-", out_dir="-", grad_clip=0.0)


def test_augment_settings_are_checked_by_name():
    config = StackTrainingConfig(pack="-", out_dir="-", augment={"intensity_prob": 0.0, "rotate_deg": 0.0})
    assert config.augment.intensity_prob == 0.0 and config.augment.rotate_deg == 0.0 and config.augment.flip_prob == 0.5
    with pytest.raises(ValueError, match=r"augment: unknown settings \['rotation'\]"):
        StackTrainingConfig(pack="-", out_dir="-", augment={"rotation": 5})


def test_bf16_is_refused_on_the_cpu(pack_file, tmp_path):
    with pytest.raises(ValueError, match="bf16=True needs a CUDA device"):
        train_stacks(_config(pack_file, tmp_path / "bf16", bf16=True), echo=False)
    with pytest.raises(ValueError, match="minutes"):
        _config(pack_file, tmp_path, minutes=0)


@pytest.mark.parametrize("network", ["npc2d", "through_plane", "slice_context"])
def test_a_bf16_autocast_step_and_validation_run_for_every_network(pack_file, network):
    # what a GPU call runs with --bf16 (the CPU's autocast casts the same kinds of ops): every term in float32, finite
    data = DeviceStacks(load_stack_pack(pack_file), [0, 1], torch.device("cpu"))
    net = {"npc2d": lambda: NPCNet(**TINY), "through_plane": lambda: ThroughPlaneNPC(**TINY),
           "slice_context": lambda: SliceContextNPC(context_channels=4, **TINY)}[network]()
    loss = StackRegistrationLoss(label_weight=3.0, volume_weight=1.0)
    terms = train_step(net, torch.optim.AdamW(net.parameters()), loss, data.batch([0, 1]), torch.bfloat16, grad_clip=1.0)
    assert set(terms) >= {"loss", "similarity", "label", "volume", "grad_norm"}
    for key, value in terms.items():
        assert value.dtype == torch.float32 and torch.isfinite(value), key
    assert float(terms["grad_norm"]) > 0
    scores = validate_stacks(net, data, amp_dtype=torch.bfloat16)
    assert 0.0 < scores["val_dice"] <= 1.0 and np.isfinite(scores["val_ef_error_lv"])


def test_budget_run_writes_log_curve_and_resumes_where_it_stopped(pack_file, tmp_path):
    one = train_stacks(_config(pack_file, tmp_path / "a", max_epochs=1), echo=False)
    assert one["epoch"] == 1 and one["step"] == 2 and one["stopped"] == "max_epochs"
    names = {Path(f).name for f in one["files"]}
    assert names == {"checkpoint.pt", "train_log.jsonl", "train.log", "curve.png", "best.pt"}
    assert (tmp_path / "a" / "curve.png").read_bytes()[:4] == b"\x89PNG"
    record = json.loads((tmp_path / "a" / "train_log.jsonl").read_text().splitlines()[0])
    for key in ("loss", "similarity", "label", "fold", "val_dice", "seconds", "network_seconds", "epoch_over_network"):
        assert np.isfinite(record[key]), key
    assert record["gpu_util"] == "n/a" and "network step" in (tmp_path / "a" / "train.log").read_text()
    with pytest.raises(FileExistsError, match="resume"):
        train_stacks(_config(pack_file, tmp_path / "a", max_epochs=2), echo=False)
    ckpt = str(tmp_path / "a" / "checkpoint.pt")
    two = train_stacks(_config(pack_file, tmp_path / "a", max_epochs=2, resume=ckpt), echo=False)
    assert two["epoch"] == 2 and two["step"] == 4
    state = torch.load(ckpt, weights_only=True)
    assert [r["epoch"] for r in state["curve"]] == [1, 2] and state["optimizer"]["state"][0]["step"] == 4
    straight = train_stacks(_config(pack_file, tmp_path / "b", max_epochs=2), echo=False)  # the same two epochs in one run
    other = torch.load(tmp_path / "b" / "checkpoint.pt", weights_only=True)
    for k, v in state["model"].items():
        torch.testing.assert_close(v, other["model"][k], msg=f"resumed run differs at {k}")
    assert straight["epoch"] == 2
    data = DeviceStacks(load_stack_pack(pack_file), [3], torch.device("cpu"))
    exported = export_weights(ckpt, tmp_path / "weights.pt", {"note": "test"})
    net = load_pretrained(exported)
    assert net.meta["note"] == "test" and net.meta["training"]["epoch"] == 2
    assert validate_stacks(net, data)["val_dice"] == pytest.approx(state["curve"][-1]["val_dice"], abs=1e-5)


def test_a_run_from_weights_validates_them_first(pack_file, tmp_path):
    """From ``init`` weights the curve starts at their own validation (epoch 0), and best.pt holds them until an
    epoch beats them."""
    train_stacks(_config(pack_file, tmp_path / "a", max_epochs=1), echo=False)
    start = export_weights(str(tmp_path / "a" / "checkpoint.pt"), tmp_path / "start.pt")
    run = train_stacks(_config(pack_file, tmp_path / "b", max_epochs=1, init=str(start), learning_rate=0.5), echo=False)
    curve = torch.load(tmp_path / "b" / "checkpoint.pt", weights_only=True)["curve"]
    assert [r["epoch"] for r in curve] == [0, 1]
    data = DeviceStacks(load_stack_pack(pack_file), [3], torch.device("cpu"))
    assert curve[0]["val_dice"] == pytest.approx(validate_stacks(load_pretrained(start), data)["val_dice"], abs=1e-6)
    assert run["best_val_dice"] == pytest.approx(max(r["val_dice"] for r in curve), abs=1e-9)
    best = load_pretrained(tmp_path / "b" / "best.pt")
    assert validate_stacks(best, data)["val_dice"] == pytest.approx(run["best_val_dice"], abs=1e-5)
    assert "epoch=0" in (tmp_path / "b" / "train.log").read_text()


def test_the_wall_time_budget_stops_the_run_and_saves(pack_file, tmp_path):
    start = time.perf_counter()
    out = train_stacks(_config(pack_file, tmp_path / "budget", minutes=0.12, val_every=1000, save_every=1000), echo=False)
    seconds = time.perf_counter() - start
    # it checks the budget before every step: past it by at most about a step and the last save (a step measured at
    # the start, under whatever load the machine has)
    assert out["stopped"] == "budget" and out["epoch"] >= 1 and seconds < 0.12 * 60 + max(1.5, 2 * out["step_seconds"]), (out, seconds)
    state = torch.load(tmp_path / "budget" / "checkpoint.pt", weights_only=True)
    assert state["epoch"] == out["epoch"] and "best.pt" not in {Path(f).name for f in out["files"]}  # never validated


def test_training_imports_need_no_ignite_or_simpleitk():
    """The GPU machine has torch, numpy, matplotlib, h5py but no ignite / SimpleITK / ITK / nibabel / fire / termcolor:
    the training path and the stack benchmark must not need them (nor tqdm)."""
    code = (
        "import sys, importlib.abc\n"
        "class Block(importlib.abc.MetaPathFinder):\n"
        "    def find_spec(self, name, path, target=None):\n"
        "        if name.split('.')[0] in {'ignite', 'SimpleITK', 'itk', 'nibabel', 'pydicom', 'tensorboard', 'fire', 'termcolor', 'tqdm'}:\n"
        "            raise ImportError('blocked ' + name)\n"
        "sys.meta_path.insert(0, Block())\n"
        "import monai_npc.engines.stack_training, monai_npc.data.stack_pack\n"
        "import monai_npc.apps.registration.models  # benchmarks/bench_stack_gpu.py, in the same device call\n"
        "print(sorted(m for m in ('ignite', 'SimpleITK', 'itk') if m in sys.modules))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip() == "[]"


def test_the_device_call_script_parses_and_names_what_is_missing():
    """examples/gpu_call.sh: valid bash; ``device`` without ``OUT`` stops before installing anything, naming OUT;
    an unknown step prints the usage."""
    script = ROOT / "examples" / "gpu_call.sh"
    assert subprocess.run(["bash", "-n", str(script)], capture_output=True).returncode == 0
    env = {k: v for k, v in os.environ.items() if k != "OUT"}
    out = subprocess.run(["bash", str(script), "device"], capture_output=True, text=True, env=env, timeout=60)
    assert out.returncode != 0 and "OUT" in out.stderr
    out = subprocess.run(["bash", str(script), "train"], capture_output=True, text=True, timeout=60)
    assert out.returncode == 2 and "usage" in out.stderr
