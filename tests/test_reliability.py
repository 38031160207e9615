"""The reliability map: mask-weighted mean agreement 2 / (2 + r_bar^2) of the kept pairs, in [0, 1]."""

import pytest
import torch

from monai_npc.functional import reliability_map
from monai_npc.functional.reliability import pair_agreement
from monai_npc.networks.nets import NPCNet


def test_reliability_is_mask_weighted_mean_agreement():
    res = torch.tensor([0.0, 2.0, 6.0, 1000.0]).view(1, 4, 1, 1).expand(1, 4, 2, 2)
    mask = torch.tensor([1.0, 1.0, 1.0, 0.0]).view(1, 4, 1, 1).expand(1, 4, 2, 2)
    rel = reliability_map(res, mask)
    # agreements 1, 0.5, 0.25 (the dropped pair does not count)
    assert torch.allclose(rel, torch.full((1, 1, 2, 2), (1.0 + 0.5 + 0.25) / 3), atol=1e-6)
    assert reliability_map(res, mask, size=[8, 8]).shape == (1, 1, 8, 8)
    # the agreement is 2ab / (a^2 + b^2) of the two response magnitudes, whatever their scale
    a, b = torch.tensor([3.0, 0.2]), torch.tensor([1.0, 0.2])
    assert torch.allclose(pair_agreement((a - b) ** 2 / (a * b)), 2 * a * b / (a * a + b * b))
    with pytest.raises(ValueError, match="same shape"):
        reliability_map(res, mask[:, :3])


def test_reliability_bounded_for_any_residual():
    res = torch.rand(2, 8, 5, 5) * torch.logspace(-3, 6, 8).view(1, 8, 1, 1)
    rel = reliability_map(res, (torch.rand(2, 8, 5, 5) > 0.5).float(), size=[20, 20])
    assert float(rel.min()) >= 0.0 and float(rel.max()) <= 1.0


def test_reliability_one_for_same_content_zero_for_missing_content():
    torch.manual_seed(0)
    net = NPCNet(kernel_size=8, stride=4, num_pairs=8, top_k=4, gate_dim=8, hidden_dim=8, num_pe=8, num_steps=1, head_channels=4).eval()
    stage = net.ode.stages[0]  # Fourier init: psi = phi, so identical images give r = 0
    fixed = torch.rand(1, 1, 32, 32)
    with torch.no_grad():
        rel = {}
        for name, moving in (("same", fixed), ("other", torch.rand(1, 1, 32, 32)), ("blank", torch.zeros(1, 1, 32, 32))):
            _, residual, mask, _ = stage(moving, *stage.prepare(fixed))
            rel[name] = float(reliability_map(residual, mask).mean())
    assert rel["same"] == pytest.approx(1.0, abs=1e-5)
    assert rel["blank"] < 0.01 < rel["other"] < rel["same"]
