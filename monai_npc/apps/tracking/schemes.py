"""Names of the tracking schemes (no heavy imports: the command line's ``--help`` reads them).

See :mod:`monai_npc.apps.tracking.track` for what each does and docs/tracking.md for the measurements
that chose :data:`DEFAULT_SCHEME`.
"""

SCHEMES = ("direct", "sequential", "average", "bidirectional", "anchored")

#: the chain of consecutive-frame registrations (each sees only the motion between two frames), each frame's
#: field corrected against the reference frame so that errors do not add up along the cycle
#: (docs/design_notes.md, "apps/tracking")
DEFAULT_SCHEME = "anchored"
