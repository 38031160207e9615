"""ThroughPlaneNPC's prior head: a head that also reads a label prior's view of both frames (images only too), its
evidence, its start at the trained network's field, its weights (the prior's stay in their own file) and training it."""

from __future__ import annotations

import pytest
import torch

from monai_npc.engines.through_plane_training import ThroughPlaneTrainingConfig, train_through_plane
from monai_npc.functional import prior_evidence, prior_reversed_channels
from monai_npc.networks.nets import load_pretrained, save_pretrained

from .test_stack_training import pack_file  # noqa: F401  (the fixture)
from .test_through_plane_head_parts import _trained_tiny


def test_prior_evidence_holds_the_warped_moving_maps_their_neighbours_and_the_fixed_maps():
    torch.manual_seed(0)
    moving, fixed = torch.rand(5, 2, 16, 16), torch.rand(5, 2, 16, 16)
    group = torch.tensor([0, 0, 0, 1, 1])
    evidence = prior_evidence(moving, fixed, torch.zeros(5, 2, 16, 16), group, 2)
    assert evidence.shape == (5, 8, 16, 16)
    torch.testing.assert_close(evidence[:, [0, 3]], moving)  # each structure's own slice (no in-plane motion)
    torch.testing.assert_close(evidence[1:3, 1], moving[0:2, 0])  # the previous slice, within the stack
    assert torch.equal(evidence[[0, 3], 1], torch.zeros(2, 16, 16)) and torch.equal(evidence[[2, 4], 2], torch.zeros(2, 16, 16))
    torch.testing.assert_close(evidence[:, 6:], fixed)
    assert prior_reversed_channels(2) == (0, 2, 1, 3, 5, 4, 6, 7)
    with pytest.raises(ValueError, match="one shape"):
        prior_evidence(moving, fixed[:, :1], torch.zeros(5, 2, 16, 16), group, 2)


def test_a_trained_network_given_the_prior_keeps_its_field_and_writes_no_prior_weights(tmp_path):
    net = _trained_tiny()
    twin = net.with_prior_evidence("acdc_heart").eval()
    assert twin.config["prior_evidence"] == "acdc_heart" and twin.label_prior is not None and net.label_prior is None
    assert not any(k.startswith("_prior") or ".unet." in k for k in twin.state_dict())  # the prior's weights: its own file
    stack = torch.rand(5, 2, 32, 32)
    with torch.no_grad():
        field = net(stack)
        torch.testing.assert_close(twin(stack), field, rtol=0, atol=0)
        torch.nn.init.normal_(twin.prior_head.decoder[-1].weight, std=0.05)
        moved = twin(stack)
        back = load_pretrained(save_pretrained(twin, tmp_path / "prior.pt", {"preprocessing": "minmax"})).eval()
        torch.testing.assert_close(back(stack), moved)
        # the through-plane component stays odd under reversing the stack, the prior's channels reversed with it
        reversed_field = twin(stack.flip(0)).flip(0)
    assert float((moved[:, 0] - field[:, 0]).abs().max()) > 1e-3 and torch.equal(moved[:, 1:], field[:, 1:])
    torch.testing.assert_close(reversed_field[:, 0], -moved[:, 0], rtol=1e-5, atol=1e-6)
    with pytest.raises(ValueError, match="prior_maps"):
        twin.heads(torch.rand(5, 10, 32, 32), torch.zeros(5, 2, 32, 32), torch.zeros(5, dtype=torch.int64), 1)
    with pytest.raises(ValueError, match="already reads a prior"):
        twin.with_prior_evidence()


def test_the_trainer_trains_the_prior_head_alone(pack_file, tmp_path):
    init = save_pretrained(_trained_tiny(), tmp_path / "tp.pt", {"preprocessing": "minmax"})
    config = ThroughPlaneTrainingConfig(pack=str(pack_file), out_dir=str(tmp_path / "run"), init=str(init), minutes=2,
                                        max_steps=3, draws=1, val_every=3, learning_rate=1e-2, prior_evidence="acdc_heart")
    summary = train_through_plane(config, echo=False)
    assert summary["steps"] == 3 and 0 < summary["initial_val_dice"] <= 1
    written, start = load_pretrained(tmp_path / "run" / "best.pt"), load_pretrained(init)
    assert written.config["prior_evidence"] == "acdc_heart" and written.meta["training"]["trained"].startswith("the prior head")
    assert all(torch.equal(written.state_dict()[k], v) for k, v in start.state_dict().items())  # the rest as init's
    with pytest.raises(ValueError, match="one at a time"):
        ThroughPlaneTrainingConfig(pack="-", out_dir="-", label_evidence=True, prior_evidence="acdc_heart")
    with pytest.raises(ValueError, match="init must be a"):
        train_through_plane(ThroughPlaneTrainingConfig(pack=str(pack_file), out_dir=str(tmp_path / "x"), init="acdc",
                                                       prior_evidence="acdc_heart"), echo=False)
