"""Cardiac measurements from short-axis label maps and motion (pure numpy / torch, below the apps).

- :mod:`~monai_npc.cardiac.aha`: the AHA 16 segments of the LV myocardium on a short-axis stack
  (:func:`aha_segments`, anchored at the anterior RV insertion point).
- :mod:`~monai_npc.cardiac.strain`: myocardial strain from the displacements of a tracked cine
  (:func:`strain_from_displacements` -> :class:`Strain`: global and per-segment circumferential and
  radial strain, peaks, time to peak, strain rate, a strain map).
- :mod:`~monai_npc.cardiac.function`: volumes, ED/ES, EDV/ESV/SV/EF, LV mass (pure functions).
- :mod:`~monai_npc.cardiac.through_plane`: basal slices a structure leaves as the base descends (and re-enters).

The files a user gets (``strain.csv``, ``strain.json``, figures) are written by
:mod:`monai_npc.apps.tracking.strain_outputs`.

Names are imported lazily.
"""

from __future__ import annotations

from monai_npc.runtime import lazy_exports

_EXPORTS = {
    "aha": ("AHA_SEGMENTS", "AHA_LEVELS", "AHASegments", "aha_segments"),
    "strain": ("STRAIN_COMPONENTS", "Strain", "strain_from_displacements"),
    "function": ("ACDC_STRUCTURES", "cardiac_function", "volume_curves", "find_ed_es", "ejection_fraction", "myocardial_mass", "agreement"),
    "through_plane": ("apply_basal_descent", "apply_basal_ascent", "BASAL_DESCENT_MM"),
}
__getattr__, __all__ = lazy_exports(__name__, _EXPORTS)


def __dir__():
    return sorted(list(globals()) + __all__)
