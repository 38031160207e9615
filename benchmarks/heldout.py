"""Held-out benchmark on real data: every method on the same test pairs, per direction/view, structure and motion bucket.

    python benchmarks/heldout.py acdc --data-dir /path/to/acdc_ssl4mis --out runs/acdc_heldout
    python benchmarks/heldout.py camus --data-dir /path/to/camus_224 --out runs/camus_heldout

Registers every pair of the ``test`` split of ``--split-file`` (default: the bundle's split file:
``npc_acdc/configs/acdc70_split.json``, 20 ACDC patients no choice was ever tuned on, both
directions; ``npc_camus/configs/camus224_split.json``, the 50 official CAMUS validation patients,
ED->ES of both views) with

- ``initial``: no registration;
- ``demons``: SimpleITK fast symmetric-forces demons (``--demons-iterations`` 200, sigma 1.5), the
  classical baseline users compare with;
- ``npc``: the NPC network (``--npc``: a shipped name, a ``save_pretrained`` file, or a MONAI bundle
  folder; default the shipped model named like the dataset) at ``--steps`` ODE steps;
- ``npc+refine``: the same network followed by its test-time refinement
  (:class:`~monai_npc.networks.blocks.InstanceRefinement`, ``--refine-iterations``);
- ``voxelmorph``: with ``--voxelmorph PATH`` (a ``VoxelMorphNet`` state dict).

The key metric is the mean Dice over RV, Myo and LV for ACDC and the LV-myocardium Dice for
CAMUS (the paper's tasks). Pairs are split by difficulty, the unregistered key metric of the pair:
``large`` motion (< 0.55), ``medium`` (0.55-0.70) and ``small`` (>= 0.70). Writes ``results.md``
(tables), ``per_pair.json`` and ``buckets.png`` (key metric per bucket and a per-pair scatter
against demons). Latency is measured per pair at batch 1 on ``--threads`` threads (default 1).
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path
from typing import Dict, List

import numpy as np
import torch

from monai_npc.engines import evaluate_pairs

BUCKETS = (("large (< 0.55)", 0.0, 0.55), ("medium (0.55-0.70)", 0.55, 0.70), ("small (>= 0.70)", 0.70, 1.01))
REPO = Path(__file__).resolve().parents[1]
#: per dataset: structure names (labels 1, 2, 3), key metric, pair grouping key, default split file
DATASETS = {
    "acdc": dict(structures=("rv", "myo", "lv"), key="dice_mean", group="direction",
                 split_file=REPO / "bundles/npc_acdc/configs/acdc70_split.json", directions=("ED->ES", "ES->ED")),
    "camus": dict(structures=("lv", "myo", "la"), key="dice_myo", group="view",
                  split_file=REPO / "bundles/npc_camus/configs/camus224_split.json", directions=("ED->ES",)),
}


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
        vxm.load_state_dict(torch.load(args.voxelmorph, map_location="cpu", weights_only=True))
        methods["voxelmorph"] = vxm
    npc = args.npc or args.dataset
    if not args.skip_npc:
        methods["npc"] = load_pretrained(npc, num_steps=args.steps, refine_iterations=0)
    if args.refine_iterations > 0:
        options = json.loads(args.refine_options) if args.refine_options else None
        methods["npc+refine"] = load_pretrained(npc, num_steps=args.steps, refine_iterations=args.refine_iterations, refine_options=options)
    return methods


def bucket_of(initial: np.ndarray) -> List[str]:
    return [next(name for name, lo, hi in BUCKETS if lo <= x < hi) for x in initial]


def tables(results: Dict[str, dict], pairs: List[dict], dataset: str) -> str:
    spec = DATASETS[dataset]
    key, group = spec["key"], spec["group"]
    groups = np.array([p[group] for p in pairs])
    group_names = sorted(set(groups.tolist()), key=lambda g: (g != "ED->ES", g))
    initial = np.array(results["initial"]["per_pair"][key])
    buckets = np.array(bucket_of(initial))
    patients = len({p["patient"] for p in pairs})
    lines = [f"{len(pairs)} pairs ({', '.join(f'{int((groups == g).sum())} {g}' for g in group_names)}) of {patients} held-out patients; "
             f"key metric `{key}`", ""]
    lines += ["| method | " + " | ".join(group_names) + " | **mean** | " + " | ".join(s.upper() if len(s) < 4 else s for s in spec["structures"])
              + " | mean Dice | HD95 (vox) | SDlogJ (x1e-2) | NDV (/10k) | folding % | ms/pair |",
              "|---|" + "---|" * (len(group_names) + len(spec["structures"]) + 7)]
    for name, r in results.items():
        pp = {k: np.array(v) for k, v in r["per_pair"].items()}
        d = pp[key]
        lines.append(
            f"| {name} | " + " | ".join(f"{d[groups == g].mean():.3f}" for g in group_names) + f" | **{d.mean():.3f}** | "
            + " | ".join(f"{np.nanmean(pp['dice_' + s]):.3f}" for s in spec["structures"])
            + f" | {pp['dice_mean'].mean():.3f} | {np.nanmean(pp['hd95']):.2f} | {pp['sdlogj'].mean():.2f} | {pp['ndv'].mean():.1f} | "
            f"{pp['folding_percent'].mean():.3f} | {1000 * r['seconds_per_pair']:.0f} |"
        )
    lines += ["", f"By motion (unregistered `{key}` of the pair), mean `{key}`:", ""]
    lines += ["| motion | pairs | " + " | ".join(results) + " |", "|---|---|" + "---|" * len(results)]
    for name, _, _ in BUCKETS:
        sel = buckets == name
        if sel.any():
            cells = [f"{np.array(r['per_pair'][key])[sel].mean():.3f}" for r in results.values()]
            lines.append(f"| {name} | {int(sel.sum())} | " + " | ".join(cells) + " |")
    if "demons" in results:
        demons = np.array(results["demons"]["per_pair"][key])
        others = [n for n in results if n not in ("initial", "demons")]
        lines += ["", f"Pairs where the method's `{key}` is >= demons' (per bucket):", ""]
        lines += ["| motion | " + " | ".join(others) + " |", "|---|" + "---|" * len(others)]
        for name, _, _ in BUCKETS + (("all", 0.0, 1.01),):
            sel = (buckets == name) if name != "all" else np.ones_like(demons, dtype=bool)
            if sel.any():
                cells = [f"{int((np.array(results[o]['per_pair'][key])[sel] >= demons[sel]).sum())}/{int(sel.sum())}" for o in others]
                lines.append(f"| {name} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def figure(results: Dict[str, dict], path: Path, dataset: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from monai_npc.viz.figures import save_figure

    key = DATASETS[dataset]["key"]
    initial = np.array(results["initial"]["per_pair"][key])
    buckets = np.array(bucket_of(initial))
    names = [n for n in results if n != "initial"]
    fig, (ax0, ax1) = plt.subplots(1, 2, figsize=(12, 4.5))
    width = 0.8 / max(1, len(names))
    for i, name in enumerate(names):
        d = np.array(results[name]["per_pair"][key])
        means = [d[buckets == b].mean() if (buckets == b).any() else np.nan for b, _, _ in BUCKETS]
        ax0.bar(np.arange(len(BUCKETS)) + i * width, means, width, label=name)
    ax0.set_xticks(np.arange(len(BUCKETS)) + width * (len(names) - 1) / 2, [f"{b}\n{int((buckets == b).sum())} pairs" for b, _, _ in BUCKETS])
    ax0.set_ylim(0.4, 1.0)
    ax0.set_ylabel(key)
    ax0.set_title(f"held-out {dataset.upper()} pairs by motion")
    ax0.legend(fontsize=8)
    if "demons" in results:
        demons = np.array(results["demons"]["per_pair"][key])
        for name in names:
            if name != "demons":
                ax1.scatter(demons, np.array(results[name]["per_pair"][key]), s=8, label=name, alpha=0.7)
        ax1.plot([0.2, 1], [0.2, 1], "k--", lw=1)
        ax1.set_xlabel(f"demons {key}")
        ax1.set_ylabel(f"method {key}")
        ax1.set_title("per pair: above the line = better than demons")
        ax1.legend(fontsize=8)
    save_figure(fig, path)


def load_pairs(dataset: str, data_dir: str, split: str, split_file: str) -> List[dict]:
    if dataset == "acdc":
        from monai_npc.data.acdc import build_acdc_pairs

        return build_acdc_pairs(data_dir, split, split_file=split_file)
    from monai_npc.data.camus import build_camus_pairs

    return build_camus_pairs(data_dir, split, split_file=split_file, directions=DATASETS[dataset]["directions"])


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("dataset", choices=sorted(DATASETS))
    p.add_argument("--data-dir", required=True, help="folder holding the data (any layout monai_npc.data reads)")
    p.add_argument("--split-file", default=None, help="JSON patient split (default: the bundle's)")
    p.add_argument("--split", default="test", choices=("train", "val", "test"))
    p.add_argument("--out", default=None, help="output folder (default runs/<dataset>_heldout)")
    p.add_argument("--npc", default=None, help="shipped model name, save_pretrained file or bundle folder (default: the dataset's name)")
    p.add_argument("--steps", type=int, default=10, help="NPC ODE steps")
    p.add_argument("--refine-iterations", type=int, default=50, help="test-time refinement steps for 'npc+refine' (0: skip)")
    p.add_argument("--refine-options", default=None,
                   help='JSON of other InstanceRefinement arguments, e.g. \'{"window": 9, "lambda_reg": 0.02}\'')
    p.add_argument("--skip-npc", action="store_true", help="only the refined NPC (with --refine-iterations), not the plain network")
    p.add_argument("--voxelmorph", default=None, help="VoxelMorphNet state dict")
    p.add_argument("--demons-iterations", type=int, default=200, help="0 skips demons")
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--max-pairs", type=int, default=None, help="only the first N pairs (smoke runs)")
    args = p.parse_args()
    from monai_npc.runtime import silence_third_party

    silence_third_party()
    torch.set_num_threads(args.threads)
    spec = DATASETS[args.dataset]
    split_file = args.split_file or str(spec["split_file"])
    out = Path(args.out or f"runs/{args.dataset}_heldout")

    pairs = load_pairs(args.dataset, args.data_dir, args.split, split_file)[: args.max_pairs]
    results: Dict[str, dict] = {}
    for name, net in build_methods(args).items():
        t0 = time.time()
        results[name] = evaluate_pairs(net.eval(), pairs, batch_size=1, names=spec["structures"])
        print(f"{name}: {spec['key']} {results[name]['mean'][spec['key']]:.4f}, {1000 * results[name]['seconds_per_pair']:.0f} ms/pair "
              f"({time.time() - t0:.0f} s)", flush=True)
    text = tables(results, pairs, args.dataset)
    print(text)
    out.mkdir(parents=True, exist_ok=True)
    (out / "results.md").write_text(text + "\n")
    per_pair = {name: r["per_pair"] for name, r in results.items()}
    per_pair["pairs"] = [{k: p.get(k) for k in ("patient", "slice", "view", "direction")} for p in pairs]
    (out / "per_pair.json").write_text(json.dumps(per_pair, default=str))
    figure(results, out / "buckets.png", args.dataset)
    print(f"wrote {out / 'results.md'}, {out / 'per_pair.json'}, {out / 'buckets.png'}")


if __name__ == "__main__":
    main()
