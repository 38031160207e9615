"""Evaluation of whole stacks against demons: per pair and method, resumable; the tables and figure at the end."""

from __future__ import annotations

import csv
import json
import math
import time
import warnings
from pathlib import Path
from typing import Any, Dict, List, Mapping, Optional, Sequence, Union

import numpy as np
import SimpleITK as sitk
import torch
from torch import nn

from monai_npc.data.io import read_sitk_file
from monai_npc.utils import as_json, changed_settings

from .pairs import basal_descent_label, demons_pair, descend_registration, register_pair
from .report import BUCKETS, group_figure, results_table, summarise
from .runs import load_model, nanmean, one_line, progress_bar, skip_record, status_file
from .studies import STRUCTURES, Study, StudyPair, find_studies, read_phase, read_phase_label

__all__ = ["label_metrics", "initial_bucket", "evaluate_studies"]

PathLike = Union[str, Path]


def label_metrics(
    pred: np.ndarray, target: np.ndarray, spacing: Sequence[float], structures: Mapping[int, str] = STRUCTURES, suffix: str = ""
) -> Dict[str, float]:
    """3-D Dice and HD95 (mm) per structure of two label maps on one grid.

    Args:
        pred, target: ``(Z, H, W)`` (or ``(H, W)``) integer label maps (``target``: the fixed ground truth).
        spacing: mm per array axis (array order, e.g. ``(z, h, w)``).
        structures: label value -> name.
        suffix: appended to every key (``"_initial"``).

    Returns ``dice_<name>``, ``hd95_<name>`` and the means ``dice_mean``, ``hd95_mean`` over the
    structures present in ``target`` (absent ones give NaN; an empty prediction gives Dice 0 and
    HD95 NaN).
    """
    from monai_npc.metrics import dice_per_structure, hd95_per_structure

    values = list(structures)
    p = torch.from_numpy(np.ascontiguousarray(pred, dtype=np.float32))[None, None]
    t = torch.from_numpy(np.ascontiguousarray(target, dtype=np.float32))[None, None]
    dice = dice_per_structure(p, t, values)[0].numpy()
    with warnings.catch_warnings():  # MONAI warns about empty structures: they are NaN here
        warnings.simplefilter("ignore")
        hd = hd95_per_structure(p, t, values, spacing=[float(s) for s in spacing])[0].numpy()
    out: Dict[str, float] = {}
    for k, name in enumerate(structures.values()):
        out[f"dice_{name}{suffix}"] = float(dice[k])
        out[f"hd95_{name}{suffix}"] = float(hd[k]) if np.isfinite(hd[k]) and np.isfinite(dice[k]) and dice[k] > 0 else math.nan
    out[f"dice_mean{suffix}"] = nanmean([out[f"dice_{n}{suffix}"] for n in structures.values()])
    out[f"hd95_mean{suffix}"] = nanmean([out[f"hd95_{n}{suffix}"] for n in structures.values()])
    return out


def initial_bucket(dice_initial: float) -> str:
    """Difficulty bucket (:data:`BUCKETS`) of a pair's unregistered mean Dice."""
    for name, lo, hi in BUCKETS:
        if lo <= dice_initial < hi:
            return name
    return BUCKETS[-1][0] if dice_initial >= 1.0 else BUCKETS[0][0]


def _evaluate_pair(
    study: Study, pair: StudyPair, net: nn.Module, name: str, methods: Sequence[str], demons: Mapping[str, Any],
    device: Union[str, torch.device], threads: int, basal_descent: bool = True, field_of_view: Optional[str] = None,
) -> List[Dict[str, Any]]:
    """Rows (one per method) of one labelled pair: Dice/HD95 on the fixed grid, folding, seconds
    (``basal_descent``: :func:`basal_descent_label` on every method's ED->ES and ES->ED labels;
    ``field_of_view``: NPC's model grid, ``None``: the weights' register setting)."""
    from monai_npc.metrics import folding_percent
    from monai_npc.runtime import use_threads

    if pair.moving.label is None or pair.fixed.label is None:
        missing = pair.moving if pair.moving.label is None else pair.fixed
        raise FileNotFoundError(f"no label for {missing.image.name} (a _gt file): cannot evaluate {pair.direction}")
    fixed = read_phase(pair.fixed, "fixed image")
    moving = read_phase(pair.moving, "moving image")
    target = read_phase_label(pair.fixed.label, fixed, "fixed label")
    spacing = fixed.GetSpacing()[::-1]
    moving_label = read_sitk_file(Path(pair.moving.label), "moving label")
    initial = sitk.GetArrayFromImage(sitk.Resample(moving_label, fixed, sitk.Transform(), sitk.sitkNearestNeighbor, 0, sitk.sitkInt16))
    base = {
        "study": study.name, "group": study.group, "direction": pair.direction,
        "slices": int(fixed.GetSize()[2]) if fixed.GetDimension() == 3 else 1, "size": list(fixed.GetSize()),
        "spacing_mm": list(fixed.GetSpacing()), **label_metrics(initial, target, spacing, suffix="_initial"),
    }
    base["bucket"] = initial_bucket(base["dice_mean_initial"])
    rows = []
    for method in methods:
        t0 = time.perf_counter()
        if method == "npc":
            reg = register_pair(pair, net, model_name=name, device=device, threads=threads, field_of_view=field_of_view)
            if basal_descent:  # the basal rules as a through-plane part of the transform: its label is what is scored
                descend_registration(pair, reg)
            seconds = time.perf_counter() - t0
            warped = sitk.GetArrayFromImage(reg.warped_label)
            folding = float(reg.summary["folding_percent"])
        else:
            with use_threads(threads):
                warped, ddf = demons_pair(moving, fixed, sitk.Cast(moving_label, sitk.sitkInt16), **demons)
                seconds = time.perf_counter() - t0
            folding = float(folding_percent(ddf).mean())
        if basal_descent and method != "npc":  # demons: the same rules on its carried label (it has no label prior)
            warped = basal_descent_label(pair, warped, initial, fixed)
        rows.append({**base, "method": method, "seconds": seconds, "folding_percent": folding, **label_metrics(warped, target, spacing)})
    return rows


def _read_rows(path: Path) -> List[Dict[str, Any]]:
    if not path.is_file():
        return []
    rows = []
    for line in path.read_text().splitlines():
        try:
            rows.append(json.loads(line))
        except json.JSONDecodeError:  # a line cut by an interrupted run: that pair is redone
            continue
    return rows


def _write_csv(rows: Sequence[Mapping[str, Any]], path: Path) -> None:
    keys: List[str] = []
    for r in rows:
        keys += [k for k in r if k not in keys]
    with open(path, "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=keys)
        writer.writeheader()
        for r in rows:
            writer.writerow({k: (json.dumps(v) if isinstance(v, (list, dict)) else v) for k, v in r.items()})


def evaluate_studies(
    root: PathLike,
    out: PathLike,
    model: Union[str, PathLike, nn.Module] = "acdc",
    model_name: Optional[str] = None,
    with_demons: bool = True,
    demons_iterations: int = 100,
    demons_smoothing: float = 1.5,
    directions: Sequence[str] = ("ED->ES", "ES->ED"),
    max_studies: Optional[int] = None,
    device: Union[str, torch.device] = "cpu",
    threads: int = 1,
    refine_iterations: Optional[int] = None,
    field_of_view: Optional[str] = None,
    with_npc: bool = True,
    resume: bool = True,
    strict: bool = False,
    figure: bool = True,
    progress: bool = True,
    basal_descent: bool = True,
) -> Dict[str, Any]:
    """Register every labelled study under ``root`` (only the moving label given) and score it.

    Per pair and method (``npc``: ``model`` through :func:`monai_npc.register`, when ``with_npc``;
    ``demons``: :func:`demons_pair` when ``with_demons``): 3-D Dice per structure of the warped moving label
    against the fixed ``_gt`` on the fixed grid, HD95 (mm, header spacing), % folding
    (``det J <= 0`` over the fixed grid), seconds per pair (``threads`` threads) and the
    unregistered Dice and its bucket (:data:`BUCKETS`).

    Writes into ``out``: ``per_pair.jsonl`` (appended pair by pair; with ``resume`` a rerun skips
    the pairs and methods it holds, without it the file is started afresh), ``per_pair.csv``,
    ``metrics.json`` (removed at the start, rewritten at the end: summary, settings and the
    skipped studies with their reasons), ``results.md`` and ``groups.png``. ``strict=True`` makes
    the first bad study fatal. ``max_studies`` keeps the first N studies (sorted by name).
    ``field_of_view`` overrides the network's model grid (:mod:`monai_npc.apps.registration`;
    ``"image"`` reproduces the whole-image grid used before the heart window). ``basal_descent``
    (default): every method's label follows the base through the plane before it is scored
    (:func:`basal_descent_label`: ``ED->ES`` basal RV slices cleared, ``ES->ED`` the slices the
    structures re-enter filled). ``per_pair.settings.json`` records each method's settings (model,
    field of view, refinement steps, descent; demons' iterations): resuming rows of other settings is
    a ``ValueError`` (use a new ``out`` or ``resume=False`` when changing them).
    Returns the content of ``metrics.json``.
    """
    out = Path(out)
    metrics_path = status_file(out, "metrics.json")
    rows_path = out / "per_pair.jsonl"
    if not resume and rows_path.exists():
        rows_path.unlink()
    methods = (["npc"] if with_npc else []) + (["demons"] if with_demons else [])
    if not methods:
        raise ValueError("nothing to evaluate: with_npc and with_demons are both False.")
    demons = {"iterations": int(demons_iterations), "smoothing": float(demons_smoothing)}
    net, name = load_model(model, device, refine_iterations)
    settings = _run_settings(out, resume, {
        "npc": {"model": name, "field_of_view": field_of_view, "refine_iterations": refine_iterations, "basal_descent": bool(basal_descent)},
        "demons": {**demons, "basal_descent": bool(basal_descent)},
    }, methods)
    studies = find_studies(root, directions)[: None if max_studies is None else int(max_studies)]
    rows = [r for r in _read_rows(rows_path) if r.get("method") in methods]
    have = {(r["study"], r["direction"], r["method"]) for r in rows}
    skipped: List[Dict[str, str]] = []
    todo = [(s, p) for s in studies if not s.error for p in s.pairs]
    for study in studies:
        if study.error:
            skipped.append(skip_record(study.name, study.error, strict))
    bar = progress_bar(todo, "evaluate", progress)
    bad = set()
    for study, pair in bar:
        need = [m for m in methods if (study.name, pair.direction, m) not in have]
        if not need or study.name in bad:
            continue
        try:
            new = _evaluate_pair(study, pair, net, name, need, demons, device, threads, basal_descent, field_of_view)
        except (OSError, ValueError, RuntimeError) as err:
            skipped.append(skip_record(study.name, f"{pair.direction}: {one_line(err)}", strict))
            bad.add(study.name)
            continue
        with open(rows_path, "a") as f:
            for r in new:
                f.write(json.dumps(r) + "\n")
        rows += new
        if progress and hasattr(bar, "set_postfix"):
            bar.set_postfix({m: f"{nanmean(r['dice_mean'] for r in rows if r['method'] == m):.3f}" for m in methods})
    names = {s.name for s in studies} - bad
    rows = [r for r in rows if r["study"] in names]
    summary = summarise(rows)
    result: Dict[str, Any] = {
        "root": str(Path(root).resolve()), "model": name, "methods": methods, "directions": list(directions),
        "demons": {**demons, "grid": "native fixed grid, slice by slice, per-slice [0, 1] scaling"} if with_demons else None,
        "threads": threads, "basal_descent": bool(basal_descent), "settings": {m: settings[m] for m in methods},
        "n_studies": len({r["study"] for r in rows}), "n_pairs": len({(r["study"], r["direction"]) for r in rows}),
        "skipped": skipped, "summary": summary,
    }
    if "npc" in summary:
        result.update({k: summary["npc"]["overall"][k] for k in ("dice_mean", "dice_mean_initial", "hd95_mean", "folding_percent", "seconds")})
    _write_csv(rows, out / "per_pair.csv")
    if rows:
        (out / "results.md").write_text(results_table(summary, rows) + "\n")
        if figure:
            group_figure(summary, out / "groups.png")
    metrics_path.write_text(json.dumps(result, indent=2, default=float))
    return result


def _run_settings(out: Path, resume: bool, settings: Dict[str, Dict[str, Any]], methods: Sequence[str]) -> Dict[str, Any]:
    """``settings`` of ``methods``, recorded in ``out/per_pair.settings.json``; with ``resume``, rows of a
    method computed with other settings are an error (``ValueError`` naming what differs), not mixed in."""
    path = out / "per_pair.settings.json"
    recorded = json.loads(path.read_text()) if resume and path.is_file() and (out / "per_pair.jsonl").exists() else {}
    now = as_json(settings)
    for method in methods:
        if method in recorded and recorded[method] != now[method]:
            changed = changed_settings(recorded[method], now[method])
            raise ValueError(f"{out}/per_pair.jsonl holds {method} rows of other settings ({'; '.join(changed)}): use a new out "
                             "folder, or resume=False to start afresh.")
    merged = {**recorded, **{m: now[m] for m in methods}}
    out.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(merged, indent=2))
    return merged
