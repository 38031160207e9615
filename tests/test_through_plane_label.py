"""A ThroughPlaneNPC whose head also reads the moving label (``label_evidence``): the evidence, the network built from
one trained without it, training it, and register passing the user's label to it."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from monai_npc import register
from monai_npc.engines.through_plane_training import ThroughPlaneTrainingConfig, train_through_plane
from monai_npc.functional import LABEL_EVIDENCE_CHANNELS, LABEL_REVERSED_CHANNELS, label_evidence, reads_label
from monai_npc.networks.nets import NPCNet, ThroughPlaneNPC, load_pretrained, save_pretrained

from .test_register_stack_net import _phantom_pair
from .test_stack_training import TINY, pack_file  # noqa: F401  (the fixture)
from .test_through_plane_npc import _reversed_rows


def _labelled_stack(z: int = 5, size: int = 16) -> torch.Tensor:
    """``(z, 1, size, size)``: slice ``k`` holds value ``k % 4`` in a square (slice 0 empty)."""
    label = torch.zeros(z, 1, size, size)
    for k in range(z):
        label[k, :, 4:12, 4:12] = k % 4
    return label


def test_label_evidence_reads_each_structure_on_the_slice_and_its_neighbours():
    label = torch.cat([_labelled_stack(5), _labelled_stack(3)])
    group = torch.tensor([0] * 5 + [1] * 3)
    evidence = label_evidence(label, torch.zeros(8, 2, 16, 16), group, 2)
    assert evidence.shape == (8, len(LABEL_EVIDENCE_CHANNELS), 16, 16) == (8, 10, 16, 16)
    present = {name: evidence[:, i, 8, 8].tolist() for i, name in enumerate(LABEL_EVIDENCE_CHANNELS)}
    assert present["label1_slice"] == [0, 1, 0, 0, 0, 0, 1, 0]  # RV (value 1) on slice 1 of each stack
    assert present["label1_previous"] == [0, 0, 1, 0, 0, 0, 0, 1]
    assert present["label1_next"] == [1, 0, 0, 0, 0, 1, 0, 0]
    assert present["label3_slice"] == [0, 0, 0, 1, 0, 0, 0, 0]
    assert present["label3_next"] == [0, 0, 1, 0, 0, 0, 0, 0]  # nothing reaches across the stacks' boundary
    assert present["has_label"] == [1] * 8 and float(evidence[:, :9, 0, 0].abs().max()) == 0  # outside the squares
    # reversing each stack's slices and permuting the channels gives the reversed stacks' evidence (the head's symmetry)
    counts = [5, 3]
    reversed_evidence = label_evidence(_reversed_rows(label, counts), torch.zeros(8, 2, 16, 16), group, 2)
    torch.testing.assert_close(reversed_evidence, _reversed_rows(evidence, counts)[:, list(LABEL_REVERSED_CHANNELS)])
    # warped in-plane: a field of +4 voxels along W reads the square 4 voxels further on
    shifted = label_evidence(label, torch.stack([torch.zeros(8, 16, 16), torch.full((8, 16, 16), 4.0)], 1), group, 2)
    assert float(shifted[1, 0, 8, 1]) == 1 and float(shifted[1, 0, 8, 9]) == 0
    assert torch.equal(label_evidence(None, torch.zeros(8, 2, 16, 16), group, 2), torch.zeros(8, 10, 16, 16))
    with pytest.raises(ValueError, match="moving_label must be"):
        label_evidence(label[:4], torch.zeros(8, 2, 16, 16), group, 2)
    with pytest.raises(ValueError, match="in-plane field"):
        label_evidence(label, torch.zeros(8, 3, 16, 16), group, 2)


def test_reads_label_only_the_coding_it_was_trained_on():
    assert reads_label(torch.tensor([0.0, 1.0, 2.0, 3.0])) and reads_label(torch.tensor([0.0, 3.0]))
    assert not reads_label(torch.zeros(4))  # nothing labelled
    assert not reads_label(torch.tensor([0.0, 255.0])) and not reads_label(torch.tensor([0.0, 1.0, 4.0]))


def test_a_network_trained_without_the_label_gains_a_label_head_with_the_same_field_until_trained(tmp_path):
    net = ThroughPlaneNPC.from_npc(NPCNet(**TINY), head_width=4, head_pool=2).eval()
    torch.nn.init.normal_(net.head.decoder[-1].weight, std=0.05)  # a head that moves through the plane
    net.set_flip_ensemble(2)
    twin = net.with_label_evidence().eval()
    assert twin.uses_label and not net.uses_label and twin.config["label_evidence"] and "label_evidence" not in net.config
    assert net.label_head is None and len(twin.flip_codes) == 2 and twin.refiner.iterations == net.refiner.iterations
    torch.manual_seed(0)
    stack, label = torch.rand(6, 2, 32, 32), torch.randint(0, 4, (6, 1, 32, 32)).float()
    with torch.no_grad():
        before = net(stack)
        assert float(before[:, 0].abs().max()) > 1e-3
        torch.testing.assert_close(twin(stack), before)
        torch.testing.assert_close(twin(stack, moving_label=label), before)  # the label head starts at zero
        torch.nn.init.normal_(twin.label_head.decoder[-1].weight, std=0.05)
        assert float((twin(stack, moving_label=label) - before)[:, 0].abs().max()) > 1e-3
        torch.testing.assert_close(twin(stack), before)  # without a label: the images' head alone
    twin.set_flip_ensemble(1)
    back = load_pretrained(save_pretrained(twin, tmp_path / "tpl.pt", {"preprocessing": "minmax"}))
    assert isinstance(back, ThroughPlaneNPC) and back.uses_label
    torch.testing.assert_close(back(stack, moving_label=label), twin(stack, moving_label=label))
    with pytest.raises(ValueError, match="already reads"):
        twin.with_label_evidence()


def test_training_the_label_head_keeps_the_images_field_and_validates_with_the_label(pack_file, tmp_path):
    init = save_pretrained(NPCNet(**TINY), tmp_path / "tiny.pt", {"preprocessing": "minmax"})
    first = train_through_plane(ThroughPlaneTrainingConfig(
        pack=str(pack_file), out_dir=str(tmp_path / "plain"), init=str(init), minutes=2, max_steps=2, draws=1, val_every=2,
        head={"head_width": 4, "head_pool": 2}, learning_rate=1e-2), echo=False)
    out = tmp_path / "label"
    config = ThroughPlaneTrainingConfig(pack=str(pack_file), out_dir=str(out), init=str(first["best"]), minutes=2, max_steps=4,
                                        draws=1, val_every=2, learning_rate=1e-2, label_evidence=True)
    summary = train_through_plane(config, echo=False)
    assert summary["steps"] == 4 and 0 < summary["initial_val_dice"] <= 1
    plain, written = load_pretrained(first["best"]), load_pretrained(summary["best"])
    assert isinstance(written, ThroughPlaneNPC) and written.uses_label
    assert all(torch.equal(written.state_dict()[k], v) for k, v in plain.state_dict().items())  # the images' field as it was
    assert written.meta["training"]["trained"].startswith("the label head only")
    with pytest.raises(ValueError, match="init must be a ThroughPlaneNPC"):
        train_through_plane(ThroughPlaneTrainingConfig(pack=str(pack_file), out_dir=str(tmp_path / "x"), init=str(init),
                                                       label_evidence=True), echo=False)


def test_register_gives_the_moving_label_to_a_network_that_reads_it():
    net = ThroughPlaneNPC.from_npc(load_pretrained("acdc", refine_iterations=0), label_evidence=True).eval()
    with torch.no_grad():  # a label head that moves through the plane only where the label says so: no bias, no image weight
        for name, p in net.label_head.named_parameters():
            p.zero_() if name.endswith("bias") else torch.nn.init.normal_(p, std=0.3)
        net.label_head.encoder[0].weight[:, :10] = 0
    ed, es, spacing = _phantom_pair()
    label = np.zeros(ed.shape, np.uint8)
    label[:2, 40:56, 40:56] = 3  # on the first slices only: the head is odd under reversing the stack
    plain = register(ed, es, model=net, spacing=spacing, field_of_view="heart-stack")
    labelled = register(ed, es, model=net, spacing=spacing, field_of_view="heart-stack", moving_label=label, label_prior=None)
    assert not np.any(plain.ddf_array[0]) and float(np.abs(labelled.ddf_array[0]).max()) > 1e-3
    assert labelled.summary["stack_network"]["network_read_label"] and not plain.summary["stack_network"]["network_read_label"]
    other = register(ed, es, model=net, spacing=spacing, field_of_view="heart-stack", moving_label=label * 85,
                     label_prior=None)  # a mask coded 255: not read as RV / Myo / LV
    assert not np.any(other.ddf_array[0]) and not other.summary["stack_network"]["network_read_label"]
    unguided = register(ed, es, model=net, spacing=spacing, field_of_view="heart-stack", moving_label=label, label_prior=None,
                        label_guidance=0.0)
    assert not np.any(unguided.ddf_array[0])  # the images alone, as asked
