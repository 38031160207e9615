"""Train NPC on real ACDC slices on a CPU, with validation, best-model export and resume.

On a machine where anything else runs, set ``OMP_NUM_THREADS=1`` (2 threads were 5x slower there).

This is the schedule that produced ``monai_npc/weights/acdc.pt`` (see its ``meta``):

    python examples/train_acdc_cpu.py --data-dir ../shared/data/acdc_ssl4mis --out runs/acdc_cpu \\
        --iterations 3000 --export monai_npc/weights/acdc.pt

Run it again with the same arguments to resume (``runs/acdc_cpu/checkpoint.pt``); a larger
``--iterations`` extends the run. Patients are split at the patient level (seed 2023) into
``--n-train`` / ``--n-val``; each iteration trains ``--batch-size`` slice pairs in both
directions (ED->ES and ES->ED) with random flips and the paper's ACDC loss. The model with the
best validation Dice (both directions) is exported with its configuration and metrics.

The paper's comparison under the same data, loss and budget: ``--top-k 128`` trains the unmasked
NPC (K = C) and ``--model voxelmorph`` MONAI's VoxelMorph (its best state dict is exported), e.g.

    python examples/train_acdc_cpu.py --data-dir ../shared/data/acdc_ssl4mis --out runs/acdc_vxm \
        --model voxelmorph --iterations 700

``--dataset camus`` trains on CAMUS instead (``--data-dir`` any layout ``monai_npc.data.camus``
reads, ED->ES of both views, the paper's CAMUS loss; the best model is the one with the best
validation LV-myocardium Dice), e.g. the VoxelMorph baseline of the ``npc_camus`` bundle:

    python examples/train_acdc_cpu.py --dataset camus --data-dir ../shared/data/camus_224 \
        --out runs/camus_vxm --model voxelmorph --iterations 700 \
        --split-file bundles/npc_camus/configs/camus224_split.json
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import torch

from monai_npc.engines import evaluate_pairs, load_pairs, train_pairs
from monai_npc.losses import RegistrationLoss, WarpedLabelDiceLoss
from monai_npc.networks.nets import NPCNet, VoxelMorphNet, save_pretrained


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--dataset", choices=("acdc", "camus"), default="acdc")
    p.add_argument("--data-dir", required=True)
    p.add_argument("--out", default="runs/acdc_cpu")
    p.add_argument("--iterations", type=int, default=3000)
    p.add_argument("--batch-size", type=int, default=8)
    p.add_argument("--model", choices=("npc", "voxelmorph"), default="npc")
    p.add_argument("--top-k", type=int, default=64, help="NPC: active filter pairs K (128 = C: unmasked)")
    p.add_argument("--steps", type=int, default=4, help="NPC: ODE steps for training and evaluation")
    p.add_argument("--n-train", type=int, default=56)
    p.add_argument("--n-val", type=int, default=14)
    p.add_argument("--seed", type=int, default=2023)
    p.add_argument("--split-file", default=None, help="JSON patient split (e.g. bundles/npc_acdc/configs/acdc70_split.json); replaces --n-train/--n-val")
    p.add_argument("--lr", type=float, default=1e-3)
    p.add_argument("--label-weight", type=float, default=0.0,
                   help="weak supervision: weight of the Dice of the warped training labels (0: unsupervised)")
    p.add_argument("--decay-per-epoch", type=float, default=0.997, help="the paper's exponential decay per epoch")
    p.add_argument("--val-every", type=int, default=100)
    p.add_argument("--checkpoint-every", type=int, default=20)
    p.add_argument("--export", default=None, help="also write the best model here (save_pretrained format)")
    args = p.parse_args()

    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    split = dict(n_train=args.n_train, n_val=args.n_val, n_test=0, seed=args.seed, split_file=args.split_file)
    camus = args.dataset == "camus"
    train = load_pairs(args.dataset, args.data_dir, "train", directions=("ED->ES",), **split)
    val = load_pairs(args.dataset, args.data_dir, "val", directions=("ED->ES",) if camus else ("ED->ES", "ES->ED"), **split)
    names = ("lv", "myo", "la") if camus else ("rv", "myo", "lv")
    key = "dice_myo" if camus else "dice_mean"
    iters_per_epoch = max(1, len(train) // args.batch_size)
    print(f"{len(train)} training slices (x2 directions), {len(val)} validation pairs, {iters_per_epoch} iterations per epoch")

    torch.manual_seed(args.seed)
    if args.model == "npc":
        net = NPCNet(num_steps=args.steps, top_k=args.top_k, detach_steps=True)
    else:
        net = VoxelMorphNet()
    log_path = out / "log.json"
    log = json.loads(log_path.read_text()) if log_path.is_file() else {"val": [], "best": None, "seconds": 0.0}
    t_start = time.time()
    seconds_before = log["seconds"]

    def validate(it: int, record: dict) -> None:
        if it % args.val_every:
            return
        res = evaluate_pairs(net, val, batch_size=16, names=names)
        net.train()
        by_dir = {}
        for d in sorted({pair["direction"] for pair in val}):
            vals = [x for x, pair in zip(res["per_pair"]["dice_mean"], val) if pair["direction"] == d]
            by_dir["dice_" + d.lower().replace("->", "_")] = sum(vals) / len(vals)
        entry = dict(iteration=it, epoch=it / iters_per_epoch, loss=record["loss"], **by_dir,
                     **{k: res["mean"][k] for k in ("dice_mean", "dice_myo", "dice_mean_initial", "sdlogj", "ndv", "folding_percent", "hd95")})
        log["val"].append(entry)
        log["seconds"] = seconds_before + time.time() - t_start
        print(json.dumps(entry), flush=True)
        if log["best"] is None or entry[key] > log["best"][key]:
            log["best"] = entry
            meta = dict(
                data=f"{args.dataset.upper()}, " + (f"split file {args.split_file}" if args.split_file else f"patient split seed {args.seed}: {args.n_train} train / {args.n_val} val patients"),
                schedule=dict(vars(args), iterations_done=it, epochs_done=it / iters_per_epoch),
                validation=entry,
                train_seconds=log["seconds"],
                command="python examples/train_acdc_cpu.py " + " ".join(f"--{k.replace('_', '-')} {v}" for k, v in vars(args).items() if v is not None),
            )
            for path in [out / "best.pt"] + ([args.export] if args.export else []):
                if args.model == "npc":
                    save_pretrained(net, path, meta)
                else:  # a plain state dict, as examples/compare_acdc.py --voxelmorph reads it
                    torch.save(net.state_dict(), path)
        log_path.write_text(json.dumps(log, indent=1))

    train_pairs(
        net, train, RegistrationLoss(args.dataset), args.iterations, args.batch_size, lr=args.lr, seed=args.seed,
        lr_decay=args.decay_per_epoch ** (1.0 / iters_per_epoch), checkpoint=out / "checkpoint.pt",
        checkpoint_every=args.checkpoint_every, callback=validate,
        label_loss=WarpedLabelDiceLoss((1, 2, 3)) if args.label_weight > 0 else None, label_weight=args.label_weight,
    )


if __name__ == "__main__":
    main()
