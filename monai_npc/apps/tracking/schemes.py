"""Names of the tracking schemes (no heavy imports: the command line's ``--help`` reads them).

See :mod:`monai_npc.apps.tracking.track` for what each does and docs/tracking.md for the measurements
that chose :data:`DEFAULT_SCHEME`.
"""

SCHEMES = ("direct", "sequential", "average", "bidirectional", "anchored")

#: the reference frame registered onto every frame with ``register``'s own pipeline (the reference label in the
#: label-guided refinement, the label prior where the weights have one): no chain, so nothing adds up along the
#: cycle, and every frame is what ``register(reference, frame, moving_label=label)`` gives (docs/design_notes.md,
#: "apps/tracking")
DEFAULT_SCHEME = "direct"
