"""The 3-D warp of a stack with a fixed through-plane component as weighted neighbour slices sampled in 2-D."""

from __future__ import annotations

import pytest
import torch

from monai_npc.functional.stack_field import warp_stack_slices
from monai_npc.functional.stack_taps import through_plane_taps, warp_stack_taps


@pytest.mark.parametrize("padding", ["border", "zeros"])
@pytest.mark.parametrize("scale", [0.0, 0.3, 1.7])
def test_the_taps_warp_equals_the_3d_warp_in_value_and_in_plane_gradient(scale, padding):
    """Three stacks (5, 3 and 1 slices), through-plane displacements from none to several slices (past the stacks'
    ends: their end slices replicated, or zeros for labels): the same values and in-plane gradients as
    warp_stack_slices, in float64."""
    torch.manual_seed(0)
    group = torch.tensor([0] * 5 + [1] * 3 + [2])
    image = torch.rand(9, 2, 12, 10, dtype=torch.float64)
    through = scale * torch.randn(9, 12, 10, dtype=torch.float64)
    in_plane = (2 * torch.randn(9, 2, 12, 10, dtype=torch.float64)).requires_grad_()
    expected = warp_stack_slices(image, torch.cat([through[:, None], in_plane], 1), group, 3, through_padding=padding)
    rows, weights = through_plane_taps(through, group, 3, padding)
    got = warp_stack_taps(image, in_plane, (rows, weights))
    assert rows.shape[0] <= 2 * int(torch.ceil(through.abs().max())) + 1
    total = weights.sum(0)
    assert torch.allclose(total, torch.ones_like(total), atol=1e-12) if padding == "border" else float(total.max()) <= 1 + 1e-12
    assert float((got - expected).abs().max()) < 1e-12
    (g_expected,) = torch.autograd.grad(expected.square().sum(), in_plane)
    (g_got,) = torch.autograd.grad(got.square().sum(), in_plane)
    assert float((g_got - g_expected).abs().max()) < 1e-12 and float(g_expected.abs().max()) > 0.1


@pytest.mark.parametrize("padding, taps", [("border", 1), ("zeros", 1)])
def test_a_displacement_far_past_the_stack_costs_the_taps_it_reads(padding, taps):
    """Six slices above the first slice of a stack read its end slice (or zeros for labels) as one slice above would:
    the taps span what is read (the end slice replicated: its own offset; zeros: nothing, so only the offset the other
    slices read), not |through|, with the 3-D warp's values."""
    torch.manual_seed(2)
    group = torch.zeros(5, dtype=torch.int64)
    image = torch.rand(5, 1, 6, 6, dtype=torch.float64)
    through = torch.zeros(5, 6, 6, dtype=torch.float64)
    through[0] = -6.0
    rows, weights = through_plane_taps(through, group, 1, padding)
    assert rows.shape[0] == taps
    in_plane = torch.zeros(5, 2, 6, 6, dtype=torch.float64)
    expected = warp_stack_slices(image, torch.cat([through[:, None], in_plane], 1), group, 1, through_padding=padding)
    assert float((warp_stack_taps(image, in_plane, (rows, weights)) - expected).abs().max()) < 1e-12


def test_a_half_slice_reads_two_slices_of_its_own_stack_only():
    """Slice values 0..4 in one stack and 10, 11 in another; +0.5 slice: the mean of a slice and the next, the last
    slice of each stack replicated (never the other stack's)."""
    group = torch.tensor([0] * 5 + [1] * 2)
    image = torch.tensor([0.0, 1, 2, 3, 4, 10, 11]).view(7, 1, 1, 1).expand(7, 1, 4, 4).contiguous()
    out = warp_stack_taps(image, torch.zeros(7, 2, 4, 4), through_plane_taps(torch.full((7, 4, 4), 0.5), group, 2))
    assert out[:, 0, 0, 0].tolist() == [0.5, 1.5, 2.5, 3.5, 4.0, 10.5, 11.0]


def test_taps_refuse_fields_that_do_not_match():
    group = torch.zeros(3, dtype=torch.int64)
    with pytest.raises(ValueError, match="through must be"):
        through_plane_taps(torch.zeros(3, 1, 4, 4), group, 1)
    with pytest.raises(ValueError, match="in_plane"):
        warp_stack_taps(torch.zeros(3, 1, 4, 4), torch.zeros(3, 3, 4, 4), through_plane_taps(torch.zeros(3, 4, 4), group, 1))


def test_a_region_of_the_taps_warp_is_that_region_of_the_whole_warp():
    """``region``: the same values and in-plane gradient as cropping the whole warp (a loss on the heart's box)."""
    torch.manual_seed(1)
    group = torch.tensor([0] * 4 + [1] * 3)
    image = torch.rand(7, 3, 14, 11, dtype=torch.float64)
    taps = through_plane_taps(0.8 * torch.randn(7, 14, 11, dtype=torch.float64), group, 2, "zeros")
    in_plane = (2 * torch.randn(7, 2, 14, 11, dtype=torch.float64)).requires_grad_()
    region = (slice(3, 10), slice(2, 8))
    whole = warp_stack_taps(image, in_plane, taps)[..., region[0], region[1]]
    part = warp_stack_taps(image, in_plane, taps, region)
    assert part.shape == (7, 3, 7, 6) and float((part - whole).abs().max()) < 1e-12
    (g_whole,) = torch.autograd.grad(whole.square().sum(), in_plane)
    (g_part,) = torch.autograd.grad(part.square().sum(), in_plane)
    assert float((g_part - g_whole).abs().max()) < 1e-12 and float(g_part[..., :3, :].abs().max()) == 0.0
