"""End-to-end SAR commands: write synthetic pair folders, evaluate a model against phase correlation.

A pair folder (``monai-npc sar generate``) holds ``pair_NNN_moving.tif`` / ``pair_NNN_fixed.tif``
(float32 amplitude), ``pair_NNN_ddf.npy`` (true displacement ``(2, H, W)``, pixels, MONAI ``Warp``
convention) and ``pairs.csv`` (``moving,fixed,out``), which ``monai-npc register --batch`` reads.
"""

from __future__ import annotations

import csv
import json
import time
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence

import numpy as np
import torch

from .evaluate import METHODS, evaluate_sar
from .io import read_amplitude, write_amplitude
from .preprocess import sar_normalize
from .synthetic import SARPairConfig, config_dict, make_sar_pair

__all__ = ["write_pair_folder", "read_pair_folder", "run_sar_evaluation"]


def write_pair_folder(out: str | Path, n: int, seed: int, config: SARPairConfig = SARPairConfig(), progress: bool = True) -> List[Dict[str, str]]:
    """Write ``n`` synthetic pairs (seeds ``seed .. seed + n - 1``) and ``pairs.csv``; return the CSV rows."""
    from tqdm.auto import tqdm

    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    rows = []
    for i in tqdm(range(n), desc="sar generate", unit="pair", disable=not progress):
        p = make_sar_pair(config, seed=seed + i)
        stem = f"pair_{i:03d}"
        write_amplitude(out / f"{stem}_moving.tif", p["moving"])
        write_amplitude(out / f"{stem}_fixed.tif", p["fixed"])
        np.save(out / f"{stem}_ddf.npy", p["ddf"])
        rows.append({"moving": f"{stem}_moving.tif", "fixed": f"{stem}_fixed.tif", "out": f"registered/{stem}"})
    with (out / "pairs.csv").open("w", newline="") as f:
        writer = csv.DictWriter(f, ["moving", "fixed", "out"])
        writer.writeheader()
        writer.writerows(rows)
    (out / "generator.json").write_text(json.dumps({"seed": seed, "n": n, **config_dict(config)}, indent=2))
    return rows


def read_pair_folder(folder: str | Path) -> List[Dict[str, Any]]:
    """Pairs of a folder written by :func:`write_pair_folder` (``ddf`` only where its ``.npy`` exists)."""
    folder = Path(folder)
    csv_path = folder / "pairs.csv"
    if not csv_path.is_file():
        raise FileNotFoundError(f"{csv_path} does not exist (write a pair folder with `monai-npc sar generate`).")
    pairs = []
    with csv_path.open(newline="") as f:
        for row in csv.DictReader(f):
            if not row.get("moving") or not row.get("fixed"):
                raise ValueError(f"{csv_path}: every row needs 'moving' and 'fixed'.")
            p: Dict[str, Any] = {"name": Path(row["moving"]).stem.replace("_moving", ""),
                                 "moving": read_amplitude(folder / row["moving"]), "fixed": read_amplitude(folder / row["fixed"])}
            ddf_path = folder / row["moving"].replace("_moving.tif", "_ddf.npy")
            if ddf_path.is_file():
                p["ddf"] = np.load(ddf_path)
            pairs.append(p)
    if not pairs:
        raise ValueError(f"{csv_path} lists no pairs.")
    return pairs


def run_sar_evaluation(
    net: torch.nn.Module,
    pairs: Sequence[Dict[str, Any]],
    out: str | Path,
    figure_rows: int = 4,
    margin: int = 16,
    progress: bool = True,
    figure_prefix: str = "sar_",
    extra: Optional[Dict[str, Any]] = None,
) -> Dict[str, Any]:
    """Evaluate, then write ``metrics.json``, ``per_pair.csv``, ``{prefix}panel.png`` and ``{prefix}filter_quads.png``.

    The panel shows ``figure_rows`` pairs: the pair where NPC's NCC gain over phase correlation is
    smallest (the failure case, as in the paper) and the first others.
    """
    from monai_npc.viz import filter_quads_figure

    from .figures import sar_panel

    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    result = evaluate_sar(net, pairs, margin=margin, progress=progress)
    per = result["per_pair"]
    names = [str(p.get("name", f"pair_{i:03d}")) for i, p in enumerate(pairs)]
    with (out / "per_pair.csv").open("w", newline="") as f:
        writer = csv.writer(f)
        keys = sorted(per)
        writer.writerow(["pair"] + keys + ["npc_beats_pc_ncc"])
        for i, name in enumerate(names):
            writer.writerow([name] + [f"{per[k][i]:.5f}" for k in keys] + [int(per["ncc_npc"][i] > per["ncc_phase_correlation"][i])])
    gain = np.array(per["ncc_npc"]) - np.array(per["ncc_phase_correlation"])
    worst = int(np.argmin(gain))
    show = ([i for i in range(len(pairs)) if i != worst][: max(figure_rows - 1, 0)] + [worst])[:figure_rows]
    sigma = result["sigma"]
    rows = []
    for i in show:
        rows.append({
            "moving": sar_normalize(np.asarray(pairs[i]["moving"]), sigma),
            "fixed": sar_normalize(np.asarray(pairs[i]["fixed"]), sigma),
            "ddf": {k: result["ddf"][k][i] for k in METHODS},
            "ncc": {k: per[f"ncc_{k}"][i] for k in METHODS},
            "label": names[i] + (" (worst)" if i == worst else ""),
        })
    figures = {"panel": str(sar_panel(rows, out / f"{figure_prefix}panel.png"))}
    stages = net.ode.stages if hasattr(net, "ode") else []
    for s, stage in enumerate(stages):
        figures[f"filter_quads_stage{s}"] = str(filter_quads_figure(
            stage.filters.psi, stage.filters.phi, out / f"{figure_prefix}filter_quads_stage{s}.png", pairs=list(range(16)), columns=8,
        ))
    metrics = {k: v for k, v in result.items() if k != "ddf"}
    metrics.update(figures=figures, worst_pair=names[worst], pairs=names, seconds=time.perf_counter() - t0)
    if extra:
        metrics.update(extra)
    (out / "metrics.json").write_text(json.dumps(metrics, indent=2, default=str))
    return metrics
