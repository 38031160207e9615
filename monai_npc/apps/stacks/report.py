"""Reports of an evaluation: the summary by method, group and difficulty; the Markdown table; the group figure."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any, Dict, Mapping, Sequence, Tuple, Union

import numpy as np

from .runs import nanmean
from .studies import GROUPS, STRUCTURES

__all__ = ["BUCKETS", "summarise", "results_table", "group_figure"]

PathLike = Union[str, Path]


#: difficulty buckets of the unregistered (initial) mean Dice, as in ``benchmarks/heldout.py``
BUCKETS: Tuple[Tuple[str, float, float], ...] = (
    ("large (< 0.55)", 0.0, 0.55), ("medium (0.55-0.70)", 0.55, 0.70), ("small (>= 0.70)", 0.70, 1.01),
)


def summarise(rows: Sequence[Mapping[str, Any]], structures: Mapping[int, str] = STRUCTURES) -> Dict[str, Any]:
    """Means per method: overall, per pathology group, per direction and per initial-Dice bucket.

    ``rows``: per-pair rows of :func:`evaluate_studies`. Each cell holds ``n`` (pairs), Dice per
    structure and mean, the initial mean Dice, HD95 per structure and mean (mm), ``folding_percent``
    and ``seconds`` (per pair), NaN-aware means.
    """
    keys = [f"dice_{n}" for n in structures.values()] + ["dice_mean", "dice_mean_initial"]
    keys += [f"hd95_{n}" for n in structures.values()] + ["hd95_mean", "folding_percent", "seconds"]

    def cell(sel: Sequence[Mapping[str, Any]]) -> Dict[str, float]:
        return {"n": len(sel), **{k: nanmean(r.get(k, math.nan) for r in sel) for k in keys}}

    out: Dict[str, Any] = {}
    for method in sorted({r["method"] for r in rows}, key=lambda m: (m != "npc", m)):
        mine = [r for r in rows if r["method"] == method]
        groups = sorted({r["group"] for r in mine}, key=lambda g: (GROUPS.index(g) if g in GROUPS else len(GROUPS), g))
        out[method] = {
            "overall": cell(mine),
            "groups": {g: cell([r for r in mine if r["group"] == g]) for g in groups},
            "directions": {d: cell([r for r in mine if r["direction"] == d]) for d in sorted({r["direction"] for r in mine})},
            "buckets": {b: cell([r for r in mine if r["bucket"] == b]) for b, _, _ in BUCKETS if any(r["bucket"] == b for r in mine)},
        }
    return out


def _fmt(x: float, digits: int = 3) -> str:
    return "-" if x is None or not np.isfinite(x) else f"{x:.{digits}f}"


def results_table(summary: Mapping[str, Any], rows: Sequence[Mapping[str, Any]], structures: Mapping[int, str] = STRUCTURES) -> str:
    """Markdown tables of :func:`summarise`: per group and overall, then per initial-Dice bucket."""
    names = list(structures.values())
    methods = list(summary)
    head = "| group | method | pairs | " + " | ".join(f"Dice {n.upper() if len(n) < 3 else n.capitalize()}" for n in names)
    lines = [head + " | Dice mean | initial | HD95 mean (mm) | folding % | s/pair |", "|---|---|---|" + "---|" * (len(names) + 5)]
    first = summary[methods[0]] if methods else {"groups": {}}
    for group in list(first["groups"]) + ["all"]:
        for m in methods:
            c = summary[m]["overall"] if group == "all" else summary[m]["groups"].get(group)
            if c is None:
                continue
            g = f"**{group}**" if group == "all" else group
            lines.append(
                f"| {g} | {m} | {c['n']} | " + " | ".join(_fmt(c[f'dice_{n}']) for n in names)
                + f" | **{_fmt(c['dice_mean'])}** | {_fmt(c['dice_mean_initial'])} | {_fmt(c['hd95_mean'], 2)} | "
                f"{_fmt(c['folding_percent'], 3)} | {_fmt(c['seconds'], 2)} |"
            )
    lines += ["", "By difficulty (unregistered mean Dice of the pair), mean Dice:", ""]
    lines += ["| initial Dice | pairs | initial | " + " | ".join(methods) + (" | NPC >= demons |" if {"npc", "demons"} <= set(methods) else " |"),
              "|---|---|---|" + "---|" * (len(methods) + ({"npc", "demons"} <= set(methods)))]
    for bucket, _, _ in BUCKETS + (("all", 0.0, 1.01),):
        cells = [summary[m]["overall"] if bucket == "all" else summary[m]["buckets"].get(bucket) for m in methods]
        if not cells or cells[0] is None:
            continue
        line = f"| {bucket} | {cells[0]['n']} | {_fmt(cells[0]['dice_mean_initial'])} | " + " | ".join(_fmt(c['dice_mean']) if c else "-" for c in cells)
        if {"npc", "demons"} <= set(methods):
            line += f" | {_wins(rows, bucket)} |"
        else:
            line += " |"
        lines.append(line)
    return "\n".join(lines)


def _wins(rows: Sequence[Mapping[str, Any]], bucket: str) -> str:
    """``k/n``: pairs of ``bucket`` (or ``"all"``) where NPC's mean Dice is >= demons'."""
    by = {}
    for r in rows:
        if bucket in ("all", r["bucket"]):
            by.setdefault((r["study"], r["direction"]), {})[r["method"]] = r["dice_mean"]
    both = [v for v in by.values() if "npc" in v and "demons" in v]
    return f"{sum(v['npc'] >= v['demons'] for v in both)}/{len(both)}"


def group_figure(summary: Mapping[str, Any], path: PathLike) -> Path:
    """Bars of the mean Dice per pathology group (and overall) for each method, initial Dice as a line."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from monai_npc.viz.figures import save_figure

    methods = list(summary)
    groups = sorted({g for m in methods for g in summary[m]["groups"]}, key=lambda g: (GROUPS.index(g) if g in GROUPS else len(GROUPS), g))
    groups += ["all"]
    empty = {"dice_mean": float("nan"), "dice_mean_initial": float("nan"), "n": 0}
    fig, ax = plt.subplots(figsize=(1.4 * len(groups) + 2, 4))
    width = 0.8 / max(len(methods), 1)
    x = np.arange(len(groups))
    for i, m in enumerate(methods):
        cells = [summary[m]["overall"] if g == "all" else summary[m]["groups"].get(g, empty) for g in groups]
        ax.bar(x + (i - (len(methods) - 1) / 2) * width, [c["dice_mean"] for c in cells], width, label=m)
    init = [summary[methods[0]]["overall"] if g == "all" else summary[methods[0]]["groups"].get(g, empty) for g in groups]
    ax.plot(x, [c["dice_mean_initial"] for c in init], "k_", ms=25, mew=2, label="initial")
    ax.set_xticks(x, [f"{g}\n{c['n']} pairs" for g, c in zip(groups, init)])
    ax.set_ylim(0.4, 1.05)
    ax.set_ylabel("3-D Dice (mean of RV, Myo, LV)")
    ax.legend(fontsize=8, loc="upper left", ncol=len(methods) + 1)
    return save_figure(fig, path, title="whole stacks, fixed grid: mean Dice per pathology group")
