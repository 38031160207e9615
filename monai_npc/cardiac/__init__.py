"""Cardiac measurements from short-axis label maps and motion (pure numpy / torch, below the apps).

- :mod:`~monai_npc.cardiac.aha`: the AHA 16 segments of the LV myocardium on a short-axis stack
  (:func:`aha_segments`, anchored at the anterior RV insertion point).
- :mod:`~monai_npc.cardiac.strain`: myocardial strain from the displacements of a tracked cine
  (:func:`strain_from_displacements` -> :class:`Strain`: global and per-segment circumferential and
  radial strain, peaks, time to peak, strain rate, a strain map).
- :mod:`~monai_npc.cardiac.strain_outputs`: ``strain.csv``, ``strain.json``, ``strain_curves.png``,
  ``strain_bullseye.png`` (:func:`write_strain`).

Names are imported lazily (matplotlib only when a figure is drawn).
"""

from __future__ import annotations

from monai_npc.runtime import lazy_exports

_EXPORTS = {
    "aha": ("AHA_SEGMENTS", "AHA_LEVELS", "AHASegments", "aha_segments"),
    "strain": ("STRAIN_COMPONENTS", "Strain", "strain_from_displacements"),
    "strain_outputs": ("STRAIN_OUTPUTS", "write_strain"),
}
__getattr__, __all__ = lazy_exports(__name__, _EXPORTS)


def __dir__():
    return sorted(list(globals()) + __all__)
