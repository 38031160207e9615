"""A real cine under acquisition shifts: `monai_npc.track` with its label prior against without it, frame by frame.

    OMP_NUM_THREADS=1 python benchmarks/cine_shifts.py [--cine-dir ../shared/data/acdc_cine_example/patient090] \\
        [--shifts none,bias,...] [--shard 0/2] [--out runs/cine_shifts]

The 4-D cine (ACDC layout: ``patientNNN_4d.nii.gz``, ``Info.cfg``, ED / ES ``_gt`` labels) gets each shift of
``benchmarks/shift_suite.py`` (MONAI's bias field, gamma / contrast, Gibbs ringing, k-space spikes, noise, blur, a
coarser in-plane resolution, inverted contrast) on every frame (random shifts seeded by the frame number), and is
tracked from the ED expert label with ``track``'s defaults (the ``direct`` scheme: ``register`` from ED onto each
frame with the label, its label-guided refinement and label prior) and with ``label_prior=0``. Per run: ES Dice
(RV / Myo / LV, Info.cfg's ES frame), LV and RV EF error against the expert ED / ES labels (at Info.cfg's frames),
the carried myocardium against its ED volume through the cycle (median and largest |change|), peak GCS / GRS, and
the frames the prior acted on. Rows go to ``OUT/rows.jsonl`` (a rerun skips what is there), the table to
``OUT/results.md``.
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
SETTINGS = {"defaults": {}, "prior off": {"label_prior": 0}}


def run(folder: Path, shift: str, setting: str, threads: int) -> Dict:
    """One tracking of the shifted cine (module docstring); the row."""
    import SimpleITK as sitk
    from shift_suite import shift_transform

    import monai_npc
    from monai_npc.apps.tracking.cine import read_cine
    from monai_npc.apps.tracking.result import label_dice
    from monai_npc.cardiac.function import cardiac_function, volume_curves
    from monai_npc.data.layout import read_cfg

    name = folder.name
    info = read_cfg(folder / "Info.cfg")
    ed, es = int(info["ED"]) - 1, int(info["ES"]) - 1
    frames = read_cine(folder / f"{name}_4d.nii.gz").frames
    shifted = []
    for t, frame in enumerate(frames):
        out = sitk.GetImageFromArray(shift_transform(shift, seed=t)(sitk.GetArrayFromImage(frame)))
        out.CopyInformation(frame)
        shifted.append(out)
    ed_arr = sitk.GetArrayFromImage(sitk.ReadImage(str(folder / f"{name}_frame{ed + 1:02d}_gt.nii.gz")))
    es_arr = sitk.GetArrayFromImage(sitk.ReadImage(str(folder / f"{name}_frame{es + 1:02d}_gt.nii.gz")))
    tracking = monai_npc.track(shifted, ed_arr, reference_frame=ed, progress=False, threads=threads, **SETTINGS[setting])
    expert = cardiac_function(volume_curves(np.stack([ed_arr, es_arr]), tracking.cine.spacing), ed=0, es=1)
    found = cardiac_function(tracking.volumes, ed, es)
    myo = tracking.volumes["myo"] / tracking.volumes["myo"][ed]
    label = tracking.settings.get("label") or {}
    return {"cine": name, "shift": shift, "setting": setting, "dice_es": label_dice(tracking.labels[es], es_arr),
            "lv_ef_error": found["lv_ef"] - expert["lv_ef"], "rv_ef_error": found["rv_ef"] - expert["rv_ef"],
            "myo_median_abs": float(np.median(np.abs(myo - 1))), "myo_max_abs": float(np.max(np.abs(myo - 1))),
            "gcs": float(tracking.strain.peak["circumferential"]), "grs": float(tracking.strain.peak["radial"]),
            "prior_acted": label.get("prior_acted_on_frames", []), "frames": len(frames),
            "seconds_per_frame": tracking.seconds_per_frame}


def summarise(rows: List[Dict]) -> str:
    lines = ["| cine | shift | setting | ES Dice RV / Myo / LV (mean) | LV EF error | RV EF error | myocardium / ED, median (largest) "
             "abs change | peak GCS / GRS % | prior acted on frames | s / frame |", "|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        d = r["dice_es"]
        mean = np.mean([d["rv"], d["myo"], d["lv"]])
        lines.append(f"| {r['cine']} | {r['shift']} | {r['setting']} | {d['rv']:.3f} / {d['myo']:.3f} / {d['lv']:.3f} ({mean:.3f}) | "
                     f"{r['lv_ef_error']:+.1f} | {r['rv_ef_error']:+.1f} | {100 * r['myo_median_abs']:.1f} % ({100 * r['myo_max_abs']:.1f} %) | "
                     f"{r['gcs']:.1f} / {r['grs']:+.1f} | {len(r['prior_acted'])} of {r['frames'] - 1} | {r['seconds_per_frame']:.1f} |")
    pairs = {(r["cine"], r["shift"], r["setting"]): r for r in rows}
    diffs = []
    for (cine, shift, setting), r in pairs.items():
        off = pairs.get((cine, shift, "prior off"))
        if setting == "defaults" and off:
            a = np.mean([r["dice_es"][k] for k in ("rv", "myo", "lv")])
            b = np.mean([off["dice_es"][k] for k in ("rv", "myo", "lv")])
            diffs.append(f"| {cine} | {shift} | {a - b:+.3f} | {abs(r['lv_ef_error']):.1f} / {abs(off['lv_ef_error']):.1f} | "
                         f"{100 * (r['myo_median_abs'] - off['myo_median_abs']):+.1f} |")
    if diffs:
        lines += ["", "| cine | shift | defaults - prior off: ES Dice (mean) | abs LV EF error, defaults / prior off | "
                  "defaults - prior off: myocardium median abs change (points) |", "|---|---|---|---|---|"] + diffs
    return "\n".join(lines)


def main(argv=None) -> int:
    from localisation import resumed_rows
    from shift_suite import SHIFTS

    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--cine-dir", type=Path, default=ROOT.parent / "shared" / "data" / "acdc_cine_example" / "patient090")
    p.add_argument("--shifts", default=",".join(SHIFTS))
    p.add_argument("--shard", default="0/1", help="i/n: every n-th (shift, setting) run from the i-th")
    p.add_argument("--out", type=Path, default=ROOT / "runs" / "cine_shifts")
    p.add_argument("--threads", type=int, default=1)
    args = p.parse_args(argv)
    if not (args.cine_dir / "Info.cfg").is_file():
        p.error(f"--cine-dir {args.cine_dir}: no Info.cfg (an ACDC patient folder with the 4-D cine and ED / ES labels is needed)")
    shifts = [s for s in args.shifts.split(",") if s]
    unknown = [s for s in shifts if s not in SHIFTS]
    if unknown:
        p.error(f"unknown shift(s) {unknown}; known: {SHIFTS}")
    i, n = (int(v) for v in args.shard.split("/"))
    args.out.mkdir(parents=True, exist_ok=True)
    log = args.out / "rows.jsonl"
    done = {(r["cine"], r["shift"], r["setting"]) for r in resumed_rows(log)}
    jobs = [(s, setting) for s in shifts for setting in SETTINGS][i::n]
    with log.open("a") as f:
        for shift, setting in jobs:
            if (args.cine_dir.name, shift, setting) in done:
                continue
            row = run(args.cine_dir, shift, setting, args.threads)
            f.write(json.dumps(row) + "\n")
            f.flush()
            print(shift, setting, f"ES Dice {np.mean(list(row['dice_es'].values())):.3f}", flush=True)
    rows = resumed_rows(log)
    order = {s: k for k, s in enumerate(SHIFTS)}
    rows.sort(key=lambda r: (r["cine"], order[r["shift"]], r["setting"]))
    text = summarise(rows)
    (args.out / "results.md").write_text(text + "\n")
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
