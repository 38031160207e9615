"""Names of the tracking schemes (no heavy imports: the command line's ``--help`` reads them).

See :mod:`monai_npc.tracking.track` for what each does and docs/tracking.md for the measurements
that chose :data:`DEFAULT_SCHEME`.
"""

SCHEMES = ("direct", "sequential", "average", "bidirectional")

#: chosen on the phantom cines and patient090 (docs/tracking.md)
DEFAULT_SCHEME = "direct"
