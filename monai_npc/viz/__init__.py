"""Figures: registration panels (matplotlib, headless)."""

from .figures import deformed_grid_lines, registration_panel

__all__ = ["deformed_grid_lines", "registration_panel"]
