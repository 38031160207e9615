"""Myocardial strain of ACDC hearts from the registration's field, by pathology group, against the expert LV EF.

    OMP_NUM_THREADS=1 python benchmarks/strain_acdc.py [--data-dir ../shared/data/acdc_ssl4mis] [--split val] \\
        [--methods npc,demons] [--out runs/strain_acdc]
    OMP_NUM_THREADS=1 python benchmarks/strain_acdc.py --data-dir ../shared/data/acdc_official_test \\
        --methods npc,demons,npc-reverse,cine-direct [--shard 0/2] --out runs/strain_acdc_test      # final reporting only

Data: by default whole short-axis stacks of the SSL4MIS copy (as ``benchmarks/localisation.py`` builds them) of the
validation and test patients of ``bundles/npc_acdc/configs/acdc70_split.json`` (26 patients); with ``--data-dir`` a
folder in the official ACDC layout (``Info.cfg`` with ED, ES and Group; native spacing; the 4-D cine beside the
frames). The official test split is for final reporting only: run it once, at the end of a piece of work.

Methods, each giving peak global circumferential (GCS) and radial (GRS) strain through
:func:`monai_npc.cardiac.strain.strain_from_displacements` (the same code for every method):

- ``npc``: the ED frame registered onto the ES frame with its expert ED label (``monai_npc.register(model=MODEL)``,
  ``--model``, default ``acdc``, with its defaults), the field read as a two-frame tracking (frame 0 = ED, the reference);
- ``demons``: the same pair with :func:`monai_npc.apps.stacks.demons_pair` (200 iterations);
- ``npc-reverse``: the ES frame registered onto the ED frame with its expert ES label; that field maps ED points to
  their ES points, so it gives the same ED-referenced strain from the other direction (its volume and Dice columns
  are the expert's);
- ``cine-SCHEME`` (official layout only): the whole 4-D cine tracked from the ED expert label with
  ``monai_npc.track(..., scheme=SCHEME)`` (its defaults otherwise), the strain of the tracking through the cycle
  (peaks over every frame); also the carried myocardium's volume through the cycle against ED (median and largest
  |ratio - 1|), its Dice at the ES frame of Info.cfg and the LV EF at Info.cfg's frames.

The expert LV EF comes from the ED and ES expert labels; the carried myocardium's volume ratio ES / ED against the
expert's. Rows go to ``OUT/rows.jsonl`` (a rerun skips what is there; ``--shard i/n`` takes every n-th patient),
``OUT/results.md`` is the table by group (mean, sd and a bootstrap 95 % interval of the mean) with Spearman's rank
correlation of GCS / GRS with the LV EF, ``OUT/strain_vs_ef.png`` the peaks against the LV EF by group.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path
from typing import Dict, List, Tuple

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))
DEFAULT_DATA = ROOT.parent / "shared" / "data" / "acdc_ssl4mis"
GROUPS = ("NOR", "MINF", "DCM", "HCM", "RV")
BOOTSTRAP = 2000  # resamples of the bootstrap interval of a group mean


def spearman(a, b) -> float:
    from scipy.stats import spearmanr

    return float(spearmanr(a, b).statistic)


def bootstrap_interval(values, seed: int = 0) -> Tuple[float, float]:
    """95 % percentile interval of the mean of ``values`` over :data:`BOOTSTRAP` resamples (fixed seed)."""
    x = np.asarray(values, float)
    means = np.random.default_rng(seed).choice(x, (BOOTSTRAP, x.size)).mean(1)
    return float(np.percentile(means, 2.5)), float(np.percentile(means, 97.5))


def summarise(rows: List[Dict], methods) -> str:
    lines = ["| method | group | patients | peak GCS % (mean +- sd) [95 % CI] | peak GRS % [95 % CI] | myocardium ES/ED, carried (expert) | "
             "carried ES Dice myo |", "|---|---|---|---|---|---|---|"]
    for m in methods:
        x = [r for r in rows if r["method"] == m]
        for g in GROUPS + ("all",):
            y = x if g == "all" else [r for r in x if r["group"] == g]
            if not y:
                continue
            gcs, grs = np.array([r["gcs"] for r in y]), np.array([r["grs"] for r in y])
            (c0, c1), (r0, r1) = bootstrap_interval(gcs), bootstrap_interval(grs)
            lines.append(f"| {m} | {g} | {len(y)} | {gcs.mean():.1f} +- {gcs.std():.1f} [{c0:.1f}, {c1:.1f}] | {grs.mean():.1f} +- {grs.std():.1f} "
                         f"[{r0:.1f}, {r1:.1f}] | {np.median([r['myo_ratio'] for r in y]):.3f} ({np.median([r['myo_ratio_expert'] for r in y]):.3f}) | "
                         f"{np.mean([r['dice_myo'] for r in y]):.3f} |")
    lines.append("")
    lines.append("| method | Spearman(GCS, LV EF) | Spearman(GRS, LV EF) | median abs(myocardium ratio - 1), carried at ES |")
    lines.append("|---|---|---|---|")
    for m in methods:
        x = [r for r in rows if r["method"] == m]
        if len(x) > 2:
            ef = [r["lv_ef"] for r in x]
            lines.append(f"| {m} | {spearman([r['gcs'] for r in x], ef):+.2f} | {spearman([r['grs'] for r in x], ef):+.2f} | "
                         f"{np.median([abs(r['myo_ratio'] - 1) for r in x]):.3f} |")
    cines = [m for m in methods if m.startswith("cine-")]
    if any(r["method"] in cines for r in rows):
        lines += ["", "| method | patients | frames (median) | s / frame | myocardium / ED through the cycle: median abs change (median over patients) | "
                  "largest abs change (median) | ES Dice RV / Myo / LV | LV EF error (MAE / bias) |", "|---|---|---|---|---|---|---|---|"]
        for m in cines:
            x = [r for r in rows if r["method"] == m]
            if not x:
                continue
            err = np.array([r["lv_ef_tracked"] - r["lv_ef"] for r in x])
            dice = [np.mean([r["dice_es"][k] for r in x]) for k in ("rv", "myo", "lv")]
            lines.append(f"| {m} | {len(x)} | {np.median([r['frames'] for r in x]):.0f} | {np.mean([r['seconds_per_frame'] for r in x]):.1f} | "
                         f"{100 * np.median([r['myo_cycle_median_abs'] for r in x]):.1f} % | {100 * np.median([r['myo_cycle_max_abs'] for r in x]):.1f} % | "
                         f"{dice[0]:.3f} / {dice[1]:.3f} / {dice[2]:.3f} | {np.abs(err).mean():.1f} / {err.mean():+.1f} |")
    pairs = {(r["patient"], r["method"]): r for r in rows}
    for other, what in (("npc-reverse", "ES -> ED registration"), *((c, f"the whole cine ({c})") for c in cines)):
        both = [(pairs[(pt, "npc")], pairs[(pt, other)]) for pt, m in pairs if m == "npc" and (pt, other) in pairs]
        if len(both) > 2:
            lines += ["", f"| reproducibility: ED -> ES registration vs {what}, the same ED-referenced strain | patients | mean abs difference | "
                      "Spearman between the two |", "|---|---|---|---|"]
            for k, name in (("gcs", "peak GCS"), ("grs", "peak GRS")):
                a, b = np.array([x[k] for x, _ in both]), np.array([y[k] for _, y in both])
                lines.append(f"| {name} | {len(both)} | {np.abs(a - b).mean():.1f} points (mean {a.mean():.1f} vs {b.mean():.1f}) | {spearman(a, b):+.2f} |")
    return "\n".join(lines)


def strain_ef_figure(rows: List[Dict], methods, path: Path) -> None:
    """Peak GCS and GRS against the expert LV EF, one column per method (pair methods), coloured by pathology group."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    shown = [m for m in methods if any(r["method"] == m for r in rows)]
    fig, axes = plt.subplots(2, len(shown), figsize=(4.2 * len(shown), 7.5), squeeze=False, sharex=True)
    colours = dict(zip(GROUPS, ("tab:green", "tab:red", "tab:blue", "tab:purple", "tab:orange")))
    for j, m in enumerate(shown):
        x = [r for r in rows if r["method"] == m]
        for i, (k, name) in enumerate((("gcs", "peak GCS (%)"), ("grs", "peak GRS (%)"))):
            ax = axes[i, j]
            for g in GROUPS:
                y = [r for r in x if r["group"] == g]
                ax.scatter([r["lv_ef"] for r in y], [r[k] for r in y], s=18, color=colours[g], label=g)
            if i == 0:
                ax.axhspan(-28, -15, color="0.9", zorder=0, label="FT normal range")
            ax.set_title(f"{m}: Spearman {spearman([r[k] for r in x], [r['lv_ef'] for r in x]):+.2f}", fontsize=10)
            ax.set_ylabel(name)
            if i == 1:
                ax.set_xlabel("expert LV EF (%)")
    handles, labels = axes[0, 0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="lower center", ncol=len(labels), fontsize=9, frameon=False)
    fig.tight_layout(rect=(0, 0.04, 1, 1))
    fig.savefig(path, dpi=110)
    plt.close(fig)


def official_patients(root: Path) -> List[Dict]:
    """``{patient, group, folder, ed, es}`` (0-based frames of Info.cfg) of every patient folder under ``root``."""
    from monai_npc.data.layout import find_patient_dirs, read_cfg

    out = []
    for d in find_patient_dirs(root, re.compile(r"^patient\d{3}$")):
        info = read_cfg(d / "Info.cfg")
        out.append({"patient": d.name, "group": info["Group"], "folder": d, "ed": int(info["ED"]) - 1, "es": int(info["ES"]) - 1})
    if not out:
        raise FileNotFoundError(f"no patient folders with Info.cfg under {root}")
    return out


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--data-dir", type=Path, default=None, help="official ACDC layout (default: the SSL4MIS validation patients)")
    p.add_argument("--split", choices=("val", "train"), default="val", help="SSL4MIS patients (without --data-dir)")
    p.add_argument("--methods", default="npc,demons", help="npc, demons, npc-reverse, cine-SCHEME (official layout; e.g. cine-direct)")
    p.add_argument("--out", type=Path, default=ROOT / "runs" / "strain_acdc")
    p.add_argument("--limit", type=int, default=None, help="the first N patients")
    p.add_argument("--per-group", type=int, default=None, help="official layout: the first N patients of each group")
    p.add_argument("--shard", default="0/1", help="i/n: every n-th patient from the i-th")
    p.add_argument("--max-area-ratio", default=None, help="strain_from_displacements' max_area_ratio (default: its "
                   "MAX_AREA_RATIO); 'none': only folds are left out (the code of the 2026-11-27 test-split report)")
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--model", default="acdc", help="the NPC methods' model: a shipped name or a save_pretrained file")
    args = p.parse_args(argv)

    import SimpleITK as sitk
    import torch
    from localisation import acdc_training_group, as_sitk, read_stack, resumed_rows, split_patients
    from tqdm import tqdm

    import monai_npc
    from monai_npc.apps.stacks import demons_pair
    from monai_npc.apps.tracking.result import label_dice
    from monai_npc.cardiac.strain import strain_from_displacements
    from monai_npc.apps.tracking.schemes import SCHEMES

    from monai_npc.cardiac.strain import MAX_AREA_RATIO

    area = MAX_AREA_RATIO if args.max_area_ratio is None else None if args.max_area_ratio.lower() == "none" else float(args.max_area_ratio)
    torch.set_num_threads(args.threads)
    sitk.ProcessObject.SetGlobalDefaultNumberOfThreads(args.threads)
    methods = [m for m in args.methods.split(",") if m]
    for m in methods:
        if m not in ("npc", "demons", "npc-reverse") and not (m.startswith("cine-") and m[5:] in SCHEMES):
            p.error(f"unknown method {m!r}: npc, demons, npc-reverse or cine-SCHEME with SCHEME one of {SCHEMES}")
    shard = tuple(int(v) for v in args.shard.split("/"))
    official = args.data_dir is not None and next(args.data_dir.glob("**/Info.cfg"), None) is not None
    if official:
        patients = official_patients(args.data_dir)
        if args.per_group:
            patients = [q for g in GROUPS for q in [r for r in patients if r["group"] == g][: args.per_group]]
        out = args.out
    else:
        if any(m.startswith("cine-") for m in methods):
            p.error("cine-SCHEME needs the official layout (--data-dir with Info.cfg and the 4-D cines)")
        data_dir = args.data_dir or DEFAULT_DATA
        data = data_dir / "data" if (data_dir / "data").is_dir() else data_dir
        patients = [{"patient": pt, "group": acdc_training_group(pt), "data": data} for pt in split_patients(args.split)]
        out = args.out / args.split
    patients = patients[: args.limit] if args.limit else patients
    patients = patients[shard[0]::shard[1]]
    missing = [str(q["folder"] / f"{q['patient']}_4d.nii.gz") for q in patients if official and not (q["folder"] / f"{q['patient']}_4d.nii.gz").is_file()]
    if missing and any(m.startswith("cine-") for m in methods):
        p.error(f"cine-SCHEME needs each patient's 4-D cine; {len(missing)} missing, e.g. {missing[0]}")
    out.mkdir(parents=True, exist_ok=True)
    log = out / "rows.jsonl"
    rows = resumed_rows(log)
    done = {(r["patient"], r["method"]) for r in rows}

    def frame_files(q: Dict, frame: int):
        stem = q["folder"] / f"{q['patient']}_frame{frame + 1:02d}"
        return Path(f"{stem}.nii.gz"), Path(f"{stem}_gt.nii.gz")

    with log.open("a") as f:
        for q in tqdm(patients, desc="patients", unit="patient"):
            pt = q["patient"]
            todo = [m for m in methods if (pt, m) not in done]
            if not todo:
                continue
            if official:
                (ed_img, ed_lab), (es_img, es_lab) = frame_files(q, q["ed"]), frame_files(q, q["es"])
                moving, fixed = sitk.ReadImage(str(ed_img), sitk.sitkFloat32), sitk.ReadImage(str(es_img), sitk.sitkFloat32)
                label, es_label_image = sitk.ReadImage(str(ed_lab)), sitk.ReadImage(str(es_lab))
                edl, esl = sitk.GetArrayFromImage(label).astype(np.int64), sitk.GetArrayFromImage(es_label_image).astype(np.int64)
            else:
                (ed, edl), (es, esl) = read_stack(q["data"], pt, 1), read_stack(q["data"], pt, 2)
                moving, fixed, label = as_sitk(ed), as_sitk(es), as_sitk(edl.astype(np.float32))
                es_label_image = as_sitk(esl.astype(np.float32))
            spacing = fixed.GetSpacing()[::-1]
            voxel = float(np.prod(spacing)) / 1000.0
            lv_ed, lv_es = (edl == 3).sum() * voxel, (esl == 3).sum() * voxel
            for m in todo:
                convention, extra = "to_reference", {}
                if m == "npc":
                    reg = monai_npc.register(moving, fixed, model=args.model, moving_label=label, threads=args.threads)
                    ddfs, carried = np.stack([np.zeros(reg.ddf.shape, np.float32), reg.ddf.numpy()]), sitk.GetArrayFromImage(reg.warped_label)
                elif m == "npc-reverse":  # ES registered onto ED with the ES label: the field maps ED points to ES points
                    reg = monai_npc.register(fixed, moving, model=args.model, moving_label=es_label_image, threads=args.threads)
                    ddfs, convention = np.stack([np.zeros(reg.ddf.shape, np.float32), reg.ddf.numpy()]), "from_reference"
                    carried = esl  # not a carried label: its volume and Dice columns are the expert's
                elif m == "demons":
                    carried, d2 = demons_pair(moving, fixed, sitk.Cast(label, sitk.sitkInt16))
                    ddf = np.concatenate([np.zeros_like(d2[:, :1].numpy()), d2.numpy()], 1).transpose(1, 0, 2, 3)
                    ddfs = np.stack([np.zeros_like(ddf), ddf])  # (2, 3, Z, H, W): ED (the reference) and ES
                else:  # the whole cine from the ED label
                    tracking = monai_npc.track(q["folder"] / f"{pt}_4d.nii.gz", ed_lab, reference_frame=q["ed"], scheme=m[5:], progress=False,
                                               model=args.model, threads=args.threads)
                    ddfs, carried = tracking.ddf.numpy(), tracking.labels[q["es"]]
                    myo = tracking.volumes["myo"] / tracking.volumes["myo"][q["ed"]]
                    lv = tracking.volumes["lv"]
                    extra = {"frames": len(tracking.cine), "seconds_per_frame": tracking.seconds_per_frame,
                             "myo_cycle_median_abs": float(np.median(np.abs(myo - 1))), "myo_cycle_max_abs": float(np.max(np.abs(myo - 1))),
                             "dice_es": label_dice(carried, esl), "lv_ef_tracked": float(100 * (lv[q["ed"]] - lv[q["es"]]) / lv[q["ed"]])}
                st = strain_from_displacements(ddfs, edl, spacing, q.get("ed", 0) if m.startswith("cine-") else 0, convention=convention,
                                               max_area_ratio=area)
                myo_ed, myo_es = (edl == 2).sum(), (carried == 2).sum()
                row = {"patient": pt, "group": q["group"], "method": m, "gcs": float(st.peak["circumferential"]),
                       "grs": float(st.peak["radial"]), "lv_ef": float(100 * (lv_ed - lv_es) / lv_ed),
                       "myo_ratio": float(myo_es / max(myo_ed, 1)), "myo_ratio_expert": float((esl == 2).sum() / max(myo_ed, 1)),
                       "dice_myo": float(2 * ((carried == 2) & (esl == 2)).sum() / max((carried == 2).sum() + (esl == 2).sum(), 1)), **extra}
                f.write(json.dumps(row) + "\n")
                f.flush()
                rows.append(row)
    rows = resumed_rows(log)  # every shard's rows
    text = summarise(rows, methods)
    (out / "results.md").write_text(text + "\n")
    strain_ef_figure(rows, [m for m in methods if not m.startswith("cine-")], out / "strain_vs_ef.png")
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
