"""The brain breadth demo: train a single-stage ``C = 128, K = 64`` NPC on the six real T1 slices,
then draw the ODE timelapse and the filter quads and measure the r16 <-> r85 landmark-curve distance.

Split: the pairs in :data:`~.data.HOLDOUT` (the landmark pair r16-r85 among them) are never seen
in training; the other 11 of the 15 inter-subject pairs are trained in both directions with
``copies`` randomly perturbed versions each (:mod:`.augment`) and random flips.
"""

from __future__ import annotations

import json
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence, Tuple

import numpy as np
import torch

from monai_npc.engines.loops import train_pairs
from monai_npc.functional.similarity import global_ncc
from monai_npc.functional.warp import jacobian_determinant, warp_image
from monai_npc.losses.registration import RegistrationLoss
from monai_npc.networks.nets import ACDC_CONFIG, NPCNet, save_pretrained

from .augment import augmented_pairs
from .data import (
    HOLDOUT, LANDMARK_PAIR, check_data_dir, curve_points, from_model_coords, load_landmarks, load_slices, split_pairs,
    to_model_coords,
)
from .landmarks import curve_distances, move_points

__all__ = ["BrainConfig", "train_brain", "register_pair", "landmark_metrics", "evaluate_brain", "run_brain_demo"]


@dataclass
class BrainConfig:
    """Schedule of the brain demo (pixels of the ``size`` model grid unless stated).

    Attributes:
        size: model grid (the 256 x 256 slices are area-averaged to it).
        iterations, batch_size, lr, lr_decay: Adam schedule (``batch_size`` pairs, both directions).
        copies: perturbed copies of each training pair (:func:`~.augment.augmented_pairs`).
        train_steps: ODE steps in training (``detach_steps``); ``eval_steps``: at inference and in the figures.
        window, lambda_reg, lambda_jac, lambda_logj: LNCC window and regulariser weights.
        seed: augmentation and sampling seed.
        holdout: unordered pairs kept out of training.
    """

    size: int = 128
    iterations: int = 300
    batch_size: int = 2
    lr: float = 2e-3
    lr_decay: float = 0.997
    copies: int = 12
    train_steps: int = 5
    eval_steps: int = 15
    window: int = 9
    lambda_reg: float = 0.1
    lambda_jac: float = 100.0
    lambda_logj: float = 1e-5
    seed: int = 0
    holdout: List[Tuple[str, str]] = field(default_factory=lambda: [tuple(p) for p in HOLDOUT])


def train_brain(data_dir: str | Path, out: str | Path, config: BrainConfig = BrainConfig(), progress: bool = True) -> NPCNet:
    """Train and save ``out/brain2d.pt`` (``save_pretrained``; ``num_steps = eval_steps``); resumable from ``out/checkpoint.pt``."""
    data_dir = check_data_dir(data_dir)
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    slices = load_slices(data_dir, config.size)
    train, _ = split_pairs(config.holdout)
    pairs = augmented_pairs(slices, train, config.copies, config.seed)
    torch.manual_seed(config.seed)
    net = NPCNet(**{**ACDC_CONFIG, "num_steps": config.train_steps, "detach_steps": True})
    loss = RegistrationLoss(
        preset=None, window=config.window, lambda_reg=config.lambda_reg, lambda_jac=config.lambda_jac, lambda_logj=config.lambda_logj
    )
    history = train_pairs(
        net, pairs, loss, config.iterations, config.batch_size, config.lr, seed=config.seed, flips=True,
        progress=progress, lr_decay=config.lr_decay, checkpoint=out / "checkpoint.pt", checkpoint_every=25,
    )
    final = NPCNet(**{**ACDC_CONFIG, "num_steps": config.eval_steps})
    final.load_state_dict(net.state_dict())
    final.meta = {
        "data": {"slices": "ANTs example T1 slices r16 r27 r30 r62 r64 r85 (256 x 256, 1 mm), area-averaged to "
                 f"{config.size} x {config.size}", "train_pairs": [list(p) for p in train], "holdout": [list(p) for p in config.holdout],
                 "training_pairs_with_augmentation": len(pairs)},
        "schedule": {**{k: v for k, v in asdict(config).items() if k != "holdout"}, "loss": dict(loss.config),
                     "optimizer": "Adam", "threads": torch.get_num_threads(), "seconds_this_call": time.perf_counter() - t0,
                     "final_loss": float(np.mean([h["loss"] for h in history[-25:]]))},
        "preprocessing": "minmax",
        "input_size": config.size,
    }
    (out / "train_history.json").write_text(json.dumps(history))
    save_pretrained(final, out / "brain2d.pt", final.meta)
    return final.eval()


@torch.inference_mode()
def register_pair(net: NPCNet, moving: np.ndarray, fixed: np.ndarray) -> Tuple[torch.Tensor, List[torch.Tensor], List[Dict[str, torch.Tensor]]]:
    """``(ddf (2, H, W), [ddf after each ODE step], diagnostics)`` for ``(H, W)`` images."""
    m = torch.as_tensor(moving, dtype=torch.float32)[None, None]
    f = torch.as_tensor(fixed, dtype=torch.float32)[None, None]
    _, ddf, diagnostics = net.register(m, f, return_diagnostics=True)
    return ddf[0], [d["ddf"][0] for d in diagnostics], diagnostics


def _ncc(a: torch.Tensor, b: torch.Tensor) -> float:
    return float(global_ncc(a.reshape(1, -1), b.reshape(1, -1))[0])


def landmark_metrics(net: NPCNet, data_dir: str | Path, size: int) -> Dict[str, Any]:
    """r16 <-> r85 curve distances (mm = native pixels), before and after, in both directions, per label and averaged.

    Direction ``"r16->r85"``: the r16 curves carried into r85 (registering moving r85 onto fixed
    r16, the field on r16's grid), compared with the r85 curves; ``"r85->r16"`` the reverse.
    """
    a, b = LANDMARK_PAIR
    slices = load_slices(data_dir, size, LANDMARK_PAIR)
    labels = {n: load_landmarks(data_dir, n) for n in LANDMARK_PAIR}
    out: Dict[str, Any] = {}
    for src, dst in ((a, b), (b, a)):
        ddf, _, _ = register_pair(net, slices[dst], slices[src])  # moving dst onto fixed src: field on src's grid
        per: Dict[str, Any] = {}
        for label in (1, 2):
            p_src, p_dst = curve_points(labels[src], label), curve_points(labels[dst], label)
            moved = from_model_coords(move_points(to_model_coords(p_src, size), ddf), size)
            per[str(label)] = {"before": curve_distances(p_src, p_dst), "after": curve_distances(moved, p_dst)}
        for when in ("before", "after"):
            for metric in ("msd", "hausdorff"):
                per.setdefault(f"{metric}_{when}", float(np.mean([per[str(lab)][when][metric] for lab in (1, 2)])))
        out[f"{src}->{dst}"] = per
    for when in ("before", "after"):
        for metric in ("msd", "hausdorff"):
            out[f"{metric}_{when}"] = float(np.mean([out[k][f"{metric}_{when}"] for k in out if "->" in k]))
    return out


def evaluate_brain(net: NPCNet, data_dir: str | Path, size: int = 128, holdout: Sequence[Tuple[str, str]] = HOLDOUT) -> Dict[str, Any]:
    """Held-out pairs (both directions): NCC before / after, % folding; plus :func:`landmark_metrics`."""
    slices = load_slices(data_dir, size)
    rows = []
    for a, b in holdout:
        for m_name, f_name in ((a, b), (b, a)):
            ddf, _, _ = register_pair(net, slices[m_name], slices[f_name])
            m = torch.from_numpy(slices[m_name])[None, None]
            f = torch.from_numpy(slices[f_name])
            warped = warp_image(m, ddf[None], "bilinear", "border")[0, 0]
            jac = jacobian_determinant(ddf[None])[0]
            rows.append({"moving": m_name, "fixed": f_name, "ncc_before": _ncc(m[0, 0], f), "ncc_after": _ncc(warped, f),
                         "folding_percent": float(100.0 * (jac <= 0).float().mean())})
    summary = {k: float(np.mean([r[k] for r in rows])) for k in ("ncc_before", "ncc_after", "folding_percent")}
    return {"holdout_pairs": rows, "mean": summary, "landmarks": landmark_metrics(net, data_dir, size)}


def run_brain_demo(
    data_dir: Optional[str | Path],
    out: str | Path,
    config: BrainConfig = BrainConfig(),
    model: Optional[str | Path] = None,
    progress: bool = True,
    figure_prefix: str = "brain_",
) -> Dict[str, Any]:
    """Train (or load ``model``: a ``save_pretrained`` file or a shipped name), evaluate, write figures and ``metrics.json``.

    Figures in ``out``: ``{prefix}timelapse.png`` (held-out pairs: moving, ODE steps 1 / 8 / 15 with
    the deformed grid, fixed), ``{prefix}filter_quads.png`` (the 16 pairs most often selected on the
    held-out pairs) and ``{prefix}landmarks.png`` (r16 curves before / after on r85).
    """
    from monai_npc.networks.nets import load_pretrained
    from monai_npc.viz import filter_quads_figure, per_pair_residual_stats

    from .figures import landmark_figure, timelapse_figure

    data_dir = check_data_dir(data_dir)
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    if model is None:
        net = train_brain(data_dir, out, config, progress)
    else:
        net = load_pretrained(model, num_steps=config.eval_steps)
    size = int(getattr(net, "meta", {}).get("input_size", config.size))
    metrics = evaluate_brain(net, data_dir, size, [tuple(p) for p in config.holdout])
    metrics["eval_steps"] = config.eval_steps
    if config.train_steps != config.eval_steps:
        short = NPCNet(**{**net.config, "num_steps": config.train_steps})
        short.load_state_dict(net.state_dict())
        metrics["landmarks_train_steps"] = landmark_metrics(short.eval(), data_dir, size)

    slices = load_slices(data_dir, size)
    rows, selected = [], []
    for a, b in config.holdout:
        _, steps, diagnostics = register_pair(net, slices[a], slices[b])
        rows.append({"moving": slices[a], "fixed": slices[b], "ddfs": steps, "title": f"{a} -> {b}"})
        selected.append(per_pair_residual_stats(diagnostics[-1])["selected"])
    marks = [s for s in (1, 8, 15) if s <= len(rows[0]["ddfs"])] or [len(rows[0]["ddfs"])]
    figures = {"timelapse": str(timelapse_figure(rows, out / f"{figure_prefix}timelapse.png", marks))}
    order = np.argsort(-np.mean(selected, 0))[:16]
    bank = net.ode.stages[0].filters
    figures["filter_quads"] = str(filter_quads_figure(bank.psi, bank.phi, out / f"{figure_prefix}filter_quads.png", pairs=order.tolist(), columns=8))
    a, b = LANDMARK_PAIR
    ddf, _, _ = register_pair(net, slices[b], slices[a])
    lab_a, lab_b = load_landmarks(data_dir, a), load_landmarks(data_dir, b)
    pts = {lab: curve_points(lab_a, lab) for lab in (1, 2)}
    moved = np.concatenate([from_model_coords(move_points(to_model_coords(pts[lab], size), ddf), size) for lab in (1, 2)])
    native_b = np.asarray(load_slices(data_dir, 256, [b])[b])
    lm = metrics["landmarks"][f"{a}->{b}"]
    figures["landmarks"] = str(landmark_figure(
        native_b,
        {f"{b} curves": np.concatenate([curve_points(lab_b, 1), curve_points(lab_b, 2)]),
         f"{a} curves, unregistered": np.concatenate([pts[1], pts[2]]),
         f"{a} curves through NPC": moved},
        out / f"{figure_prefix}landmarks.png",
        title=f"{a} -> {b}: mean symmetric distance {lm['msd_before']:.2f} -> {lm['msd_after']:.2f} mm",
    ))
    metrics["figures"] = figures
    metrics["model"] = str(model) if model is not None else str(out / "brain2d.pt")
    metrics["meta"] = getattr(net, "meta", {})
    metrics["seconds"] = time.perf_counter() - t0
    (out / "metrics.json").write_text(json.dumps(metrics, indent=2, default=str))
    return metrics
