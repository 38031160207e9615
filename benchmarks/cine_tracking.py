"""Cine tracking schemes compared: phantom cines (true labels in every frame) and a real ACDC cine.

    python benchmarks/cine_tracking.py --out runs/cine_tracking \\
        [--cine-dir ../shared/data/acdc_cine_example/patient090] [--phantoms 3] [--refine N] [--steps N] [--model acdc]

For every case, all schemes of :func:`monai_npc.apps.tracking.track_schemes` (``direct``,
``sequential``, ``average``, ``bidirectional`` share their registrations; ``anchored`` runs its own,
the network alone between consecutive frames and a correction against the reference frame; each
scheme's seconds count every registration it uses) with ``model="acdc"`` (``--model``: another shipped name or
weights file, e.g. a stack network's, ``acdc_through_plane``) and the library's defaults
(4 ODE steps and 10 refinement steps between consecutive frames, ``register``'s across more frames;
``--steps`` / ``--refine`` set every registration's, for ``anchored`` the correction's steps):

- phantoms (:func:`monai_npc.data.phantom_cine.cardiac_cine`, 10 frames, 3 slices, 96 x 96,
  seeds 100, 101, ...; ED label of frame 0 given): Dice per frame against the true labels
  (mean and worst frame; ``basal_descent=False``: the phantom has no through-plane motion), ES
  Dice, LV / RV volume error per frame (mL, mean |error|), LV / RV EF
  error (points), ES frame found vs true, drift (cycle Dice);
- the real cine (``patientNNN_4d.nii.gz`` with ``Info.cfg`` and ED/ES ``_gt`` labels; ED label
  given): ES frame found vs ``Info.cfg``, ES 3-D Dice against the expert ES label after tracking
  through every frame, LV / RV EF against the expert (ED + ES labels), drift, seconds per frame.

One JSON per case in ``OUT`` (a rerun skips finished cases), ``OUT/results.md`` from all of
them, and the volume-curve figure of each real cine per scheme.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path
from typing import Dict

import numpy as np

STRUCT = ("lv", "rv", "myo")


def _mean_dice(d: Dict[str, float]) -> float:
    return float(np.nanmean([d[k] for k in STRUCT]))


def phantom_case(seed: int, refine, steps=None, model: str = "acdc") -> Dict[str, object]:
    from monai_npc.data.phantom_cine import cardiac_cine
    from monai_npc.cardiac.function import cardiac_function, volume_curves
    from monai_npc.apps.tracking.track import label_dice, track_schemes

    c = cardiac_cine(frames=10, seed=seed)
    truth_v = volume_curves(c["label"], c["spacing"])
    truth_f = cardiac_function(truth_v)
    # the phantom has no through-plane motion (every slice keeps its level), so no basal descent
    results = track_schemes(c["image"], c["label"][0], 0, spacing=c["spacing"], refine_iterations=refine, num_steps=steps, threads=1,
                            basal_descent=False, model=model)
    out = {"case": f"phantom{seed}", "model": model, "truth": truth_f, "schemes": {}}
    for name, r in results.items():
        dice = [_mean_dice(label_dice(r.labels[t], c["label"][t])) for t in range(len(c["label"]))]
        es = c["es"]
        out["schemes"][name] = {
            "dice_mean": float(np.mean(dice[1:])), "dice_worst": float(np.min(dice[1:])), "dice_es": dice[es],
            "dice_per_frame": dice,
            "lv_volume_mae_ml": float(np.abs(r.volumes["lv"] - truth_v["lv"]).mean()),
            "rv_volume_mae_ml": float(np.abs(r.volumes["rv"] - truth_v["rv"]).mean()),
            "lv_ef_error": r.function["lv_ef"] - truth_f["lv_ef"], "rv_ef_error": r.function["rv_ef"] - truth_f["rv_ef"],
            "es_found": r.function["es_frame"], "es_true": es, "drift": r.drift,
            "seconds_per_frame": r.seconds_per_frame, "registrations": r.registrations,
        }
    return out


def real_case(folder: Path, refine, out_dir: Path, steps=None, model: str = "acdc") -> Dict[str, object]:
    import SimpleITK as sitk

    from monai_npc.data.layout import read_cfg
    from monai_npc.apps.tracking.figures import function_figure
    from monai_npc.cardiac.function import cardiac_function, volume_curves
    from monai_npc.apps.tracking.track import label_dice, track_schemes

    name = folder.name
    info = read_cfg(folder / "Info.cfg")
    ed, es = int(info["ED"]) - 1, int(info["ES"]) - 1  # 0-based
    ed_gt = folder / f"{name}_frame{ed + 1:02d}_gt.nii.gz"
    es_gt = sitk.GetArrayFromImage(sitk.ReadImage(str(folder / f"{name}_frame{es + 1:02d}_gt.nii.gz")))
    ed_arr = sitk.GetArrayFromImage(sitk.ReadImage(str(ed_gt)))
    results = track_schemes(folder / f"{name}_4d.nii.gz", ed_gt, ed, threads=1, refine_iterations=refine, num_steps=steps, model=model)
    first = next(iter(results.values()))
    expert_volumes = volume_curves(np.stack([ed_arr, es_gt]), first.cine.spacing)
    expert, expert_myo_es = cardiac_function(expert_volumes, ed=0, es=1), expert_volumes["myo"][1]
    out = {"case": name, "model": model, "ed_info": ed, "es_info": es, "expert": expert, "frames": len(first.cine), "schemes": {}}
    images = first.cine.arrays()
    for scheme, r in results.items():
        at_info = cardiac_function(r.volumes, ed, es)
        out["schemes"][scheme] = {
            "es_found": r.function["es_frame"], "ed_found": r.function["ed_frame"],
            "dice_es": label_dice(r.labels[es], es_gt), "function_found": r.function, "function_at_info": at_info,
            "lv_ef_error": at_info["lv_ef"] - expert["lv_ef"], "rv_ef_error": at_info["rv_ef"] - expert["rv_ef"],
            "drift": r.drift, "volumes_ml": {k: v.tolist() for k, v in r.volumes.items()},
            "seconds_per_frame": r.seconds_per_frame, "registrations": r.registrations,
            # the carried myocardium through the cycle against its reference volume, and at ES against the expert's
            "myo_ratio_median_abs": float(np.median(np.abs(r.volumes["myo"] / r.volumes["myo"][ed] - 1.0))),
            "myo_ratio_max_abs": float(np.max(np.abs(r.volumes["myo"] / r.volumes["myo"][ed] - 1.0))),
            "myo_es_ml": float(r.volumes["myo"][es]), "myo_es_expert_ml": float(expert_myo_es),
            "peak_gcs": float(r.strain.peak["circumferential"]), "peak_grs": float(r.strain.peak["radial"]),
        }
        function_figure(r.volumes, r.function["ed_frame"], r.function["es_frame"], images, r.labels,
                        out_dir / f"{name}_{scheme}.png", title=f"{name}: {scheme} tracking from ED (frame {ed})")
    return out


def _drift(d) -> str:
    return "-" if d is None else f"{_mean_dice(d):.3f}"


def summarise(out_dir: Path) -> str:
    lines = ["# Cine tracking schemes", ""]
    cases = [json.loads(p.read_text()) for p in sorted(out_dir.glob("*.json"))]
    ph = [c for c in cases if c["case"].startswith("phantom")]
    if ph:
        lines += [f"## Phantom cines ({len(ph)}; 10 frames, 3 slices, mean over cases)", "",
                  "| scheme | Dice mean | Dice worst frame | Dice ES | LV vol MAE mL | RV vol MAE mL | LV EF err | RV EF err | ES found | drift (cycle Dice) | s/frame |",
                  "|---|---|---|---|---|---|---|---|---|---|---|"]
        for s in ph[0]["schemes"]:
            rows = [c["schemes"][s] for c in ph]
            m = lambda k: float(np.mean([r[k] for r in rows]))  # noqa: E731
            found = sum(r["es_found"] == r["es_true"] for r in rows)
            drift = [r["drift"] for r in rows]
            dr = "-" if drift[0] is None else f"{np.mean([_mean_dice(d) for d in drift]):.3f}"
            lines.append(f"| {s} | {m('dice_mean'):.3f} | {m('dice_worst'):.3f} | {m('dice_es'):.3f} | {m('lv_volume_mae_ml'):.2f} | "
                         f"{m('rv_volume_mae_ml'):.2f} | {m('lv_ef_error'):+.1f} | {m('rv_ef_error'):+.1f} | {found}/{len(rows)} | {dr} | {m('seconds_per_frame'):.1f} |")
        lines.append("")
    for c in cases:
        if c["case"].startswith("phantom"):
            continue
        e = c["expert"]
        lines += [f"## {c['case']} ({c['frames']} frames; Info.cfg ED {c['ed_info']}, ES {c['es_info']} (0-based); "
                  f"expert LV EF {e['lv_ef']:.1f} %, RV EF {e['rv_ef']:.1f} %)", "",
                  "| scheme | ES found | ES Dice LV / RV / Myo | LV EF (err) | RV EF (err) | drift (cycle Dice) | s/frame | "
                  "myocardium / ED, median (max) abs change over the cycle | ES myocardium mL (expert) | peak GCS / GRS % |",
                  "|---|---|---|---|---|---|---|---|---|---|"]
        for s, r in c["schemes"].items():
            d, f = r["dice_es"], r["function_at_info"]
            extra = (f" {100 * r['myo_ratio_median_abs']:.1f} % ({100 * r['myo_ratio_max_abs']:.1f} %) | {r['myo_es_ml']:.1f} ({r['myo_es_expert_ml']:.1f}) | "
                     f"{r['peak_gcs']:.1f} / {r['peak_grs']:+.1f} |" if "peak_gcs" in r else " - | - | - |")
            lines.append(f"| {s} | {r['es_found']} | {d['lv']:.3f} / {d['rv']:.3f} / {d['myo']:.3f} | {f['lv_ef']:.1f} ({r['lv_ef_error']:+.1f}) | "
                         f"{f['rv_ef']:.1f} ({r['rv_ef_error']:+.1f}) | {_drift(r['drift'])} | {r['seconds_per_frame']:.1f} |" + extra)
        lines.append("")
    text = "\n".join(lines) + "\n"
    (out_dir / "results.md").write_text(text)
    return text


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", default="runs/cine_tracking")
    p.add_argument("--cine-dir", nargs="*", default=["../shared/data/acdc_cine_example/patient090"])
    p.add_argument("--phantoms", type=int, default=3)
    p.add_argument("--refine", type=int, default=None, help="refinement steps of every registration (default: track's)")
    p.add_argument("--steps", type=int, default=None, help="ODE steps of every registration (default: track's)")
    p.add_argument("--flip", type=int, default=None, help="flip ensemble of the consecutive-frame registrations (default: track's)")
    p.add_argument("--model", default="acdc", help="track's model: a shipped name or a weights file")
    args = p.parse_args(argv)
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    if args.flip is not None:
        from monai_npc.apps.tracking import registrations

        registrations.TRACK_FLIP_ENSEMBLE = args.flip
    import SimpleITK as sitk
    import torch

    torch.set_num_threads(1)
    sitk.ProcessObject.SetGlobalDefaultNumberOfThreads(1)
    sitk.ProcessObject.GlobalWarningDisplayOff()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    jobs = [(f"phantom{100 + i}", lambda s=100 + i: phantom_case(s, args.refine, args.steps, args.model)) for i in range(args.phantoms)]
    jobs += [(Path(d).name, lambda d=Path(d): real_case(d, args.refine, out, args.steps, args.model)) for d in args.cine_dir]
    for name, job in jobs:
        path = out / f"{name}.json"
        if path.is_file():
            continue
        result = job()
        tmp = path.with_suffix(".json.tmp")
        tmp.write_text(json.dumps(result, indent=1))
        tmp.replace(path)
        print(summarise(out), flush=True)
    print(summarise(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
