"""Held-out ACDC benchmark: every method on the same test pairs, per direction, structure and motion bucket.

    python benchmarks/acdc_heldout.py --data-dir /path/to/acdc_ssl4mis --out runs/acdc_heldout

Registers every pair of the ``test`` split of ``--split-file`` (default: the bundle's
``configs/acdc70_split.json``, 20 patients no choice was ever tuned on) in both directions with

- ``initial``: no registration;
- ``demons``: SimpleITK fast symmetric-forces demons (``--demons-iterations`` 200, sigma 1.5), the
  classical baseline users compare with;
- ``npc``: the NPC network (``--npc``: a shipped name, a ``save_pretrained`` file, or a MONAI bundle
  folder; default the shipped ``acdc``) at ``--steps`` ODE steps;
- ``npc+refine``: the same network followed by its test-time refinement
  (:class:`~monai_npc.networks.blocks.InstanceRefinement`, ``--refine-iterations``);
- ``voxelmorph``: with ``--voxelmorph PATH`` (a ``VoxelMorphNet`` state dict).

Pairs are split by difficulty, the unregistered mean Dice of the pair: ``large`` motion (< 0.55),
``medium`` (0.55-0.70) and ``small`` (>= 0.70). Writes ``results.md`` (tables), ``per_pair.json``
and ``buckets.png`` (Dice per bucket and a per-pair scatter against demons). Latency is measured
per pair at batch 1 on ``--threads`` threads (default 1).
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path
from typing import Dict, List

import numpy as np
import torch

from monai_npc.data.acdc import build_acdc_pairs
from monai_npc.engines import evaluate_pairs

BUCKETS = (("large (< 0.55)", 0.0, 0.55), ("medium (0.55-0.70)", 0.55, 0.70), ("small (>= 0.70)", 0.70, 1.01))
STRUCTURES = ("rv", "myo", "lv")
REPO = Path(__file__).resolve().parents[1]


class _Identity(torch.nn.Module):
    def forward(self, image: torch.Tensor) -> torch.Tensor:
        return torch.zeros_like(image)


def build_methods(args: argparse.Namespace) -> Dict[str, torch.nn.Module]:
    from monai_npc.networks.nets import DemonsNet, VoxelMorphNet, load_pretrained

    methods: Dict[str, torch.nn.Module] = {"initial": _Identity()}
    if args.demons_iterations > 0:
        methods["demons"] = DemonsNet(iterations=args.demons_iterations, smoothing=1.5)
    if args.voxelmorph:
        vxm = VoxelMorphNet()
        vxm.load_state_dict(torch.load(args.voxelmorph, map_location="cpu"))
        methods["voxelmorph"] = vxm
    methods["npc"] = load_pretrained(args.npc, num_steps=args.steps, refine_iterations=0)
    if args.refine_iterations > 0:
        methods["npc+refine"] = load_pretrained(args.npc, num_steps=args.steps, refine_iterations=args.refine_iterations)
    return methods


def bucket_of(initial: np.ndarray) -> List[str]:
    return [next(name for name, lo, hi in BUCKETS if lo <= x < hi) for x in initial]


def tables(results: Dict[str, dict], pairs: List[dict]) -> str:
    directions = np.array([p["direction"] for p in pairs])
    initial = np.array(results["initial"]["per_pair"]["dice_mean"])
    buckets = np.array(bucket_of(initial))
    lines = [f"{len(pairs)} directed pairs ({len(pairs) // 2} slices x 2 directions) of {len({p['patient'] for p in pairs})} held-out patients", ""]
    lines += ["| method | ED->ES | ES->ED | mean | RV | Myo | LV | HD95 (vox) | SDlogJ (x1e-2) | NDV (/10k) | folding % | ms/pair |",
              "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for name, r in results.items():
        pp = {k: np.array(v) for k, v in r["per_pair"].items()}
        d = pp["dice_mean"]
        lines.append(
            f"| {name} | {d[directions == 'ED->ES'].mean():.3f} | {d[directions == 'ES->ED'].mean():.3f} | **{d.mean():.3f}** | "
            + " | ".join(f"{pp['dice_' + s].mean():.3f}" for s in STRUCTURES)
            + f" | {np.nanmean(pp['hd95']):.2f} | {pp['sdlogj'].mean():.2f} | {pp['ndv'].mean():.1f} | {pp['folding_percent'].mean():.3f} | {1000 * r['seconds_per_pair']:.0f} |"
        )
    lines += ["", "By motion (unregistered mean Dice of the pair), mean Dice:", ""]
    lines += ["| motion | pairs | " + " | ".join(results) + " |", "|---|---|" + "---|" * len(results)]
    for name, _, _ in BUCKETS:
        sel = buckets == name
        if not sel.any():
            continue
        cells = [f"{np.array(r['per_pair']['dice_mean'])[sel].mean():.3f}" for r in results.values()]
        lines.append(f"| {name} | {int(sel.sum())} | " + " | ".join(cells) + " |")
    if "demons" in results:
        demons = np.array(results["demons"]["per_pair"]["dice_mean"])
        lines += ["", "Pairs where the method's Dice is >= demons' (per bucket):", ""]
        others = [n for n in results if n not in ("initial", "demons")]
        lines += ["| motion | " + " | ".join(others) + " |", "|---|" + "---|" * len(others)]
        for name, _, _ in BUCKETS + (("all", 0.0, 1.01),):
            sel = (buckets == name) if name != "all" else np.ones_like(demons, dtype=bool)
            if not sel.any():
                continue
            cells = [f"{int((np.array(results[o]['per_pair']['dice_mean'])[sel] >= demons[sel]).sum())}/{int(sel.sum())}" for o in others]
            lines.append(f"| {name} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def figure(results: Dict[str, dict], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    initial = np.array(results["initial"]["per_pair"]["dice_mean"])
    buckets = np.array(bucket_of(initial))
    names = [n for n in results if n != "initial"]
    fig, (ax0, ax1) = plt.subplots(1, 2, figsize=(12, 4.5))
    width = 0.8 / max(1, len(names))
    for i, name in enumerate(names):
        d = np.array(results[name]["per_pair"]["dice_mean"])
        means = [d[buckets == b].mean() if (buckets == b).any() else np.nan for b, _, _ in BUCKETS]
        ax0.bar(np.arange(len(BUCKETS)) + i * width, means, width, label=name)
    ax0.set_xticks(np.arange(len(BUCKETS)) + width * (len(names) - 1) / 2, [b for b, _, _ in BUCKETS])
    ax0.set_ylim(0.5, 1.0)
    ax0.set_ylabel("mean Dice (RV, Myo, LV)")
    ax0.set_title("held-out ACDC pairs by motion")
    ax0.legend(fontsize=8)
    if "demons" in results:
        demons = np.array(results["demons"]["per_pair"]["dice_mean"])
        for name in names:
            if name == "demons":
                continue
            ax1.scatter(demons, np.array(results[name]["per_pair"]["dice_mean"]), s=8, label=name, alpha=0.7)
        ax1.plot([0.2, 1], [0.2, 1], "k--", lw=1)
        ax1.set_xlabel("demons Dice")
        ax1.set_ylabel("method Dice")
        ax1.set_title("per pair: above the line = better than demons")
        ax1.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--data-dir", required=True, help="folder holding the ACDC data (any layout monai_npc.data.acdc reads)")
    p.add_argument("--split-file", default=str(REPO / "bundles/npc_acdc/configs/acdc70_split.json"))
    p.add_argument("--split", default="test", choices=("train", "val", "test"))
    p.add_argument("--out", default="runs/acdc_heldout")
    p.add_argument("--npc", default="acdc", help="shipped model name, save_pretrained file or bundle folder")
    p.add_argument("--steps", type=int, default=10, help="NPC ODE steps")
    p.add_argument("--refine-iterations", type=int, default=50, help="test-time refinement steps for 'npc+refine' (0: skip)")
    p.add_argument("--voxelmorph", default=None, help="VoxelMorphNet state dict")
    p.add_argument("--demons-iterations", type=int, default=200, help="0 skips demons")
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--max-pairs", type=int, default=None, help="only the first N pairs (smoke runs)")
    args = p.parse_args()
    torch.set_num_threads(args.threads)

    pairs = build_acdc_pairs(args.data_dir, args.split, split_file=args.split_file)[: args.max_pairs]
    results: Dict[str, dict] = {}
    for name, net in build_methods(args).items():
        t0 = time.time()
        results[name] = evaluate_pairs(net.eval(), pairs, batch_size=1, names=STRUCTURES)
        print(f"{name}: Dice {results[name]['mean']['dice_mean']:.4f}, {1000 * results[name]['seconds_per_pair']:.0f} ms/pair "
              f"({time.time() - t0:.0f} s)", flush=True)
    text = tables(results, pairs)
    print(text)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "results.md").write_text(text + "\n")
    per_pair = {name: r["per_pair"] for name, r in results.items()}
    per_pair["pairs"] = [{k: p[k] for k in ("patient", "slice", "direction")} for p in pairs]
    (out / "per_pair.json").write_text(json.dumps(per_pair, default=str))
    figure(results, out / "buckets.png")
    print(f"wrote {out / 'results.md'}, {out / 'per_pair.json'}, {out / 'buckets.png'}")


if __name__ == "__main__":
    main()
