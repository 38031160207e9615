"""Figures (matplotlib, headless): registration panels and NPC diagnostics."""

from .diagnostics import filter_quads_figure, per_pair_residual_stats, residual_per_pair_figure
from .figures import deformed_grid_lines, registration_panel

__all__ = [
    "deformed_grid_lines",
    "filter_quads_figure",
    "per_pair_residual_stats",
    "registration_panel",
    "residual_per_pair_figure",
]
