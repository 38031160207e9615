"""Whole short-axis stacks as a clinician hands them over: NPC vs SimpleITK demons, by pathology group.

    python benchmarks/whole_stack.py --data-dir ../shared/data/acdc_official_test --out runs/whole_stack
    python benchmarks/whole_stack.py --data-dir DIR --patients 2 --out runs/ws_smoke      # first 2 patients
    python benchmarks/whole_stack.py --data-dir DIR --no-demons                           # NPC only

For every study of ``--data-dir`` (official ACDC layout: ``patientNNN/patientNNN_frameFF.nii.gz``
+ ``_gt`` + ``Info.cfg``; see :mod:`monai_npc.apps.stacks` for the other layouts), both
directions ED->ES and ES->ED are registered on the whole stack (full field of view, native
spacing, every slice) with

- ``npc``: ``monai_npc.register(moving, fixed, model=--model, moving_label=...)``: no label on
  the fixed frame;
- ``demons``: SimpleITK fast symmetric-forces demons slice by slice at the fixed image's native
  grid, each slice scaled to [0, 1] (``--demons-iterations``, default 100: the whole 100-pair ACDC test set in about
  23 min on one thread; field smoothing
  ``--demons-smoothing`` 1.5 voxels, as ``benchmarks/heldout.py``).

The moving label is carried across and scored on the fixed grid against the fixed ``_gt``: 3-D
Dice per structure (RV, Myo, LV) and their mean, HD95 in mm (header spacing), % folding
(``det J <= 0``), seconds per pair on ``--threads`` threads (default 1), per pathology group
(``Group:`` of Info.cfg), overall and per initial-Dice bucket (< 0.55, 0.55-0.70, >= 0.70).

Writes ``per_pair.jsonl`` (a rerun into the same ``--out`` skips the pairs it holds; ``--restart``
starts afresh), ``per_pair.csv``, ``metrics.json``, ``results.md`` and ``groups.png``.
"""

from __future__ import annotations

import argparse
from pathlib import Path


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--data-dir", required=True, help="folder of studies (official ACDC layout, or see monai_npc.apps.stacks)")
    p.add_argument("--model", default="acdc", help="shipped model name, save_pretrained file or bundle folder")
    p.add_argument("--out", default="runs/whole_stack", help="output folder")
    p.add_argument("--no-demons", action="store_true", help="NPC only")
    p.add_argument("--no-npc", action="store_true", help="demons only (e.g. before the NPC model changes; a later run adds NPC)")
    p.add_argument("--patients", type=int, default=None, help="only the first N studies (sorted by name)")
    p.add_argument("--demons-iterations", type=int, default=100, help="demons iterations per slice (100: about 14 s per 10-slice pair on one thread)")
    p.add_argument("--demons-smoothing", type=float, default=1.5, help="Gaussian field smoothing (voxels)")
    p.add_argument("--refine-iterations", type=int, default=None, help="NPC test-time refinement steps (default: the weights')")
    p.add_argument("--field-of-view", default=None, choices=("image", "heart", "heart-stack", "image+heart", "image>heart"),
                   help="NPC model grid (default: the weights' own, the heart window for acdc; 'image': the whole field of view)")
    p.add_argument("--no-basal-descent", action="store_true",
                   help="score the in-plane labels (default, for every method: ED->ES basal RV slices the base leaves cleared, ES->ED the basal slices the structures re-enter filled)")
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--restart", action="store_true", help="ignore the pairs already in --out/per_pair.jsonl")
    p.add_argument("--strict", action="store_true", help="stop at the first unusable study instead of skipping it")
    args = p.parse_args()

    import SimpleITK as sitk
    import torch

    from monai_npc.apps.stacks import evaluate_studies
    from monai_npc.runtime import silence_third_party

    silence_third_party()
    torch.set_num_threads(args.threads)
    sitk.ProcessObject.SetGlobalDefaultNumberOfThreads(args.threads)
    sitk.ProcessObject.SetGlobalWarningDisplay(False)  # "unexpected scales in sform" on every ACDC file
    out = Path(args.out)
    result = evaluate_studies(
        args.data_dir, out, model=args.model, with_demons=not args.no_demons, with_npc=not args.no_npc, demons_iterations=args.demons_iterations,
        demons_smoothing=args.demons_smoothing, max_studies=args.patients, threads=args.threads,
        refine_iterations=args.refine_iterations, resume=not args.restart, strict=args.strict, basal_descent=not args.no_basal_descent,
        field_of_view=args.field_of_view,
    )
    for s in result["skipped"]:
        print(f"skipped {s['study']}: {s['reason']}")
    if (out / "results.md").is_file():
        print((out / "results.md").read_text())
    print(f"{result['n_pairs']} pairs of {result['n_studies']} studies; wrote {out}/metrics.json, results.md, per_pair.csv, groups.png")


if __name__ == "__main__":
    main()
