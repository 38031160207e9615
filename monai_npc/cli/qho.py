"""``monai-npc qho``: recover the harmonic oscillator's eigenstates and energies from wavefunction pairs."""

from __future__ import annotations

import argparse
from typing import Any


def add_parser(subparsers: Any) -> argparse.ArgumentParser:
    parser = subparsers.add_parser(
        "qho",
        help="quantum harmonic oscillator: learn eigenstates and energies from time-evolved pairs",
        description=(
            "Train NPC on random wavefunction pairs (Psi(0), Psi(tau)) of the 1-D quantum harmonic "
            "oscillator, then match the learned filters to the Hermite functions and the calibrated "
            "rates to E_n = n + 1/2. Writes metrics.json, filters.npy, energies.npy and PNG figures."
        ),
    )
    parser.add_argument("--tau-max", type=float, default=0.6, help="largest pair time (tau ~ U[0.05, tau_max]); default 0.6")
    parser.add_argument("--steps", type=int, default=8000, help="training steps (default 8000)")
    parser.add_argument("--seed", type=int, default=0, help="random seed (default 0)")
    parser.add_argument("--out", required=True, help="output directory")
    parser.add_argument("--batch-size", type=int, default=64, help="pairs per step (default 64)")
    parser.add_argument("--lr", type=float, default=1e-3, help="Adam learning rate (default 1e-3)")
    parser.add_argument("--eval-pairs", type=int, default=2048, help="held-out pairs for evaluation (default 2048)")
    parser.add_argument(
        "--compare",
        nargs="*",
        default=[],
        metavar="DIR",
        help="earlier output directories whose energy ladders are drawn next to this run's",
    )
    parser.add_argument("--threads", type=int, default=1, help="torch CPU threads (default 1; the model is tiny)")
    parser.add_argument("--no-progress", action="store_true", help="hide the progress bar")
    parser.set_defaults(func=run)
    return parser


def run(args: argparse.Namespace) -> int:
    import json

    import torch

    from monai_npc.extras.qho.experiment import run_qho
    from monai_npc.extras.qho.train import QHOConfig

    if args.threads < 1:
        raise ValueError(f"--threads must be >= 1, got {args.threads}.")
    torch.set_num_threads(args.threads)
    cfg = QHOConfig(
        tau_max=args.tau_max, steps=args.steps, seed=args.seed, batch_size=args.batch_size, lr=args.lr,
        threads=args.threads,
    )
    metrics = run_qho(cfg, args.out, progress=not args.no_progress, compare=args.compare, n_eval_pairs=args.eval_pairs)
    keys = ("median_overlap", "min_overlap", "max_energy_error", "tau_pearson", "hamiltonian_rel_error", "seconds")
    print(json.dumps({k: metrics[k] for k in keys}, indent=2))
    return 0
