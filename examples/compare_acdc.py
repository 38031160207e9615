"""The paper's comparison on held-out ACDC patients: Initial, classical baselines and trained models.

    python examples/compare_acdc.py --data-dir ../shared/data/acdc_ssl4mis --out runs/compare_acdc \\
        [--model NAME=PATH ...] [--voxelmorph PATH] [--skip-demons]

Registers every validation pair of ``examples/train_acdc_cpu.py``'s split (both directions) with:
no registration, global phase correlation, SimpleITK symmetric-forces demons, the shipped NPC
model (``acdc``) and any ``--model NAME=PATH`` (files written by ``save_pretrained``, e.g. an
unmasked ``K = C`` NPC trained with the same budget) or ``--voxelmorph PATH`` (a state dict of
``VoxelMorphNet``). Prints and writes a Markdown table (Dice ED->ES, ES->ED and their mean,
SDlogJ x1e-2, NDV per 10k foreground voxels; per-pair mean ± sample std) and ``compare.json``.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np
import torch

from monai_npc.data.acdc import build_acdc_pairs
from monai_npc.engines import evaluate_pairs
from monai_npc.networks.nets import DemonsNet, PhaseCorrelationNet, VoxelMorphNet, available_models, load_pretrained


class _Identity(torch.nn.Module):
    def forward(self, image: torch.Tensor) -> torch.Tensor:
        return torch.zeros_like(image)


def summarise(result: dict, pairs) -> dict:
    per = result["per_pair"]
    directions = np.array([p["direction"] for p in pairs])
    out = {}
    for key, d in (("dice_ed_es", "ED->ES"), ("dice_es_ed", "ES->ED")):
        v = np.array(per["dice_mean"])[directions == d]
        out[key] = (float(v.mean()), float(v.std(ddof=1)))
    out["dice_mean"] = (float(np.mean(per["dice_mean"])), float(np.std(per["dice_mean"], ddof=1)))
    for key in ("sdlogj", "ndv", "folding_percent", "hd95"):
        out[key] = (float(np.mean(per[key])), float(np.std(per[key], ddof=1)))
    out["seconds_per_pair"] = result["seconds_per_pair"]
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--data-dir", required=True)
    p.add_argument("--out", default="runs/compare_acdc")
    p.add_argument("--model", action="append", default=[], help="NAME=PATH of a save_pretrained file")
    p.add_argument("--voxelmorph", default=None)
    p.add_argument("--skip-demons", action="store_true")
    p.add_argument("--steps", type=int, default=10, help="ODE steps of every NPC model (default 10, the shipped setting)")
    p.add_argument("--n-train", type=int, default=56)
    p.add_argument("--n-val", type=int, default=14)
    args = p.parse_args()
    pairs = build_acdc_pairs(args.data_dir, "val", n_train=args.n_train, n_val=args.n_val, n_test=0)
    methods = {"Initial (no registration)": _Identity(), "Global phase correlation (Tukey 0.25)": PhaseCorrelationNet(window=0.25)}
    if not args.skip_demons:
        methods["SimpleITK symmetric-forces demons"] = DemonsNet()
    if args.voxelmorph:
        vxm = VoxelMorphNet()
        vxm.load_state_dict(torch.load(args.voxelmorph, map_location="cpu", weights_only=True))
        methods["VoxelMorph + NCC"] = vxm
    if "acdc" in available_models():
        methods["NPC (masked, K = 64), shipped acdc"] = load_pretrained("acdc", num_steps=args.steps)
    for spec in args.model:
        name, _, path = spec.partition("=")
        methods[name] = load_pretrained(path, num_steps=args.steps)
    table = {}
    for name, net in methods.items():
        res = evaluate_pairs(net.eval(), pairs, batch_size=8, names=("rv", "myo", "lv"))
        table[name] = summarise(res, pairs)
        print(name, json.dumps({k: v for k, v in table[name].items()}), flush=True)
    fmt = lambda mv, d=3: f"{mv[0]:.{d}f} ± {mv[1]:.{d}f}"
    lines = [f"{len(pairs)} pairs ({len(pairs) // 2} slices x 2 directions), {args.n_val} held-out patients", "",
             "| Method | ED->ES Dice | ES->ED Dice | Avg | SDlogJ (x1e-2) | NDV (/10k) | s/pair |", "|---|---|---|---|---|---|---|"]
    for name, r in table.items():
        lines.append(f"| {name} | {fmt(r['dice_ed_es'])} | {fmt(r['dice_es_ed'])} | {r['dice_mean'][0]:.3f} | "
                     f"{fmt(r['sdlogj'], 2)} | {fmt(r['ndv'], 1)} | {r['seconds_per_pair']:.2f} |")
    text = "\n".join(lines)
    print(text)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "compare.md").write_text(text + "\n")
    (out / "compare.json").write_text(json.dumps(table, indent=1))


if __name__ == "__main__":
    main()
