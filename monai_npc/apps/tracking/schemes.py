"""Names of the tracking schemes (no heavy imports: the command line's ``--help`` reads them).

See :mod:`monai_npc.apps.tracking.track` for what each does and docs/tracking.md for the measurements
that chose :data:`DEFAULT_SCHEME`.
"""

SCHEMES = ("direct", "sequential", "average", "bidirectional", "anchored")

#: chosen on the phantom cines and patient090 (docs/tracking.md, "Anchored tracking"): ``sequential``
#: beat ``direct`` at ES on the real cine (each registration sees only the motion between consecutive
#: frames), and ``anchored`` (the same chain, each frame's field corrected against the reference
#: frame) beats ``sequential`` on the phantoms (Dice through the cycle, drift) and on patient090 (ES
#: Dice, LV EF error, drift) in about the same time
DEFAULT_SCHEME = "anchored"
