"""The label prior under acquisition shifts: ``register`` with the prior (defaults) and without it (``label_prior=0``)
when the images are unlike the training data.

    OMP_NUM_THREADS=1 python benchmarks/shift_suite.py [--data-dir ../shared/data/acdc_ssl4mis] [--split val] \\
        [--shifts none,bias,gamma,contrast,gibbs,spikes,noise,blur,coarse,inverted] [--phantoms 16] [--out runs/shift_suite] \\
        [--model acdc] [--settings prior,off,images]

Whole short-axis stacks of the SSL4MIS copy (as ``benchmarks/localisation.py`` builds them) of the validation and
test patients of ``bundles/npc_acdc/configs/acdc70_split.json`` (26 patients, both directions), never the official
test split. Each shift is one of MONAI's intensity and artefact transforms with a fixed seed, applied to BOTH
frames of the pair (another scanner or sequence gives both), except ``inverted``, which inverts the FIXED frame's
contrast only (the hardest case for a segmentation network of the fixed frame):

- ``bias``: ``RandBiasField`` (coefficient range 0.4); ``gamma``: ``AdjustContrast(gamma=2.0)``;
  ``contrast``: ``AdjustContrast(gamma=0.5)``; ``gibbs``: ``GibbsNoise(alpha=0.6)``;
  ``spikes``: ``RandKSpaceSpikeNoise`` (one spike per slice); ``noise``: ``RandGaussianNoise`` (std 0.08 of the range);
  ``blur``: ``GaussianSmooth(sigma 1.5 voxels in-plane)``; ``coarse``: in-plane resolution halved
  (``Zoom`` 0.5 then back, linear); ``inverted``: the fixed frame's intensities turned upside down.

Per pair and shift (``--settings``, all three by default): the label carried by ``monai_npc.register(model=MODEL)``
(``--model``, default ``acdc``) with no label at all (``images``: the moving label carried by the written transform,
issue 51's images-only target; with a model that names a prior, its segmentation of the moving frame steers the
refinement), and the moving label carried with the defaults (the prior ``acdc_heart``, weight 8)
and with ``label_prior=0``, 3-D Dice (RV/Myo/LV mean) against the fixed frame's expert
label, whether the prior acted and its checks (``agreement`` on the moving image, ``fixed_agreement``: its
fixed-image segmentation against the moving label before registration, ``carried_agreement``: the same against the
label the network's field carries, ``aside`` / ``dropped``: why it did not act). Rows go to ``OUT/rows.jsonl`` (a rerun
skips what is there); ``OUT/results.md`` is the table by shift, then the best label `register` returns (``fused_label`` where the prior acted) and
the EF bias of both settings by shift (ED->ES pairs). ``--shard i/n`` splits the patients between processes.
``--phantoms N`` adds the quickstart's cardiac phantom pairs (seeds 0..N-1; the quickstart itself registers 0-7),
another kind of image altogether, as the row ``phantoms``.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
import zlib
from pathlib import Path
from typing import Callable, Dict, List, Sequence

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))
DEFAULT_DATA = ROOT.parent / "shared" / "data" / "acdc_ssl4mis"
SHIFTS = ("none", "bias", "gamma", "contrast", "gibbs", "spikes", "noise", "blur", "coarse", "inverted")
#: register's settings scored per pair: the defaults (moving label + prior), the label without the prior, no label
SETTINGS = ("prior", "off", "images")


def shift_transform(name: str, seed: int) -> Callable[[np.ndarray], np.ndarray]:
    """``(Z, H, W)`` float32 stack -> the shifted stack (MONAI transforms on each slice as a channel-first 2-D image)."""
    from monai import transforms as mt

    def per_slice(t) -> Callable[[np.ndarray], np.ndarray]:
        def apply(stack: np.ndarray) -> np.ndarray:
            if hasattr(t, "set_random_state"):
                t.set_random_state(seed)
            return np.stack([np.asarray(t(sl[None]))[0] for sl in stack]).astype(np.float32)
        return apply

    if name == "none":
        return lambda s: s
    if name == "inverted":
        return lambda s: (s.max() - s).astype(np.float32)

    def scaled(t) -> Callable[[np.ndarray], np.ndarray]:  # on [0, 1], back to the stack's range
        inner = per_slice(t)

        def apply(stack: np.ndarray) -> np.ndarray:
            lo, hi = float(stack.min()), float(stack.max())
            return (inner((stack - lo) / max(hi - lo, 1e-6)) * (hi - lo) + lo).astype(np.float32)
        return apply

    table = {
        "bias": lambda: scaled(mt.RandBiasField(coeff_range=(0.3, 0.4), prob=1.0)),
        "gamma": lambda: scaled(mt.AdjustContrast(gamma=2.0)),
        "contrast": lambda: scaled(mt.AdjustContrast(gamma=0.5)),
        "gibbs": lambda: scaled(mt.GibbsNoise(alpha=0.6)),
        "spikes": lambda: scaled(mt.RandKSpaceSpikeNoise(prob=1.0, intensity_range=(11.0, 12.0))),
        "noise": lambda: scaled(mt.RandGaussianNoise(prob=1.0, std=0.08)),
        "blur": lambda: scaled(mt.GaussianSmooth(sigma=1.5)),
    }
    if name == "coarse":
        def coarse(stack: np.ndarray) -> np.ndarray:
            lo, hi = float(stack.min()), float(stack.max())
            unit = (stack - lo) / max(hi - lo, 1e-6)
            out = []
            for sl in unit:
                small = np.asarray(mt.Zoom(0.5, mode="area", keep_size=False)(sl[None]))
                out.append(np.asarray(mt.Resize(sl.shape, mode="bilinear")(small))[0])
            return (np.stack(out) * (hi - lo) + lo).astype(np.float32)
        return coarse
    if name not in table:
        raise ValueError(f"unknown shift {name!r}; known: {SHIFTS}")
    return table[name]()


def summarise(rows: List[Dict], shifts) -> str:
    """The table by shift: both settings' Dice, their per-pair difference, and what the prior did (acted, stood aside
    because the network's field already carried the label onto its segmentation, or dropped by its checks)."""
    lines = []
    if any("images" in r for r in rows):
        lines += ["Images only (`register(moving, fixed)`, the moving label carried by the written transform): 3-D Dice and "
                  "LV / RV EF bias (points, ED->ES pairs)", "", "| shift | pairs | Dice, images only | LV EF bias | RV EF bias |",
                  "|---|---|---|---|---|"]
        for s in shifts:
            x = [r for r in rows if r["shift"] == s and "images" in r]
            ef = [r for r in x if "ef_images" in r]
            if x:
                bias = [f"{np.nanmean([r['ef_images'][k] - r['ef_expert'][k] for r in ef]):+.1f}" if ef else "-" for k in ("lv", "rv")]
                lines.append(f"| {s} | {len(x)} | {np.mean([r['images'] for r in x]):.4f} | " + " | ".join(bias) + " |")
        lines.append("")
    if not any("prior" in r and "off" in r for r in rows):
        return "\n".join(lines)
    lines += ["| shift | pairs | Dice, label_prior=0 | Dice, defaults | defaults - off (per pair) | pairs worse by > 0.005 | "
              "prior acted / stood aside / dropped | fixed_agreement median (min) |", "|---|---|---|---|---|---|---|---|"]
    for s in shifts:
        x = [r for r in rows if r["shift"] == s and "prior" in r and "off" in r]
        if not x:
            continue
        on, off = np.array([r["prior"] for r in x]), np.array([r["off"] for r in x])
        d = on - off
        fa = [r["fixed_agreement"] for r in x if r.get("fixed_agreement") is not None]
        acted = sum(bool(r.get("acted")) for r in x)
        aside = sum(bool(r.get("aside")) for r in x)
        lines.append(f"| {s} | {len(x)} | {off.mean():.4f} | {on.mean():.4f} | {d.mean():+.4f} +- {d.std() / np.sqrt(len(d)):.4f} | "
                     f"{(d < -0.005).sum()} | {acted} / {aside} / {sum(bool(r.get('dropped')) for r in x)} | "
                     + (f"{np.median(fa):.2f} ({min(fa):.2f})" if fa else "-") + " |")
    lines += ["", "The best label `register` returns (`fused_label` where the prior acted, else `warped_label`) and LV / RV EF "
              "bias (points, ED->ES pairs: the ED expert label and the carried ES label against the expert ED + ES labels):", "",
              "| shift | Dice, fused or warped | fused - off | LV EF bias, off | LV EF bias, defaults | RV EF bias, off | RV EF bias, defaults |",
              "|---|---|---|---|---|---|---|"]
    for s in shifts:
        x = [r for r in rows if r["shift"] == s and "fused" in r and "off" in r]
        if not x:
            continue
        best = np.array([r["fused"] for r in x])
        cells = [f"{best.mean():.4f}", f"{(best - np.array([r['off'] for r in x])).mean():+.4f}"]
        ef = [r for r in x if "ef_off" in r]
        for k in ("lv", "rv"):
            for key in ("off", "prior"):
                cells.append(f"{np.nanmean([r['ef_' + key][k] - r['ef_expert'][k] for r in ef]):+.1f}" if ef else "-")
        lines.append(f"| {s} | " + " | ".join(cells) + " |")
    lines += ["", "With the basal rules in the transform (`basal_through_plane`, with the prior's LV rule where the prior acted), as "
              "the bundle and the README's table run `register`: Dice and EF bias (points, ED->ES pairs):", "",
              "| shift | Dice, off | Dice, defaults | defaults - off | LV EF bias, off | LV EF bias, defaults | RV EF bias, off | "
              "RV EF bias, defaults |", "|---|---|---|---|---|---|---|---|"]
    for s in shifts:
        x = [r for r in rows if r["shift"] == s and "prior_rules" in r and "off_rules" in r]
        if not x:
            continue
        on, off = np.array([r["prior_rules"] for r in x]), np.array([r["off_rules"] for r in x])
        cells = [f"{off.mean():.4f}", f"{on.mean():.4f}", f"{(on - off).mean():+.4f}"]
        ef = [r for r in x if "ef_off_rules" in r]
        for k in ("lv", "rv"):
            for key in ("off", "prior"):
                cells.append(f"{np.nanmean([r['ef_' + key + '_rules'][k] - r['ef_expert'][k] for r in ef]):+.1f}" if ef else "-")
        lines.append(f"| {s} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def prior_fields(info: Dict) -> Dict:
    """What the prior did, from ``summary["label_prior"]``: acted, its checks' numbers, why it did not act."""
    return dict(acted=bool(info) and info.get("weight", 0) > 0, agreement=info.get("agreement"), fixed_agreement=info.get("fixed_agreement"),
                carried_agreement=info.get("carried_agreement"), aside=info.get("aside"), dropped=info.get("dropped"))


def score_settings(row: Dict, moving, fixed, label, fixed_label: np.ndarray, threads: int, moving_label: np.ndarray = None,
                   direction: str = None, model: str = "acdc", settings: Sequence[str] = SETTINGS) -> None:
    """Fill ``row`` with ``register(model=model)`` of ``moving`` onto ``fixed`` (SimpleITK images, ``label`` the moving
    label) in each of ``settings``: with the prior (defaults, key ``prior``), without it (``off``), and with no label at
    all (``images``: the label carried by the written transform afterwards, ITK label-linear as ``transform.h5``
    carries it): 3-D Dice against ``fixed_label``, seconds, for ``prior`` the best label returned (``fused``) and what
    the prior did; with ``direction`` (a stack pair) also the label settings after the basal rules in the transform
    (``*_rules``) and, ED->ES, the EF of each from ``moving_label``."""
    from localisation import dice3
    from results_table import ejection_fraction

    import SimpleITK as sitk

    import monai_npc
    from monai_npc.apps.registration.through_plane import basal_through_plane
    from monai_npc.interop.label_resample import resample_label

    def ef(carried: np.ndarray) -> Dict[str, float]:  # EF (%) from the ED expert label and a carried ES label
        return {s_: ejection_fraction(moving_label, carried, v) for s_, v in (("lv", 3), ("rv", 1))}

    if direction == "ED->ES":
        row["ef_expert"] = ef(fixed_label)
    for key in settings:
        t0 = time.perf_counter()
        if key == "images":
            reg = monai_npc.register(moving, fixed, model=model, threads=threads)
            carried = sitk.GetArrayFromImage(resample_label(label, fixed, reg.transform, reg.label_sigma))
        else:
            prior = None if key == "prior" else 0
            reg = monai_npc.register(moving, fixed, model=model, moving_label=label, label_prior=prior, threads=threads)
            carried = sitk.GetArrayFromImage(reg.warped_label)
        row[key] = float(np.mean(dice3(carried, fixed_label)))
        row["seconds_" + key] = time.perf_counter() - t0
        if direction == "ED->ES":
            row["ef_" + key] = ef(carried)
        if key == "images":
            continue
        if prior is None:
            fused = reg.fused_label  # the best label register returns (the transform's when the prior stood aside)
            row["fused"] = row[key] if fused is None else float(np.mean(dice3(sitk.GetArrayFromImage(fused), fixed_label)))
            row.update(prior_fields(reg.summary.get("label_prior") or {}))
        if direction is None:
            continue
        basal_through_plane(reg, direction)  # the basal rules in the transform, as the bundle and the README's table run it
        ruled = sitk.GetArrayFromImage(reg.warped_label)
        row[key + "_rules"] = float(np.mean(dice3(ruled, fixed_label)))
        if direction == "ED->ES":
            row["ef_" + key + "_rules"] = ef(ruled)


def phantom_rows(log: Path, done, n: int, model: str = "acdc", settings: Sequence[str] = SETTINGS) -> List[Dict]:
    """The quickstart's cardiac phantom pairs (``monai_npc.data.phantoms.cardiac_pair``, 128 x 128, 1.5 mm, ED -> ES),
    seeds ``0 .. n-1`` not in ``done``, with the prior (defaults) and without; appended to ``log``."""
    import SimpleITK as sitk

    from monai_npc.data.phantoms import cardiac_pair

    rows = []
    with log.open("a") as f:
        for seed in range(n):
            name = f"phantom{seed}"
            if name in done:
                continue
            pair = cardiac_pair(128, seed=seed)
            images = []
            for key in ("moving", "fixed", "moving_label"):
                image = sitk.GetImageFromArray(pair[key].astype(np.float32))
                image.SetSpacing((1.5, 1.5))
                images.append(image)
            row = {"patient": name, "direction": "ED->ES", "shift": "phantoms"}
            score_settings(row, *images, pair["fixed_label"], 1, model=model, settings=settings)
            f.write(json.dumps(row) + "\n")
            f.flush()
            rows.append(row)
    return rows


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--data-dir", type=Path, default=DEFAULT_DATA)
    p.add_argument("--split", choices=("val", "train"), default="val", help="val: the 26 validation and test patients of acdc70")
    p.add_argument("--shifts", default=",".join(SHIFTS))
    p.add_argument("--out", type=Path, default=ROOT / "runs" / "shift_suite")
    p.add_argument("--limit", type=int, default=None, help="first N patients only")
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--phantoms", type=int, default=16, help="also the cardiac phantom pairs of the quickstart, seeds 0..N-1 "
                   "(0: none; the quickstart registers seeds 0-7); rows with shift 'phantoms', run by shard 0")
    p.add_argument("--shard", default="0/1", help="i/n: every n-th patient from the i-th (run n processes, then once more for the table)")
    p.add_argument("--model", default="acdc", help="register's model: a shipped name or a save_pretrained file")
    p.add_argument("--settings", default=",".join(SETTINGS), help="of " + ", ".join(SETTINGS) + " (rows lacking one are not rerun: "
                   "a new --out for new settings)")
    args = p.parse_args(argv)
    settings = [v for v in args.settings.split(",") if v.strip()]
    if not settings or set(settings) - set(SETTINGS):
        p.error(f"--settings: a comma-separated subset of {', '.join(SETTINGS)}; got {args.settings!r}")

    import SimpleITK as sitk
    import torch
    from localisation import as_sitk, read_stack, resumed_rows, split_patients
    from tqdm import tqdm

    torch.set_num_threads(args.threads)
    sitk.ProcessObject.SetGlobalDefaultNumberOfThreads(args.threads)
    shard, n = (int(v) for v in args.shard.split("/"))
    patients = split_patients(args.split, args.limit)[shard::n]
    shifts = [s for s in args.shifts.split(",") if s.strip()]
    data = args.data_dir / "data" if (args.data_dir / "data").is_dir() else args.data_dir
    out = args.out / args.split
    out.mkdir(parents=True, exist_ok=True)
    log = out / "rows.jsonl"
    rows = resumed_rows(log)
    done = {(r["patient"], r["direction"], r["shift"]) for r in rows}
    todo = [(pt, d, s) for pt in patients for s in shifts for d in ("ED->ES", "ES->ED") if (pt, d, s) not in done]
    stacks: Dict[str, tuple] = {}
    with log.open("a") as f:
        for pt, direction, s in tqdm(todo, desc="shifted pairs", unit="pair"):
            if pt not in stacks:
                stacks = {pt: (read_stack(data, pt, 1), read_stack(data, pt, 2))}
            (ed, edl), (es, esl) = stacks[pt]
            m, ml, fx, fl = (ed, edl, es, esl) if direction == "ED->ES" else (es, esl, ed, edl)
            seed = zlib.crc32(f"{pt} {direction} {s}".encode())  # the same every run
            shift = shift_transform(s, seed)
            m_img = as_sitk(m if s == "inverted" else shift(m.astype(np.float32)))
            f_img = as_sitk(shift(fx.astype(np.float32)))
            label = as_sitk(ml.astype(np.float32))
            row = {"patient": pt, "direction": direction, "shift": s}
            score_settings(row, m_img, f_img, label, fl, args.threads, ml, direction, args.model, settings)
            f.write(json.dumps(row) + "\n")
            f.flush()
            rows.append(row)
    if args.phantoms and shard == 0:
        rows += phantom_rows(log, {r["patient"] for r in rows if r["shift"] == "phantoms"}, args.phantoms, args.model, settings)
        shifts.append("phantoms")
    text = summarise(rows, shifts)
    (out / "results.md").write_text(text + "\n")
    print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
