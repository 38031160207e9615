"""Whole short-axis stacks in folders: find the studies, register them, evaluate them against demons.

- :mod:`.studies`: the studies under a folder (official ACDC layout, 4-D cines, plain pairs, DICOM series);
- :mod:`.pairs`: one pair registered by NPC (with the basal through-plane rules) or by the demons baseline;
- :mod:`.inference`: :func:`infer_studies`, every pair registered and written;
- :mod:`.evaluation`: :func:`evaluate_studies`, NPC against demons per pair, resumable;
- :mod:`.report`: the summary by group and difficulty, the Markdown table, the group figure;
- :mod:`.bundle`: :class:`StackInference` / :class:`StackEvaluation`, what the bundles' configs run;
- :mod:`.training`: :class:`StackTraining` (the ACDC bundle's ``train.json``: pack on first use, whole-stack
  training, ``models/model.pt``), :func:`pack_for_training`.

Names are imported on first use.
"""

from __future__ import annotations

from monai_npc.runtime import lazy_exports

_EXPORTS = {
    "studies": ("GROUPS", "STRUCTURES", "Phase", "StudyPair", "Study", "find_studies", "read_phase", "read_phase_label"),
    "pairs": ("register_pair", "basal_descent_label", "descend_registration", "demons_pair"),
    "inference": ("infer_studies",),
    "evaluation": ("label_metrics", "initial_bucket", "evaluate_studies"),
    "report": ("BUCKETS", "summarise", "results_table", "group_figure"),
    "bundle": ("StackInference", "StackEvaluation"),
    "training": ("StackTraining", "pack_for_training", "check_stack_training", "motion_window_centre"),
}
__getattr__, __all__ = lazy_exports(__name__, _EXPORTS)
