"""Train the ``acdc_heart`` label prior: a small 2-D U-Net of RV / myocardium / LV on ``register``'s heart window.

    python examples/train_acdc_label_prior.py --data-dir ../shared/data/acdc_ssl4mis \
        --out runs/acdc_label_prior --epochs 120 --threads 2

``register(model="acdc", moving_label=...)`` refines the network's field with a label-guided term;
the prior adds what a segmentation network sees on the fixed frame (``monai_npc.networks.nets.LabelPrior``,
``monai_npc.functional.label_prior``). It sees exactly the registration network's inputs: each
stack's heart window (``examples/train_acdc_stacks.py``'s :func:`stack_window`: ``register``'s
``heart-stack`` window at the SSL4MIS copy's native resolution), every slice min-maxed in it.

Data: the ED and ES frames of the 44 training patients of ``bundles/npc_acdc/configs/acdc70_split.json``
(826 slices); the validation and test patients of that split are never trained on, only scored
(3-D Dice per frame, every ``--val-every`` epochs), and no choice reads the official ACDC test set.
Augmentation: the window shifted by up to ``--jitter`` voxels, turned by up to 20 degrees, scaled by
up to 1.2, a random gamma (up to 1.5), brightness and noise. Loss: Dice + cross-entropy (MONAI
``DiceCELoss``), AdamW, cosine learning rate. The last epoch's network is written with
:func:`monai_npc.networks.nets.save_label_prior` (the shipped file: ``--epochs 120 --seed 0``,
about 60 min on two threads; 60 epochs, the first shipped prior, segment the validation frames a little
worse: 3-D Dice mean 0.895 against 0.903).

A checkpoint (network, optimiser, epoch, random state) is written every epoch (atomically) and a
run resumes from it.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from pathlib import Path
from typing import Dict, List

import numpy as np
import torch
import torch.nn.functional as F

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "examples"))

from monai.losses import DiceCELoss  # noqa: E402

from monai_npc.data.acdc import find_acdc_patients  # noqa: E402
from monai_npc.networks.nets.label_prior import LabelPrior, save_label_prior  # noqa: E402
from monai_npc.serialization import safe_load  # noqa: E402
from monai_npc.utils import atomic_torch_save  # noqa: E402
from train_acdc_stacks import SPLIT, crop, stack_window  # noqa: E402

STRUCTURES = ("rv", "myo", "lv")


def slices_of_window(stacks: List[Dict[str, torch.Tensor]], jitter: int, rng: np.random.Generator) -> Dict[str, torch.Tensor]:
    """Every slice of both frames of ``stacks``, each stack's window shifted at random by up to ``jitter``
    voxels: ``image (N, 1, S, S)`` in [0, 1], ``label (N, 1, S, S)`` int64."""
    images, labels = [], []
    for st in stacks:
        dy, dx = (int(v) for v in rng.integers(-jitter, jitter + 1, 2)) if jitter else (0, 0)
        w = crop(st, dy, dx, jitter)
        images += [w["ed"], w["es"]]
        labels += [w["ed_label"], w["es_label"]]
    return {"image": torch.cat(images), "label": torch.cat(labels)}


def augment(x: torch.Tensor, y: torch.Tensor, gen: torch.Generator) -> tuple:
    """Random turn (+-20 degrees), scale (1/1.2-1.2), shift (+-5 %), gamma (1/1.5-1.5), brightness and noise."""
    b = x.shape[0]
    u = lambda *shape: torch.rand(*shape, generator=gen)  # noqa: E731
    ang = (u(b) - 0.5) * 2 * math.radians(20)
    sc = torch.exp((u(b) - 0.5) * 2 * math.log(1.2))
    tx, ty = (u(b) - 0.5) * 0.1, (u(b) - 0.5) * 0.1
    theta = torch.stack([torch.stack([torch.cos(ang) / sc, -torch.sin(ang) / sc, tx], 1),
                         torch.stack([torch.sin(ang) / sc, torch.cos(ang) / sc, ty], 1)], 1)
    grid = F.affine_grid(theta, list(x.shape), align_corners=False)
    x = F.grid_sample(x, grid, "bilinear", "zeros", align_corners=False)
    y = F.grid_sample(y.float(), grid, "nearest", "zeros", align_corners=False).long()
    x = x.clamp(min=0) ** torch.exp((u(b, 1, 1, 1) - 0.5) * 2 * math.log(1.5))
    x = x * (1 + (u(b, 1, 1, 1) - 0.5) * 0.3) + torch.randn(x.shape, generator=gen) * 0.02 * u(b, 1, 1, 1)
    return x, y


@torch.no_grad()
def validate(net: LabelPrior, stacks: List[Dict[str, torch.Tensor]], jitter: int) -> Dict[str, float]:
    """Mean 3-D Dice per structure over the frames of ``stacks`` (unshifted windows)."""
    net.eval()
    per = []
    for st in stacks:
        w = crop(st, 0, 0, jitter)
        for frame in ("ed", "es"):
            pred = net.predict(w[frame]).argmax(1)
            ref = w[f"{frame}_label"][:, 0]
            per.append([2.0 * ((pred == v) & (ref == v)).sum().item() / max(((pred == v).sum() + (ref == v).sum()).item(), 1)
                        for v in (1, 2, 3)])
    net.train()
    d = np.mean(per, axis=0)
    return {**{s: float(v) for s, v in zip(STRUCTURES, d)}, "mean": float(d.mean())}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--data-dir", type=Path, default=ROOT.parent / "shared" / "data" / "acdc_ssl4mis")
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--epochs", type=int, default=120)
    p.add_argument("--batch", type=int, default=16)
    p.add_argument("--lr", type=float, default=2e-3)
    p.add_argument("--jitter", type=int, default=8, help="random shift of each stack's window, voxels")
    p.add_argument("--val-every", type=int, default=5)
    p.add_argument("--threads", type=int, default=1, help="torch threads (one per free core; 1 is safe)")
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args(argv)
    torch.set_num_threads(max(1, args.threads))
    patients = {pt.name: pt for pt in find_acdc_patients(args.data_dir)}
    split = json.loads(SPLIT.read_text())
    missing = [pid for pid in split["train"] + split["val"] + split["test"] if pid not in patients]
    if missing:
        raise SystemExit(f"{args.data_dir}: patients {missing[:5]} of {SPLIT.name} are missing (is this the SSL4MIS ACDC copy?)")
    args.out.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    train = [stack_window(patients[pid], args.jitter) for pid in split["train"]]
    val = [stack_window(patients[pid], args.jitter) for pid in split["val"] + split["test"]]
    print(f"{len(train)} training stacks ({2 * sum(s['ed'].shape[0] for s in train)} slices), {len(val)} validation, "
          f"{time.perf_counter() - t0:.1f} s", flush=True)

    torch.manual_seed(args.seed)
    net = LabelPrior()
    net.train()
    opt = torch.optim.AdamW(net.parameters(), lr=args.lr, weight_decay=1e-4)
    loss_fn = DiceCELoss(to_onehot_y=True, softmax=True)
    rng, gen = np.random.default_rng(args.seed), torch.Generator().manual_seed(args.seed)
    log_path, ckpt = args.out / "log.jsonl", args.out / "checkpoint.pt"
    start = 1
    if ckpt.is_file():
        state = safe_load(ckpt, what="training checkpoint")
        net.load_state_dict(state["network"])
        opt.load_state_dict(state["optimizer"])
        rng.bit_generator.state = state["rng"]
        gen.set_state(state["torch_rng"])
        start = int(state["epoch"]) + 1
        print(f"resumed after epoch {start - 1}", flush=True)

    for epoch in range(start, args.epochs + 1):
        lr = args.lr * 0.5 * (1 + math.cos(math.pi * (epoch - 1) / args.epochs))
        for g in opt.param_groups:
            g["lr"] = lr
        t_epoch = time.perf_counter()
        data = slices_of_window(train, args.jitter, rng)
        order = torch.from_numpy(rng.permutation(data["image"].shape[0]))
        total, steps = 0.0, 0
        for s in range(0, len(order) - args.batch + 1, args.batch):
            x, y = augment(data["image"][order[s : s + args.batch]], data["label"][order[s : s + args.batch]], gen)
            loss = loss_fn(net.logits(x), y)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            total, steps = total + loss.item(), steps + 1
        record = {"epoch": epoch, "loss": total / max(steps, 1), "lr": lr, "seconds": round(time.perf_counter() - t_epoch, 1)}
        if epoch % args.val_every == 0 or epoch == args.epochs:
            record["val_dice"] = validate(net, val, args.jitter)
        print(json.dumps(record), flush=True)
        with log_path.open("a") as fh:
            fh.write(json.dumps(record) + "\n")
        atomic_torch_save({"network": net.state_dict(), "optimizer": opt.state_dict(), "epoch": epoch, "rng": rng.bit_generator.state,
                           "torch_rng": gen.get_state()}, ckpt)

    net.eval()
    final = validate(net, val, args.jitter)
    out = save_label_prior(net, args.out / "acdc_heart.pt", meta={
        "name": "acdc_heart", "labels": {"0": "background", "1": "rv", "2": "myo", "3": "lv"},
        "inputs": "register's acdc heart window: 128 x 128 slices at 1.3-1.9 mm, each min-maxed to [0, 1] (the acdc weights' own inputs)",
        "trained_on": f"ED and ES frames of the {len(train)} training patients of bundles/npc_acdc/configs/acdc70_split.json (SSL4MIS ACDC copy)",
        "command": "python examples/train_acdc_label_prior.py " + " ".join(sys.argv[1:] if argv is None else argv),
        "validation_dice_3d": final,
        "validation": f"{len(val)} validation and test patients of acdc70_split (ED and ES frames), never trained on",
    })
    print(f"wrote {out}: validation 3-D Dice {final}", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
