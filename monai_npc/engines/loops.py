"""Small, dependency-free training/evaluation loops over lists of pair dicts.

A pair is a mapping with ``moving``, ``fixed`` (``(H, W)`` or ``(1, H, W)``), optional
``moving_label``, ``fixed_label`` and ``ddf`` (the true displacement ``(2, H, W)``, voxels). The
bundles use MONAI workflows instead; these loops serve the quick start, benchmarks and tests.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Callable, Dict, List, Mapping, Optional, Sequence

import numpy as np
import torch
from torch import nn

from monai_npc.functional.warp import warp_image
from monai_npc.losses.registration import RegistrationLoss, bidirectional_loss
from monai_npc.metrics.registration import registration_metrics
from monai_npc.serialization import UnsafeWeightsError, remove_leftovers, safe_load
from monai_npc.utils import atomic_torch_save

__all__ = ["stack_pairs", "train_pairs", "evaluate_pairs"]


def stack_pairs(pairs: Sequence[Mapping], key: str) -> torch.Tensor:
    """Stack ``key`` of several pairs into ``(N, C, H, W)`` float32 (a channel axis is added to 2-D arrays)."""
    arrs = [torch.as_tensor(np.asarray(p[key]), dtype=torch.float32) for p in pairs]
    return torch.stack([a if a.dim() == 3 else a.unsqueeze(0) for a in arrs])


def train_pairs(
    network: nn.Module,
    pairs: Sequence[Mapping],
    loss: RegistrationLoss,
    iterations: int,
    batch_size: int = 8,
    lr: float = 1e-3,
    seed: int = 0,
    flips: bool = True,
    progress: bool = True,
    callback: Optional[Callable[[int, Dict[str, float]], None]] = None,
    lr_decay: float = 1.0,
    checkpoint: Optional[str | Path] = None,
    checkpoint_every: int = 50,
    label_loss: Optional[Callable] = None,
    label_weight: float = 1.0,
) -> List[Dict[str, float]]:
    """Adam training with the bidirectional loss on random mini-batches of ``pairs``.

    With ``flips`` each batch gets random horizontal / vertical flips applied identically to both
    images of a pair (the paper's ACDC augmentation). ``lr_decay`` multiplies the learning rate
    after every iteration. With ``checkpoint``, the network, optimizer, iteration, loss history and
    random state are saved there every ``checkpoint_every`` iterations and at the end, and a run
    finding the file resumes from it (so ``iterations`` is the total, not the remainder); the file is
    read as data only, and temporaries left by a killed save are deleted when the run starts.
    With ``label_loss`` (e.g. :class:`~monai_npc.losses.WarpedLabelDiceLoss`) every pair must hold
    ``moving_label`` / ``fixed_label`` and ``label_weight * label_loss`` of both directions is added
    (weak supervision, as ``RegistrationTrainer(label_loss=...)`` in the bundles).
    Returns the per-iteration loss terms.
    """
    if not pairs:
        raise ValueError("train_pairs: no training pairs.")
    if label_loss is not None and not all("moving_label" in p and "fixed_label" in p for p in pairs):
        raise KeyError("train_pairs: label_loss needs 'moving_label' and 'fixed_label' in every training pair.")
    from tqdm.auto import tqdm

    rng = np.random.default_rng(seed)
    moving, fixed = stack_pairs(pairs, "moving"), stack_pairs(pairs, "fixed")
    labels = (stack_pairs(pairs, "moving_label"), stack_pairs(pairs, "fixed_label")) if label_loss is not None else None
    opt = torch.optim.Adam(network.parameters(), lr=lr)
    sched = torch.optim.lr_scheduler.ExponentialLR(opt, gamma=lr_decay)
    history: List[Dict[str, float]] = []
    start = 1
    ckpt = Path(checkpoint) if checkpoint else None
    if ckpt is not None:
        remove_leftovers(ckpt.parent, [ckpt.name])  # temporaries of a killed save: never resumed from
    if ckpt is not None and ckpt.is_file():
        try:
            state = safe_load(ckpt, what="training checkpoint")  # data only: a checkpoint never runs code
        except UnsafeWeightsError:
            raise
        except ValueError as err:  # truncated or foreign: say so instead of a bare EOFError
            raise ValueError(
                f"train_pairs: cannot resume from checkpoint {ckpt} ({ckpt.stat().st_size} bytes): {err} "
                "Delete it to train from scratch."
            ) from err
        network.load_state_dict(state["network"])
        opt.load_state_dict(state["optimizer"])
        sched.load_state_dict(state["scheduler"])
        history = list(state["history"])
        rng.bit_generator.state = state["rng"]
        start = int(state["iteration"]) + 1

    def save(it: int) -> None:
        if ckpt is None:
            return
        state = dict(network=network.state_dict(), optimizer=opt.state_dict(), scheduler=sched.state_dict(),
                     history=history, rng=rng.bit_generator.state, iteration=it)
        atomic_torch_save(state, ckpt)  # a kill during the write keeps the previous checkpoint

    network.train()
    bar = tqdm(range(start, iterations + 1), desc="train", disable=not progress, initial=start - 1, total=iterations)
    for it in bar:
        idx = torch.as_tensor(rng.choice(len(pairs), size=min(batch_size, len(pairs)), replace=False))
        m, f = moving[idx], fixed[idx]
        ml, fl = (labels[0][idx], labels[1][idx]) if labels is not None else (None, None)
        if flips:
            for axis in (2, 3):
                if rng.random() < 0.5:
                    m, f = m.flip(axis), f.flip(axis)
                    if labels is not None:
                        ml, fl = ml.flip(axis), fl.flip(axis)
        terms = bidirectional_loss(network, loss, m, f)
        if labels is not None:
            terms["label"] = label_weight * label_loss(torch.cat([ml, fl]), torch.cat([fl, ml]), terms["ddf"])
            terms["loss"] = terms["loss"] + terms["label"]
        opt.zero_grad(set_to_none=True)
        terms["loss"].backward()
        opt.step()
        sched.step()
        record = {k: float(v.detach()) for k, v in terms.items() if v.dim() == 0}
        history.append(record)
        bar.set_postfix(loss=f"{record['loss']:.4f}")
        if callback is not None:
            callback(it, record)
        if it % checkpoint_every == 0:
            save(it)
    if start <= iterations:
        save(iterations)
    return history


@torch.inference_mode()
def evaluate_pairs(
    network: nn.Module,
    pairs: Sequence[Mapping],
    batch_size: int = 8,
    labels: Sequence[int] = (1, 2, 3),
    names: Optional[Sequence[str]] = None,
) -> Dict[str, object]:
    """Register every pair; return per-pair metrics (lists), their means, and ``seconds_per_pair``.

    Metrics: those of :func:`~monai_npc.metrics.registration_metrics` after registration, the
    initial ``dice_mean_initial``, and when pairs carry a true ``ddf`` the endpoint error
    ``epe`` / ``epe_initial`` (voxels, mean over the union of the two label maps).
    """
    if not pairs:
        raise ValueError("evaluate_pairs: no pairs to evaluate.")
    network.eval()
    per_pair: Dict[str, List[float]] = {}
    seconds = 0.0
    for start in range(0, len(pairs), batch_size):
        batch = pairs[start : start + batch_size]
        m, f = stack_pairs(batch, "moving"), stack_pairs(batch, "fixed")
        t0 = time.perf_counter()
        ddf = network(torch.cat([m, f], 1))
        seconds += time.perf_counter() - t0
        ml, fl = stack_pairs(batch, "moving_label"), stack_pairs(batch, "fixed_label")
        warped_label = warp_image(ml, ddf, "nearest", "border")
        out = registration_metrics(warped_label, fl, ml, ddf, labels, names)
        out["dice_mean_initial"] = registration_metrics(ml, fl, ml, torch.zeros_like(ddf), labels, names)["dice_mean"]
        if "ddf" in batch[0]:
            true = stack_pairs(batch, "ddf")
            fg = ((ml > 0) | (fl > 0)).float()[:, 0]
            denom = fg.flatten(1).sum(1).clamp(min=1)
            out["epe"] = ((ddf - true).norm(dim=1) * fg).flatten(1).sum(1) / denom
            out["epe_initial"] = (true.norm(dim=1) * fg).flatten(1).sum(1) / denom
        for k, v in out.items():
            per_pair.setdefault(k, []).extend(float(x) for x in v)
    means = {k: float(np.nanmean(v)) for k, v in per_pair.items()}
    return {"mean": means, "per_pair": per_pair, "n_pairs": len(pairs), "seconds_per_pair": seconds / len(pairs)}
