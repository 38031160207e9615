"""Per-pair registration metrics as ignite metrics, and their summary."""

from __future__ import annotations

import math
from typing import Any, Callable, Dict, List, Mapping, Optional, Sequence

import numpy as np
import torch
from ignite.engine import Engine
from ignite.metrics import Metric

__all__ = ["PairMeanMetric", "pair_records", "nonfinite_pairs", "summarize_pair_metrics", "direction_tag"]

#: columns of a per-pair record that identify the pair (the rest are metrics)
ID_COLUMNS = ("patient", "view", "slice", "direction")


def direction_tag(direction: str) -> str:
    """``"ED->ES"`` -> ``"ed_es"`` (the suffix of per-direction summary keys)."""
    return str(direction).lower().replace("->", "_").replace(" ", "")


def _item(value: Any, i: int) -> Any:
    """The ``i``-th entry of a collated batch value (list of str, tensor, ...)."""
    if torch.is_tensor(value):
        v = value[i] if value.dim() > 0 else value
        return v.item() if v.numel() == 1 else v.tolist()
    if isinstance(value, (list, tuple)):
        return value[i]
    return value


def pair_records(output: Mapping[str, Any]) -> List[Dict[str, Any]]:
    """One dict per pair of a :class:`~monai_npc.engines.RegistrationEvaluator` output:
    ``patient``, ``view``, ``slice``, ``direction`` (those present), every ``metrics`` entry
    (float) and ``seconds`` (the batch's network time divided by the batch size)."""
    metrics = output.get("metrics")
    if not metrics:
        return []
    n = int(next(iter(metrics.values())).shape[0])
    meta = output.get("meta", {}) or {}
    seconds = float(output.get("seconds", float("nan"))) / max(n, 1)
    rows = []
    for i in range(n):
        row: Dict[str, Any] = {}
        for key in ID_COLUMNS:
            if key in meta:
                value = _item(meta[key], i)
                row[key] = int(value) if key == "slice" else str(value)
        row.update({k: float(v[i]) for k, v in metrics.items()})
        row["seconds"] = seconds
        rows.append(row)
    return rows


def nonfinite_pairs(output: Mapping[str, Any], keys: Sequence[str] = ("moving", "fixed")) -> Dict[int, str]:
    """``{pair index: reason}`` for the pairs of a batch whose input images hold NaN or Inf values.

    Their metrics would be meaningless (or silently averaged): writers skip them and say why.
    """
    bad: Dict[int, str] = {}
    for key in keys:
        value = output.get(key)
        if not torch.is_tensor(value) or value.dim() == 0 or not value.is_floating_point():
            continue
        count = (~torch.isfinite(value.detach())).reshape(value.shape[0], -1).sum(1)
        for i in torch.nonzero(count).flatten().tolist():
            note = f"{key} image has {int(count[i])} non-finite (NaN/Inf) value(s)"
            bad[i] = f"{bad[i]}; {note}" if i in bad else note
    return bad


class PairMeanMetric(Metric):
    """Mean over pairs of one per-pair value of ``engine.state.output["metrics"]``.

    Use as ``key_val_metric`` / ``additional_metrics`` of a
    :class:`~monai_npc.engines.RegistrationEvaluator`, e.g. ``PairMeanMetric("dice_mean")`` (the
    validation Dice) or ``PairMeanMetric("dice_mean", direction="ED->ES")``. NaN values (a
    structure absent from the fixed label) are skipped. Sums and counts are all-reduced over
    processes, so under ``torchrun`` every rank gets the mean over the whole (sharded) set.

    Args:
        metric: key of the per-pair metric (``dice_mean``, ``dice_<name>``, ``hd95``, ``sdlogj``,
            ``ndv``, ``folding_percent``, ``dice_mean_initial``, ``epe``).
        direction: only pairs whose ``meta["direction"]`` equals this (``None``: all pairs).
        output_transform: applied to ``engine.state.output`` first.
    """

    def __init__(
        self,
        metric: str = "dice_mean",
        direction: Optional[str] = None,
        output_transform: Callable = lambda x: x,
        device: str | torch.device = "cpu",
    ) -> None:
        self.metric = str(metric)
        self.direction = direction
        super().__init__(output_transform=output_transform, device=device)

    def reset(self) -> None:
        self._sum = 0.0
        self._count = 0

    def update(self, output: Mapping[str, Any]) -> None:
        metrics = output.get("metrics") if isinstance(output, Mapping) else None
        if not metrics:
            raise KeyError("PairMeanMetric: engine output has no 'metrics'; use a RegistrationEvaluator with compute_metrics=True.")
        if self.metric not in metrics:
            raise KeyError(f"PairMeanMetric: no per-pair metric {self.metric!r}; available: {sorted(metrics)}.")
        values = torch.as_tensor(metrics[self.metric], dtype=torch.float64).flatten()
        if self.direction is not None:
            directions = (output.get("meta") or {}).get("direction")
            if directions is None:
                raise KeyError("PairMeanMetric: direction filter set but the batch has no 'direction'.")
            keep = torch.tensor([str(d) == self.direction for d in directions], dtype=torch.bool)
            values = values[keep]
        values = values[~torch.isnan(values)]
        self._sum += float(values.sum())
        self._count += int(values.numel())

    def iteration_completed(self, engine: Engine) -> None:
        self.update(self._output_transform(engine.state.output))

    def compute(self) -> float:
        import ignite.distributed as idist

        total = torch.tensor([self._sum, float(self._count)], dtype=torch.float64)
        if idist.get_world_size() > 1:
            total = idist.all_reduce(total.to(self._device)).cpu()
        return float(total[0] / total[1]) if total[1] > 0 else float("nan")


def _nan_stats(values: Sequence[float]) -> tuple:
    arr = np.asarray(values, dtype=np.float64)
    arr = arr[~np.isnan(arr)]
    if arr.size == 0:
        return float("nan"), float("nan")
    return float(arr.mean()), float(arr.std(ddof=1)) if arr.size > 1 else 0.0


def summarize_pair_metrics(rows: Sequence[Mapping[str, Any]], label_names: Sequence[str] = ()) -> Dict[str, Any]:
    """Summary of per-pair records (:func:`pair_records`): means over pairs, their sample std,
    and per-direction means.

    Keys: ``n_pairs``; every metric's mean (``dice_mean``, ``dice_<name>``, ``hd95``, ``sdlogj``,
    ``ndv``, ``folding_percent``, ``dice_mean_initial``, ``epe``, ...); ``seconds_per_pair``; per
    direction ``D`` with tag ``t`` (``ED->ES`` -> ``ed_es``): ``n_pairs_t``, ``dice_t`` (= mean
    ``dice_mean`` of that direction) and ``dice_<name>_t``; ``std`` (sample std over pairs of
    every metric); ``by_direction`` (every metric's mean per direction). NaNs (absent structures)
    are skipped; metrics without any value are ``NaN``.
    """
    rows = list(rows)
    if not rows:
        raise ValueError("summarize_pair_metrics: no pairs were evaluated.")
    names = [k for k in rows[0] if k not in ID_COLUMNS and k != "seconds"]
    summary: Dict[str, Any] = {"n_pairs": len(rows)}
    std: Dict[str, float] = {}
    for key in names:
        summary[key], std[key] = _nan_stats([r.get(key, float("nan")) for r in rows])
    seconds = [r["seconds"] for r in rows if "seconds" in r and not math.isnan(r["seconds"])]
    if seconds:
        summary["seconds_per_pair"] = float(np.mean(seconds))
    by_direction: Dict[str, Dict[str, Any]] = {}
    directions = sorted({str(r["direction"]) for r in rows if "direction" in r})
    for direction in directions:
        subset = [r for r in rows if str(r.get("direction")) == direction]
        tag = direction_tag(direction)
        means = {key: _nan_stats([r.get(key, float("nan")) for r in subset])[0] for key in names}
        by_direction[direction] = {"n_pairs": len(subset), **means}
        summary[f"n_pairs_{tag}"] = len(subset)
        if "dice_mean" in means:
            summary[f"dice_{tag}"] = means["dice_mean"]
        for name in label_names:
            if f"dice_{name}" in means:
                summary[f"dice_{name}_{tag}"] = means[f"dice_{name}"]
    summary["std"] = std
    summary["by_direction"] = by_direction
    return summary
