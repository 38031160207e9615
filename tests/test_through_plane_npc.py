"""ThroughPlaneNPC: the 2-D NPC's in-plane field, then a through-plane component from what each slice matches in its
neighbours; its evidence, its head's symmetry, its weights, register, and training its head alone."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from monai_npc import register
from monai_npc.apps.registration.models import is_stack_network
from monai_npc.engines.through_plane_training import ThroughPlaneTrainingConfig, train_through_plane
from monai_npc.functional import EVIDENCE_CHANNELS, REVERSED_CHANNELS, in_plane_divergence, through_plane_evidence
from monai_npc.losses import StackRegistrationLoss
from monai_npc.networks.blocks import ThroughPlaneHead
from monai_npc.networks.nets import NPCNet, ThroughPlaneNPC, load_pretrained, save_pretrained

from .test_register_stack_net import _phantom_pair
from .test_slice_context import _two_stacks
from .test_stack_training import TINY, pack_file  # noqa: F401  (the fixture)


def test_evidence_says_which_neighbour_each_fixed_slice_matches():
    pair, group, _ = _two_stacks(z=6, size=32)  # stack 0: moving(z - 1) = fixed(z); stack 1: moving(z + 1) = fixed(z)
    evidence = through_plane_evidence(pair[:, :1], pair[:, 1:], torch.zeros(12, 2, 32, 32), group, 2)
    assert evidence.shape == (12, len(EVIDENCE_CHANNELS), 32, 32)
    channel = {name: evidence[:, i].mean((1, 2)) for i, name in enumerate(EVIDENCE_CHANNELS)}
    assert channel["has_previous"].tolist() == [0] + [1] * 5 + [0] + [1] * 5
    assert channel["has_next"].tolist() == [1] * 5 + [0] + [1] * 5 + [0]
    assert torch.equal(evidence[[0, 6], 2], torch.zeros(2, 32, 32)) and torch.equal(evidence[[5, 11], 3], torch.zeros(2, 32, 32))
    inner0, inner1 = slice(1, 6), slice(6, 11)  # the slices whose matching neighbour is inside the stack
    assert torch.all(channel["correlation_previous"][inner0] > 0.99)
    assert torch.all(channel["correlation_next"][inner1] > 0.99)
    assert torch.all(channel["correlation_previous"][inner0] > channel["correlation"][inner0] + 0.05)
    assert torch.all(channel["correlation_next"][inner1] > channel["correlation"][inner1] + 0.05)
    with pytest.raises(ValueError, match="in-plane field"):
        through_plane_evidence(pair[:, :1], pair[:, 1:], torch.zeros(12, 3, 32, 32), group, 2)


def test_divergence_of_an_expansion_and_the_reversed_channel_order():
    y, x = torch.meshgrid(torch.arange(16.0), torch.arange(16.0), indexing="ij")
    ddf = 0.1 * torch.stack([y - 7.5, x - 7.5]).unsqueeze(0)  # samples the moving image from a region 1.1 times larger
    torch.testing.assert_close(in_plane_divergence(ddf), torch.full((1, 1, 16, 16), 0.2))
    names = [EVIDENCE_CHANNELS[i] for i in REVERSED_CHANNELS]
    assert names == [n.replace("previous", "@").replace("next", "previous").replace("@", "next") for n in EVIDENCE_CHANNELS]


def _reversed_rows(x: torch.Tensor, counts) -> torch.Tensor:
    return torch.cat([part.flip(0) for part in x.split(counts)])


def test_the_head_starts_at_zero_and_is_odd_under_reversing_each_stack():
    torch.manual_seed(0)
    counts, c = [5, 3], len(EVIDENCE_CHANNELS)
    group = torch.tensor([0] * 5 + [1] * 3)
    evidence = torch.rand(8, c, 24, 20)
    head = ThroughPlaneHead(c, REVERSED_CHANNELS, width=4, pool=2)
    assert torch.equal(head(evidence, group, 2), torch.zeros(8, 1, 24, 20))
    torch.nn.init.normal_(head.decoder[-1].weight)
    out = head(evidence, group, 2).detach()
    assert out.shape == (8, 1, 24, 20) and float(out.abs().mean()) > 1e-3
    reversed_evidence = _reversed_rows(evidence, counts)[:, list(REVERSED_CHANNELS)]
    torch.testing.assert_close(head(reversed_evidence, group, 2), -_reversed_rows(out, counts), rtol=1e-5, atol=1e-6)
    with pytest.raises(ValueError, match="permutation"):
        ThroughPlaneHead(c, [0] * c)


def test_the_head_learns_which_way_each_stack_moved():
    pair, group, truth = _two_stacks(z=6, size=32)
    net = ThroughPlaneNPC.from_npc(NPCNet(**TINY), head_width=4, head_pool=2)
    loss = StackRegistrationLoss("acdc", label_weight=0.0)
    in_plane = torch.zeros(12, 2, 32, 32)
    evidence = through_plane_evidence(pair[:, :1], pair[:, 1:], in_plane, group, 2)
    optimiser = torch.optim.Adam(net.head.parameters(), lr=1e-2)
    label = torch.zeros(12, 1, 32, 32)
    for _ in range(40):
        ddf = torch.cat([net.head(evidence, group, 2), in_plane], 1)
        terms = loss(pair[:, :1], pair[:, 1:], label, label, ddf, group, 2)
        optimiser.zero_grad()
        terms["loss"].backward()
        torch.nn.utils.clip_grad_norm_(net.head.parameters(), 1.0)  # as the trainer: one fold spike must not stall Adam
        optimiser.step()
    through = net.head(evidence, group, 2)[:, 0].detach()
    inner = [through[1:5].mean(), through[7:11].mean()]  # away from the stacks' ends
    assert inner[0] < 0.5 * float(truth[0]) and inner[1] > 0.5 * float(truth[1]), inner  # truth -1, +1


def test_from_acdc_the_2d_field_no_through_plane_motion_and_the_weights_round_trip(tmp_path):
    npc = load_pretrained("acdc", refine_iterations=0)
    net = ThroughPlaneNPC.from_npc(npc).eval()
    assert is_stack_network(net) and net.config["architecture"] == "through_plane"
    ed, es, spacing = _phantom_pair()
    reg = register(ed, es, model=net, spacing=spacing, field_of_view="heart-stack")
    ref = register(ed, es, model=npc, spacing=spacing, field_of_view="heart-stack")
    assert reg.ddf_array.shape == (3,) + ed.shape and not np.any(reg.ddf_array[0])  # the head starts at zero
    assert float(np.abs(reg.ddf_array[1:] - ref.ddf_array[1:]).max()) < 1e-4  # the 2-D network's own field
    assert reg.summary["stack_network"]["through_plane"] == "network"
    assert reg.summary["stack_network"]["in_plane_flip_ensemble"] == 1 and "flip_ensemble" in reg.summary["stack_network"]["not_applied"]
    npc.set_flip_ensemble(2)
    net.set_flip_ensemble(2)  # the in-plane part's test-time ensemble: the 2-D model's, slice by slice
    reg2 = register(ed, es, model=net, spacing=spacing, field_of_view="heart-stack")
    ref2 = register(ed, es, model=npc, spacing=spacing, field_of_view="heart-stack")
    assert float(np.abs(ref2.ddf_array[1:] - ref.ddf_array[1:]).max()) > 1e-3  # the ensemble changed the field
    assert float(np.abs(reg2.ddf_array[1:] - ref2.ddf_array[1:]).max()) < 1e-4
    assert reg2.summary["stack_network"]["in_plane_flip_ensemble"] == 2 and "flip_ensemble" not in reg2.summary["stack_network"]["not_applied"]
    net.set_flip_ensemble(1)
    torch.nn.init.normal_(net.head.decoder[-1].weight, std=0.01)
    path = save_pretrained(net, tmp_path / "tp.pt", {"preprocessing": "minmax"})
    back = load_pretrained(path)
    assert isinstance(back, ThroughPlaneNPC) and back.config == {**net.config, "init": back.config["init"]}
    stack = torch.rand(4, 2, 64, 64)
    torch.testing.assert_close(back(stack), net(stack))
    with pytest.raises(ValueError, match="architecture"):
        ThroughPlaneNPC(architecture="slice_context")


def test_training_the_head_alone_writes_shipped_weights_log_and_curve(pack_file, tmp_path):
    init = save_pretrained(NPCNet(**TINY), tmp_path / "tiny.pt", {"preprocessing": "minmax"})
    out = tmp_path / "run"
    config = ThroughPlaneTrainingConfig(pack=str(pack_file), out_dir=str(out), init=str(init), minutes=2, max_steps=4,
                                        draws=2, val_every=2, head={"head_width": 4, "head_pool": 2}, learning_rate=1e-2)
    summary = train_through_plane(config, echo=False)
    assert summary["steps"] == 4 and 0 < summary["initial_val_dice"] <= 1
    assert {p.name for p in out.iterdir()} >= {"best.pt", "train_log.jsonl", "train.log", "curve.png"}
    records = [json.loads(line) for line in (out / "train_log.jsonl").read_text().splitlines()]
    assert [r["step"] for r in records] == [2, 4] and all(0 < r["val_dice"] <= 1 for r in records)
    assert records[1]["lr"] < records[0]["lr"] < 1e-2  # the cosine over the budget
    best = load_pretrained(summary["best"])
    assert isinstance(best, ThroughPlaneNPC) and best.meta["training"]["script"] == "monai_npc.engines.through_plane_training"
    tiny = load_pretrained(init)
    assert all(torch.equal(best.npc.state_dict()[k], v) for k, v in tiny.state_dict().items())  # the 2-D part frozen
    # a trained state continues: its head as saved (the first validation is the saved state's)
    again = ThroughPlaneTrainingConfig(pack=str(pack_file), out_dir=str(tmp_path / "again"), init=str(summary["best"]),
                                       minutes=2, max_steps=1, draws=1, val_every=1)
    assert train_through_plane(again, echo=False)["initial_val_dice"] == pytest.approx(summary["best_val_dice"], abs=1e-6)
    # the 2-D part's fields as register computes them (steps, flip ensemble); the weights keep their own settings
    settled = ThroughPlaneTrainingConfig(pack=str(pack_file), out_dir=str(tmp_path / "settled"), init=str(init), minutes=2,
                                         max_steps=1, draws=1, val_every=1, num_steps=1, flip_ensemble=2)
    first = train_through_plane(settled, echo=False)
    assert first["steps"] == 1 and 0 < first["initial_val_dice"] <= 1
    written = load_pretrained(first["best"])
    assert written.ode.steps_per_stage == tiny.ode.steps_per_stage and len(written.npc.flip_codes) == 1
    assert written.meta["training"]["in_plane_settings"] == {"num_steps": 1, "flip_ensemble": 2}
    with pytest.raises(ValueError, match="cannot change"):
        train_through_plane(ThroughPlaneTrainingConfig(pack=str(pack_file), out_dir=str(tmp_path / "x"), init=str(summary["best"]),
                                                       head={"head_width": 8}), echo=False)
    with pytest.raises(ValueError, match="head: unknown"):
        ThroughPlaneTrainingConfig(pack="-", out_dir="-", head={"width": 4})
    with pytest.raises(ValueError, match="flip_ensemble must be one of"):  # before any pack is read
        ThroughPlaneTrainingConfig(pack="-", out_dir="-", flip_ensemble=3)
    with pytest.raises(ValueError, match="num_steps must be"):
        ThroughPlaneTrainingConfig(pack="-", out_dir="-", num_steps=0)


def test_the_whole_stack_trainer_trains_a_through_plane_network_end_to_end_or_its_head_alone(pack_file, tmp_path):
    from monai_npc.engines.stack_training import StackTrainingConfig, build_network, train_stacks

    init = save_pretrained(NPCNet(**TINY), tmp_path / "tiny.pt", {"preprocessing": "minmax"})
    base = dict(pack=str(pack_file), minutes=1.0, device="cpu", stacks_per_batch=2, val_every=1, save_every=1,
                max_epochs=1, timing_steps=1, init=str(init), architecture="through_plane",
                network={"head_width": 4, "head_pool": 2})
    built = build_network(StackTrainingConfig(out_dir="-", **base))
    assert isinstance(built, ThroughPlaneNPC) and built.config["head_width"] == 4
    with pytest.raises(ValueError, match="not for architecture"):
        build_network(StackTrainingConfig(out_dir="-", **{**base, "network": {"context_channels": 4}}))
    tiny = load_pretrained(init).state_dict()
    for trainable in ("context", "all"):
        out = tmp_path / trainable
        train_stacks(StackTrainingConfig(out_dir=str(out), trainable=trainable, learning_rate=1e-2, **base), echo=False)
        state = torch.load(out / "checkpoint.pt", weights_only=True)["model"]
        assert float(state["head.decoder.2.weight"].abs().max()) > 0, trainable  # the output layer started at zero
        moved = [k for k, v in tiny.items() if not torch.equal(state["npc." + k], v)]
        assert bool(moved) == (trainable == "all"), moved[:5]  # the 2-D part frozen with trainable="context"


def test_the_shipped_acdc_through_plane_weights_are_acdc_plus_a_trained_head():
    net = load_pretrained("acdc_through_plane")
    acdc = load_pretrained("acdc")
    assert isinstance(net, ThroughPlaneNPC) and net.refiner.iterations == acdc.refiner.iterations == 50
    assert all(torch.equal(net.npc.state_dict()[k], v) for k, v in acdc.state_dict().items())  # acdc's 2-D network
    assert float(net.head.decoder[-1].weight.abs().max()) > 0 and net.meta["bundle"] == acdc.meta["bundle"]
    ed, es, spacing = _phantom_pair()
    reg = register(ed, es, model="acdc_through_plane", spacing=spacing)
    assert reg.ddf_array.shape == (3,) + ed.shape and np.isfinite(reg.ddf_array).all()
    assert reg.summary["stack_network"]["through_plane"] == "network" and reg.summary["folding_percent"] <= 0.05
    assert reg.summary["stack_network"]["in_plane_flip_ensemble"] == 2  # acdc's register settings reach the 2-D part
