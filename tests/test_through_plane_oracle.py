"""benchmarks/through_plane_oracle.py: the loss's free fits on a stack whose fixed frame is the moving one a slice lower."""

import importlib.util
from pathlib import Path

import torch

from monai_npc.engines.stack_data import StackBatch
from monai_npc.losses.stack import StackRegistrationLoss

_SPEC = importlib.util.spec_from_file_location("through_plane_oracle", Path(__file__).resolve().parents[1] / "benchmarks" / "through_plane_oracle.py")
oracle = importlib.util.module_from_spec(_SPEC)
_SPEC.loader.exec_module(oracle)


def _shifted_stack() -> StackBatch:
    """One stack of 6 slices, 32 x 32: a disc (LV 3 in a ring of Myo 2) on moving slices 0-3, on fixed slices 1-4."""
    yy, xx = torch.meshgrid(torch.arange(32.0), torch.arange(32.0), indexing="ij")
    r = ((yy - 16) ** 2 + (xx - 16) ** 2).sqrt()
    disc = torch.where(r < 6, 3.0, torch.where(r < 9, 2.0, 0.0))
    moving_label = torch.zeros(6, 1, 32, 32)
    moving_label[0:4, 0] = disc
    fixed_label = torch.zeros_like(moving_label)
    fixed_label[1:5, 0] = disc
    image = lambda label: 0.2 + 0.25 * label  # noqa: E731
    return StackBatch(moving=image(moving_label), fixed=image(fixed_label), moving_label=moving_label, fixed_label=fixed_label,
                      group=torch.zeros(6, dtype=torch.int64), n_groups=1, stacks=[0])


def test_only_the_through_plane_fit_recovers_a_one_slice_shift():
    torch.manual_seed(0)
    batch = _shifted_stack()
    loss = StackRegistrationLoss("acdc", label_weight=3.0)
    start = torch.zeros(6, 2, 32, 32)
    identity = float(oracle.stack_dice(batch, torch.zeros(6, 3, 32, 32)).nanmean())
    through = oracle.fit(batch, start, loss, "through", 60, 0.05)
    in_plane = oracle.fit(batch, start, loss, "in-plane", 60, 0.05)
    shift = oracle.fit(batch, start, loss, "slice-shift", 60, 0.05)
    d_through = float(oracle.stack_dice(batch, through).nanmean())
    d_in_plane = float(oracle.stack_dice(batch, in_plane).nanmean())
    assert d_through > identity + 0.1 and d_through > d_in_plane + 0.1, (identity, d_through, d_in_plane)
    assert float(in_plane[:, 0].abs().max()) == 0.0 and float(through[:, 1:].abs().max()) == 0.0
    # fixed slice z shows moving slice z - 1: the fit reads towards slice 0 where the disc is
    labelled = batch.fixed_label[:, 0] > 0
    assert float(through[:, 0][labelled].mean()) < -0.3
    # one value per slice, the same for all of its voxels
    assert float(shift[:, 1:].abs().max()) == 0.0 and bool((shift[:, 0] == shift[:, 0, :1, :1]).all())
    assert float(oracle.stack_dice(batch, shift).nanmean()) > d_in_plane + 0.1


def test_a_stack_network_start_keeps_its_through_plane_component():
    batch = _shifted_stack()
    loss = StackRegistrationLoss("acdc", label_weight=3.0)
    start = torch.zeros(6, 3, 32, 32)
    start[:, 0] = -1.0  # already reads one slice towards slice 0: the fixed frame's correspondence
    assert float(oracle.stack_dice(batch, start).nanmean()) == 1.0
    in_plane = oracle.fit(batch, start, loss, "in-plane", 5, 0.05)
    through = oracle.fit(batch, start, loss, "through", 5, 0.05)
    assert torch.equal(in_plane[:, 0], start[:, 0])
    # the through-plane fit starts from the network's channel 0 (5 steps at 0.05 move it by 0.25 at most)
    assert float(through[:, 0].mean()) < -0.75 and torch.equal(through[:, 1:], start[:, 1:])
