"""What the whole-stack training loss asks of a field's through-plane channel: free fields fitted to it directly.

    OMP_NUM_THREADS=1 python benchmarks/through_plane_oracle.py --pack .cache/acdc70_stacks.npz --out runs/through_plane_oracle

For each validation stack of the pack (both directions, images min-maxed per slice as the trainer validates them), the
network's field (``--model``, default ``acdc``, as the trainer runs it: no test-time refinement; a 2-D NPC's in-plane
field, or a stack network's 3-D field, e.g. a slice-context state the GPU trained) is the start;
then, with :class:`~monai_npc.losses.StackRegistrationLoss` (the trainer's loss: LNCC, diffusion, fold and log-Jacobian
terms on the 3-D field, ``--label-weight`` times the soft 3-D Dice of RV / Myo / LV against the **fixed label**),
``--steps`` Adam steps fit, per voxel:

- ``through``: only a through-plane component (slices, added to the start's; the in-plane field kept);
- ``slice-shift``: only a through-plane shift per slice (one value for all of a slice's voxels: what a head that
  predicts one number per slice could give);
- ``in-plane``: only a correction of the in-plane field (the start's through-plane component kept: 0 for a 2-D NPC);
- ``both``: the two together.

Each is scored as the trainer's validation scores a network (the moving label carried by nearest-neighbour sampling,
background beyond the stack's ends, mean 3-D Dice over the structures present). The fits use the fixed label, so they
are not registrations: they bound what the loss rewards each channel for, i.e. what a network trained with it can gain
by learning that channel. Also printed: the fitted through-plane component, mean over the voxels labelled in either
frame, per slice counted from the base (:func:`~monai_npc.cardiac.through_plane.base_end` of the ED label; negative
reads towards the base), and the network's own (0 for a 2-D NPC): for a trained stack network, how far it learned what
the fits ask for. Writes ``results.md`` and ``results.json`` into ``--out``.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Dict, List

import numpy as np
import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from monai_npc.cardiac.through_plane import base_end  # noqa: E402
from monai_npc.data.stack_pack import load_stack_pack  # noqa: E402
from monai_npc.engines.stack_data import DeviceStacks, StackBatch  # noqa: E402
from monai_npc.engines.stack_training import predict, warp_batch  # noqa: E402
from monai_npc.losses.label import one_hot_labels  # noqa: E402
from monai_npc.losses.stack import StackRegistrationLoss, group_overlap  # noqa: E402
from monai_npc.networks.nets import load_pretrained  # noqa: E402

FITS = ("through", "slice-shift", "in-plane", "both")
LABELS = (1, 2, 3)


def stack_dice(batch: StackBatch, ddf: torch.Tensor) -> torch.Tensor:
    """``(n_groups, 3)`` 3-D Dice per registration and structure (NaN where absent from both frames)."""
    carried = warp_batch(batch.moving_label, ddf, batch, "nearest", "zeros")
    inter, pred, target = group_overlap(one_hot_labels(carried, LABELS), one_hot_labels(batch.fixed_label, LABELS),
                                        batch.group, batch.n_groups)
    return torch.where(pred + target > 0, 2 * inter / (pred + target).clamp(min=1), torch.nan)


def fit(batch: StackBatch, start: torch.Tensor, loss: StackRegistrationLoss, which: str, steps: int, lr: float) -> torch.Tensor:
    """The 3-D field ``(N, 3, H, W)`` of one fit (:data:`FITS`) started from the network's field ``start``: in-plane
    ``(N, 2, H, W)`` (a 2-D NPC; through-plane 0) or 3-D ``(N, 3, H, W)`` (a stack network; its through-plane channel
    is the start of the through-plane fits and is kept by the in-plane one)."""
    in_plane = start[:, -2:]
    through_start = start[:, :1] if start.shape[1] == 3 else torch.zeros_like(start[:, :1])
    per_slice = which == "slice-shift"
    through = torch.zeros_like(start[:, :1, :1, :1] if per_slice else start[:, :1], requires_grad=which != "in-plane")
    correction = torch.zeros_like(in_plane, requires_grad=which == "in-plane" or which == "both")
    optimiser = torch.optim.Adam([p for p in (through, correction) if p.requires_grad], lr=lr)

    def field() -> torch.Tensor:
        return torch.cat([through_start + through.expand_as(through_start), in_plane + correction], 1)

    for _ in range(steps):
        terms = loss(batch.moving, batch.fixed, batch.moving_label, batch.fixed_label, field(), batch.group, batch.n_groups)
        optimiser.zero_grad()
        terms["loss"].backward()
        optimiser.step()
    return field().detach()


def base_profile(batch: StackBatch, ddf: torch.Tensor, group: int, ed_label: np.ndarray) -> List[float]:
    """Mean through-plane component over the voxels labelled in either frame, per slice from the base."""
    rows = (batch.group == group).nonzero().flatten().tolist()
    base, step = base_end(ed_label)
    order = rows if step > 0 else rows[::-1]
    out = []
    for row in order:
        labelled = (batch.fixed_label[row, 0] > 0) | (batch.moving_label[row, 0] > 0)
        out.append(float(ddf[row, 0][labelled].mean()) if bool(labelled.any()) else float("nan"))
    return out


def main(argv=None) -> Dict[str, object]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--pack", default=str(ROOT / ".cache" / "acdc70_stacks.npz"))
    parser.add_argument("--model", default="acdc", help="weights whose field is the start: a 2-D NPC, or a stack network "
                        "(e.g. a trained slice-context state, whose own through-plane component is then printed beside the fits')")
    parser.add_argument("--steps", type=int, default=100)
    parser.add_argument("--lr", type=float, default=0.05, help="Adam rate of the free fields (voxels, slices)")
    parser.add_argument("--label-weight", type=float, default=3.0, help="the Dice term's weight (the acdc recipe's)")
    parser.add_argument("--stacks-per-batch", type=int, default=2)
    parser.add_argument("--out", default="runs/through_plane_oracle")
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    pack = load_stack_pack(args.pack)
    val = DeviceStacks(pack, pack.indices("val"), torch.device("cpu"))
    net = load_pretrained(args.model, refine_iterations=0).eval()  # as the trainer runs and validates it
    loss = StackRegistrationLoss("acdc", label_weight=args.label_weight)
    records = []
    for stacks in val.batches(range(len(val)), args.stacks_per_batch):
        batch = val.batch(stacks)
        with torch.no_grad():
            start = predict(net, batch)
        fields = {"network": start if start.shape[1] == 3 else torch.cat([torch.zeros_like(start[:, :1]), start], 1)}
        fields.update({which: fit(batch, start, loss, which, args.steps, args.lr) for which in FITS})
        dice = {k: stack_dice(batch, f) for k, f in fields.items()}
        n = len(stacks)
        for g in range(batch.n_groups):
            stack = stacks[g % n]
            rows = (batch.group == g).nonzero().flatten()
            ed_label = (batch.moving_label if g < n else batch.fixed_label)[rows, 0].numpy()
            record = {"patient": val.names[stack], "direction": "ED->ES" if g < n else "ES->ED",
                      **{k: float(d[g].nanmean()) for k, d in dice.items()},
                      **{f"{k}_structures": d[g].tolist() for k, d in dice.items()},
                      **{f"{k}_from_base": base_profile(batch, fields[k], g, ed_label) for k in ("network", "through", "slice-shift", "both")}}
            records.append(record)
            print(f"{record['patient']} {record['direction']}: " + ", ".join(f"{k} {record[k]:.3f}" for k in fields)
                  + " | through-plane from the base (both): " + " ".join(f"{v:+.2f}" for v in record["both_from_base"][:4]), flush=True)
    return write(records, args)


def write(records: List[Dict[str, object]], args: argparse.Namespace) -> Dict[str, object]:
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    keys = ("network",) + FITS
    lines = [f"# What the training loss asks of the through-plane channel ({args.model}, {len(records)} registrations, "
             f"{args.steps} Adam steps, label weight {args.label_weight})", "",
             "| direction | " + " | ".join(keys) + " |", "|---|" + "---|" * len(keys)]
    summary: Dict[str, object] = {"settings": vars(args), "records": records}
    for direction in ("ED->ES", "ES->ED", "all"):
        rows = [r for r in records if direction in ("all", r["direction"])]
        means = {k: float(np.mean([r[k] for r in rows])) for k in keys}
        summary[direction] = means
        lines.append(f"| {direction} | " + " | ".join(f"{means[k]:.3f}" for k in keys) + " |")
    lines += ["", "Through-plane component, slices, mean over labelled voxels, from the base (the network's; the fit of both):", ""]
    for direction in ("ED->ES", "ES->ED"):
        for key in ("network", "both"):
            profiles = [r[f"{key}_from_base"][:3] for r in records if r["direction"] == direction]
            means = np.nanmean(np.array([p + [np.nan] * (3 - len(p)) for p in profiles]), 0)
            lines.append(f"- {direction}, {key}: " + ", ".join(f"slice {i} {v:+.2f}" for i, v in enumerate(means)))
            summary[f"{direction}_{key}_from_base"] = means.tolist()
    (out / "results.md").write_text("\n".join(lines) + "\n")
    (out / "results.json").write_text(json.dumps(summary, indent=1))
    print("\n".join(lines))
    return summary


if __name__ == "__main__":
    main()
