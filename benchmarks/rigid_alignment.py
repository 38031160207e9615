"""The rigid pre-alignment of two acquisitions (``register(align=...)``) on turned ACDC stacks.

    OMP_NUM_THREADS=1 python benchmarks/rigid_alignment.py [--data-dir ../shared/data/acdc_ssl4mis] \\
        [--split val|train] [--angles 0,10,20,45,90] [--out runs/rigid_alignment]
    python benchmarks/rigid_alignment.py --estimate-only --split train     # the turn found, no network

Whole short-axis stacks of the SSL4MIS copy (as ``benchmarks/localisation.py`` builds them: every
slice, full field of view, 360 mm over the larger side) of the validation and test patients of
``bundles/npc_acdc/configs/acdc70_split.json`` (26 patients, 52 pairs, both directions; ``--split
train``: the 44 training patients, on which the search's settings were chosen). The moving stack
and its label are turned by each angle about the stack's centre (about the slice normal) and
shifted in-plane by ``(min(a / 2, 8), -min(a / 3, 6))`` mm (zero where no data turns in), as another acquisition of the same
heart would be, then carried onto the untouched fixed frame by ``monai_npc.register(model="acdc")``
with ``align="none"`` and ``align="rigid"``; 3-D Dice (RV/Myo/LV, mean) against the fixed frame's
expert label, the turn error of the alignment (degrees) and seconds per pair.
``--estimate-only``: :func:`monai_npc.apps.registration.align.rigid_in_plane` alone (turn error, time, how
many turns were kept: a turn beyond the +-90 degree search is dropped rather than applied wrongly).

Rows are appended to ``OUT/rows.jsonl`` (a rerun skips what is there) and summarised in
``OUT/results.md``. The official ACDC test split is never used here.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Dict, List, Sequence

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))
DEFAULT_DATA = ROOT.parent / "shared" / "data" / "acdc_ssl4mis"
SPLIT = ROOT / "bundles" / "npc_acdc" / "configs" / "acdc70_split.json"


def turned(image, degrees: float, nearest: bool = False):
    """``image`` turned about its centre and slice normal and shifted in-plane (0 outside: the corners it
    turns in are empty, which the alignment has to cope with as with a smaller field of view)."""
    import SimpleITK as sitk

    centre = image.TransformContinuousIndexToPhysicalPoint([(s - 1) / 2 for s in image.GetSize()])
    t = sitk.Euler3DTransform()
    t.SetCenter(centre)
    t.SetRotation(0.0, 0.0, float(np.deg2rad(degrees)))
    t.SetTranslation((min(degrees / 2, 8.0), -min(degrees / 3, 6.0), 0.0))
    if nearest:
        return sitk.Resample(image, image, t, sitk.sitkNearestNeighbor, 0, sitk.sitkUInt8)
    return sitk.Resample(image, image, t, sitk.sitkLinear, 0.0)


def turn_error(found_deg: float, applied_deg: float) -> float:
    """|found + applied| modulo a full turn (the alignment undoes the applied turn)."""
    return abs((found_deg + applied_deg + 180.0) % 360.0 - 180.0)


def summarise(rows: List[Dict], angles: Sequence[float], estimate_only: bool) -> str:
    if estimate_only:
        lines = ["| turn (degrees) | pairs | kept | turn error median / max (degrees) | > 2 degrees | seconds (mean / max) |", "|---|---|---|---|---|---|"]
        for a in angles:
            x = [r for r in rows if r["angle"] == a]
            if x:
                e = np.array([r["error"] for r in x])
                t = np.array([r["seconds_align"] for r in x])
                kept = sum(r.get("applied", True) for r in x)
                lines.append(f"| {a:g} | {len(x)} | {kept} | {np.median(e):.2f} / {e.max():.2f} | {(e > 2).sum()} | {t.mean():.2f} / {t.max():.2f} |")
        return "\n".join(lines)
    lines = ["| turn (degrees) | pairs | Dice, align none | Dice, align rigid | rigid - none (per pair) | better / worse | "
             "turn error median / max | s/pair none / rigid |", "|---|---|---|---|---|---|---|---|"]
    for a in angles:
        x = [r for r in rows if r["angle"] == a]
        if not x:
            continue
        d = np.array([r["rigid"] - r["none"] for r in x])
        e = np.array([r["error"] for r in x])
        lines.append(
            f"| {a:g} | {len(x)} | {np.mean([r['none'] for r in x]):.4f} | {np.mean([r['rigid'] for r in x]):.4f} | "
            f"{d.mean():+.4f} +- {d.std() / np.sqrt(len(d)):.4f} | {(d > 0).sum()} / {(d < 0).sum()} | {np.median(e):.2f} / {e.max():.2f} | "
            f"{np.mean([r['seconds_none'] for r in x]):.2f} / {np.mean([r['seconds_rigid'] for r in x]):.2f} |"
        )
    return "\n".join(lines)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--data-dir", type=Path, default=DEFAULT_DATA)
    p.add_argument("--split", choices=("val", "train"), default="val", help="val: the 26 validation and test patients of acdc70")
    p.add_argument("--angles", default="0,10,20,45,90", help="comma-separated turns in degrees")
    p.add_argument("--out", type=Path, default=ROOT / "runs" / "rigid_alignment")
    p.add_argument("--limit", type=int, default=None, help="first N patients only")
    p.add_argument("--estimate-only", action="store_true", help="the alignment alone (no network)")
    p.add_argument("--threads", type=int, default=1)
    args = p.parse_args(argv)

    import SimpleITK as sitk
    import torch
    from localisation import as_sitk, dice3, read_stack
    from tqdm import tqdm

    import monai_npc
    from monai_npc.apps.registration.align import rigid_in_plane

    torch.set_num_threads(args.threads)
    sitk.ProcessObject.SetGlobalDefaultNumberOfThreads(args.threads)
    split = json.loads(SPLIT.read_text())
    patients = split["train"] if args.split == "train" else split["val"] + split["test"]
    patients = patients[: args.limit] if args.limit else patients
    angles = [float(a) for a in args.angles.split(",") if a.strip()]
    data = args.data_dir / "data" if (args.data_dir / "data").is_dir() else args.data_dir
    out = args.out / ("estimate_" + args.split if args.estimate_only else args.split)
    out.mkdir(parents=True, exist_ok=True)
    log = out / "rows.jsonl"
    rows = [json.loads(line) for line in log.read_text().splitlines() if line.strip()] if log.exists() else []
    done = {(r["patient"], r["direction"], r["angle"]) for r in rows}
    todo = [(pt, d, a) for pt in patients for d in ("ED->ES", "ES->ED") for a in angles if (pt, d, a) not in done]
    stacks: Dict[str, tuple] = {}
    with log.open("a") as f:
        for pt, direction, a in tqdm(todo, desc="turned pairs", unit="pair"):
            if pt not in stacks:
                stacks = {pt: (read_stack(data, pt, 1), read_stack(data, pt, 2))}
            (ed, edl), (es, esl) = stacks[pt]
            m, ml, fx, fl = (ed, edl, es, esl) if direction == "ED->ES" else (es, esl, ed, edl)
            moving, fixed = turned(as_sitk(m), a), as_sitk(fx)
            row = {"patient": pt, "direction": direction, "angle": a}
            if args.estimate_only:
                sp = fixed.GetSpacing()
                fit = rigid_in_plane(sitk.GetArrayFromImage(moving), fx.astype(np.float32), (sp[1], sp[0], sp[2]))
                row.update(error=turn_error(fit.angle_deg, a), seconds_align=fit.seconds, applied=fit.applied)
            else:
                label = turned(as_sitk(ml.astype(np.float32)), a, nearest=True)
                for mode in ("none", "rigid"):
                    t0 = time.perf_counter()
                    reg = monai_npc.register(moving, fixed, model="acdc", moving_label=label, align=mode, threads=args.threads)
                    row[mode] = float(np.mean(dice3(sitk.GetArrayFromImage(reg.warped_label), fl)))
                    row["seconds_" + mode] = time.perf_counter() - t0
                fit = reg.summary["alignment"]
                row.update(error=turn_error(fit["angle_deg"], a), seconds_align=fit["seconds"], applied=fit.get("applied", True))
            rows.append(row)
            f.write(json.dumps(row) + "\n")
            f.flush()
    table = summarise(rows, angles, args.estimate_only)
    (out / "results.md").write_text(f"# Rigid pre-alignment, acdc70 {args.split} ({len(set(r['patient'] for r in rows))} patients)\n\n{table}\n")
    print(table)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
