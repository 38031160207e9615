"""Names of the tracking schemes (no heavy imports: the command line's ``--help`` reads them).

See :mod:`monai_npc.tracking.track` for what each does and docs/tracking.md for the measurements
that chose :data:`DEFAULT_SCHEME`.
"""

SCHEMES = ("direct", "sequential", "average", "bidirectional")

#: chosen on the phantom cines and patient090 (docs/tracking.md): on the phantoms (small, smooth
#: motion) ``direct`` is marginally better (Dice through the cycle 0.969 vs 0.961); on the real
#: cine ``sequential`` is clearly better at ES (LV Dice 0.863 vs 0.829, LV EF error -7.1 vs -13.2
#: points), as each registration then sees only the motion between consecutive frames
DEFAULT_SCHEME = "sequential"
