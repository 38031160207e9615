"""The README's results table in one command: every method on the same whole-stack ED/ES pairs, each row naming the
parts that produced it, by pathology group, with LV / RV EF from the carried ES label.

    OMP_NUM_THREADS=1 python benchmarks/results_table.py                                   # validation (default)
    OMP_NUM_THREADS=1 python benchmarks/results_table.py --shard 0/2 & ... --shard 1/2     # two processes, then
    OMP_NUM_THREADS=1 python benchmarks/results_table.py                                   # once more: the table
    OMP_NUM_THREADS=1 python benchmarks/results_table.py --data-dir ../shared/data/acdc_official_test --out runs/results_table_test

Pairs: by default the 26 validation and test patients of ``bundles/npc_acdc/configs/acdc70_split.json`` in the SSL4MIS
copy (whole stacks as ``benchmarks/localisation.py`` builds them: no spacing stored, 10 mm slices assumed; EF is a
ratio, so it does not depend on it); with ``--data-dir`` a folder of studies in the official ACDC layout (native
spacing, ``Group:`` of Info.cfg). The official test split is for final reporting only: run it once, at the end of a
piece of work. Both directions, ED->ES and ES->ED; only the moving label is ever given.

Rows (``--methods``), each scored as 3-D Dice (RV/Myo/LV mean) against the fixed frame's expert label:

- ``initial``: no registration (the moving label on the fixed grid);
- ``demons``: SimpleITK fast symmetric-forces demons, 200 iterations, slice by slice, images only; the label carried
  by its field as NPC's is (:func:`monai_npc.apps.stacks.pairs.demons_pair`);
- ``demons+helpers``: the same field, then the basal rules (with the label prior's LV rule) applied to its label
  and the result fused with the label prior (:func:`monai_npc.functional.label_fusion.fuse_by_slice`): every helper NPC
  gets, applied after the fact (demons has no place for them inside its transform);
- ``npc-images``: ``register(moving, fixed)`` with no label: the images, the network and its refinement, whose
  label-guided term steers the label prior's segmentation of the moving image against its view of the fixed one; the
  moving label enters only when the written transform is applied to it (ITK label-linear);
- ``npc-images-alone``: the same with ``label_prior=0``: the images, the network and its image-only refinement;
- ``npc-label``: ``register(..., moving_label=, label_prior=0)`` + the basal rules in the transform;
- ``npc-label-prior``: ``register``'s defaults (moving label + label prior ``acdc_heart``) + the basal rules in the
  transform, its ``warped_label`` (the transform's label): what the bundle writes as ``warped_label.nii.gz``;
- ``npc-fused``: the same run's ``fused_label``;
- ``prior-alone``: the label prior's own segmentation of the fixed frame (``Registration.prior_label``: the slices the
  moving label covers, the heart window; where the prior stood aside, the same with its last check off), no
  registration; ``demons+helpers`` uses the same.

Rows go to ``OUT/rows.jsonl`` (reruns skip what is there; ``--shard i/n`` takes every n-th patient);
``OUT/results.md`` holds the table by group, the EF table (ED->ES pairs) and each row's Dice by slice position from the
base (:func:`slice_profile`: where along the stack the carried label is right; the rows keep the counts as ``profile``).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any, Dict, Iterator, List, Optional, Sequence, Tuple

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))
DEFAULT_DATA = ROOT.parent / "shared" / "data" / "acdc_ssl4mis"
GROUPS = ("DCM", "HCM", "MINF", "NOR", "RV")
#: row -> the parts that produced it (printed in the table)
METHODS: Dict[str, str] = {
    "initial": "no registration",
    "demons": "SimpleITK demons 200 it., slice by slice, images only",
    "demons+helpers": "demons + basal rules (prior's LV rule) + fused with the label prior (label edits after the field)",
    "npc-images": "NPC, images only: network + refinement steered by the label prior's view of both frames; label through transform.h5",
    "npc-images-alone": "NPC, images only without the prior (network + image-only refinement); label through transform.h5",
    "npc-label": "NPC + moving label in the refinement + basal rules in the transform; no prior",
    "npc-label-prior": "NPC defaults: moving label + label prior + basal rules in the transform (warped_label)",
    "npc-fused": "the same run's fused_label (prior's outlines where it agrees with warped_label)",
    "prior-alone": "label prior `acdc_heart` segmenting the fixed frame (slices the moving label covers), no registration",
}


def pairs(data_dir: Path, official: bool, shard: Tuple[int, int]) -> Iterator[Tuple[str, str, str, Any, Any, Any, np.ndarray]]:
    """``(patient, group, direction, moving, fixed, moving_label (sitk), fixed_label (Z, H, W))`` of every pair."""
    import SimpleITK as sitk

    if official:
        from monai_npc.apps.stacks.studies import find_studies, read_phase, read_phase_label
        from monai_npc.data.io.sitk_file import read_sitk_file

        studies = [s for s in find_studies(data_dir) if s.error is None][shard[0]::shard[1]]
        for s in studies:
            for p in s.pairs:
                fixed = read_phase(p.fixed, "fixed image")
                yield (s.name, s.group, p.direction, read_phase(p.moving, "moving image"), fixed,
                       sitk.Cast(read_sitk_file(Path(p.moving.label), "moving label"), sitk.sitkInt32),
                       read_phase_label(p.fixed.label, fixed, "fixed label"))
        return
    from localisation import acdc_training_group, as_sitk, read_stack, split_patients

    data = data_dir / "data" if (data_dir / "data").is_dir() else data_dir
    for pt in split_patients("val")[shard[0]::shard[1]]:
        (ed, edl), (es, esl) = read_stack(data, pt, 1), read_stack(data, pt, 2)
        for direction, (m, ml, f, fl) in (("ED->ES", (ed, edl, es, esl)), ("ES->ED", (es, esl, ed, edl))):
            yield pt, acdc_training_group(pt), direction, as_sitk(m), as_sitk(f), sitk.Cast(as_sitk(ml), sitk.sitkInt32), fl.astype(np.int16)


def dice3(a: np.ndarray, b: np.ndarray) -> List[float]:
    return [float(2 * ((a == v) & (b == v)).sum() / max(int((a == v).sum() + (b == v).sum()), 1)) for v in (1, 2, 3)]


#: slice positions of :func:`slice_profile`: the base, the next two slices towards the apex, then the rest together
PROFILE_BINS = ("base", "base+1", "base+2", "rest")
STRUCTURES = (("rv", 1), ("myo", 2), ("lv", 3))


def slice_profile(label: np.ndarray, target: np.ndarray, reference: np.ndarray) -> Dict[str, List[List[int]]]:
    """Where along the stack a carried label is right: for each structure, ``[carried, expert, overlap]`` voxel counts
    of ``label`` against ``target`` (both ``(Z, H, W)`` on the fixed grid) in each of :data:`PROFILE_BINS`, the slices
    counted from the base (:func:`~monai_npc.cardiac.through_plane.base_end` of ``reference``, the moving label on the
    fixed grid, and ``target`` together, so every row of a pair shares it). The base slices are where the heart moves
    through the plane (what the basal rules or a stack network's through-plane motion decide)."""
    from monai_npc.cardiac.through_plane import base_end

    base, step = base_end(np.maximum(reference, target))
    position = np.clip((np.arange(label.shape[0]) - base) * step, 0, len(PROFILE_BINS) - 1)  # above the base: the base bin
    out: Dict[str, List[List[int]]] = {}
    for name, value in STRUCTURES:
        a, b = label == value, target == value
        counts = np.stack([a.sum((1, 2)), b.sum((1, 2)), (a & b).sum((1, 2))], 1)  # (Z, 3)
        out[name] = [[int(c) for c in counts[position == i].sum(0)] for i in range(len(PROFILE_BINS))]
    return out


def profile_table(rows: List[Dict[str, Any]], methods: Sequence[str]) -> List[str]:
    """Markdown lines: per method and direction, the pooled Dice of each structure in each of :data:`PROFILE_BINS`
    (``2 sum(overlap) / (sum(carried) + sum(expert))`` over the pairs), from the rows' ``profile``."""
    x = [r for r in rows if "profile" in r]
    if not x:
        return []
    lines = ["", "| row | direction | " + " | ".join(f"{b} RV / Myo / LV" for b in PROFILE_BINS) + " |",
             "|---|---|" + "---|" * len(PROFILE_BINS)]
    for m in methods:
        for direction in ("ED->ES", "ES->ED"):
            y = [r["profile"][m] for r in x if m in r["profile"] and r["direction"] == direction]
            if not y:
                continue
            cells = []
            for i in range(len(PROFILE_BINS)):
                sums = [np.sum([p[name][i] for p in y], 0) for name, _ in STRUCTURES]
                cells.append(" / ".join(f"{2 * c[2] / (c[0] + c[1]):.3f}" if c[0] + c[1] else "-" for c in sums))
            lines.append(f"| `{m}` | {direction} | " + " | ".join(cells) + " |")
    lines += ["", "3-D Dice pooled over the pairs by slice position from the base (the moving and fixed labels' most basal "
              f"slice; `rest`: from the fourth slice on towards the apex), {len(x)} pairs: where along the stack each row is right."]
    return lines


def moving_on_fixed(moving_label, fixed) -> np.ndarray:
    """The moving label on the fixed grid, unregistered (nearest neighbour): ``(Z, H, W)``."""
    import SimpleITK as sitk

    return sitk.GetArrayFromImage(sitk.Resample(moving_label, fixed, sitk.Transform(), sitk.sitkNearestNeighbor, 0, sitk.sitkInt32))


def run_pair(moving, fixed, moving_label, reference: np.ndarray, direction: str, methods: Sequence[str], threads: int,
             model: str = "acdc", folds: Optional[Dict[str, float]] = None) -> Dict[str, Tuple[np.ndarray, float]]:
    """``{method: (label on the fixed grid (Z, H, W), seconds)}``; the NPC rows register with ``model``; ``reference``:
    :func:`moving_on_fixed` of the pair (the ``initial`` row). ``folds``, when given, gets each NPC row's written field's
    share of voxels with det J <= 0 (%, ``summary["folding_percent"]``, after the basal rules)."""
    import SimpleITK as sitk

    import monai_npc
    from monai_npc.apps.registration.through_plane import basal_through_plane
    from monai_npc.apps.stacks.pairs import demons_pair
    from monai_npc.cardiac.through_plane import basal_rules
    from monai_npc.functional.label_fusion import fuse_by_slice
    from monai_npc.interop.label_resample import resample_label
    from monai_npc.runtime import use_threads

    arr = sitk.GetArrayFromImage
    fold = {} if folds is None else folds
    out: Dict[str, Tuple[np.ndarray, float]] = {}
    out["initial"] = (reference, 0.0)
    kw = dict(model=model, threads=threads)
    prior = None
    if {"npc-label-prior", "npc-fused", "prior-alone", "demons+helpers"} & set(methods):
        t0 = time.perf_counter()
        reg = monai_npc.register(moving, fixed, moving_label=moving_label, **kw)
        basal_through_plane(reg, direction)
        seconds = time.perf_counter() - t0
        out["npc-label-prior"] = (arr(reg.warped_label), seconds)
        fold["npc-label-prior"] = reg.summary["folding_percent"]
        prior_image = prior_segmentation(reg, moving, fixed, moving_label, kw)
        prior = None if prior_image is None else arr(prior_image)
        fused = reg.fused_label
        out["npc-fused"] = (arr(fused) if fused is not None else arr(reg.warped_label), seconds)
        out["prior-alone"] = (prior if prior is not None else np.zeros_like(reference), 0.0)
    if "npc-label" in methods:
        t0 = time.perf_counter()
        reg = monai_npc.register(moving, fixed, moving_label=moving_label, label_prior=0, **kw)
        basal_through_plane(reg, direction)
        out["npc-label"] = (arr(reg.warped_label), time.perf_counter() - t0)
        fold["npc-label"] = reg.summary["folding_percent"]
    for method, extra in (("npc-images", {}), ("npc-images-alone", {"label_prior": 0})):
        if method in methods:
            t0 = time.perf_counter()
            reg = monai_npc.register(moving, fixed, **kw, **extra)
            out[method] = (arr(resample_label(moving_label, fixed, reg.transform, reg.label_sigma)), time.perf_counter() - t0)
            fold[method] = reg.summary["folding_percent"]
    if {"demons", "demons+helpers"} & set(methods):
        t0 = time.perf_counter()
        with use_threads(threads):
            carried, _ = demons_pair(moving, fixed, sitk.Cast(moving_label, sitk.sitkInt16), iterations=200, smoothing=1.5)
        seconds = time.perf_counter() - t0
        out["demons"] = (carried, seconds)
        helped = basal_rules(direction, carried, reference, fixed.GetSpacing()[2], prior)[0] if fixed.GetDimension() == 3 else carried
        out["demons+helpers"] = (fuse_by_slice(helped, prior)[0] if prior is not None else helped, seconds)
    return {m: out[m] for m in methods if m in out}


def prior_segmentation(reg, moving, fixed, moving_label, kw: Dict[str, Any]):
    """The label prior's own segmentation of the fixed frame: ``reg.prior_label``, or, where the prior stood aside in
    ``reg`` (the network's field already carried the label onto it: ``label_prior.aside``), the same call's with that
    last check off (what the prior sees does not depend on whether it steers)."""
    if reg.prior_label is not None or "aside" not in (reg.summary.get("label_prior") or {}):
        return reg.prior_label
    import monai_npc
    import monai_npc.apps.registration.label_prior as label_prior

    keep, label_prior.PRIOR_MIN_GAP = label_prior.PRIOR_MIN_GAP, float("-inf")
    try:
        return monai_npc.register(moving, fixed, moving_label=moving_label, **kw).prior_label
    finally:
        label_prior.PRIOR_MIN_GAP = keep


def ejection_fraction(ed: np.ndarray, es: np.ndarray, value: int) -> float:
    """EF (%) of structure ``value`` from an ED and an ES label map of one voxel size."""
    edv = float((ed == value).sum())
    return 100.0 * (edv - float((es == value).sum())) / edv if edv else float("nan")


def table(rows: List[Dict[str, Any]], methods: Sequence[str], model: str = "acdc") -> str:
    groups = [g for g in GROUPS if any(r["group"] == g for r in rows)] + ["all"]
    lines = ["| row | what produced it | " + " | ".join(groups) + " | pairs above demons | s / pair |",
             "|---|---|" + "---|" * (len(groups) + 2)]
    for m in methods:
        x = [r for r in rows if m in r["dice"]]
        if not x:
            continue
        cells = [f"{np.mean([np.mean(r['dice'][m]) for r in x if g == 'all' or r['group'] == g]):.3f}" for g in groups]
        scored = [r for r in x if "demons" in r["dice"]]  # a run without the demons row has nothing to count against
        above = f"{sum(np.mean(r['dice'][m]) > np.mean(r['dice']['demons']) for r in scored)} / {len(scored)}" if scored else "-"
        lines.append(f"| `{m}` | {METHODS[m]} | " + " | ".join(cells) + f" | {above} | {np.mean([r['seconds'][m] for r in x]):.1f} |")
    n = len({r['patient'] for r in rows})
    from monai_npc.apps.registration.models import names_stack_network

    stack = (" (a stack network: its own through-plane motion, no basal rules; its refinement moves the in-plane channels)"
             if names_stack_network(model) else "")
    lines += ["", f"3-D Dice, mean of RV / Myo / LV, {len(rows)} pairs of {n} patients (both directions), by pathology group;"
              f" NPC rows with the model `{model}`{stack}.", "",
              "| row | LV EF MAE | LV EF bias | RV EF MAE | RV EF bias |", "|---|---|---|---|---|"]
    ed_es = [r for r in rows if r["direction"] == "ED->ES"]
    for m in methods:
        x = [r for r in ed_es if m in r["ef"]]
        if not x or m == "initial":
            continue
        cells = []
        for s in ("lv", "rv"):
            err = np.array([r["ef"][m][s] - r["ef"]["expert"][s] for r in x])
            cells += [f"{np.nanmean(np.abs(err)):.1f}", f"{np.nanmean(err):+.1f}"]
        lines.append(f"| `{m}` | " + " | ".join(cells) + " |")
    lines += ["", f"EF in points, from the ED expert label and the carried ES label, against the expert ED + ES labels; {len(ed_es)} ED->ES pairs."]
    return "\n".join(lines + folding_table(rows, methods) + profile_table(rows, methods))


def folding_table(rows: List[Dict[str, Any]], methods: Sequence[str]) -> List[str]:
    """Lines of a table: each NPC row's written field, the share of its voxels with det J <= 0 (mean and largest over
    the pairs, and the pairs above the 0.05 % line); rows kept before this was recorded are left out."""
    lines = ["", "| row | det J <= 0, mean % | largest % | pairs above 0.05 % |", "|---|---|---|---|"]
    for m in methods:
        x = np.array([r["folding_percent"][m] for r in rows if m in r.get("folding_percent", {})])
        if x.size:
            lines.append(f"| `{m}` | {x.mean():.4f} | {x.max():.4f} | {(x > 0.05).sum()} / {x.size} |")
    if len(lines) == 3:
        return []
    return lines + ["", "The written transform (`displacement.nii.gz`, `transform.h5`) of each pair: share of its voxels where "
                        "it folds (full 3-D Jacobian with a through-plane part), the basal rules included."]


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--data-dir", type=Path, default=None, help="official ACDC layout (default: the SSL4MIS validation patients)")
    p.add_argument("--out", type=Path, default=ROOT / "runs" / "results_table")
    p.add_argument("--methods", default=",".join(METHODS))
    p.add_argument("--shard", default="0/1", help="i/n: every n-th patient from the i-th")
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--model", default="acdc", help="the NPC rows' model: a shipped name or a save_pretrained file (e.g. a"
                   " stack network's); give each model its own --out, since rows are resumed from there")
    args = p.parse_args(argv)

    import SimpleITK as sitk
    import torch
    from tqdm import tqdm

    from monai_npc.runtime import silence_third_party

    silence_third_party()
    torch.set_num_threads(args.threads)
    sitk.ProcessObject.SetGlobalDefaultNumberOfThreads(args.threads)
    sitk.ProcessObject.SetGlobalWarningDisplay(False)
    methods = [m for m in args.methods.split(",") if m]
    unknown = set(methods) - set(METHODS)
    if unknown:
        p.error(f"unknown --methods {sorted(unknown)}; known: {list(METHODS)}")
    i, n = (int(v) for v in args.shard.split("/"))
    args.out.mkdir(parents=True, exist_ok=True)
    log = args.out / "rows.jsonl"
    rows = [json.loads(line) for line in log.read_text().splitlines() if line.strip()] if log.exists() else []
    other = {r.get("model", "acdc") for r in rows} - {args.model}
    if other:
        p.error(f"{log} holds rows of --model {sorted(other)}, not {args.model!r}: give this model its own --out")
    done = {(r["patient"], r["direction"]) for r in rows}
    data = args.data_dir or DEFAULT_DATA
    with log.open("a") as f:
        for pt, group, direction, moving, fixed, moving_label, target in tqdm(pairs(data, args.data_dir is not None, (i, n)), desc="pairs", unit="pair"):
            if (pt, direction) in done:
                continue
            reference = moving_on_fixed(moving_label, fixed)
            folds: Dict[str, float] = {}
            labels = run_pair(moving, fixed, moving_label, reference, direction, methods, args.threads, args.model, folds)
            row = {"patient": pt, "group": group, "direction": direction, "model": args.model, "folding_percent": folds,
                   "dice": {m: dice3(lab, target) for m, (lab, _) in labels.items()},
                   "seconds": {m: s for m, (_, s) in labels.items()},
                   "profile": {m: slice_profile(lab, target, reference) for m, (lab, _) in labels.items()}}
            if direction == "ED->ES":
                ed = sitk.GetArrayFromImage(moving_label)
                row["ef"] = {m: {s: ejection_fraction(ed, lab, v) for s, v in (("lv", 3), ("rv", 1))} for m, (lab, _) in labels.items()}
                row["ef"]["expert"] = {s: ejection_fraction(ed, target, v) for s, v in (("lv", 3), ("rv", 1))}
            f.write(json.dumps(row) + "\n")
            f.flush()
            rows.append(row)
    text = table(rows, methods, args.model)
    (args.out / "results.md").write_text(text + "\n")
    print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
