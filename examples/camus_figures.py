"""Figures of the shipped CAMUS model on real held-out echocardiography (paper's CAMUS figures).

    python examples/camus_figures.py --data-dir /path/to/camus_224 --out docs/figures

Uses the ``test`` split of ``bundles/npc_camus/configs/camus224_split.json`` (the 50 official
validation patients, never used in training or selection) and writes

- ``camus_registration_2ch.png`` / ``camus_registration_4ch.png``: for each view the pair with the
  median LV-myocardium Dice gain: moving (ED), fixed (ES), warped with label contours, difference,
  deformed grid;
- ``camus_residual_per_pair.png``: for the 2CH pair, the per-pair mean normalised residual, sorted,
  at the first, middle and last ODE step of the **fine** stage, with the K most selected pairs.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import torch

from monai_npc.data.camus import build_camus_pairs
from monai_npc.engines import stack_pairs
from monai_npc.functional import warp_image
from monai_npc.metrics import dice_per_structure
from monai_npc.networks.nets import load_pretrained
from monai_npc.viz import registration_panel, residual_per_pair_figure

REPO = Path(__file__).resolve().parents[1]


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--data-dir", required=True, help="the public CAMUS 224 copy (train/ and val/ folders)")
    p.add_argument("--split-file", default=str(REPO / "bundles/npc_camus/configs/camus224_split.json"))
    p.add_argument("--out", default="docs/figures")
    p.add_argument("--model", default="camus")
    args = p.parse_args()
    torch.set_num_threads(1)
    net = load_pretrained(args.model)
    out = Path(args.out)
    for view in ("2CH", "4CH"):
        pairs = build_camus_pairs(args.data_dir, "test", split_file=args.split_file, views=(view,))
        m, f = stack_pairs(pairs, "moving"), stack_pairs(pairs, "fixed")
        ml, fl = stack_pairs(pairs, "moving_label"), stack_pairs(pairs, "fixed_label")
        with torch.inference_mode():
            warped, ddf, _ = net.register(m, f)
        wl = warp_image(ml, ddf, "nearest")
        before, after = dice_per_structure(ml, fl, (2,))[:, 0], dice_per_structure(wl, fl, (2,))[:, 0]
        i = int(torch.argsort(after - before)[len(pairs) // 2])  # a typical pair: median gain
        registration_panel(
            m[i, 0], f[i, 0], warped[i, 0], ddf[i], out / f"camus_registration_{view.lower()}.png",
            title=f"NPC on a held-out CAMUS {view} pair ({pairs[i]['patient']}, ED->ES): LV-myocardium Dice {before[i]:.3f} -> {after[i]:.3f}",
            labels=(ml[i, 0], fl[i, 0], wl[i, 0]),
        )
        print(f"{view}: myo Dice {before.mean():.3f} -> {after.mean():.3f} over {len(pairs)} pairs; figure pair {pairs[i]['patient']}")
        if view == "2CH":
            with torch.inference_mode():
                _, _, diag = net.register(m[i : i + 1], f[i : i + 1], return_diagnostics=True)
            fine = [d for d in diag if int(d["stage"]) == len(net.ode.stages) - 1]
            residual_per_pair_figure(
                fine, net.ode.stages[-1].mask.top_k, out / "camus_residual_per_pair.png",
                title=f"CAMUS {view} {pairs[i]['patient']}, fine stage: sorted per-pair residual (ODE steps of the fine stage)",
            )
    print(f"wrote {out}/camus_*.png")


if __name__ == "__main__":
    main()
