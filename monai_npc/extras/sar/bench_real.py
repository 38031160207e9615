"""Real-scene SAR benchmark: no registration, scikit-image phase correlation, our windowed
phase correlation and NPC on the pairs of :func:`~.real.benchmark_pairs`.

Endpoint error (EPE, pixels) is measured inside a 24-px margin (the moving crop has no true
content there), overall and separately on the changed and unchanged pixels of the scene's
change map. Wins: pairs where NPC's EPE is lower than phase correlation's.
With ``truth_check``, :func:`truth_offset` also measures how far each pair's truth is from the
images' best alignment (a misregistration between the dates that the synthetic truth leaves out).
"""

from __future__ import annotations

import csv
import json
import time
from collections import defaultdict
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence, Union

import numpy as np
import torch

from .evaluate import phase_correlation_shift, register_sar
from .preprocess import DEFAULT_SIGMA
from .real import DEFAULT_ROOT, benchmark_pairs, read_scenes

__all__ = ["MARGIN", "BENCH_METHODS", "BASELINES", "DEFAULT_BOUND", "skimage_phase_correlation", "pair_errors", "truth_offset",
           "run_real_benchmark", "format_table", "format_truth_check"]

#: border (pixels) left out of the endpoint error
MARGIN = 24
#: methods in table order; ``skimage_pc`` is the reference baseline (scikit-image ``phase_cross_correlation``, upsample 20,
#: on the amplitudes as read), ``phase_correlation`` the package's log-amplitude Tukey-windowed variant,
#: ``phase_correlation_bounded`` the same with its peak search bounded like NPC's start (the model's
#: ``phase_init_max_shift``; :data:`DEFAULT_BOUND` px when the model has none), so that NPC's bound is no
#: advantage over the baseline
BENCH_METHODS = ("none", "skimage_pc", "phase_correlation", "phase_correlation_bounded", "npc")
#: the baselines NPC's wins are counted against
BASELINES = ("skimage_pc", "phase_correlation", "phase_correlation_bounded")
#: bound (px per axis) of ``phase_correlation_bounded`` for a model without ``phase_init_max_shift``
DEFAULT_BOUND = 16.0
#: a pair whose EPE exceeds this (pixels) counts as a failure (the global shift was not found)
FAILURE_PX = 3.0
#: field seeds of the splits (``benchmark_pairs(seed=...)``), per global shift range
SPLIT_SEEDS = {"test": 14_000, "train": 14_500}


def skimage_phase_correlation(moving: np.ndarray, fixed: np.ndarray, upsample_factor: int = 20) -> torch.Tensor:
    """Constant field ``(2, H, W)`` from ``skimage.registration.phase_cross_correlation(fixed, moving)``.

    scikit-image returns the shift that moves ``moving`` onto ``fixed`` (``moving(x - s) ~ fixed(x)``),
    so the MONAI-convention displacement is ``-s``.
    """
    try:
        from skimage.registration import phase_cross_correlation
    except ImportError as err:
        raise ImportError("the scikit-image baseline needs scikit-image: pip install 'monai_npc[sar]'.") from err

    shift = phase_cross_correlation(np.asarray(fixed, np.float64), np.asarray(moving, np.float64), upsample_factor=upsample_factor)[0]
    return torch.as_tensor(-shift, dtype=torch.float32)[:, None, None].expand(2, *np.shape(moving)).contiguous()


def pair_errors(ddf: torch.Tensor, true: np.ndarray, change: Optional[np.ndarray], margin: int = MARGIN) -> Dict[str, float]:
    """EPE of ``ddf`` ``(2, H, W)`` against ``true`` inside ``margin``: ``epe``, and ``epe_changed`` /
    ``epe_unchanged`` over the change map's pixels (NaN without a map or without such pixels)."""
    err = (ddf - torch.as_tensor(true)).norm(dim=0).numpy()[margin:-margin, margin:-margin]
    out = {"epe": float(err.mean()), "epe_changed": float("nan"), "epe_unchanged": float("nan")}
    if change is not None:
        c = np.asarray(change, bool)[margin:-margin, margin:-margin]
        if c.any():
            out["epe_changed"] = float(err[c].mean())
        if (~c).any():
            out["epe_unchanged"] = float(err[~c].mean())
    return out


def truth_offset(
    moving: np.ndarray, fixed: np.ndarray, true: np.ndarray, sigma: float = DEFAULT_SIGMA, span: float = 1.5, step: float = 0.25,
    window: int = 33, margin: int = MARGIN,
) -> np.ndarray:
    """How far the benchmark's truth is from the images' own best alignment: the constant offset ``(dy, dx)``
    (pixels) that, added to ``true`` ``(2, H, W)``, maximises the local NCC (``window``) of the warped moving and
    the fixed image (both :func:`~.preprocess.sar_normalize` d with ``sigma``) inside ``margin``.

    Searched on a grid of ``step`` within ``+-span`` per axis (one batch). ``(0, 0)`` when the two dates are
    co-registered; a non-zero offset that flips sign with the date order is a misregistration between the
    dates, which the protocol's truth (the synthetic field alone) does not contain. An offset at ``+-span``
    means the similarity has no clear peak there (for example sea whose texture changed).
    """
    from monai_npc.functional.similarity import local_ncc
    from monai_npc.functional.warp import warp_image

    from .preprocess import sar_normalize

    grid = torch.arange(-span, span + step / 2, step, dtype=torch.float32)
    offsets = torch.cartesian_prod(grid, grid)  # (n, 2)
    m = torch.from_numpy(sar_normalize(moving, sigma))[None, None].float()
    f = torch.from_numpy(sar_normalize(fixed, sigma))[None, None].float()
    fields = torch.as_tensor(true, dtype=torch.float32)[None] + offsets[:, :, None, None]
    with torch.no_grad():
        warped = warp_image(m.expand(len(offsets), -1, -1, -1), fields, "bilinear", "border")
        crop = (Ellipsis, slice(margin, -margin), slice(margin, -margin))
        score = local_ncc(warped[crop], f.expand_as(warped)[crop], window).mean(dim=(1, 2, 3))
    return offsets[int(score.argmax())].numpy()


def _sigma(net: torch.nn.Module) -> float:
    """The model's preprocessing smoothing (``meta["sigma"]``), else the package default."""
    return float(getattr(net, "meta", {}).get("sigma", DEFAULT_SIGMA))


def _bound(net: torch.nn.Module) -> float:
    """The model's start bound (``config["phase_init_max_shift"]``), else :data:`DEFAULT_BOUND`."""
    bound = getattr(net, "config", {}).get("phase_init_max_shift")
    return DEFAULT_BOUND if bound is None else float(bound)


def _run(net: torch.nn.Module, method: str, moving: np.ndarray, fixed: np.ndarray) -> torch.Tensor:
    if method == "skimage_pc":
        return skimage_phase_correlation(moving, fixed)
    if method == "phase_correlation_bounded":
        shift = phase_correlation_shift(moving, fixed, max_shift=_bound(net))
        return shift[:, None, None].expand(2, *np.shape(moving)).contiguous()
    return register_sar(net, moving, fixed, method, _sigma(net))


def _evaluate(net: torch.nn.Module, pairs: Sequence[Dict[str, Any]], progress: bool, truth_check: bool = False) -> Dict[str, Any]:
    from tqdm.auto import tqdm

    rows: List[Dict[str, Any]] = []
    for p in tqdm(pairs, desc="bench-real", unit="pair", disable=not progress):
        row: Dict[str, Any] = {"pair": p["name"], "scene": p["scene"], "true_shift_y": float(p["shift"][0]), "true_shift_x": float(p["shift"][1]),
                               "changed_percent": float("nan") if p["change"] is None else 100.0 * float(np.mean(p["change"]))}
        aligned = None
        if truth_check:
            offset = truth_offset(p["moving"], p["fixed"], p["ddf"], _sigma(net))
            row.update(truth_offset_y=float(offset[0]), truth_offset_x=float(offset[1]), truth_offset_px=float(np.hypot(*offset)))
            aligned = np.asarray(p["ddf"]) + offset[:, None, None]
        for method in BENCH_METHODS:
            t0 = time.perf_counter()
            ddf = _run(net, method, p["moving"], p["fixed"])
            row[f"seconds_{method}"] = time.perf_counter() - t0
            for k, v in pair_errors(ddf, p["ddf"], p["change"]).items():
                row[f"{k}_{method}"] = v
            if aligned is not None:  # against the truth moved by the dates' own offset
                row[f"epe_aligned_{method}"] = pair_errors(ddf, aligned, None)["epe"]
        rows.append(row)
    summary: Dict[str, Any] = {"n_pairs": len(rows), "n_pairs_with_change_map": int(sum(np.isfinite(r["changed_percent"]) for r in rows))}
    for method in BENCH_METHODS:
        for k in ("epe", "epe_changed", "epe_unchanged"):
            vals = np.array([r[f"{k}_{method}"] for r in rows], np.float64)
            summary[f"mean_{k}_{method}"] = float(np.nanmean(vals)) if np.isfinite(vals).any() else None
        mapped = [r[f"epe_{method}"] for r in rows if np.isfinite(r["changed_percent"])]
        summary[f"mean_epe_mapped_{method}"] = float(np.mean(mapped)) if mapped else None
        summary[f"failures_{method}"] = int(sum(r[f"epe_{method}"] > FAILURE_PX for r in rows))
        summary[f"median_epe_{method}"] = float(np.median([r[f"epe_{method}"] for r in rows]))
        summary[f"max_epe_{method}"] = float(np.max([r[f"epe_{method}"] for r in rows]))
        summary[f"seconds_per_pair_{method}"] = float(np.mean([r[f"seconds_{method}"] for r in rows]))
    summary["bound"] = _bound(net)
    if truth_check:
        summary["mean_truth_offset_px"] = float(np.mean([r["truth_offset_px"] for r in rows]))
        summary["pairs_truth_offset_over_half_px"] = int(sum(r["truth_offset_px"] > 0.5 for r in rows))
        for method in BENCH_METHODS:
            summary[f"mean_epe_aligned_{method}"] = float(np.mean([r[f"epe_aligned_{method}"] for r in rows]))
        for base in BASELINES:
            summary[f"npc_wins_aligned_vs_{base}"] = int(sum(r["epe_aligned_npc"] < r[f"epe_aligned_{base}"] for r in rows))
        per_scene = defaultdict(list)
        for r in rows:
            per_scene[r["scene"]].append(r["truth_offset_px"])
        summary["mean_truth_offset_px_per_scene"] = {sc: float(np.mean(v)) for sc, v in sorted(per_scene.items())}
    for base in BASELINES:
        summary[f"npc_wins_vs_{base}"] = int(sum(r["epe_npc"] < r[f"epe_{base}"] for r in rows))
    return {"summary": summary, "per_pair": rows}


def run_real_benchmark(
    model: Union[str, Path, torch.nn.Module] = "sar",
    root: Optional[Union[str, Path]] = None,
    splits: Sequence[str] = ("test", "train"),
    max_shifts: Sequence[float] = (6.0, 8.0),
    nonrigid: float = 3.0,
    out: Optional[Union[str, Path]] = None,
    progress: bool = True,
    truth_check: bool = False,
) -> Dict[str, Any]:
    """Benchmark ``model`` on the real scenes: one entry per ``(split, max_shift)`` (``"test_6"``...).

    Pairs: :func:`~.real.benchmark_pairs` of ``split`` with global shifts up to ``max_shift`` and a
    non-rigid part up to ``nonrigid`` pixels (field seeds fixed per split and range). With ``out``,
    writes ``metrics.json`` and ``per_pair_<split>_<shift>.csv``. With ``truth_check``, every pair also gets
    :func:`truth_offset` (columns ``truth_offset_y/x/px``; summary: mean, pairs over 0.5 px, mean per scene) and
    every method's EPE against the truth moved by that offset (``epe_aligned_<method>``, NPC's wins on it).
    """
    from monai_npc.networks.nets import load_pretrained

    net = model if isinstance(model, torch.nn.Module) else load_pretrained(model)
    net.eval()
    scenes = read_scenes(root or DEFAULT_ROOT)
    result: Dict[str, Any] = {"model": str(model) if not isinstance(model, torch.nn.Module) else type(model).__name__,
                              "margin": MARGIN, "nonrigid": nonrigid, "threads": torch.get_num_threads(), "runs": {}}
    for split in splits:
        for max_shift in max_shifts:
            pairs = benchmark_pairs(split, scenes, max_shift, nonrigid, seed=SPLIT_SEEDS[split] + int(round(10 * max_shift)))
            run = _evaluate(net, pairs, progress, truth_check)
            run["summary"].update(split=split, max_shift=max_shift)
            result["runs"][f"{split}_{max_shift:g}"] = run
    if out is not None:
        out = Path(out)
        out.mkdir(parents=True, exist_ok=True)
        (out / "metrics.json").write_text(json.dumps({**result, "runs": {k: v["summary"] for k, v in result["runs"].items()}}, indent=2))
        for key, run in result["runs"].items():
            with (out / f"per_pair_{key}.csv").open("w", newline="") as f:
                writer = csv.DictWriter(f, list(run["per_pair"][0]))
                writer.writeheader()
                writer.writerows(run["per_pair"])
    return result


def format_table(result: Dict[str, Any]) -> str:
    """Markdown table of every run: EPE (mean, median, max, failures; on the pairs with a change map:
    all, unchanged and changed pixels), NPC's wins against each phase correlation, seconds per pair."""
    def f(v: Optional[float]) -> str:
        return "-" if v is None else f"{v:.3f}"

    lines = ["| split, shift | method | mean EPE | median | max | failures (> 3 px) | mapped pairs: all | unchanged | changed "
             "| NPC wins | s / pair |", "|---|---|---|---|---|---|---|---|---|---|---|"]
    for key, run in result["runs"].items():
        s = run["summary"]
        for m in BENCH_METHODS:
            wins = f"{s[f'npc_wins_vs_{m}']}/{s['n_pairs']}" if m in BASELINES else ""
            name = f"{m} (+-{s['bound']:g} px)" if m == "phase_correlation_bounded" else m
            lines.append(f"| {s['split']} +-{s['max_shift']:g} px ({s['n_pairs']} pairs) | {name} | {f(s[f'mean_epe_{m}'])} | "
                         f"{f(s[f'median_epe_{m}'])} | {f(s[f'max_epe_{m}'])} | {s[f'failures_{m}']} | {f(s[f'mean_epe_mapped_{m}'])} | "
                         f"{f(s[f'mean_epe_unchanged_{m}'])} | "
                         f"{f(s[f'mean_epe_changed_{m}'])} | {wins} | {s[f'seconds_per_pair_{m}']:.3f} |")
    return "\n".join(lines)


def format_truth_check(result: Dict[str, Any]) -> str:
    """Markdown table of the :func:`truth_offset` summaries (runs made with ``truth_check``), one row per run."""
    lines = ["| split, shift | mean offset of the truth from the best alignment (px) | pairs over 0.5 px | per scene (px) "
             "| mean EPE against the moved truth: PC bounded / NPC | NPC wins on it vs PC bounded |", "|---|---|---|---|---|---|"]
    for run in result["runs"].values():
        s = run["summary"]
        if "mean_truth_offset_px" not in s:
            continue
        scenes = ", ".join(f"{k} {v:.2f}" for k, v in s["mean_truth_offset_px_per_scene"].items())
        lines.append(f"| {s['split']} +-{s['max_shift']:g} px | {s['mean_truth_offset_px']:.2f} | "
                     f"{s['pairs_truth_offset_over_half_px']}/{s['n_pairs']} | {scenes} | "
                     f"{s['mean_epe_aligned_phase_correlation_bounded']:.3f} / {s['mean_epe_aligned_npc']:.3f} | "
                     f"{s['npc_wins_aligned_vs_phase_correlation_bounded']}/{s['n_pairs']} |")
    return "\n".join(lines)
