"""Cine tracking and cardiac function.

- :mod:`~monai_npc.apps.tracking.cine`: 4-D short-axis cines (NIfTI ``(X, Y, Z, T)``, cine DICOM
  folders, arrays) as a list of 3-D frames on one grid, and back to a 4-D image.
- :mod:`~monai_npc.apps.tracking.track`: :func:`track`, a label on one frame carried to every frame
  with :func:`monai_npc.register`.
- :mod:`~monai_npc.apps.tracking.schemes`: the schemes (``direct``, ``sequential``, ``average``, ``bidirectional``,
  ``anchored``) as objects: their networks, label rule, registrations and per-frame fields.
- :mod:`~monai_npc.apps.tracking.registrations`: the run's settings, the networks tracking loads, the pairwise
  registrations cached between schemes.
- :mod:`~monai_npc.apps.tracking.fields`: the fields the schemes compose, in-plane or a stack network's 3-D ones.
- :mod:`~monai_npc.apps.tracking.anchor`: the ``anchored`` scheme's correction of a chained field against the reference frame.
- :mod:`~monai_npc.apps.tracking.cohort`: :func:`track_cohort`, many studies from a CSV, resumable,
  shared between ``torchrun`` ranks.
- :mod:`~monai_npc.cardiac.through_plane`: basal slices a structure leaves as the base descends.
- :mod:`~monai_npc.cardiac.function`: volumes, ED/ES, EDV/ESV/SV/EF, LV mass (pure functions).
- :mod:`~monai_npc.apps.tracking.figures`: volume curve + contour strip, Bland-Altman.

Names are imported lazily (``import monai_npc.cardiac.function`` needs numpy only).
"""

from __future__ import annotations

from monai_npc.runtime import lazy_exports

_EXPORTS = {
    "cine": ("Cine", "read_cine"),
    "schemes": ("SCHEMES", "DEFAULT_SCHEME", "scheme"),
    "track": ("Tracking", "track", "track_schemes"),
    "outputs": ("write_tracking",),
    "cohort": ("track_cohort", "read_cohort"),
    "through_plane": ("apply_basal_descent", "BASAL_DESCENT_MM"),
    "function": ("cardiac_function", "volume_curves", "find_ed_es", "ejection_fraction", "myocardial_mass", "agreement"),
    "figures": ("function_figure", "bland_altman_figure"),
}
__getattr__, __all__ = lazy_exports(__name__, _EXPORTS)
