"""Evaluation of whole stacks against demons: per pair and method, resumable; the tables and figure at the end."""

from __future__ import annotations

import csv
import json
import math
import time
import warnings
from pathlib import Path
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple, Union

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


def _row_files(out: Path) -> List[Path]:
    """``out/per_pair.jsonl`` and the ``per_pair.rank<r>.jsonl`` of a ``torchrun`` run (merged into the
    first at its end; left behind when it was interrupted) that exist."""
    return [f for f in [out / "per_pair.jsonl", *sorted(out.glob("per_pair.rank*.jsonl"))] if f.is_file()]


def _read_rows(out: Path) -> List[Dict[str, Any]]:
    """Every row of :func:`_row_files`, a pair and method once (the last one read)."""
    rows: Dict[Tuple[Any, ...], Dict[str, Any]] = {}
    for path in _row_files(out):
        for line in path.read_text().splitlines():
            try:
                row = json.loads(line)
            except json.JSONDecodeError:  # a line cut by an interrupted run: that pair is redone
                continue
            rows[(row.get("study"), row.get("direction"), row.get("method"))] = row
    return list(rows.values())


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

    Under ``torchrun --nproc_per_node N`` (or a bundle's ``configs/multi_gpu_evaluate.json``) the
    studies are shared (:func:`monai_npc.runtime.shard`): each rank appends its rows to
    ``per_pair.rank<r>.jsonl`` (read back by a resumed run of any number of ranks), and rank 0,
    once every rank's rows are gathered, writes the files above from all of them, in study order,
    as one process would; ``device`` ``"cuda"`` is each rank's own GPU.
    """
    from monai_npc.runtime import distributed, gather_shards, rank_desc, rank_device, shard

    out = Path(out)
    methods = (["npc"] if with_npc else []) + (["demons"] if with_demons else [])
    if not methods:
        raise ValueError("nothing to evaluate: with_npc and with_demons are both False.")
    demons = {"iterations": int(demons_iterations), "smoothing": float(demons_smoothing)}
    with distributed() as (rank, world_size):
        _start(out, resume, rank)
        device = rank_device(device)
        net, name = load_model(model, device, refine_iterations)
        settings = _run_settings(out, resume, {
            "npc": {"model": name, "field_of_view": field_of_view, "refine_iterations": refine_iterations, "basal_descent": bool(basal_descent)},
            "demons": {**demons, "basal_descent": bool(basal_descent)},
        }, methods, write=rank == 0)
        studies = find_studies(root, directions)[: None if max_studies is None else int(max_studies)]
        old = _read_rows(out)
        have = {(r["study"], r["direction"], r["method"]): r for r in old if r.get("method") in methods}
        rows_path = out / ("per_pair.jsonl" if world_size == 1 else f"per_pair.rank{rank}.jsonl")
        bar = progress_bar(shard(studies, rank, world_size), rank_desc("evaluate", rank, world_size), progress, "study")
        parts = []
        for study in bar:
            parts.append(_evaluate_study(study, have, rows_path, net, name, methods, demons, device, threads, basal_descent, field_of_view, strict))
            if progress and hasattr(bar, "set_postfix"):
                bar.set_postfix({m: f"{nanmean(r['dice_mean'] for p in parts for r in p[0] if r['method'] == m):.3f}" for m in methods})
        parts = gather_shards(parts, world_size)
        rows, skipped = [r for p in parts for r in p[0]], [r for p in parts for r in p[1]]  # in study, pair and method order
        result = _result(root, name, methods, directions, demons if with_demons else None, threads, basal_descent, settings, rows, skipped)
        if rank == 0:
            _write_outputs(out, rows, old, result, figure)
    return result


def _start(out: Path, resume: bool, rank: int) -> None:
    """Rank 0 removes the previous ``metrics.json`` (and, without ``resume``, the rows); then every rank
    waits for it (:func:`monai_npc.runtime.barrier`) before reading the rows to resume."""
    from monai_npc.runtime import barrier

    if rank == 0:
        status_file(out, "metrics.json")
        for path in [] if resume else _row_files(out):
            path.unlink()
    barrier()


def _evaluate_study(
    study: Study, have: Mapping[Tuple[str, str, str], Dict[str, Any]], rows_path: Path, net: nn.Module, name: str,
    methods: Sequence[str], demons: Mapping[str, Any], device: Union[str, torch.device], threads: int, basal_descent: bool,
    field_of_view: Optional[str], strict: bool,
) -> Tuple[List[Dict[str, Any]], List[Dict[str, str]]]:
    """``(rows, skipped)`` of one study of :func:`evaluate_studies`: the rows of every pair and method,
    those in ``have`` (an earlier run's) reused and the others computed and appended to ``rows_path``;
    an unusable study (or pair) gives no rows and one skip record."""
    if study.error:
        return [], [skip_record(study.name, study.error, strict)]
    rows: List[Dict[str, Any]] = []
    for pair in study.pairs:
        need = [m for m in methods if (study.name, pair.direction, m) not in have]
        try:
            new = _evaluate_pair(study, pair, net, name, need, demons, device, threads, basal_descent, field_of_view) if need else []
        except (OSError, ValueError, RuntimeError) as err:
            return [], [skip_record(study.name, f"{pair.direction}: {one_line(err)}", strict)]
        with open(rows_path, "a") as f:
            for r in new:
                f.write(json.dumps(r) + "\n")
        computed = {r["method"]: r for r in new}
        rows += [computed[m] if m in computed else have[(study.name, pair.direction, m)] for m in methods]
    return rows, []


def _result(root: PathLike, name: str, methods: Sequence[str], directions: Sequence[str], demons: Optional[Mapping[str, Any]],
            threads: int, basal_descent: bool, settings: Mapping[str, Any], rows: List[Dict[str, Any]],
            skipped: List[Dict[str, str]]) -> Dict[str, Any]:
    """The content of ``metrics.json``: the summary of ``rows`` (:func:`summarise`), the settings, the skipped studies."""
    summary = summarise(rows)
    result: Dict[str, Any] = {
        "root": str(Path(root).resolve()), "model": name, "methods": list(methods), "directions": list(directions),
        "demons": {**demons, "grid": "native fixed grid, slice by slice, per-slice [0, 1] scaling"} if demons else None,
        "threads": threads, "basal_descent": bool(basal_descent), "settings": {m: settings[m] for m in methods},
        "n_studies": len({r["study"] for r in rows}), "n_pairs": len({(r["study"], r["direction"]) for r in rows}),
        "skipped": skipped, "summary": summary,
    }
    if "npc" in summary:
        result.update({k: summary["npc"]["overall"][k] for k in ("dice_mean", "dice_mean_initial", "hd95_mean", "folding_percent", "seconds")})
    return result


def _write_outputs(out: Path, rows: List[Dict[str, Any]], old: List[Dict[str, Any]], result: Mapping[str, Any], figure: bool) -> None:
    """Rank 0's files: ``per_pair.jsonl`` (this run's rows, then the other rows an earlier run left, e.g. of
    another method; the ranks' files merged into it), ``per_pair.csv``, ``results.md``, ``groups.png``, ``metrics.json``."""
    from monai_npc.io_safety import atomic_write_text

    keys = {(r["study"], r["direction"], r["method"]) for r in rows}
    kept = rows + [r for r in old if (r.get("study"), r.get("direction"), r.get("method")) not in keys]
    atomic_write_text(out / "per_pair.jsonl", "".join(json.dumps(r) + "\n" for r in kept))
    for path in out.glob("per_pair.rank*.jsonl"):
        path.unlink()
    _write_csv(rows, out / "per_pair.csv")
    if rows:
        (out / "results.md").write_text(results_table(result["summary"], rows) + "\n")
        if figure:
            group_figure(result["summary"], out / "groups.png")
    (out / "metrics.json").write_text(json.dumps(result, indent=2, default=float))


def _run_settings(out: Path, resume: bool, settings: Dict[str, Dict[str, Any]], methods: Sequence[str], write: bool = True) -> Dict[str, Any]:
    """``settings`` of ``methods``, recorded in ``out/per_pair.settings.json`` (when ``write``: rank 0); with
    ``resume``, rows of a method computed with other settings are an error (``ValueError`` naming what
    differs), not mixed in."""
    from monai_npc.io_safety import atomic_write_text

    path = out / "per_pair.settings.json"
    recorded = json.loads(path.read_text()) if resume and path.is_file() and _row_files(out) else {}
    now = as_json(settings)
    for method in methods:
        if method in recorded and recorded[method] != now[method]:
            changed = changed_settings(recorded[method], now[method])
            raise ValueError(f"{out}/per_pair.jsonl holds {method} rows of other settings ({'; '.join(changed)}): use a new out "
                             "folder, or resume=False to start afresh.")
    merged = {**recorded, **{m: now[m] for m in methods}}
    if write:
        out.mkdir(parents=True, exist_ok=True)
        atomic_write_text(path, json.dumps(merged, indent=2))
    return merged
