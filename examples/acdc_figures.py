"""Diagnostic figures of the shipped ACDC model on held-out ACDC pairs (paper Figures 3/5 and 6).

    python examples/acdc_figures.py --data-dir ../shared/data/acdc_ssl4mis --out docs/figures

Writes ``acdc_registration.png`` (moving, fixed, warped with label contours, difference, grid),
``acdc_residual_per_pair.png`` (per-pair mean normalised residual, sorted, at the first, middle and
last ODE step, with the K most selected pairs) and ``acdc_filter_quads.png`` (the 32 pairs most
often selected at the last step: moving pair on top, fixed pair below). The pairs are the
validation patients of ``examples/train_acdc_cpu.py``'s split, so the model never trained on them.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np
import torch

from monai_npc.data.acdc import build_acdc_pairs
from monai_npc.engines import stack_pairs
from monai_npc.functional import warp_image
from monai_npc.metrics import dice_per_structure
from monai_npc.networks.nets import load_pretrained
from monai_npc.viz import filter_quads_figure, per_pair_residual_stats, registration_panel, residual_per_pair_figure


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--data-dir", required=True)
    p.add_argument("--out", default="docs/figures")
    p.add_argument("--model", default="acdc")
    p.add_argument("--pairs", type=int, default=16, help="validation pairs pooled for the residual statistics")
    p.add_argument("--n-train", type=int, default=56)
    p.add_argument("--n-val", type=int, default=14)
    args = p.parse_args()
    net = load_pretrained(args.model)
    pairs = build_acdc_pairs(args.data_dir, "val", n_train=args.n_train, n_val=args.n_val, n_test=0, directions=("ED->ES",))
    pairs = pairs[: args.pairs]
    m, f = stack_pairs(pairs, "moving"), stack_pairs(pairs, "fixed")
    ml, fl = stack_pairs(pairs, "moving_label"), stack_pairs(pairs, "fixed_label")
    with torch.inference_mode():
        warped, ddf, diag = net.register(m, f, return_diagnostics=True)
    wl = warp_image(ml, ddf, "nearest")
    before = dice_per_structure(ml, fl).nanmean(1)
    after = dice_per_structure(wl, fl).nanmean(1)
    i = int(torch.argsort(after - before)[len(pairs) // 2])  # a typical pair: median improvement
    out = Path(args.out)
    registration_panel(
        m[i, 0], f[i, 0], warped[i, 0], ddf[i], out / "acdc_registration.png",
        title=f"NPC on a held-out ACDC pair ({pairs[i]['patient']}, slice {pairs[i]['slice']}, ED->ES): Dice {before[i]:.3f} -> {after[i]:.3f}",
        labels=(ml[i, 0], fl[i, 0], wl[i, 0]),
    )
    k = net.ode.stages[0].mask.top_k
    residual_per_pair_figure(diag, k, out / "acdc_residual_per_pair.png",
                             title=f"ACDC, {len(pairs)} held-out ED->ES pairs: sorted per-pair residual")
    stats = per_pair_residual_stats(diag[-1])
    top = np.argsort(-stats["selected"])[:32]
    bank = net.ode.stages[0].filters
    filter_quads_figure(bank.psi, bank.phi, out / "acdc_filter_quads.png", pairs=top.tolist(),
                        title="ACDC: the 32 filter pairs most often selected at the last ODE step (top: psi, bottom: phi)")
    print(f"Dice {before.mean():.3f} -> {after.mean():.3f} on {len(pairs)} pairs; wrote {out}/acdc_*.png")


if __name__ == "__main__":
    main()
