"""Whole-stack NPC training on one GPU for a fixed wall time: pack the data, train, export.

    # once, on a machine with ../shared/data (about 16 MB, 25 s):
    OMP_NUM_THREADS=1 python examples/train_stacks_gpu.py pack --out .cache/acdc70_stacks.npz
    # on the GPU machine (7.5 minutes, then saves; --resume continues a committed checkpoint):
    python examples/train_stacks_gpu.py train --pack .cache/acdc70_stacks.npz --out $OUT --minutes 7.5 [--bf16] \\
        [--resume runs/stacks/checkpoint.pt] [--network slice_context --init acdc]
    # the best state as shipped weights (register(model=...), load_pretrained):
    python examples/train_stacks_gpu.py export runs/stacks/best.pt runs/stacks/acdc_stacks.pt --meta-from acdc
    # a through-plane head on the frozen acdc network (CPU-friendly: the 2-D fields are cached once):
    OMP_NUM_THREADS=1 python examples/train_stacks_gpu.py train-through-plane --pack .cache/acdc70_stacks.npz --out runs/tp

``pack`` crops every ACDC SSL4MIS patient's ED and ES stacks to a 128 x 128 window (by default ``register``'s
label-free window, :func:`monai_npc.apps.stacks.training.motion_window_centre`: ``motion_centre`` of the whole
stack with the SSL4MIS pixel size taken as 360 mm over the larger side, as ``benchmarks/localisation.py``) and records the
split of ``bundles/npc_acdc/configs/acdc70_split.json``. ``train`` is :func:`monai_npc.engines.stack_training.train_stacks`
(what it writes: docs/training_gpu.md). It runs on the CPU too (a few steps: ``--minutes 1 --max-epochs 1``), and
on several GPUs under ``torchrun --nproc_per_node=N`` (each process ``--stacks-per-batch`` stacks of every step).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import List, Optional

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

SPLIT = ROOT / "bundles" / "npc_acdc" / "configs" / "acdc70_split.json"
DATA = ROOT.parent / "shared" / "data" / "acdc_ssl4mis"


def pack(args: argparse.Namespace) -> int:
    from monai_npc.apps.stacks.training import motion_window_centre
    from monai_npc.data.stack_pack import label_union_centre, pack_acdc_stacks

    centre = motion_window_centre if args.centre == "motion" else label_union_centre
    out = pack_acdc_stacks(args.data_dir, args.out, args.split_file, size=args.size, centre=centre, centre_name=args.centre,
                           patients=args.patients.split(",") if args.patients else None)
    print(f"{out}: {out.stat().st_size / 1e6:.1f} MB")
    return 0


def train(args: argparse.Namespace) -> int:
    from monai_npc.engines.stack_training import StackTrainingConfig, train_stacks
    from monai_npc.runtime import distributed

    architecture, network = args.network, json.loads(args.network_args)
    if architecture.lstrip().startswith("{"):  # the earlier spelling: --network '{JSON}' (NPCNet arguments)
        architecture, network = "npc2d", {**json.loads(architecture), **network}
    config = StackTrainingConfig(
        pack=args.pack, out_dir=args.out, minutes=args.minutes, max_epochs=args.max_epochs, stacks_per_batch=args.stacks_per_batch,
        learning_rate=args.lr, lr_decay=args.lr_decay, weight_decay=args.weight_decay, label_weight=args.label_weight,
        volume_weight=args.volume_weight,
        val_every=args.val_every, save_every=args.save_every, bf16=args.bf16, device=args.device, seed=args.seed,
        init=args.init, resume=args.resume, architecture=architecture, network=network, timing_steps=args.timing_steps,
        trainable=args.trainable, augment=json.loads(args.augment),
        grad_clip=args.grad_clip or None, context_lr_scale=args.context_lr_scale)
    with distributed() as (rank, _):  # under torchrun: the process group (one process per GPU)
        summary = train_stacks(config)
    if rank == 0:
        print(json.dumps({k: v for k, v in summary.items() if k != "files"}))
    return 0


def train_through_plane(args: argparse.Namespace) -> int:
    from monai_npc.engines.through_plane_training import ThroughPlaneTrainingConfig, train_through_plane as run

    config = ThroughPlaneTrainingConfig(
        pack=args.pack, out_dir=args.out, init=args.init, minutes=args.minutes, max_steps=args.max_steps, draws=args.draws,
        stacks_per_step=args.stacks_per_step, learning_rate=args.lr, label_weight=args.label_weight,
        volume_weight=args.volume_weight, val_every=args.val_every,
        seed=args.seed, head=json.loads(args.head), augment=json.loads(args.augment), num_steps=args.num_steps,
        flip_ensemble=args.flip_ensemble, label_evidence=args.label_evidence)
    summary = run(config)
    print(json.dumps({k: str(v) if isinstance(v, Path) else v for k, v in summary.items()}))
    return 0


def export(args: argparse.Namespace) -> int:
    from monai_npc.engines.stack_training import export_weights

    out = export_weights(args.checkpoint, args.out, json.loads(args.meta), meta_from=args.meta_from, **json.loads(args.overrides))
    print(out)
    return 0


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = p.add_subparsers(dest="command", required=True)
    a = sub.add_parser("pack", help="ACDC SSL4MIS stacks -> one small .npz")
    a.add_argument("--data-dir", type=Path, default=DATA)
    a.add_argument("--out", type=Path, default=ROOT / ".cache" / "acdc70_stacks.npz")
    a.add_argument("--split-file", type=Path, default=SPLIT)
    a.add_argument("--size", type=int, default=128)
    a.add_argument("--centre", choices=("motion", "labels"), default="motion",
                   help="window centre: register's label-free localiser (default) or the labels' union box")
    a.add_argument("--patients", default="", help="comma-separated patient ids (default: all)")
    t = sub.add_parser("train", help="train for a fixed wall time; writes checkpoint, log and curve into --out")
    t.add_argument("--pack", required=True)
    t.add_argument("--out", required=True)
    t.add_argument("--minutes", type=float, default=7.5, help="wall-time budget of this run, set-up included")
    t.add_argument("--max-epochs", type=int, default=None)
    t.add_argument("--resume", default=None, help="a checkpoint.pt of an earlier run to continue")
    t.add_argument("--init", default=None, help="weights to start from (e.g. acdc); default: from scratch")
    t.add_argument("--bf16", action="store_true", help="bf16 autocast of the network (CUDA only)")
    t.add_argument("--device", default="auto")
    t.add_argument("--stacks-per-batch", type=int, default=4)
    t.add_argument("--lr", type=float, default=1e-3)
    t.add_argument("--lr-decay", type=float, default=0.995, help="per epoch")
    t.add_argument("--weight-decay", type=float, default=1e-4)
    t.add_argument("--label-weight", type=float, default=1.0)
    t.add_argument("--volume-weight", type=float, default=0.0, help="weight of the warped structures' relative volume "
                   "error in the loss (what an EF from the transform reads)")
    t.add_argument("--val-every", type=int, default=5)
    t.add_argument("--save-every", type=int, default=10)
    t.add_argument("--seed", type=int, default=0)
    t.add_argument("--grad-clip", type=float, default=1.0, help="largest total gradient norm per step; 0: none")
    t.add_argument("--augment", default="{}", help="StackAugmentConfig settings as JSON over the defaults, e.g. "
                   "'{\"intensity_prob\": 0, \"invert_prob\": 0, \"rotate_deg\": 0}'")
    t.add_argument("--context-lr-scale", type=float, default=1.0,
                   help="slice_context: its heads' learning rate over the rest's (new heads beside pretrained 2-D weights)")
    t.add_argument("--trainable", choices=("all", "context"), default="all",
                   help="all parameters, or (slice_context, through_plane) only the heads, the shared 2-D part frozen")
    t.add_argument("--timing-steps", type=int, default=5)
    t.add_argument("--network", default="npc2d", help="npc2d (the 2-D NPC slice by slice, default), slice_context "
                   "(SliceContextNPC: neighbouring slices in, a 3-D field with a through-plane component out) or through_plane "
                   "(ThroughPlaneNPC: the 2-D field, then a through-plane head; --init may be its weights)")
    t.add_argument("--network-args", default="{}", help="NPCNet arguments as JSON, over the train_crops.json network "
                   "(slice_context: also context_channels; through_plane: head_width, head_pool, evidence_window)")
    h = sub.add_parser("train-through-plane", help="a ThroughPlaneNPC's head alone on frozen 2-D weights' fields "
                       "(cached once; CPU-friendly); writes best.pt (shipped format), log and curve into --out")
    h.add_argument("--pack", required=True)
    h.add_argument("--out", required=True)
    h.add_argument("--init", default="acdc", help="the frozen 2-D weights (their refinement settings and meta are kept), or an earlier run's best.pt to continue")
    h.add_argument("--minutes", type=float, default=30.0, help="wall-time budget, caching included")
    h.add_argument("--max-steps", type=int, default=None)
    h.add_argument("--draws", type=int, default=4, help="cached augmentations per training stack (the first unaugmented)")
    h.add_argument("--stacks-per-step", type=int, default=2)
    h.add_argument("--lr", type=float, default=1e-3)
    h.add_argument("--label-weight", type=float, default=3.0)
    h.add_argument("--volume-weight", type=float, default=0.0, help="weight of the warped structures' relative volume "
                   "error in the loss (what an EF from the transform reads)")
    h.add_argument("--val-every", type=int, default=100, help="steps")
    h.add_argument("--seed", type=int, default=0)
    h.add_argument("--head", default="{}", help="head_width, head_pool, evidence_window as JSON")
    h.add_argument("--augment", default="{}", help="StackAugmentConfig settings as JSON over the defaults")
    h.add_argument("--num-steps", type=int, default=None, help="the 2-D part's ODE steps while caching and validating "
                   "(register's acdc setting: 6; default: the weights' own)")
    h.add_argument("--flip-ensemble", type=int, default=1, help="the 2-D part's in-plane flip ensemble while caching and "
                   "validating (register's acdc setting: 2)")
    h.add_argument("--label-evidence", action="store_true", help="train a label head beside --init's trained head: "
                   "it reads the moving label too (register passes the user's); the images-only field stays --init's")
    e = sub.add_parser("export", help="a checkpoint.pt / best.pt -> shipped weights format")
    e.add_argument("checkpoint")
    e.add_argument("out")
    e.add_argument("--meta-from", default=None, help="weights whose meta to start from, e.g. acdc")
    e.add_argument("--meta", default="{}", help="meta entries as JSON")
    e.add_argument("--overrides", default="{}", help="NPCNet arguments for inference as JSON, e.g. {\"refine_iterations\": 50}")
    return p


def main(argv: Optional[List[str]] = None) -> int:
    args = parser().parse_args(argv)
    try:
        return {"pack": pack, "train": train, "train-through-plane": train_through_plane, "export": export}[args.command](args)
    except (ValueError, FileNotFoundError, FileExistsError) as err:  # a user error: one line, no traceback
        print(f"train_stacks_gpu.py {args.command}: error: {err}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    raise SystemExit(main())
