"""Label-free heart localisation and the model's field of view on whole ACDC stacks (issue 24, item 1).

    python benchmarks/localisation.py [--data-dir ../shared/data/acdc_ssl4mis] [--dice] [--variants image,heart-stack,heart]

A variant is a ``field_of_view`` of ``monai_npc.register``, optionally with the refinement steps
after a colon (``heart-stack:0``), their learning rate after a second one (``heart:40:0.25``), the
label-guidance weight after a third
(``heart:25:0.25:0.1``; default: ``register``'s 0.05), the learned ODE steps after a fourth
(``heart:40:::6``) and the refinement's residual grid stride after a fifth (``heart:40:::6:4``);
empty fields keep their default, ``register``'s settings (6 ODE steps, 30 refinement steps of 0.5
falling to 0.15 voxels, grid stride 8 for ``acdc``; a learning rate given is kept for every step).

Whole short-axis stacks are rebuilt from the SSL4MIS slice files (full field of view, every
slice; that copy stores no spacing, so the in-plane spacing is taken as 360 mm / the larger
side, ACDC's typical field of view). Two measurements:

1. Localisation (all 70 patients; :func:`monai_npc.apps.registration.localize.motion_centre` uses no label,
   the labels only score it): distance from the centre it finds to the centre of the ED/ES label
   box, and the share of label voxels a 128 x 128 window on it holds.
2. ``--dice``: whole-stack 3-D Dice (RV/Myo/LV) of the moving label carried to the fixed frame by
   ``monai_npc.register(model="acdc")`` with each ``field_of_view`` variant, both directions, on
   the validation and test patients of ``bundles/npc_acdc/configs/acdc70_split.json`` (26
   patients, 52 pairs; none trained on; the official ACDC test set is never used here; ``--split
   train``: its 44 training patients, 88 pairs, for a second look at a choice), by
   initial-Dice bucket, with folding and seconds per pair, and the LV EF error of the ED->ES pairs
   (points; the ES LV volume of the carried ED label against the expert ES label's, slice voxel
   counts, no basal descent): mean absolute error and bias. A second table splits that ES volume
   error by slice position (the most basal LV slice of the ED label, the two most apical, the
   rest; % of the ED volume, mean per patient) and by the ACDC training set's pathology group
   (patients 001-020 DCM, 021-040 HCM, 041-060 MINF, 061-080 NOR, 081-100 RV), with the patients
   whose expert ES label has no LV in that basal slice: the base left it in systole, which an
   in-plane field cannot express.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import time
from pathlib import Path
from typing import Dict, List, Optional, Tuple

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
DEFAULT_DATA = ROOT.parent / "shared" / "data" / "acdc_ssl4mis"
SPLIT = ROOT / "bundles" / "npc_acdc" / "configs" / "acdc70_split.json"


def read_stack(data: Path, patient: str, frame: int) -> Tuple[np.ndarray, np.ndarray]:
    """``(Z, H, W)`` image and label of one frame from the SSL4MIS slice files."""
    import h5py

    files = sorted(data.glob(f"{patient}_frame{frame:02d}_slice_*.h5"), key=lambda f: int(re.search(r"slice_(\d+)", f.name).group(1)))
    if not files:
        raise FileNotFoundError(f"no slice files for {patient} frame {frame} in {data}")
    images, labels = [], []
    for f in files:
        with h5py.File(f, "r") as h:
            images.append(h["image"][()])
            labels.append(h["label"][()])
    return np.stack(images).astype(np.float32), np.stack(labels).astype(np.int32)


def split_patients(split: str, limit=None) -> List[str]:
    """The patients of ``bundles/npc_acdc/configs/acdc70_split.json``: ``"train"`` (44) or ``"val"`` (its validation and
    test patients, 26), the first ``limit`` of them when given."""
    table = json.loads(SPLIT.read_text())
    patients = table["train"] if split == "train" else table["val"] + table["test"]
    return patients[:limit] if limit else patients


def resumed_rows(log: Path) -> List[dict]:
    """The rows a previous run appended to ``log`` (JSON lines; none when it does not exist)."""
    return [json.loads(line) for line in log.read_text().splitlines() if line.strip()] if log.exists() else []


def as_sitk(array: np.ndarray):
    import SimpleITK as sitk

    image = sitk.GetImageFromArray(array.astype(np.float32))
    s = 360.0 / max(array.shape[1:])
    image.SetSpacing((s, s, 10.0))
    return image


def dice3(a: np.ndarray, b: np.ndarray) -> List[float]:
    return [float(2 * ((a == v) & (b == v)).sum() / max(int((a == v).sum() + (b == v).sum()), 1)) for v in (1, 2, 3)]


def localisation(data: Path, patients: List[str]) -> Dict[str, float]:
    from monai_npc.apps.registration.localize import motion_centre

    errors, coverage = [], []
    for p in patients:
        (ed, edl), (es, esl) = read_stack(data, p, 1), read_stack(data, p, 2)
        s = 360.0 / max(ed.shape[1:])
        row, col = motion_centre(ed, es, (s, s))
        union = (edl > 0) | (esl > 0)
        rr, cc = np.nonzero(union.any(0))
        errors.append(float(np.hypot(row - (rr.min() + rr.max()) / 2, col - (cc.min() + cc.max()) / 2)))
        r0, c0 = int(round(row)) - 64, int(round(col)) - 64
        coverage.append(float(union[:, max(r0, 0) : r0 + 128, max(c0, 0) : c0 + 128].sum() / union.sum()))
    e, c = np.asarray(errors), np.asarray(coverage)
    return {"patients": len(patients), "centre_error_px_median": float(np.median(e)), "centre_error_px_max": float(e.max()),
            "coverage_min": float(c.min()), "coverage_mean": float(c.mean()), "coverage_below_0.99": int((c < 0.99).sum())}


def dice_by_variant(data: Path, patients: List[str], variants: List[str], weights: Optional[Path] = None) -> List[dict]:
    import SimpleITK as sitk
    from tqdm.auto import tqdm

    import monai_npc
    from monai_npc.apps.registration.models import resolve_model
    from monai_npc.serialization import safe_load
    from monai_npc.cardiac.through_plane import volume_error_by_position

    nets = {}
    for v in variants:
        fov, steps, lr, guidance, ode, stride = (v.split(":") + [""] * 5)[:6]
        net, _ = resolve_model("acdc", "cpu", int(steps) if steps else None, int(ode) if ode else None)
        if weights is not None:  # another state of the acdc network (examples/train_acdc_stacks.py), register's settings kept
            net.load_state_dict(safe_load(weights, what="acdc weights"))
        if lr:
            net.refiner.learning_rate, net.refiner.learning_rate_end = float(lr), None
        if stride:
            net.refiner.grid_stride = int(stride)
        nets[v] = (fov, net, {"label_guidance": float(guidance)} if guidance else {})
    rows = []
    for p in tqdm(patients, desc="patients"):
        (ed, edl), (es, esl) = read_stack(data, p, 1), read_stack(data, p, 2)
        for direction, (m, ml, f, fl) in {"ED->ES": (ed, edl, es, esl), "ES->ED": (es, esl, ed, edl)}.items():
            row = {"patient": p, "direction": direction, "initial": float(np.mean(dice3(ml, fl)))}
            for v, (fov, net, extra) in nets.items():
                t0 = time.perf_counter()
                r = monai_npc.register(as_sitk(m), as_sitk(f), model=net, moving_label=as_sitk(ml), field_of_view=fov, threads=1, **extra)
                warped = sitk.GetArrayFromImage(r.warped_label)
                row[v] = float(np.mean(dice3(warped, fl)))
                row[f"{v}_lv_voxels"] = [int((ml == 3).sum()), int((warped == 3).sum()), int((fl == 3).sum())]  # moving, carried, fixed
                if direction == "ED->ES":
                    row[f"{v}_lv_by_position"] = volume_error_by_position(ml, warped, fl, 3)
                row[f"{v}_folding"] = r.summary["folding_percent"]
                row[f"{v}_seconds"] = time.perf_counter() - t0
            rows.append(row)
    return rows


ACDC_TRAINING_GROUPS = ("DCM", "HCM", "MINF", "NOR", "RV")  # the ACDC training set is ordered by group, 20 patients each


def acdc_training_group(patient: str) -> str:
    """Pathology group of an ACDC *training-set* patient (``patient001``-``patient100``) from its number."""
    number = int(re.search(r"(\d+)$", patient).group(1))
    if not 1 <= number <= 100:
        raise ValueError(f"{patient}: not an ACDC training-set patient (001-100); its group is in its Info.cfg")
    return ACDC_TRAINING_GROUPS[(number - 1) // 20]


def position_table(rows: List[dict], variant: str) -> str:
    """ED->ES LV volume error by slice position and group (markdown), from
    :func:`monai_npc.cardiac.through_plane.volume_error_by_position`."""
    pairs = [r for r in rows if r["direction"] == "ED->ES" and f"{variant}_lv_by_position" in r]
    lines = [f"ED->ES LV volume error of `{variant}` by slice position, % of the ED volume, mean per patient "
             "(positive: the carried LV is too large at ES):", "",
             "| group | patients | all slices | basal | mid | apical | basal slice left at ES | their basal error |",
             "|---|---|---|---|---|---|---|---|"]
    for group in ACDC_TRAINING_GROUPS + ("all",):
        sel = [r[f"{variant}_lv_by_position"] for r in pairs if group == "all" or acdc_training_group(r["patient"]) == group]
        if not sel:
            continue
        left = [e["basal"] for e in sel if e["basal_left"]]
        total = np.mean([e["basal"] + e["mid"] + e["apical"] for e in sel])
        lines.append(f"| {group} | {len(sel)} | {total:+.2f} | " + " | ".join(f"{np.mean([e[k] for e in sel]):+.2f}" for k in ("basal", "mid", "apical"))
                     + f" | {len(left)} | " + (f"{np.mean(left):+.2f}" if left else "-") + " |")
    return "\n".join(lines)


def summarise(rows: List[dict], variants: List[str]) -> str:
    init = np.asarray([r["initial"] for r in rows])
    buckets = {"large (<0.55)": init < 0.55, "medium": (init >= 0.55) & (init < 0.70), "small (>=0.70)": init >= 0.70}
    lines = ["| variant | mean Dice | " + " | ".join(f"{k} ({int(m.sum())})" for k, m in buckets.items())
             + " | ED->ES LV EF error MAE / bias | folding % | s/pair |",
             "|---|---|" + "---|" * len(buckets) + "---|---|---|"]
    for v in variants:
        d = np.asarray([r[v] for r in rows])
        ef = np.asarray([100.0 * (r[f"{v}_lv_voxels"][2] - r[f"{v}_lv_voxels"][1]) / max(r[f"{v}_lv_voxels"][0], 1)
                         for r in rows if r["direction"] == "ED->ES"])  # EF(carried) - EF(expert), same ED volume
        lines.append(f"| {v} | {d.mean():.4f} | " + " | ".join(f"{d[m].mean():.4f}" for m in buckets.values())
                     + f" | {np.abs(ef).mean():.2f} / {ef.mean():+.2f} | {np.mean([r[v + '_folding'] for r in rows]):.4f}"
                     + f" | {np.mean([r[v + '_seconds'] for r in rows]):.2f} |")
    return "\n".join(lines)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data-dir", type=Path, default=DEFAULT_DATA)
    parser.add_argument("--dice", action="store_true", help="also register every pair with each --variants field of view")
    parser.add_argument("--variants", default="image,heart-stack,heart")
    parser.add_argument("--out", type=Path, default=None, help="write the per-pair rows (JSON) here")
    parser.add_argument("--split", choices=("heldout", "train"), default="heldout",
                        help="--dice on the 26 validation/test patients of acdc70_split (default) or on its 44 training patients")
    parser.add_argument("--weights", type=Path, default=None,
                        help="a state dict of the acdc network to use instead of the shipped one (e.g. a best_model.pt of "
                             "examples/train_acdc_stacks.py); register's settings for acdc stay")
    parser.add_argument("--no-localisation", action="store_true", help="skip the localisation scores (measurement 1)")
    args = parser.parse_args(argv)
    data = args.data_dir / "data" if (args.data_dir / "data").is_dir() else args.data_dir
    split = json.loads(SPLIT.read_text())
    if not args.no_localisation:
        print(json.dumps(localisation(data, split["train"] + split["val"] + split["test"]), indent=2))
    if args.dice:
        variants = args.variants.split(",")
        rows = dice_by_variant(data, split["train"] if args.split == "train" else split["val"] + split["test"], variants, args.weights)
        if args.out:
            args.out.write_text(json.dumps(rows, indent=1))
        print(summarise(rows, variants))
        for v in variants:
            print("\n" + position_table(rows, v))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
