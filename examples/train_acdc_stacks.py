"""Fine-tune the ``acdc`` weights on whole short-axis stacks as ``register`` sees them (issues 24 and 26).

    OMP_NUM_THREADS=1 python examples/train_acdc_stacks.py --data-dir ../shared/data/acdc_ssl4mis \
        --out runs/acdc_stacks --epochs 30

The shipped ``acdc`` model was trained on the paper's crop protocol: 128 x 128 crops centred on
the ED/ES label boxes, only slices whose two frames both hold RV, myocardium and LV. ``register``
gives it something else: one heart window per stack found without labels
(:func:`monai_npc.apps.registration.localize.motion_centre`), every slice of the stack, basal slices the
ventricles leave at end-systole and apical ones without a cavity included. This script trains on
exactly that: for each training patient of ``acdc70_split.json`` (44; the validation and test
patients are never seen), the stack's window from the frames' difference, jittered by up to
``--jitter`` voxels, every slice min-maxed inside the window (as ``register`` preprocesses), random
flips; one stack per step, both directions, the paper's ACDC loss plus ``--label-weight`` x the
**3-D** soft Dice of the warped RV / Myo / LV over the whole stack (what the whole-stack benchmark
scores: a basal slice whose LV is gone at ES counts as the stack's false positives, not as a
slice of its own with an undefined Dice).

Checkpoints (network, Adam, epoch, random state) are written every epoch and a run resumes from
them; ``--val-every`` epochs the network alone (``--val-steps`` ODE steps, no refinement) is scored
on the validation patients' stacks (3-D Dice, both directions), and the best state is kept as
``best_model.pt`` (a state dict; data only). ``--volume-weight`` adds the carried structures' stack-volume
error (:class:`monai_npc.losses.WarpedLabelVolumeLoss`; measured and not kept for the shipped weights,
bundle README).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Dict, List

import numpy as np
import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from monai_npc.apps.registration.localize import motion_centre
from monai_npc.data.acdc import ACDCPatient, find_acdc_patients, load_acdc_patient  # noqa: E402
from monai_npc.functional.warp import warp_image  # noqa: E402
from monai_npc.losses import RegistrationLoss, WarpedLabelDiceLoss, WarpedLabelVolumeLoss, bidirectional_loss  # noqa: E402
from monai_npc.networks.nets import load_pretrained  # noqa: E402
from monai_npc.serialization import safe_load  # noqa: E402
from monai_npc.utils import atomic_torch_save  # noqa: E402

SPLIT = ROOT / "bundles" / "npc_acdc" / "configs" / "acdc70_split.json"
SIZE = 128
HIGH_EF = 0.55  # --high-ef-repeat: LV EF of a training stack's labels above which it is drawn more often


def stack_window(patient: ACDCPatient, margin: int) -> Dict[str, torch.Tensor]:
    """The stack's heart window (``SIZE + 2 margin`` square, zero outside the image) for both frames.

    Returns ``ed``, ``es`` ``(Z, 1, S, S)`` float32 and ``ed_label``, ``es_label`` ``(Z, 1, S, S)`` int64.
    The centre is :func:`motion_centre` of the whole stack with the SSL4MIS copy's spacing
    (360 mm over the larger side, as ``benchmarks/localisation.py``), i.e. ``register``'s
    ``heart-stack`` window; SSL4MIS pixels are 1.4-1.8 mm, inside the ``acdc`` weights' 1.3-1.9 mm,
    so the window is at native resolution, as in ``register``.
    """
    v = load_acdc_patient(patient)  # every slice, (Z, H, W)
    ed, es, edl, esl = v["ed_image"], v["es_image"], v["ed_label"].astype(np.int64), v["es_label"].astype(np.int64)
    s = 360.0 / max(ed.shape[1:])
    row, col = motion_centre(ed, es, (s, s))
    size = SIZE + 2 * margin
    r0, c0 = int(round(row - (size - 1) / 2)), int(round(col - (size - 1) / 2))
    out = {}
    for key, arr in (("ed", ed), ("es", es), ("ed_label", edl), ("es_label", esl)):
        win = np.zeros((arr.shape[0], size, size), arr.dtype)
        rs, cs = max(r0, 0), max(c0, 0)
        re_, ce = min(r0 + size, arr.shape[1]), min(c0 + size, arr.shape[2])
        win[:, rs - r0 : re_ - r0, cs - c0 : ce - c0] = arr[:, rs:re_, cs:ce]
        out[key] = torch.from_numpy(win)[:, None]
    return out


def minmax(x: torch.Tensor) -> torch.Tensor:
    """Each slice of ``(Z, 1, H, W)`` to ``[0, 1]`` (``register``'s ``minmax`` preprocessing)."""
    lo = x.amin(dim=(1, 2, 3), keepdim=True)
    hi = x.amax(dim=(1, 2, 3), keepdim=True)
    return torch.where(hi > lo, (x - lo) / (hi - lo).clamp(min=1e-12), torch.zeros_like(x))


def crop(stack: Dict[str, torch.Tensor], dy: int, dx: int, margin: int) -> Dict[str, torch.Tensor]:
    sl = (slice(None), slice(None), slice(margin + dy, margin + dy + SIZE), slice(margin + dx, margin + dx + SIZE))
    out = {k: v[sl] for k, v in stack.items()}
    out["ed"], out["es"] = minmax(out["ed"]), minmax(out["es"])
    return out


@torch.no_grad()
def validate(net, stacks: List[Dict[str, torch.Tensor]], margin: int) -> Dict[str, float]:
    """3-D Dice (RV/Myo/LV mean) of the network alone, both directions, nearest-neighbour labels."""
    net.eval()
    dice = {"ED->ES": [], "ES->ED": []}
    for st in stacks:
        w = crop(st, 0, 0, margin)
        for d, (m, ml, f, fl) in {"ED->ES": ("ed", "ed_label", "es", "es_label"), "ES->ED": ("es", "es_label", "ed", "ed_label")}.items():
            ddf = net(torch.cat([w[m], w[f]], 1))
            warped = warp_image(w[ml].float(), ddf, "nearest", "border").long()
            per = [2.0 * ((warped == v) & (w[fl] == v)).sum().item() / max(((warped == v).sum() + (w[fl] == v).sum()).item(), 1)
                   for v in (1, 2, 3)]
            dice[d].append(float(np.mean(per)))
    net.train()
    return {"dice": float(np.mean(dice["ED->ES"] + dice["ES->ED"])), "ed_es": float(np.mean(dice["ED->ES"])),
            "es_ed": float(np.mean(dice["ES->ED"]))}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--data-dir", type=Path, default=ROOT.parent / "shared" / "data" / "acdc_ssl4mis")
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--init", default="acdc", help="weights to start from (a model argument of load_pretrained)")
    p.add_argument("--epochs", type=int, default=30)
    p.add_argument("--lr", type=float, default=1e-4)
    p.add_argument("--lr-decay", type=float, default=0.97, help="per epoch")
    p.add_argument("--label-weight", type=float, default=1.0)
    p.add_argument("--volume-weight", type=float, default=0.0,
                   help="weight of the stack-volume error of the carried --volume-labels (WarpedLabelVolumeLoss), both directions")
    p.add_argument("--volume-labels", default="3", help="comma-separated label values of the volume term (3 = LV)")
    p.add_argument("--high-ef-repeat", type=int, default=1,
                   help="draw the training stacks whose ED->ES LV EF (from their labels) is above 55 %% this many times per epoch")
    p.add_argument("--jitter", type=int, default=8, help="random shift of the window, voxels")
    p.add_argument("--steps", type=int, default=4, help="ODE steps in training (detached between steps)")
    p.add_argument("--val-steps", type=int, default=6)
    p.add_argument("--val-every", type=int, default=2)
    p.add_argument("--split", choices=("val", "val+test"), default="val",
                   help="validation patients of acdc70_split for checkpoint selection")
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args(argv)
    patients = {p.name: p for p in find_acdc_patients(args.data_dir)}
    split = json.loads(SPLIT.read_text())
    val_ids = split["val"] + (split["test"] if args.split == "val+test" else [])
    args.out.mkdir(parents=True, exist_ok=True)
    torch.manual_seed(args.seed)

    t0 = time.perf_counter()
    train = [stack_window(patients[pid], args.jitter) for pid in split["train"]]
    val = [stack_window(patients[pid], args.jitter) for pid in val_ids]
    print(f"{len(train)} training stacks ({sum(s['ed'].shape[0] for s in train)} slices), {len(val)} validation, "
          f"{time.perf_counter() - t0:.1f} s", flush=True)

    lv_ef = np.asarray([1.0 - float((st["es_label"] == 3).sum()) / max(float((st["ed_label"] == 3).sum()), 1.0) for st in train])
    high_ef = np.nonzero(lv_ef > HIGH_EF)[0]
    order = np.concatenate([np.arange(len(train))] + [high_ef] * (args.high_ef_repeat - 1))  # the stacks of one epoch
    if args.high_ef_repeat > 1:
        print(f"{high_ef.size} training stacks with LV EF > {HIGH_EF:.0%} drawn {args.high_ef_repeat} times per epoch", flush=True)
    net = load_pretrained(args.init, num_steps=args.steps, detach_steps=True, refine_iterations=0)
    net.train()
    loss = RegistrationLoss("acdc")
    stack_dice = WarpedLabelDiceLoss((1, 2, 3), smooth=1.0, batch=True)  # the stack's 3-D Dice
    stack_volume = WarpedLabelVolumeLoss([int(v) for v in args.volume_labels.split(",")])  # ED->ES: the EF error, as a fraction
    opt = torch.optim.Adam(net.parameters(), lr=args.lr)
    rng = np.random.default_rng(args.seed)
    log_path, ckpt = args.out / "log.jsonl", args.out / "checkpoint.pt"
    start, best = 1, -1.0
    if ckpt.is_file():
        state = safe_load(ckpt, what="training checkpoint")
        net.load_state_dict(state["network"])
        opt.load_state_dict(state["optimizer"])
        rng.bit_generator.state = state["rng"]
        start, best = int(state["epoch"]) + 1, float(state["best"])
        print(f"resumed after epoch {start - 1} (best {best:.4f})", flush=True)
    else:
        net.ode.set_steps(args.val_steps)
        v = validate(net, val, args.jitter)
        net.ode.set_steps(args.steps)
        print(f"epoch 0 validation {v}", flush=True)
        with log_path.open("a") as fh:
            fh.write(json.dumps({"epoch": 0, **v}) + "\n")

    for epoch in range(start, args.epochs + 1):
        for g in opt.param_groups:
            g["lr"] = args.lr * args.lr_decay ** (epoch - 1)
        t_epoch, sums = time.perf_counter(), {}
        for i in rng.permutation(order):
            dy, dx = (int(v) for v in rng.integers(-args.jitter, args.jitter + 1, 2))
            w = crop(train[i], dy, dx, args.jitter)
            for axis in (2, 3):
                if rng.random() < 0.5:
                    w = {k: v.flip(axis) for k, v in w.items()}
            terms = bidirectional_loss(net, loss, w["ed"], w["es"])
            z = w["ed"].shape[0]
            ddf = terms["ddf"]
            terms["label"] = args.label_weight * 0.5 * (stack_dice(w["ed_label"], w["es_label"], ddf[:z])
                                                        + stack_dice(w["es_label"], w["ed_label"], ddf[z:]))
            total = terms["loss"] + terms["label"]
            if args.volume_weight:
                terms["volume"] = args.volume_weight * 0.5 * (stack_volume(w["ed_label"], w["es_label"], ddf[:z])
                                                              + stack_volume(w["es_label"], w["ed_label"], ddf[z:]))
                total = total + terms["volume"]
            opt.zero_grad(set_to_none=True)
            total.backward()
            opt.step()
            for k in ("loss", "label", "volume"):
                if k in terms:
                    sums[k] = sums.get(k, 0.0) + float(terms[k]) / len(order)
        record = {"epoch": epoch, "seconds": round(time.perf_counter() - t_epoch, 1), "lr": args.lr * args.lr_decay ** (epoch - 1), **sums}
        if epoch % args.val_every == 0 or epoch == args.epochs:
            net.ode.set_steps(args.val_steps)
            record.update(validate(net, val, args.jitter))
            net.ode.set_steps(args.steps)
            if record["dice"] > best:
                best = record["dice"]
                atomic_torch_save(net.state_dict(), args.out / "best_model.pt")
            atomic_torch_save(net.state_dict(), args.out / f"model_epoch{epoch:03d}.pt")
        print(json.dumps(record), flush=True)
        with log_path.open("a") as fh:
            fh.write(json.dumps(record) + "\n")
        atomic_torch_save(dict(network=net.state_dict(), optimizer=opt.state_dict(), rng=rng.bit_generator.state,
                               epoch=epoch, best=best), ckpt)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
