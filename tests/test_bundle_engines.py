"""The bundle engines and handlers with numbers: RegistrationTrainer / RegistrationEvaluator,
PairMeanMetric, the metrics summary and writers, checkpoints with resume, data helpers."""

from __future__ import annotations

import copy
import json
import math

import numpy as np
import pytest
import torch
from torch import nn

pytest.importorskip("ignite")

from monai.data import DataLoader  # noqa: E402

from monai_npc.data.pairs import make_dataset  # noqa: E402
from monai_npc.data.phantoms import cardiac_pair  # noqa: E402
from monai_npc.engines import RegistrationEvaluator, RegistrationTrainer, as_bool, init_weights, load_pairs, prepare_dataset_dir  # noqa: E402
from monai_npc.functional.warp import warp_image  # noqa: E402
from monai_npc.handlers import (  # noqa: E402
    PairMeanMetric,
    RegistrationMetricsWriter,
    latest_checkpoint,
    pair_name,
    summarize_pair_metrics,
)
from monai_npc.losses import RegistrationLoss, WarpedLabelDiceLoss, bidirectional_loss  # noqa: E402
from monai_npc.metrics.registration import dice_per_structure  # noqa: E402
from monai_npc.networks.nets import NPCNet  # noqa: E402

TINY = dict(num_pairs=8, top_k=4, gate_dim=16, hidden_dim=16, num_pe=16, head_channels=4, num_steps=2)

pytestmark = pytest.mark.usefixtures("one_thread")


def _pairs(n: int = 3, size: int = 48):
    """``n`` phantom slices, both directions each (ES->ED uses the moving/fixed swap, no true field)."""
    items = []
    for seed in range(n):
        d = cardiac_pair(size=size, seed=seed)
        common = dict(patient=f"p{seed}", slice=seed)
        items.append(dict(common, direction="ED->ES", moving=d["moving"][None], fixed=d["fixed"][None],
                          moving_label=d["moving_label"][None], fixed_label=d["fixed_label"][None], ddf=d["ddf"]))
    return items


class _FixedField(nn.Module):
    """A 'network' returning given displacements in loader order."""

    def __init__(self, ddf: torch.Tensor) -> None:
        super().__init__()
        self.register_buffer("ddf", ddf)
        self.calls = 0

    def forward(self, image: torch.Tensor) -> torch.Tensor:
        start = self.calls
        self.calls += image.shape[0]
        return self.ddf[start : start + image.shape[0]]


def _evaluator(network, pairs, batch_size=2, **kwargs):
    loader = DataLoader(make_dataset(pairs), batch_size=batch_size, shuffle=False)
    metric = {"dice": PairMeanMetric("dice_mean")}
    extra = {"epe": PairMeanMetric("epe"), "dice_es_ed": PairMeanMetric("dice_mean", direction="ES->ED")}
    return RegistrationEvaluator(
        device="cpu", val_data_loader=loader, network=network, key_val_metric=metric, additional_metrics=extra,
        label_names=["rv", "myo", "lv"], **kwargs,
    )


def test_evaluator_true_and_zero_fields():
    pairs = _pairs(3)
    true = torch.stack([torch.as_tensor(p["ddf"]) for p in pairs])
    ev = _evaluator(_FixedField(true), pairs)
    ev.run()
    # with the true field the endpoint error vanishes and Dice is that of the truth-warped labels
    assert ev.state.metrics["epe"] == pytest.approx(0.0, abs=1e-6)
    ml = torch.stack([torch.as_tensor(p["moving_label"]).float() for p in pairs])
    fl = torch.stack([torch.as_tensor(p["fixed_label"]).float() for p in pairs])
    expected = torch.nanmean(dice_per_structure(warp_image(ml, true, "nearest", "border"), fl), 1).mean()
    assert ev.state.metrics["dice"] == pytest.approx(float(expected), abs=1e-6)
    assert ev.state.metrics["dice"] > 0.85
    assert math.isnan(ev.state.metrics["dice_es_ed"])  # no ES->ED pairs here
    out = ev.state.output
    assert out["pred"].shape == (1, 2, 48, 48) and out["warped_label"].shape == (1, 1, 48, 48)
    assert out["meta"]["patient"] == ["p2"] and out["meta"]["direction"] == ["ED->ES"]

    zero = _evaluator(_FixedField(torch.zeros_like(true)), pairs)
    zero.run()
    initial = torch.nanmean(dice_per_structure(ml, fl), 1).mean()
    assert zero.state.metrics["dice"] == pytest.approx(float(initial), abs=1e-6)
    assert zero.state.metrics["dice"] < expected - 0.1
    epe0 = zero.state.metrics["epe"]
    assert epe0 > 0.5  # the phantoms move by more than half a voxel on average


def test_evaluator_reliability_needs_register():
    pairs = _pairs(1)
    ev = _evaluator(NPCNet(**TINY), pairs, return_reliability=True)
    ev.run()
    rel = ev.state.output["reliability"]
    assert rel.shape == (1, 1, 48, 48) and bool((rel >= 0).all())
    with pytest.raises(TypeError, match="register"):
        _evaluator(_FixedField(torch.zeros(1, 2, 48, 48)), pairs, return_reliability=True).run()


@pytest.mark.parametrize("bidirectional", [True, False])
def test_trainer_iteration_matches_manual_step(bidirectional):
    """One RegistrationTrainer iteration = the bidirectional (or one-way) loss + one Adam step."""
    pairs = _pairs(2)
    net = NPCNet(**TINY)
    ref = copy.deepcopy(net)
    loss = RegistrationLoss("acdc", window=9)
    opt = torch.optim.Adam(net.parameters(), lr=1e-2)
    loader = DataLoader(make_dataset(pairs), batch_size=2, shuffle=False)
    trainer = RegistrationTrainer(
        device="cpu", max_epochs=1, train_data_loader=loader, network=net, optimizer=opt, loss_function=loss,
        bidirectional=bidirectional,
    )
    trainer.run()
    moving = torch.stack([torch.as_tensor(p["moving"]) for p in pairs]).float()
    fixed = torch.stack([torch.as_tensor(p["fixed"]) for p in pairs]).float()
    ref_opt = torch.optim.Adam(ref.parameters(), lr=1e-2)
    if bidirectional:
        terms = bidirectional_loss(ref, loss, moving, fixed)
    else:
        ddf = ref(torch.cat([moving, fixed], 1))
        terms = loss.components(warp_image(moving, ddf, "bilinear", "border"), fixed, ddf)
    terms["loss"].backward()
    ref_opt.step()
    assert float(trainer.state.output["loss"]) == pytest.approx(float(terms["loss"].detach()), abs=1e-6)
    assert trainer.state.output["pred"].shape[0] == (4 if bidirectional else 2)
    for (name, a), b in zip(net.state_dict().items(), ref.state_dict().values()):
        torch.testing.assert_close(a, b, atol=1e-6, rtol=1e-5, msg=name)


def test_summary_numbers_and_writer(tmp_path):
    rows = [
        {"patient": "a", "slice": 1, "direction": "ED->ES", "dice_rv": 0.8, "dice_mean": 0.7, "ndv": 0.0, "seconds": 0.1},
        {"patient": "a", "slice": 1, "direction": "ES->ED", "dice_rv": float("nan"), "dice_mean": 0.9, "ndv": 2.0, "seconds": 0.3},
        {"patient": "b", "slice": 2, "direction": "ED->ES", "dice_rv": 0.6, "dice_mean": 0.5, "ndv": 4.0, "seconds": 0.2},
    ]
    s = summarize_pair_metrics(rows, ["rv"])
    assert s["n_pairs"] == 3 and s["dice_mean"] == pytest.approx(0.7) and s["dice_rv"] == pytest.approx(0.7)
    assert s["dice_ed_es"] == pytest.approx(0.6) and s["dice_es_ed"] == pytest.approx(0.9)
    assert s["n_pairs_ed_es"] == 2 and s["dice_rv_ed_es"] == pytest.approx(0.7) and math.isnan(s["dice_rv_es_ed"])
    assert s["std"]["dice_mean"] == pytest.approx(0.2) and s["seconds_per_pair"] == pytest.approx(0.2)
    assert s["by_direction"]["ES->ED"]["ndv"] == pytest.approx(2.0)
    with pytest.raises(ValueError, match="no pairs"):
        summarize_pair_metrics([])

    # the writer on a real evaluation: strict JSON (NaN -> null) and one CSV row per pair
    pairs = _pairs(2)
    ev = _evaluator(_FixedField(torch.zeros(2, 2, 48, 48)), pairs)
    writer = RegistrationMetricsWriter(tmp_path, label_names=["rv", "myo", "lv"], extra={"checkpoint": "x.pt"})
    writer.attach(ev)
    ev.run()
    text = (tmp_path / "metrics.json").read_text()
    metrics = json.loads(text)
    assert "NaN" not in text and metrics["checkpoint"] == "x.pt" and metrics["n_pairs"] == 2
    assert metrics["dice_mean"] == pytest.approx(metrics["dice_mean_initial"], abs=1e-6)
    lines = (tmp_path / "metrics_per_pair.csv").read_text().strip().splitlines()
    assert len(lines) == 3 and lines[0].startswith("patient,slice,direction,dice_rv")


def test_pair_name():
    meta = {"patient": ["patient001", "patient002"], "slice": torch.tensor([3, 4]), "direction": ["ED->ES", "ES->ED"]}
    assert pair_name(meta, 1, 0) == "patient002_slice04_ES-to-ED"
    assert pair_name({"patient": ["patient0001"], "view": ["2CH"], "direction": ["ED->ES"]}, 0, 0) == "patient0001_2CH_ED-to-ES"
    assert pair_name({}, 0, 7) == "pair00007"


def test_latest_checkpoint_and_as_bool(tmp_path):
    assert latest_checkpoint(tmp_path / "missing") is None
    for epoch in (2, 9, 10):
        (tmp_path / f"checkpoint_epoch={epoch}.pt").write_bytes(b"")
    (tmp_path / "model.pt").write_bytes(b"")
    assert latest_checkpoint(tmp_path).name == "checkpoint_epoch=10.pt"  # numeric, not lexicographic
    assert as_bool("true") is True and as_bool("False") is False and as_bool(1) is True and as_bool(None) is False
    with pytest.raises(ValueError, match="resume"):
        as_bool("maybe", "resume")


def test_dataset_dir_helpers(tmp_path):
    with pytest.raises(FileNotFoundError, match="dataset_dir"):
        prepare_dataset_dir(tmp_path / "nope", "acdc", tmp_path)
    with pytest.raises(ValueError, match="dataset must be"):
        prepare_dataset_dir(None, "oasis", tmp_path)
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises((FileNotFoundError, ValueError), match="dataset_dir="):
        load_pairs("acdc", empty, split="all")
    # phantom fallback: written once, then reused
    root = prepare_dataset_dir(None, "acdc", tmp_path / "cache", patients=2, first_id=5, max_slices=2)
    assert root.name == "acdc_seed0_patients5-6_slices2" and (root / "patient005").is_dir()
    stamp = (root / ".complete").stat().st_mtime_ns
    assert prepare_dataset_dir("", "acdc", tmp_path / "cache", patients=2, first_id=5, max_slices=2) == root
    assert (root / ".complete").stat().st_mtime_ns == stamp
    pairs = load_pairs("acdc", root, split="all", max_pairs=1, roi_size=64)
    assert len(pairs) == 1 and pairs[0]["moving"].shape == (1, 64, 64) and "ddf" in pairs[0]


def test_init_weights_bare_checkpoint_and_ddp_like(tmp_path):
    """init_weights loads a bundle state dict or a training checkpoint, unwrapped, and refuses other shapes."""
    torch.manual_seed(0)
    source, target = nn.Linear(3, 2), nn.Linear(3, 2)
    assert not torch.equal(source.weight, target.weight)
    torch.save(source.state_dict(), tmp_path / "model.pt")
    torch.save({"model": source.state_dict(), "optimizer": {}}, tmp_path / "checkpoint_epoch=3.pt")

    assert init_weights(target, None) is target and not torch.equal(source.weight, target.weight)
    assert init_weights(target, "") is target and not torch.equal(source.weight, target.weight)
    init_weights(target, tmp_path / "model.pt")
    assert torch.equal(source.weight, target.weight) and torch.equal(source.bias, target.bias)

    wrapped = nn.DataParallel(nn.Linear(3, 2))
    init_weights(wrapped, str(tmp_path / "checkpoint_epoch=3.pt"))
    assert torch.equal(wrapped.module.weight, source.weight)

    with pytest.raises(RuntimeError, match="model.pt does not fit"):
        init_weights(nn.Linear(4, 2), tmp_path / "model.pt")
    with pytest.raises(FileNotFoundError, match="missing.pt"):
        init_weights(target, tmp_path / "missing.pt")


def test_warped_label_dice_loss_values_and_gradient():
    """0 for a perfect overlap, 1 for none; the true shift beats no shift and gives ddf a gradient."""
    label = torch.zeros(1, 1, 32, 32)
    label[..., 8:20, 8:20] = 1
    label[..., 10:14, 10:14] = 2
    loss = WarpedLabelDiceLoss(labels=(1, 2))
    zero = torch.zeros(1, 2, 32, 32)
    assert float(loss(label, label, zero)) == pytest.approx(0.0, abs=1e-4)
    far = torch.zeros_like(label)
    far[..., 24:30, 24:30] = 1
    far[..., 26:28, 2:4] = 2
    assert float(loss(label, far, zero)) == pytest.approx(1.0, abs=1e-4)
    fixed = torch.roll(label, shifts=3, dims=3)  # fixed(x) = moving(x - 3 e_1): out(x) = moving(x + u) with u = -3
    true = torch.zeros(1, 2, 32, 32)
    true[:, 1] = -3.0
    assert float(loss(label, fixed, true)) == pytest.approx(0.0, abs=1e-4)
    guess = torch.zeros(1, 2, 32, 32, requires_grad=True)
    value = loss(label, fixed, guess)
    value.backward()
    assert float(value) > 0.3 and float(guess.grad.abs().sum()) > 0
    with pytest.raises(ValueError, match=r"\(B, 1, \*S\)"):
        loss(label[0], fixed[0], zero)


def test_trainer_label_loss_term_and_missing_labels():
    """With label_loss the loss is the unsupervised loss + label_weight x label Dice, both directions."""
    pairs = _pairs(2)
    net = NPCNet(**TINY)
    ref = copy.deepcopy(net)
    loss, label_loss = RegistrationLoss("acdc", window=9), WarpedLabelDiceLoss((1, 2, 3))
    loader = DataLoader(make_dataset(pairs), batch_size=2, shuffle=False)
    trainer = RegistrationTrainer(
        device="cpu", max_epochs=1, train_data_loader=loader, network=net, optimizer=torch.optim.Adam(net.parameters(), lr=1e-2),
        loss_function=loss, label_loss=label_loss, label_weight=0.5,
    )
    trainer.run()
    stack = lambda key: torch.stack([torch.as_tensor(p[key]) for p in pairs]).float()  # noqa: E731
    terms = bidirectional_loss(ref, loss, stack("moving"), stack("fixed"))
    ml, fl = stack("moving_label"), stack("fixed_label")
    expected_label = 0.5 * label_loss(torch.cat([ml, fl]), torch.cat([fl, ml]), terms["ddf"])
    logged = trainer.state.output["loss_terms"]
    assert float(logged["label"]) == pytest.approx(float(expected_label), abs=1e-6)
    assert float(logged["label"]) > 0.01
    assert float(trainer.state.output["loss"]) == pytest.approx(float(terms["loss"] + expected_label), abs=1e-6)

    unlabelled = [{k: v for k, v in p.items() if "label" not in k} for p in pairs]
    trainer = RegistrationTrainer(
        device="cpu", max_epochs=1, train_data_loader=DataLoader(make_dataset(unlabelled), batch_size=2), network=net,
        optimizer=torch.optim.Adam(net.parameters()), loss_function=loss, label_loss=label_loss,
    )
    with pytest.raises(KeyError, match="moving_label"):
        trainer.run()
