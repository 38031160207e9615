"""Real-scene SAR benchmark (issue 14): no registration, scikit-image phase correlation, our windowed
phase correlation and NPC on the pairs of :func:`~.real.benchmark_pairs`.

Endpoint error (EPE, pixels) is measured inside a 24-px margin (the moving crop has no true
content there), overall and separately on the changed and unchanged pixels of the scene's
change map. Wins: pairs where NPC's EPE is lower than phase correlation's.
"""

from __future__ import annotations

import csv
import json
import time
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence, Union

import numpy as np
import torch

from .evaluate import phase_correlation_shift, register_sar
from .real import DEFAULT_ROOT, benchmark_pairs, read_scenes

__all__ = ["MARGIN", "BENCH_METHODS", "BASELINES", "DEFAULT_BOUND", "skimage_phase_correlation", "pair_errors", "run_real_benchmark", "format_table"]

#: border (pixels) left out of the endpoint error
MARGIN = 24
#: methods in table order; ``skimage_pc`` is the baseline of the issue (``phase_cross_correlation``, upsample 20,
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
    return register_sar(net, moving, fixed, method, float(getattr(net, "meta", {}).get("sigma", 1.0)))


def _evaluate(net: torch.nn.Module, pairs: Sequence[Dict[str, Any]], progress: bool) -> Dict[str, Any]:
    from tqdm.auto import tqdm

    rows: List[Dict[str, Any]] = []
    for p in tqdm(pairs, desc="bench-real", unit="pair", disable=not progress):
        row: Dict[str, Any] = {"pair": p["name"], "true_shift_y": float(p["shift"][0]), "true_shift_x": float(p["shift"][1]),
                               "changed_percent": float("nan") if p["change"] is None else 100.0 * float(np.mean(p["change"]))}
        for method in BENCH_METHODS:
            t0 = time.perf_counter()
            ddf = _run(net, method, p["moving"], p["fixed"])
            row[f"seconds_{method}"] = time.perf_counter() - t0
            for k, v in pair_errors(ddf, p["ddf"], p["change"]).items():
                row[f"{k}_{method}"] = v
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
) -> Dict[str, Any]:
    """Benchmark ``model`` on the real scenes: one entry per ``(split, max_shift)`` (``"test_6"``...).

    Pairs: :func:`~.real.benchmark_pairs` of ``split`` with global shifts up to ``max_shift`` and a
    non-rigid part up to ``nonrigid`` pixels (field seeds fixed per split and range). With ``out``,
    writes ``metrics.json`` and ``per_pair_<split>_<shift>.csv``.
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
            run = _evaluate(net, pairs, progress)
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
