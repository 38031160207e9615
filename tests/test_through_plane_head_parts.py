"""The through-plane head's optional parts: an in-plane residual (even under reversing the slices) and the stack's
mean features; both start at zero, so a trained network given them keeps its field until they are trained."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from monai_npc.engines.through_plane_training import ThroughPlaneTrainingConfig, train_through_plane
from monai_npc.functional import EVIDENCE_CHANNELS, REVERSED_CHANNELS, through_plane_evidence
from monai_npc.losses import StackRegistrationLoss
from monai_npc.networks.blocks import ThroughPlaneHead
from monai_npc.networks.nets import NPCNet, ThroughPlaneNPC, load_pretrained, save_pretrained

from .test_stack_training import TINY, pack_file  # noqa: F401  (the fixture)
from .test_through_plane_npc import _reversed_rows


def test_the_parts_start_at_zero_and_keep_the_heads_symmetry():
    torch.manual_seed(0)
    counts, c = [5, 3], len(EVIDENCE_CHANNELS)
    group = torch.tensor([0] * 5 + [1] * 3)
    evidence = torch.rand(8, c, 24, 20)
    head = ThroughPlaneHead(c, REVERSED_CHANNELS, width=4, pool=2, in_plane=True, stack_context=True)
    assert head.out_channels == 3 and torch.equal(head(evidence, group, 2), torch.zeros(8, 3, 24, 20))
    torch.nn.init.normal_(head.decoder[-1].weight)
    torch.nn.init.normal_(head.context.weight)
    out = head(evidence, group, 2).detach()
    assert float(out[:, 1:].abs().mean()) > 1e-3 and float(out[:, :1].abs().mean()) > 1e-3
    back = head(_reversed_rows(evidence, counts)[:, list(REVERSED_CHANNELS)], group, 2)
    flipped = _reversed_rows(out, counts)
    torch.testing.assert_close(back[:, :1], -flipped[:, :1], rtol=1e-5, atol=1e-6)  # through the plane: odd
    torch.testing.assert_close(back[:, 1:], flipped[:, 1:], rtol=1e-5, atol=1e-6)  # in-plane: even
    # the stack's mean features reach every voxel: changing one slice of stack 0 changes stack 0's output far from it
    # (beyond the convolutions' reach through the plane), and never stack 1's
    long = torch.rand(12, c, 16, 16)
    group = torch.tensor([0] * 10 + [1] * 2)
    changed = long.clone()
    changed[0] += 1.0
    before, after = head(long, group, 2).detach(), head(changed, group, 2).detach()
    assert float((after[9] - before[9]).abs().max()) > 1e-4
    torch.testing.assert_close(after[10:], before[10:])


def _trained_tiny() -> ThroughPlaneNPC:
    torch.manual_seed(1)
    net = ThroughPlaneNPC.from_npc(NPCNet(**TINY), head_width=4, head_pool=2)
    torch.nn.init.normal_(net.head.decoder[-1].weight, std=0.05)  # a head that moves through the plane
    net.set_flip_ensemble(2)
    return net.eval()


def test_a_trained_network_given_the_parts_keeps_its_field_and_round_trips(tmp_path):
    net = _trained_tiny()
    twin = net.with_head_options(in_plane_residual=True, stack_context=True).eval()
    assert twin.config["in_plane_residual"] is True and twin.config["stack_context"] is True
    assert "in_plane_residual" not in net.config and len(twin.flip_codes) == 2  # options off stay out of the config
    stack = torch.rand(6, 2, 32, 32)
    with torch.no_grad():
        field = net(stack)
        torch.testing.assert_close(twin(stack), field, rtol=0, atol=0)
        torch.nn.init.normal_(twin.head.decoder[-1].weight, std=0.05)
        moved = twin(stack)
    assert float((moved[:, 1:] - field[:, 1:]).abs().max()) > 1e-3  # the residual adds to the 2-D network's field
    back = load_pretrained(save_pretrained(twin, tmp_path / "parts.pt", {"preprocessing": "minmax"})).eval()
    with torch.no_grad():
        torch.testing.assert_close(back(stack), moved)
    assert twin.with_head_options().config["stack_context"] is True  # options on stay on
    with pytest.raises(ValueError, match="plain head"):
        twin.with_label_evidence()


def test_the_in_plane_residual_learns_an_in_plane_shift_the_2d_field_missed():
    torch.manual_seed(0)
    z, size = 4, 32
    p = F.avg_pool2d(F.avg_pool2d(torch.rand(z, 1, size + 4, size), 5, 1, 2), 5, 1, 2)
    p = (p - p.amin((2, 3), keepdim=True)) / (p.amax((2, 3), keepdim=True) - p.amin((2, 3), keepdim=True))
    fixed, moving = p[:, :, 1 : size + 1], p[:, :, 3 : size + 3]  # out(y) = moving(y - 2): the residual should reach -2
    group = torch.zeros(z, dtype=torch.int64)
    in_plane = torch.zeros(z, 2, size, size)  # what the 2-D network gave: nothing
    head = ThroughPlaneHead(len(EVIDENCE_CHANNELS), REVERSED_CHANNELS, width=4, pool=2, in_plane=True)
    evidence = through_plane_evidence(moving, fixed, in_plane, group, 1)
    loss = StackRegistrationLoss("acdc", label_weight=0.0)
    label = torch.zeros(z, 1, size, size)
    optimiser = torch.optim.Adam(head.parameters(), lr=1e-2)
    for _ in range(60):
        ddf = ThroughPlaneNPC.compose(head(evidence, group, 1), in_plane)
        terms = loss(moving, fixed, label, label, ddf, group, 1)
        optimiser.zero_grad()
        terms["loss"].backward()
        torch.nn.utils.clip_grad_norm_(head.parameters(), 1.0)
        optimiser.step()
    residual = head(evidence, group, 1).detach()[:, 1:, 8:-8, 8:-8].mean((0, 2, 3))
    assert residual[0] < -1.0 and abs(float(residual[1])) < 0.5, residual


def test_the_trainer_adds_the_parts_to_a_trained_head(pack_file, tmp_path):
    init = save_pretrained(_trained_tiny(), tmp_path / "tp.pt", {"preprocessing": "minmax"})
    config = ThroughPlaneTrainingConfig(pack=str(pack_file), out_dir=str(tmp_path / "run"), init=str(init), minutes=2,
                                        max_steps=2, draws=1, val_every=1, learning_rate=1e-2,
                                        head={"in_plane_residual": True})
    summary = train_through_plane(config, echo=False)
    assert summary["initial_val_dice"] == pytest.approx(train_through_plane(ThroughPlaneTrainingConfig(
        pack=str(pack_file), out_dir=str(tmp_path / "plain"), init=str(init), minutes=2, max_steps=1, draws=1,
        val_every=1), echo=False)["initial_val_dice"], abs=1e-6)  # the new part starts at zero
    written = load_pretrained(tmp_path / "run" / "best.pt")
    assert written.config["in_plane_residual"] is True and written.meta["training"]["head_parts"] == ["in_plane_residual"]
    with pytest.raises(ValueError, match="cannot change"):
        train_through_plane(ThroughPlaneTrainingConfig(pack=str(pack_file), out_dir=str(tmp_path / "x"), init=str(init),
                                                       head={"head_width": 8, "stack_context": True}), echo=False)
