"""``monai-npc phantom``: write cardiac (ACDC layout) or echo (CAMUS layout) phantoms to disk.

The phantoms carry their true ED->ES displacement (``*_ddf_ED_ES``) and its inverse
(``*_ddf_ES_ED``) next to the images, in voxels, MONAI ``Warp`` convention; the ACDC and CAMUS
loaders of ``monai_npc.data`` read the folders back unchanged.
"""

from __future__ import annotations

import argparse


def add_parser(sub) -> argparse.ArgumentParser:
    p = sub.add_parser(
        "phantom",
        help="write ACDC-layout cardiac or CAMUS-layout echo phantoms with true motion",
        description=__doc__,
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    p.add_argument("dataset", choices=("acdc", "camus"), help="which layout (and phantom) to write")
    p.add_argument("--out", required=True, help="output folder (created; existing patients are overwritten)")
    p.add_argument("--patients", type=int, default=10, help="number of patients")
    p.add_argument("--seed", type=int, default=0, help="random seed (patient k depends only on seed and k)")
    p.add_argument("--first-id", type=int, default=1, help="number of the first patient folder")
    p.add_argument("--format", choices=("mhd", "nifti"), default="mhd", help="CAMUS release to mimic")
    p.add_argument("--no-progress", action="store_true", help="hide the progress bar")
    p.set_defaults(func=run)
    return p


def run(args: argparse.Namespace) -> int:
    from monai_npc.data.phantom_layouts import write_acdc_phantom, write_camus_phantom

    if args.patients < 1:
        raise ValueError(f"--patients must be at least 1, got {args.patients}")
    if args.first_id < 0:
        raise ValueError(f"--first-id must be non-negative, got {args.first_id}")
    progress = not args.no_progress
    if args.dataset == "acdc":
        folders = write_acdc_phantom(args.out, args.patients, args.seed, first_id=args.first_id, progress=progress)
    else:
        folders = write_camus_phantom(
            args.out, args.patients, args.seed, fmt=args.format, first_id=args.first_id, progress=progress
        )
    print(f"wrote {len(folders)} {args.dataset.upper()} phantom patient(s) to {args.out}")
    return 0
