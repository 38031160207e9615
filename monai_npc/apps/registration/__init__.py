"""One registration, top to bottom: ``monai_npc.register(moving, fixed)`` -> :class:`Registration`.

- :mod:`.api`: :func:`register`, the in-memory registration (``monai_npc.register``);
- :mod:`.result`: :class:`Registration` and the files it writes (:data:`OUTPUTS`);
- :mod:`.models`: :func:`resolve_model`, model profiles and register settings from the weights' meta;
- :mod:`.pipeline`: :func:`run_pipeline`: align, localise, model grid, every slice, field pasted back;
- :mod:`.align`: the rigid in-plane pre-alignment of two acquisitions;
- :mod:`.localize`: the heart window found from the two images alone;
- :mod:`.grids`: model grids on the fixed image;
- :mod:`.label_prior`: the label prior's part (its setting, its check, its probabilities of the fixed slices);
- :mod:`.files`: :func:`register_files` / :func:`register_batch`, the Python face of ``monai-npc register``;
- :mod:`.through_plane`: the basal rules of an ED/ES pair as a through-plane part of the transform.

Names are imported on first use (``import monai_npc.apps.registration.align`` does not load the network code).
"""

from __future__ import annotations

from monai_npc.runtime import lazy_exports

_EXPORTS = {
    "api": ("register",),
    "result": ("Registration", "OutputFolder", "OUTPUTS", "compact_label"),
    "models": ("resolve_model", "PHASE_CORRELATION", "is_phase_correlation", "model_profile", "register_settings", "ModelProfile",
               "PREPROCESSING", "FIELDS_OF_VIEW"),
    "pipeline": ("run_pipeline", "PipelineResult"),
    "files": ("register_files", "register_batch", "read_pairs_csv", "duplicate_outs", "BATCH_COLUMNS"),
    "through_plane": ("basal_through_plane",),
}
__getattr__, __all__ = lazy_exports(__name__, _EXPORTS)
