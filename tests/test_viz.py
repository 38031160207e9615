"""Figures are written and show what they claim (the reliability map: tests/test_reliability.py)."""

import numpy as np
import pytest
import torch

from monai_npc.networks.nets import NPCNet
from monai_npc.viz import deformed_grid_lines, filter_quads_figure, per_pair_residual_stats, registration_panel, residual_per_pair_figure


def test_deformed_grid_lines_follow_the_field():
    ddf = np.zeros((2, 16, 16), np.float32)
    ddf[1] = 2.0
    lines = deformed_grid_lines(ddf, spacing=8)
    assert len(lines) == 4
    r, c = lines[0]
    assert np.allclose(c, np.arange(16) + 2.0) and np.allclose(r, 0.0)


def test_figures_are_written(tmp_path):
    net = NPCNet(kernel_size=8, stride=4, num_pairs=8, top_k=4, gate_dim=8, hidden_dim=8, num_pe=8, num_steps=3)
    m, f = torch.rand(1, 1, 32, 32), torch.rand(1, 1, 32, 32)
    with torch.no_grad():
        warped, ddf, diag = net.register(m, f, True)
    stats = per_pair_residual_stats(diag[0])
    assert stats["residual"].shape == (8,) and np.allclose(stats["selected"].sum(), 4.0, atol=1e-3)
    lab = (m > 0.5).float()
    p1 = registration_panel(m[0, 0], f[0, 0], warped[0, 0], ddf[0], tmp_path / "a.png", title="t", labels=(lab[0, 0], lab[0, 0], lab[0, 0]))
    p2 = residual_per_pair_figure(diag, 4, tmp_path / "b.png")
    bank = net.ode.stages[0].filters
    p3 = filter_quads_figure(bank.psi, bank.phi, tmp_path / "c.png")
    for p in (p1, p2, p3):
        assert p.stat().st_size > 5000
    with pytest.raises(ValueError, match="no diagnostics"):
        residual_per_pair_figure([], 4, tmp_path / "d.png")
