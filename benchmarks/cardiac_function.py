"""Cardiac function from ED->ES label propagation on held-out ACDC patients: NPC vs demons vs expert.

    python benchmarks/cardiac_function.py --data-dir ../shared/data/acdc_official_test --out runs/cardiac_function
    python benchmarks/cardiac_function.py ... --methods demons      # one method (resumes, see below)
    python benchmarks/cardiac_function.py ... --summarise-only      # tables and figure from what ran

For every patient (official ACDC layout: ``patientNNN_frameFF[_gt].nii.gz`` and ``Info.cfg``), the
expert ED label is carried to ES without looking at the ES label:

- ``npc``: ``monai_npc.register(ED, ES, model="acdc", moving_label=ED_gt)`` on the whole stacks
  with the library's defaults (``--refine`` overrides the refinement steps); ``warped_label``;
- ``demons``: SimpleITK fast symmetric-forces demons
  (:func:`monai_npc.apps.stacks.demons_pair`, 100 iterations, sigma 1.5 voxels)
  slice by slice on the same stacks at their native resolution (each slice scaled to
  [0, 1]); the label is warped as NPC's (each value linearly, the largest wins).

Each method is reported twice from the same registration: ``<method>`` (the in-plane result)
and ``<method>+descent`` (then the basal slices the RV leaves at ES cleared,
:func:`monai_npc.cardiac.through_plane.apply_basal_descent`, what ``monai_npc.track`` does by
default on short-axis stacks; for NPC also the LV and myocardium of the most basal LV slice when
``register``'s label prior finds the LV gone from it at ES,
:func:`~monai_npc.cardiac.through_plane.clear_basal_by_prior`, as the bundle's inference and
``benchmarks/whole_stack.py`` do).

From the expert ED label and the propagated ES label: LV/RV EDV, ESV, EF, LV mass
(:mod:`monai_npc.cardiac.function`), compared with the same from the expert ED and ES labels
(:func:`~monai_npc.cardiac.function.agreement`: MAE, bias, 95 % limits of agreement, Pearson r),
per pathology group (``Group:`` of ``Info.cfg``) and overall; ES 3-D Dice per structure.

Each finished patient is appended to ``OUT/<method>.jsonl``: a rerun skips what is there
(resume). ``OUT/results.md`` (tables), ``OUT/summary.json`` and ``OUT/bland_altman.png`` are
rewritten from all records at the end. One torch / SimpleITK thread (``--threads``).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Dict, List, Optional, Tuple

import numpy as np

STRUCTURES = {"rv": 1, "myo": 2, "lv": 3}
QUANTITIES = ("lv_ef", "rv_ef", "lv_esv", "rv_esv")


def _patients(root: Path) -> List[Path]:
    folders = sorted(p.parent for p in root.rglob("Info.cfg"))
    if not folders:
        raise FileNotFoundError(f"{root}: no patient folders (Info.cfg) found.")
    return folders


def _frames(folder: Path) -> Dict[str, object]:
    from monai_npc.data.layout import read_cfg

    info = read_cfg(folder / "Info.cfg")
    name = folder.name
    ed, es = int(float(info["ED"])), int(float(info["ES"]))
    return {
        "name": name, "group": info.get("Group", "?"),
        "ed": folder / f"{name}_frame{ed:02d}.nii.gz", "es": folder / f"{name}_frame{es:02d}.nii.gz",
        "ed_gt": folder / f"{name}_frame{ed:02d}_gt.nii.gz", "es_gt": folder / f"{name}_frame{es:02d}_gt.nii.gz",
    }


def propagate_npc(item: Dict[str, object], refine) -> Tuple[np.ndarray, Optional[np.ndarray]]:
    """ES label ``(Z, H, W)`` from ``monai_npc.register`` (defaults) of the ED stack onto the ES stack, and the
    label prior's segmentation of the ES stack (``Registration.prior_label``; ``None`` when no prior acted)."""
    import SimpleITK as sitk

    import monai_npc

    reg = monai_npc.register(item["ed"], item["es"], model="acdc", moving_label=item["ed_gt"], threads=1, refine_iterations=refine)
    return sitk.GetArrayFromImage(reg.warped_label), None if reg.prior_label is None else sitk.GetArrayFromImage(reg.prior_label)


def propagate_demons(item: Dict[str, object]) -> np.ndarray:
    """ES label ``(Z, H, W)``: slice-wise demons (100 iterations) at native resolution, the label warped
    as NPC's is (:func:`monai_npc.apps.stacks.demons_pair`)."""
    import SimpleITK as sitk

    from monai_npc.apps.stacks import demons_pair

    ed, es = sitk.ReadImage(str(item["ed"]), sitk.sitkFloat32), sitk.ReadImage(str(item["es"]), sitk.sitkFloat32)
    warped, _ = demons_pair(ed, es, sitk.ReadImage(str(item["ed_gt"])), iterations=100)
    return warped.astype(np.int32)


def _dice(a: np.ndarray, b: np.ndarray, value: int) -> float:
    pa, pb = a == value, b == value
    total = int(pa.sum() + pb.sum())
    return float(2.0 * np.logical_and(pa, pb).sum() / total) if total else float("nan")


def evaluate(item: Dict[str, object], es_pred: np.ndarray) -> Dict[str, object]:
    """Expert and propagated function figures and ES Dice of one patient."""
    import SimpleITK as sitk

    from monai_npc.cardiac.function import cardiac_function, volume_curves

    ed_img = sitk.ReadImage(str(item["ed_gt"]))
    ed_gt = sitk.GetArrayFromImage(ed_img)
    es_gt = sitk.GetArrayFromImage(sitk.ReadImage(str(item["es_gt"])))
    spacing = ed_img.GetSpacing()
    expert = cardiac_function(volume_curves(np.stack([ed_gt, es_gt]), spacing), ed=0, es=1)
    pred = cardiac_function(volume_curves(np.stack([ed_gt, es_pred]), spacing), ed=0, es=1)
    return {"expert": expert, "pred": pred, "dice": {k: _dice(es_pred, es_gt, v) for k, v in STRUCTURES.items()}}


def _git_commit() -> str:
    try:
        return subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, check=True,
                              cwd=Path(__file__).parent).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "?"


def run_method(method: str, items: List[Dict[str, object]], out: Path, refine) -> None:
    from tqdm import tqdm

    import SimpleITK as sitk

    from monai_npc.cardiac.through_plane import apply_basal_descent, clear_basal_by_prior

    paths = {method: out / f"{method}.jsonl", f"{method}+descent": out / f"{method}+descent.jsonl"}
    done = set.intersection(*({json.loads(line)["name"] for line in p.read_text().splitlines() if line.strip()} if p.is_file() else set()
                              for p in paths.values()))
    commit = _git_commit()
    for item in tqdm([i for i in items if i["name"] not in done], desc=method, unit="patient"):
        t0 = time.perf_counter()
        es_pred, prior = propagate_npc(item, refine) if method == "npc" else (propagate_demons(item), None)
        seconds = time.perf_counter() - t0
        ed_img = sitk.ReadImage(str(item["ed_gt"]))
        ed_label = sitk.GetArrayFromImage(ed_img)
        descended = apply_basal_descent(es_pred, ed_label, ed_img.GetSpacing()[2])
        descended = clear_basal_by_prior(descended, ed_label, prior)[0]  # NPC: the LV gone from the basal slice, as its prior sees it
        for name, pred in ((method, es_pred), (f"{method}+descent", descended)):
            record = {"name": item["name"], "group": item["group"], "method": name, "seconds": seconds, "commit": commit, **evaluate(item, pred)}
            with open(paths[name], "a") as f:
                f.write(json.dumps(record) + "\n")


def _fmt(s: Dict[str, float]) -> str:
    return f"{s['mae']:.1f} | {s['bias']:+.1f} | [{s['loa_low']:.1f}, {s['loa_high']:.1f}] | {s['r']:.2f}"


def summarise(out: Path) -> Dict[str, object]:
    from monai_npc.apps.tracking.figures import bland_altman_figure
    from monai_npc.cardiac.function import agreement

    records = {}
    for path in sorted(out.glob("*.jsonl")):
        rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
        records[path.stem] = {r["name"]: r for r in rows}
    if not records:
        raise FileNotFoundError(f"{out}: no <method>.jsonl results yet.")
    names = sorted(set.intersection(*(set(r) for r in records.values())))
    groups = sorted({records[next(iter(records))][n]["group"] for n in names})
    summary: Dict[str, object] = {"patients": len(names), "methods": {}}
    lines = [f"# Cardiac function from ED->ES propagation ({len(names)} patients in every method)", ""]
    ref_rec = next(iter(records.values()))
    lines += ["Expert reference (ED + ES labels), mean per group:", "", "| group | n | LV EF % | RV EF % | LV ESV mL | RV ESV mL |",
              "|---|---|---|---|---|---|"]
    for group in groups + ["all"]:
        sel = [ref_rec[n]["expert"] for n in names if group == "all" or ref_rec[n]["group"] == group]
        lines.append(f"| {group} | {len(sel)} | " + " | ".join(f"{np.mean([e[q] for e in sel]):.1f}" for q in QUANTITIES) + " |")
    lines.append("")
    for method, rec in records.items():
        commits = sorted({rec[n].get("commit", "?") for n in names})
        secs = [rec[n]["seconds"] for n in names]
        lines += [f"## {method} (commit {', '.join(commits)}; {np.mean(secs):.1f} s per patient)", "",
                  "| group | n | quantity | MAE | bias | 95 % LoA | r |", "|---|---|---|---|---|---|---|"]
        per_group = {}
        for group in groups + ["all"]:
            sel = [n for n in names if group == "all" or rec[n]["group"] == group]
            stats = {q: agreement([rec[n]["pred"][q] for n in sel], [rec[n]["expert"][q] for n in sel]) for q in QUANTITIES}
            dice = {k: float(np.nanmean([rec[n]["dice"][k] for n in sel])) for k in STRUCTURES}
            per_group[group] = {"agreement": stats, "es_dice": dice}
            for q in QUANTITIES:
                lines.append(f"| {group} | {len(sel)} | {q} | {_fmt(stats[q])} |")
        lines += ["", "ES 3-D Dice (mean over patients):", "", "| group | RV | Myo | LV |", "|---|---|---|---|"]
        for group, g in per_group.items():
            lines.append(f"| {group} | {g['es_dice']['rv']:.3f} | {g['es_dice']['myo']:.3f} | {g['es_dice']['lv']:.3f} |")
        lines.append("")
        summary["methods"][method] = {"commits": commits, "seconds_per_patient": float(np.mean(secs)), "groups": per_group}
    ref = next(iter(records.values()))
    titles = {"lv_ef": "LV EF", "rv_ef": "RV EF"}
    # the figure shows what track() gives (the +descent records) when they are there; results.md has every method
    shown = [m for m in records if m.endswith("+descent")] or list(records)
    panels = {titles[q]: {m: [records[m][n]["pred"][q] for n in names] for m in shown} for q in titles}
    reference = {titles[q]: [ref[n]["expert"][q] for n in names] for q in titles}
    bland_altman_figure(panels, reference, out / "bland_altman.png", units="EF %",
                        title=f"ED->ES propagation vs expert ES labels, {len(names)} ACDC test patients")
    (out / "results.md").write_text("\n".join(lines) + "\n")
    (out / "summary.json").write_text(json.dumps(summary, indent=2))
    return summary


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--data-dir", default="../shared/data/acdc_official_test")
    p.add_argument("--out", default="runs/cardiac_function")
    p.add_argument("--methods", nargs="+", default=["npc", "demons"], choices=["npc", "demons"])
    p.add_argument("--refine", type=int, default=None, help="NPC refinement steps (default: the weights' setting)")
    p.add_argument("--limit", type=int, default=None, help="first N patients only")
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--summarise-only", action="store_true")
    args = p.parse_args(argv)
    os.environ.setdefault("OMP_NUM_THREADS", str(args.threads))
    import SimpleITK as sitk
    import torch

    torch.set_num_threads(args.threads)
    sitk.ProcessObject.SetGlobalDefaultNumberOfThreads(args.threads)
    sitk.ProcessObject.GlobalWarningDisplayOff()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    if not args.summarise_only:
        items = [_frames(f) for f in _patients(Path(args.data_dir))][: args.limit]
        for method in args.methods:
            run_method(method, items, out, args.refine)
    summary = summarise(out)
    print((out / "results.md").read_text())
    return 0 if summary else 1


if __name__ == "__main__":
    sys.exit(main())
