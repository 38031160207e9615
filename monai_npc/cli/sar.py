"""``monai-npc sar``: synthetic SAR pairs, training and evaluation against global phase correlation."""

from __future__ import annotations

import argparse
from typing import Any


def _data_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--size", type=int, default=256, help="image side in pixels (default 256)")
    p.add_argument("--max-shift", type=float, default=4.0, help="global shift range per axis, pixels (default 4)")
    p.add_argument("--nonrigid", type=float, default=3.0, help="largest non-rigid displacement, pixels (default 3)")
    p.add_argument("--looks", type=int, nargs=2, default=(2, 6), metavar=("MIN", "MAX"), help="number of looks range (default 2 6)")
    p.add_argument("--change-probability", type=float, default=0.3, help="share of pairs with changed regions (default 0.3)")


def _data_config(args: argparse.Namespace):
    from monai_npc.extras.sar.synthetic import SARPairConfig

    return SARPairConfig(size=args.size, max_shift=args.max_shift, nonrigid=args.nonrigid, looks=tuple(args.looks),
                         change_probability=args.change_probability)


def add_parser(subparsers: Any) -> argparse.ArgumentParser:
    parser = subparsers.add_parser(
        "sar",
        help="SAR co-registration: synthetic pairs, training, evaluation against phase correlation",
        description="SAR-SAR co-registration with NPC (paper Appendix 'Sub-meter SAR') against global phase correlation.",
    )
    sub = parser.add_subparsers(dest="sar_command", metavar="ACTION", required=True)

    g = sub.add_parser("generate", help="write synthetic speckled pairs with their true displacement (TIFF + .npy + pairs.csv)")
    g.add_argument("--out", required=True, help="output folder")
    g.add_argument("--n", type=int, default=40, help="number of pairs (default 40)")
    g.add_argument("--seed", type=int, default=100_000, help="seed of the first pair (default 100000, the test split)")
    _data_args(g)
    g.add_argument("--no-progress", action="store_true", help="hide the progress bar")
    g.set_defaults(func=run_generate)

    t = sub.add_parser("train", help="train the coarse + fine cascade on synthetic pairs (resumable), then evaluate it")
    t.add_argument("--out", required=True, help="output folder (checkpoint.pt, sar.pt, train_history.json, metrics.json, figures)")
    t.add_argument("--iterations", type=int, default=2000, help="total Adam iterations (default 2000)")
    t.add_argument("--pairs", type=int, default=200, help="synthetic training pairs (default 200)")
    t.add_argument("--crop", type=int, default=128, help="training tile side, 0 = whole pairs (default 128)")
    t.add_argument("--batch-size", type=int, default=4, help="tiles per batch (default 4)")
    t.add_argument("--lr", type=float, default=2e-3, help="Adam learning rate (default 2e-3)")
    t.add_argument("--supervision", type=float, default=1.0, help="weight of the endpoint error to the true field; 0 = unsupervised (default 1)")
    t.add_argument("--eval-pairs", type=int, default=40, help="held-out pairs evaluated at the end (default 40; 0 skips)")
    t.add_argument("--threads", type=int, default=1, help="torch CPU threads (default 1)")
    t.add_argument("--init", default=None, help="fine-tune: start from these weights (shipped name, e.g. sar, or a file)")
    _data_args(t)
    t.add_argument("--no-progress", action="store_true", help="hide the progress bars")
    t.set_defaults(func=run_train)

    r = sub.add_parser("train-real", help="fine-tune on real scenes (training pixels of the sar_real scenes) with known warps")
    r.add_argument("--out", required=True, help="output folder (checkpoint.pt, sar.pt, train_history.json); resumes a checkpoint there")
    r.add_argument("--data", default=None, help="scene folder (default: ../shared/data/sar_real beside the repository)")
    r.add_argument("--iterations", type=int, default=5000, help="total Adam iterations (default 5000)")
    r.add_argument("--batch-size", type=int, default=2, help="256 x 256 pairs per batch (default 2)")
    r.add_argument("--lr", type=float, default=1e-3, help="Adam learning rate (default 1e-3, x 0.9995 per iteration)")
    r.add_argument("--lr-decay", type=float, default=0.9995, help="learning-rate factor per iteration (default 0.9995)")
    r.add_argument("--supervision", type=float, default=1.0, help="weight of the endpoint error to the known field (default 1)")
    r.add_argument("--init", default="sar", help="starting weights (shipped name or file; default sar); 'none' trains from scratch")
    r.add_argument("--max-shift", type=float, default=8.0, help="global shift range of the training warps, pixels (default 8)")
    r.add_argument("--synthetic-fraction", type=float, default=0.25, help="share of synthetic pairs in the batches (default 0.25)")
    r.add_argument("--threads", type=int, default=1, help="torch CPU threads (default 1)")
    r.add_argument("--no-progress", action="store_true", help="hide the progress bars")
    r.set_defaults(func=run_train_real)

    b = sub.add_parser("bench-real", help="real-scene benchmark: none, skimage phase correlation, NPC (protocol: monai_npc.extras.sar.real)")
    b.add_argument("--out", default=None, help="write metrics.json and per_pair.csv here (optional)")
    b.add_argument("--data", default=None, help="scene folder (default: ../shared/data/sar_real beside the repository)")
    b.add_argument("--model", default="sar", help="shipped name or save_pretrained file (default: sar)")
    b.add_argument("--split", choices=("test", "train", "both"), default="both", help="pairs to evaluate (default both)")
    b.add_argument("--max-shift", type=float, nargs="+", default=[6.0, 8.0], help="global shift ranges, pixels (default 6 8)")
    b.add_argument("--threads", type=int, default=1, help="torch CPU threads (default 1)")
    b.add_argument("--truth-check", action="store_true",
                   help="also measure how far each pair's truth is from the images' best alignment (inter-date misregistration)")
    b.add_argument("--no-progress", action="store_true", help="hide the progress bar")
    b.set_defaults(func=run_bench_real)

    e = sub.add_parser("evaluate", help="NCC / endpoint error of NPC, phase correlation and no registration; panel figure")
    e.add_argument("--out", required=True, help="output folder (metrics.json, per_pair.csv, sar_panel.png, filter quads)")
    e.add_argument("--model", default="sar", help="shipped name or save_pretrained file (default: sar)")
    e.add_argument("--data", default=None, help="pair folder from `sar generate` (default: generate --n pairs with --seed)")
    e.add_argument("--n", type=int, default=40, help="pairs to generate when --data is not given (default 40)")
    e.add_argument("--seed", type=int, default=100_000, help="first seed when generating (default 100000, the test split)")
    e.add_argument("--margin", type=int, default=16, help="border pixels left out of the metrics (default 16)")
    e.add_argument("--rows", type=int, default=4, help="pairs in the panel figure (default 4)")
    e.add_argument("--threads", type=int, default=1, help="torch CPU threads (default 1)")
    _data_args(e)
    e.add_argument("--no-progress", action="store_true", help="hide the progress bar")
    e.set_defaults(func=run_evaluate)
    return parser


def _summary(metrics) -> str:
    m, w, n = metrics["mean"], metrics["wins"], metrics["n_pairs"]
    text = (f"NCC none {m['ncc_none']:.3f} | phase correlation {m['ncc_phase_correlation']:.3f} | NPC {m['ncc_npc']:.3f}; "
            f"NPC beats phase correlation on NCC in {w['ncc']}/{n} pairs")
    if "epe_npc" in m:
        text += (f"\nendpoint error (px) none {m['epe_none']:.3f} | phase correlation {m['epe_phase_correlation']:.3f} | "
                 f"NPC {m['epe_npc']:.3f}; NPC lower in {w['epe']}/{n} pairs")
    return text


def run_generate(args: argparse.Namespace) -> int:
    from monai_npc.extras.sar.experiment import write_pair_folder

    if args.n < 1:
        raise ValueError(f"--n must be >= 1, got {args.n}.")
    write_pair_folder(args.out, args.n, args.seed, _data_config(args), progress=not args.no_progress)
    print(f"wrote {args.n} pairs and pairs.csv to {args.out}")
    return 0


def run_train(args: argparse.Namespace) -> int:
    from pathlib import Path

    import torch

    from monai_npc.extras.sar.experiment import run_sar_evaluation
    from monai_npc.extras.sar.synthetic import make_sar_pairs
    from monai_npc.extras.sar.train import TEST_SEED, SARTrainConfig, train_sar

    torch.set_num_threads(max(1, args.threads))
    cfg = SARTrainConfig(n_pairs=args.pairs, crop=args.crop, iterations=args.iterations, batch_size=args.batch_size,
                         lr=args.lr, supervision=args.supervision, init=args.init)
    data = _data_config(args)
    net = train_sar(args.out, cfg, data, progress=not args.no_progress)
    print(f"weights: {Path(args.out) / 'sar.pt'}")
    if args.eval_pairs > 0:
        pairs = make_sar_pairs(args.eval_pairs, TEST_SEED, data)
        metrics = run_sar_evaluation(net, pairs, args.out, progress=not args.no_progress)
        print(_summary(metrics))
    return 0


def run_evaluate(args: argparse.Namespace) -> int:
    import torch

    from monai_npc.extras.sar.experiment import read_pair_folder, run_sar_evaluation
    from monai_npc.extras.sar.synthetic import make_sar_pairs
    from monai_npc.networks.nets import load_pretrained

    torch.set_num_threads(max(1, args.threads))
    net = load_pretrained(args.model)
    if args.data:
        pairs = read_pair_folder(args.data)
    else:
        if args.n < 1:
            raise ValueError(f"--n must be >= 1, got {args.n}.")
        pairs = make_sar_pairs(args.n, args.seed, _data_config(args), progress=not args.no_progress)
    metrics = run_sar_evaluation(net, pairs, args.out, figure_rows=args.rows, margin=args.margin, progress=not args.no_progress,
                                 extra={"model": str(args.model), "data": args.data or {"seed": args.seed, "n": args.n}})
    print(_summary(metrics))
    return 0


def run_train_real(args: argparse.Namespace) -> int:
    from pathlib import Path

    import torch

    from monai_npc.extras.sar.real import DEFAULT_ROOT, read_scenes
    from monai_npc.extras.sar.train import RealTrainConfig, SARTrainConfig, train_sar_real

    torch.set_num_threads(max(1, args.threads))
    if args.iterations < 1:
        raise ValueError(f"--iterations must be >= 1, got {args.iterations}.")
    scenes = read_scenes(args.data or DEFAULT_ROOT, ["farmland", "wenchuan", "jeddah_s1"])
    cfg = SARTrainConfig(crop=0, iterations=args.iterations, batch_size=args.batch_size, lr=args.lr, lr_decay=args.lr_decay,
                         supervision=args.supervision, init=None if args.init == "none" else args.init)
    real = RealTrainConfig(max_shift=args.max_shift, synthetic_fraction=args.synthetic_fraction)
    train_sar_real(args.out, scenes, cfg, real, progress=not args.no_progress)
    print(f"weights: {Path(args.out) / 'sar.pt'}")
    return 0


def run_bench_real(args: argparse.Namespace) -> int:
    import torch

    from monai_npc.extras.sar.bench_real import format_table, format_truth_check, run_real_benchmark

    torch.set_num_threads(max(1, args.threads))
    splits = ("test", "train") if args.split == "both" else (args.split,)
    result = run_real_benchmark(args.model, args.data, splits, args.max_shift, out=args.out, progress=not args.no_progress,
                                truth_check=args.truth_check)
    print(format_table(result))
    if args.truth_check:
        print()
        print(format_truth_check(result))
    return 0
