"""What a whole-stack training run writes beside its checkpoint: the log (one JSON line and one text line per
epoch), the GPU utilisation samples, and the loss / validation-Dice curve figure."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any, List, Mapping, Optional, Sequence

import torch

__all__ = ["GpuUtilisation", "RunLog", "curve_figure"]


class GpuUtilisation:
    """Samples of ``torch.cuda.utilization()`` (percent of the last sampling period the GPU was busy, NVML).

    ``sample()`` after each step; ``mean()`` returns the average since the last ``mean()`` as a float, or
    ``"n/a"`` on the CPU or where NVML (``pynvml`` / ``nvidia-ml-py``) is missing.
    """

    def __init__(self, device: torch.device) -> None:
        self.device = torch.device(device)
        self.samples: List[float] = []
        self.available = self.device.type == "cuda"
        self.reason = "" if self.available else f"device {self.device.type}"

    def sample(self) -> None:
        if not self.available:
            return
        try:
            self.samples.append(float(torch.cuda.utilization(self.device)))
        except Exception as err:  # ModuleNotFoundError (pynvml), NVML errors: report, never stop training
            self.available, self.reason = False, f"{type(err).__name__}: {err}".splitlines()[0]

    def mean(self) -> Any:
        if not self.samples:
            return "n/a"
        value, self.samples = sum(self.samples) / len(self.samples), []
        return round(value, 1)


def _fmt(value: Any, digits: int = 4) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:.{digits}f}"
    return str(value)


class RunLog:
    """``train_log.jsonl`` (a record per epoch, machine-readable) and ``train.log`` (the same as text, plus
    messages) in ``folder``; a resumed run appends to both. ``active=False`` (ranks other than 0 of a
    ``torchrun`` job): writes and prints nothing."""

    def __init__(self, folder: Path, active: bool = True) -> None:
        self.folder, self.active = Path(folder), bool(active)
        if self.active:
            self.folder.mkdir(parents=True, exist_ok=True)
        self.jsonl, self.text = self.folder / "train_log.jsonl", self.folder / "train.log"

    def message(self, line: str, echo: bool = True) -> None:
        if not self.active:
            return
        with self.text.open("a") as fh:
            fh.write(line.rstrip() + "\n")
        if echo:
            print(line, flush=True)

    def epoch(self, record: Mapping[str, Any], echo: bool = True) -> None:
        if not self.active:
            return
        with self.jsonl.open("a") as fh:
            fh.write(json.dumps(dict(record)) + "\n")
        keys = ("epoch", "loss", "similarity", "label", "volume", "fold", "grad_norm", "val_dice", "val_ef_error_lv",
                "val_ef_error_rv", "seconds", "network_seconds",
                "epoch_over_network", "gpu_util", "lr", "elapsed_min")
        self.message("  ".join(f"{k}={_fmt(record.get(k))}" for k in keys if k in record), echo)


def curve_figure(curve: Sequence[Mapping[str, Any]], path: Path, title: str = "") -> Optional[Path]:
    """``path`` (PNG): training loss (left axis) and validation mean 3-D Dice (right axis) against the epoch.

    Returns ``None`` without writing when matplotlib is missing or ``curve`` is empty.
    """
    if not curve:
        return None
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return None
    epochs = [r["epoch"] for r in curve]
    fig, ax = plt.subplots(figsize=(7, 4), dpi=110)
    ax.plot(epochs, [r.get("loss", math.nan) for r in curve], color="tab:blue", lw=1.2, label="training loss")
    if any("label" in r for r in curve):
        ax.plot(epochs, [r.get("label", math.nan) for r in curve], color="tab:cyan", lw=0.8, label="of which: label Dice term")
    ax.set_xlabel("epoch")
    ax.set_ylabel("loss")
    val = [(r["epoch"], r["val_dice"]) for r in curve if r.get("val_dice") is not None]
    handles, labels = ax.get_legend_handles_labels()
    if val:
        ax2 = ax.twinx()
        line = ax2.plot([e for e, _ in val], [d for _, d in val], "o-", color="tab:red", ms=3, lw=1.2,
                        label="validation mean 3-D Dice")[0]
        ax2.set_ylabel("validation Dice (RV / Myo / LV mean)")
        handles, labels = handles + [line], labels + [line.get_label()]
    ax.legend(handles, labels, loc="center right", fontsize=8)
    ax.set_title(title or "whole-stack training", fontsize=9)
    fig.tight_layout()
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path)
    plt.close(fig)
    return Path(path)
