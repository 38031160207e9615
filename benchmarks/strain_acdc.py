"""Myocardial strain of ACDC ED -> ES pairs from the registration's field, by pathology group, against the expert LV EF.

    OMP_NUM_THREADS=1 python benchmarks/strain_acdc.py [--data-dir ../shared/data/acdc_ssl4mis] [--split val] \\
        [--methods npc,demons] [--out runs/strain_acdc]

Whole short-axis stacks of the SSL4MIS copy (as ``benchmarks/localisation.py`` builds them) of the validation and
test patients of ``bundles/npc_acdc/configs/acdc70_split.json`` (26 patients; never the official test split). For
each patient the ED frame is registered onto the ES frame with its expert ED label (``npc``:
``monai_npc.register(model="acdc")`` with its defaults; ``demons``: :func:`monai_npc.apps.stacks.demons_pair`, 200
iterations) and the field, as a two-frame tracking (frame 0 = ED, the reference), gives the strain through
:func:`monai_npc.cardiac.strain.strain_from_displacements` (the same code for both methods): peak global
circumferential (GCS) and radial (GRS) strain at ES. The expert LV EF comes from the ED and ES expert labels; the
carried myocardium's volume ratio ES / ED against the expert's. Rows go to ``OUT/rows.jsonl`` (a rerun skips what
is there), ``OUT/results.md`` is the table by group with Spearman's rank correlation of GCS / GRS with the LV EF.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Dict, List

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))
DEFAULT_DATA = ROOT.parent / "shared" / "data" / "acdc_ssl4mis"
GROUPS = ("NOR", "MINF", "DCM", "HCM", "RV")


def spearman(a, b) -> float:
    from scipy.stats import spearmanr

    return float(spearmanr(a, b).statistic)


def summarise(rows: List[Dict], methods) -> str:
    lines = ["| method | group | patients | peak GCS % (mean +- sd) | peak GRS % | myocardium ES/ED, carried (expert) | "
             "carried ES Dice myo |", "|---|---|---|---|---|---|---|"]
    for m in methods:
        x = [r for r in rows if r["method"] == m]
        for g in GROUPS + ("all",):
            y = x if g == "all" else [r for r in x if r["group"] == g]
            if not y:
                continue
            gcs, grs = np.array([r["gcs"] for r in y]), np.array([r["grs"] for r in y])
            lines.append(f"| {m} | {g} | {len(y)} | {gcs.mean():.1f} +- {gcs.std():.1f} | {grs.mean():.1f} +- {grs.std():.1f} | "
                         f"{np.median([r['myo_ratio'] for r in y]):.3f} ({np.median([r['myo_ratio_expert'] for r in y]):.3f}) | "
                         f"{np.mean([r['dice_myo'] for r in y]):.3f} |")
    lines.append("")
    lines.append("| method | Spearman(GCS, LV EF) | Spearman(GRS, LV EF) | median abs(myocardium ratio - 1), carried |")
    lines.append("|---|---|---|---|")
    for m in methods:
        x = [r for r in rows if r["method"] == m]
        if len(x) > 2:
            ef = [r["lv_ef"] for r in x]
            lines.append(f"| {m} | {spearman([r['gcs'] for r in x], ef):+.2f} | {spearman([r['grs'] for r in x], ef):+.2f} | "
                         f"{np.median([abs(r['myo_ratio'] - 1) for r in x]):.3f} |")
    pairs = {(r["patient"], r["method"]): r for r in rows}
    both = [(pairs[(pt, "npc")], pairs[(pt, "npc-reverse")]) for pt, m in pairs if m == "npc" and (pt, "npc-reverse") in pairs]
    if len(both) > 2:
        lines.append("")
        lines.append("| reproducibility: ED -> ES vs ES -> ED registration, the same ED-referenced strain | patients | mean abs difference | "
                     "Spearman between the two |")
        lines.append("|---|---|---|---|")
        for k, name in (("gcs", "peak GCS"), ("grs", "peak GRS")):
            a, b = np.array([x[k] for x, _ in both]), np.array([y[k] for _, y in both])
            lines.append(f"| {name} | {len(both)} | {np.abs(a - b).mean():.1f} points (mean {a.mean():.1f} vs {b.mean():.1f}) | {spearman(a, b):+.2f} |")
    return "\n".join(lines)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--data-dir", type=Path, default=DEFAULT_DATA)
    p.add_argument("--split", choices=("val", "train"), default="val")
    p.add_argument("--methods", default="npc,demons", help="npc, demons, npc-reverse (ES registered onto ED, the strain "
                   "of the same ED-referenced motion from the other direction)")
    p.add_argument("--out", type=Path, default=ROOT / "runs" / "strain_acdc")
    p.add_argument("--limit", type=int, default=None)
    p.add_argument("--threads", type=int, default=1)
    args = p.parse_args(argv)

    import SimpleITK as sitk
    import torch
    from localisation import acdc_training_group, as_sitk, read_stack, resumed_rows, split_patients
    from tqdm import tqdm

    import monai_npc
    from monai_npc.apps.stacks import demons_pair
    from monai_npc.cardiac.strain import strain_from_displacements

    torch.set_num_threads(args.threads)
    sitk.ProcessObject.SetGlobalDefaultNumberOfThreads(args.threads)
    patients = split_patients(args.split, args.limit)
    methods = [m for m in args.methods.split(",") if m]
    data = args.data_dir / "data" if (args.data_dir / "data").is_dir() else args.data_dir
    out = args.out / args.split
    out.mkdir(parents=True, exist_ok=True)
    log = out / "rows.jsonl"
    rows = resumed_rows(log)
    done = {(r["patient"], r["method"]) for r in rows}
    with log.open("a") as f:
        for pt in tqdm(patients, desc="patients", unit="patient"):
            todo = [m for m in methods if (pt, m) not in done]
            if not todo:
                continue
            (ed, edl), (es, esl) = read_stack(data, pt, 1), read_stack(data, pt, 2)
            moving, fixed, label = as_sitk(ed), as_sitk(es), as_sitk(edl.astype(np.float32))
            spacing = fixed.GetSpacing()[::-1]
            voxel = float(np.prod(spacing)) / 1000.0
            lv_ed, lv_es = (edl == 3).sum() * voxel, (esl == 3).sum() * voxel
            for m in todo:
                convention = "to_reference"
                if m == "npc":
                    reg = monai_npc.register(moving, fixed, model="acdc", moving_label=label, threads=args.threads)
                    ddf, carried = reg.ddf.numpy(), sitk.GetArrayFromImage(reg.warped_label)
                elif m == "npc-reverse":  # ES registered onto ED with the ES label: the field maps ED points to ES points
                    reg = monai_npc.register(fixed, moving, model="acdc", moving_label=as_sitk(esl.astype(np.float32)), threads=args.threads)
                    ddf, convention = reg.ddf.numpy(), "from_reference"
                    carried = esl  # not a carried label: its volume and Dice columns are the expert's
                else:
                    carried, d2 = demons_pair(moving, fixed, sitk.Cast(label, sitk.sitkInt16))
                    ddf = np.concatenate([np.zeros_like(d2[:, :1].numpy()), d2.numpy()], 1).transpose(1, 0, 2, 3)
                ddfs = np.stack([np.zeros_like(ddf), ddf])  # (2, 3, Z, H, W): ED (the reference) and ES
                st = strain_from_displacements(ddfs, edl, spacing, 0, convention=convention)
                myo_ed, myo_es = (edl == 2).sum(), (carried == 2).sum()
                row = {"patient": pt, "group": acdc_training_group(pt), "method": m, "gcs": float(st.peak["circumferential"]),
                       "grs": float(st.peak["radial"]), "lv_ef": float(100 * (lv_ed - lv_es) / lv_ed),
                       "myo_ratio": float(myo_es / max(myo_ed, 1)), "myo_ratio_expert": float((esl == 2).sum() / max(myo_ed, 1)),
                       "dice_myo": float(2 * ((carried == 2) & (esl == 2)).sum() / max((carried == 2).sum() + (esl == 2).sum(), 1))}
                f.write(json.dumps(row) + "\n")
                f.flush()
                rows.append(row)
    text = summarise(rows, methods)
    (out / "results.md").write_text(text + "\n")
    print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
