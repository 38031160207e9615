"""functional.carried_area_change and the refinement's area term (lambda_area)."""

import pytest
import torch

from monai_npc.functional.area import carried_area_change
from monai_npc.networks.blocks.refinement import InstanceRefinement


def _disc(size=64, radius=12.0):
    yy, xx = torch.meshgrid(torch.arange(size, dtype=torch.float64), torch.arange(size, dtype=torch.float64), indexing="ij")
    return (((yy - 31.5) ** 2 + (xx - 31.5) ** 2) <= radius**2).to(torch.float64)[None, None]


def test_a_translation_keeps_the_area_and_a_scaling_changes_it_by_its_determinant():
    disc = _disc()
    shift = torch.zeros(1, 2, 64, 64, dtype=torch.float64)
    shift[:, 0], shift[:, 1] = 3.0, -2.0
    assert carried_area_change(disc, shift).abs().item() < 1e-12  # the whole disc stays inside the grid
    yy, xx = torch.meshgrid(torch.arange(64.0, dtype=torch.float64), torch.arange(64.0, dtype=torch.float64), indexing="ij")
    # x + u(x) = 31.5 + 0.8 (x - 31.5): the carried disc is the disc scaled by 1 / 0.8 about the centre
    contract = torch.stack([-0.2 * (yy - 31.5), -0.2 * (xx - 31.5)])[None]
    assert carried_area_change(disc, contract).item() == pytest.approx(1 / 0.8**2 - 1, rel=0.03)
    empty = torch.zeros_like(disc)
    assert carried_area_change(empty, contract).item() == 0.0
    with pytest.raises(ValueError, match="share batch and spatial size"):
        carried_area_change(disc, contract[..., :32])


def test_the_area_term_holds_the_carried_area():
    """A pair in which the disc grows (fixed = the disc scaled by 1.25): LNCC alone carries the label into a larger
    disc; with lambda_area the carried area stays nearer the moving one."""
    moving_label = _disc(radius=10.0)
    fixed = _disc(radius=12.5)
    moving = moving_label.clone()
    start = torch.zeros(1, 2, 64, 64, dtype=torch.float64)
    changes = []
    for lam in (0.0, 50.0):
        ref = InstanceRefinement(iterations=30, grid_stride=4, lambda_area=lam, area_values=(1,))
        out = ref(moving.float(), fixed.float(), start.float(), moving_label.float())
        changes.append(carried_area_change(moving_label.float(), out).item())
    assert changes[0] > 0.2  # the image term grows the carried disc towards 1.25^2 - 1 = 0.56
    assert abs(changes[1]) < 0.05  # measured 0.526 without, 0.005 with
    with pytest.raises(ValueError, match="lambda_area"):
        InstanceRefinement(lambda_area=-1.0)
