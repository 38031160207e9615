"""``monai-npc brain-demo``: the 2-D brain breadth demo on six real T1 slices (paper Appendix "Deformation breadth")."""

from __future__ import annotations

import argparse
from typing import Any


def add_parser(subparsers: Any) -> argparse.ArgumentParser:
    parser = subparsers.add_parser(
        "brain-demo",
        help="2-D brain breadth demo: train a C=128, K=64 NPC on six T1 slices, timelapse, filter quads, landmarks",
        description=(
            "Train a single-stage NPC (C = 128, K = 64) on 11 of the 15 inter-subject pairs of the six ANTs "
            "T1 slices (plus random affine/elastic perturbations and flips), or load --model, then write the "
            "ODE timelapse, the filter quads, the r16 <-> r85 landmark-curve distances and metrics.json."
        ),
    )
    parser.add_argument("--out", required=True, help="output folder")
    parser.add_argument("--data", default=None, help="folder of r16slice.jpg ... (default: ../shared/data/brain2d or $MONAI_NPC_BRAIN2D)")
    parser.add_argument("--model", default=None, help="evaluate this model (shipped name, e.g. brain2d, or file) instead of training")
    parser.add_argument("--iterations", type=int, default=300, help="training iterations (default 300)")
    parser.add_argument("--batch-size", type=int, default=2, help="pairs per batch, both directions (default 2)")
    parser.add_argument("--copies", type=int, default=12, help="perturbed copies per training pair (default 12)")
    parser.add_argument("--seed", type=int, default=0, help="seed (default 0)")
    parser.add_argument("--threads", type=int, default=1, help="torch CPU threads (default 1)")
    parser.add_argument("--no-progress", action="store_true", help="hide the progress bar")
    parser.set_defaults(func=run)
    return parser


def run(args: argparse.Namespace) -> int:
    import torch

    from monai_npc.extras.brain.demo import BrainConfig, run_brain_demo

    if args.iterations < 1:
        raise ValueError(f"--iterations must be >= 1, got {args.iterations}.")
    torch.set_num_threads(max(1, args.threads))
    cfg = BrainConfig(iterations=args.iterations, batch_size=args.batch_size, copies=args.copies, seed=args.seed)
    m = run_brain_demo(args.data, args.out, cfg, model=args.model, progress=not args.no_progress)
    lm = m["landmarks"]
    print(
        f"held-out NCC {m['mean']['ncc_before']:.3f} -> {m['mean']['ncc_after']:.3f}, folding {m['mean']['folding_percent']:.3f} %; "
        f"r16 <-> r85 landmark mean symmetric distance {lm['msd_before']:.2f} -> {lm['msd_after']:.2f} mm "
        f"(Hausdorff {lm['hausdorff_before']:.2f} -> {lm['hausdorff_after']:.2f} mm)"
    )
    return 0
