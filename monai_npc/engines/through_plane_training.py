"""Train a :class:`~monai_npc.networks.nets.ThroughPlaneNPC`'s head alone, on its frozen 2-D network's fields.

The 2-D network (e.g. the shipped ``acdc`` weights) does not change, so its in-plane fields and the head's evidence
(:func:`~monai_npc.functional.through_plane_evidence`) are computed once, for ``draws`` augmentations of every
training stack (draw 0 unaugmented; the others :class:`~monai_npc.transforms.RandStackAugment`'s flips, rotations,
shifts, intensity and artefact transforms and contrast inversion, as the whole-stack trainer draws them), and every
step only runs the head and the whole-stack loss (:class:`~monai_npc.losses.StackRegistrationLoss`: LNCC,
regulariser, fold and log-Jacobian terms on the 3-D field, ``label_weight`` times the soft 3-D Dice of RV / Myo /
LV; labels in the loss only). On the CPU a step of two stacks (both directions) takes about a second on one thread,
without the 2-D network's forward pass, which the whole-stack trainer repeats every step.

Validation runs the whole network (:func:`~monai_npc.engines.stack_training.validate_stacks`: the validation stacks,
both directions, labels carried by the 3-D field with nearest neighbour) every ``val_every`` steps; the best state is
written in the shipped weights format (``best.pt``, ``register(model=...)`` reads it) with ``train_log.jsonl``,
``train.log`` and ``curve.png``. The rate falls from ``learning_rate`` to 0 along a cosine over the wall-time budget.
"""

from __future__ import annotations

import math
import random
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Dict, List, Mapping, Optional

import torch

from monai_npc.data.stack_pack import load_stack_pack
from monai_npc.functional.through_plane_evidence import label_evidence, through_plane_evidence
from monai_npc.losses.stack import StackRegistrationLoss
from monai_npc.networks.nets import ThroughPlaneNPC, load_pretrained, save_pretrained
from monai_npc.networks.nets.npc import FLIP_ENSEMBLES
from monai_npc.transforms.stack_augment import RandStackAugment, StackAugmentConfig

from .stack_checkpoint import PROVENANCE
from .stack_data import DeviceStacks, StackBatch
from .stack_report import RunLog, curve_figure
from .stack_training import validate_stacks

__all__ = ["ThroughPlaneTrainingConfig", "CachedStacks", "cache_stacks", "train_through_plane"]


@dataclass
class ThroughPlaneTrainingConfig:
    """Settings of :func:`train_through_plane` (times in minutes).

    ``init``: the 2-D weights (a :func:`~monai_npc.networks.nets.load_pretrained` argument; their test-time
    refinement settings and meta are kept for ``register``), or a ``ThroughPlaneNPC`` state (e.g. an earlier run's
    ``best.pt``), whose head continues; ``draws``: cached augmentations per training stack
    (draw 0 unaugmented); ``stacks_per_step``: stacks per step (both directions of each); ``head``: the
    :class:`~monai_npc.networks.nets.ThroughPlaneNPC` head arguments (``head_width``, ``head_pool``,
    ``evidence_window``); ``max_steps``: an optional cap besides ``minutes``; ``num_steps`` / ``flip_ensemble``: the
    2-D part's learned ODE steps and in-plane flip ensemble while its fields are cached and the network validated, so
    that the head learns from the fields ``register`` gives it (``acdc``'s register settings: 6 and 2; ``None`` / 1:
    the weights' own steps, no ensemble). The written weights keep their own settings; ``register`` sets its own.
    ``label_weight`` / ``volume_weight``: the loss's soft 3-D Dice and relative volume terms
    (:class:`~monai_npc.losses.StackRegistrationLoss`). ``label_evidence``: train the label head of ``init``'s
    :meth:`~monai_npc.networks.nets.ThroughPlaneNPC.with_label_evidence` (``init`` a trained ``ThroughPlaneNPC``),
    every stack with its moving label; the images' head stays as it is, so the images-only field does too, and
    validation scores the field with the label.
    """

    pack: str
    out_dir: str
    init: str = "acdc"
    minutes: float = 30.0
    max_steps: Optional[int] = None
    draws: int = 4
    stacks_per_step: int = 2
    learning_rate: float = 1e-3
    label_weight: float = 3.0
    volume_weight: float = 0.0
    loss_preset: str = "acdc"
    grad_clip: float = 1.0
    val_every: int = 100
    seed: int = 0
    head: Dict[str, Any] = field(default_factory=dict)
    num_steps: Optional[int] = None
    flip_ensemble: int = 1
    augment: StackAugmentConfig = field(default_factory=StackAugmentConfig)
    label_evidence: bool = False

    def __post_init__(self) -> None:
        if not 0 < self.minutes <= 600:
            raise ValueError(f"minutes must be in (0, 600], got {self.minutes!r}.")
        for name in ("draws", "stacks_per_step", "val_every"):
            if not isinstance(getattr(self, name), int) or getattr(self, name) < 1:
                raise ValueError(f"{name} must be an integer >= 1, got {getattr(self, name)!r}.")
        if self.max_steps is not None and self.max_steps < 1:
            raise ValueError(f"max_steps must be >= 1 or None, got {self.max_steps!r}.")
        if not (self.learning_rate > 0 and self.label_weight >= 0 and self.volume_weight >= 0 and self.grad_clip > 0):
            raise ValueError(f"need learning_rate > 0, label_weight >= 0, volume_weight >= 0, grad_clip > 0; got "
                             f"{self.learning_rate}, {self.label_weight}, {self.volume_weight}, {self.grad_clip}.")
        if self.flip_ensemble not in FLIP_ENSEMBLES:
            raise ValueError(f"flip_ensemble must be one of {sorted(FLIP_ENSEMBLES)} (1 = off), got {self.flip_ensemble!r}.")
        if self.num_steps is not None and (not isinstance(self.num_steps, int) or self.num_steps < 1):
            raise ValueError(f"num_steps must be an integer >= 1 or None (the weights' own), got {self.num_steps!r}.")
        unknown = set(self.head) - {"head_width", "head_pool", "evidence_window"}
        if unknown:
            raise ValueError(f"head: unknown settings {sorted(unknown)}; known: head_width, head_pool, evidence_window.")
        if isinstance(self.augment, Mapping):
            self.augment = StackAugmentConfig.from_mapping(self.augment)


@dataclass
class CachedStacks:
    """One batch of stacks (both directions) with the frozen 2-D network's in-plane field ``(N, 2, H, W)`` and the
    head's evidence ``(N, C, H, W)``, stored in float16 (labels ``uint8``)."""

    batch: StackBatch
    in_plane: torch.Tensor
    evidence: torch.Tensor

    @staticmethod
    def of(batch: StackBatch, in_plane: torch.Tensor, window: int) -> "CachedStacks":
        evidence = through_plane_evidence(batch.moving, batch.fixed, in_plane, batch.group, batch.n_groups, window)
        half = StackBatch(batch.moving.half(), batch.fixed.half(), batch.moving_label.to(torch.uint8),
                          batch.fixed_label.to(torch.uint8), batch.group, batch.n_groups, batch.stacks)
        return CachedStacks(half, in_plane.half(), evidence.half())


def cache_stacks(net: ThroughPlaneNPC, data: DeviceStacks, draws: int, augment: Optional[RandStackAugment],
                 progress: bool = True) -> List[CachedStacks]:
    """Every stack of ``data``, ``draws`` times (draw 0 unaugmented, the others through ``augment``), as
    :class:`CachedStacks` of one stack each (``net.npc``'s in-plane field, no gradient)."""
    jobs = [(d, s) for d in range(draws) for s in range(len(data))]
    try:
        from tqdm.auto import tqdm

        jobs_iter = tqdm(jobs, desc="in-plane fields", disable=not progress)
    except ImportError:
        jobs_iter = jobs
    out = []
    with torch.no_grad():
        for d, s in jobs_iter:
            batch = data.batch([s], augment=augment if d > 0 else None)
            out.append(CachedStacks.of(batch, net.npc(batch.pair), net.evidence_window))
    return out


def _joined(units: List[CachedStacks]) -> Dict[str, Any]:
    """Several cached batches as one (groups renumbered), in float32."""
    group, n = [], 0
    for u in units:
        group.append(u.batch.group + n)
        n += u.batch.n_groups

    def cat(parts: List[torch.Tensor]) -> torch.Tensor:
        return torch.cat(parts).float()

    joined: Dict[str, Any] = {name: cat([getattr(u.batch, name) for u in units])
                              for name in ("moving", "fixed", "moving_label", "fixed_label")}
    return {**joined, "group": torch.cat(group), "n_groups": n, "in_plane": cat([u.in_plane for u in units]),
            "evidence": cat([u.evidence for u in units])}


def _progress(config: ThroughPlaneTrainingConfig, start: float, step: int) -> float:
    """How far the run is through its budget, 0 .. 1: elapsed wall time over ``minutes``, or steps over
    ``max_steps`` when that comes first."""
    by_time = (time.monotonic() - start) / (config.minutes * 60)
    return max(by_time, step / config.max_steps) if config.max_steps else by_time


def train_through_plane(config: ThroughPlaneTrainingConfig, echo: bool = True) -> Dict[str, Any]:
    """Train the head; returns ``{"best_val_dice", "initial_val_dice", "steps", "best_step", "best"}`` (``best``: the
    written weights' path, the initial network's when no validation improved on it)."""
    start = time.monotonic()
    torch.manual_seed(config.seed)
    rng = random.Random(config.seed)
    out = Path(config.out_dir)
    log = RunLog(out)
    pack = load_stack_pack(config.pack)
    cpu = torch.device("cpu")
    train_data, val_data = (DeviceStacks(pack, pack.indices(s), cpu) for s in ("train", "val"))
    npc = load_pretrained(config.init)
    if isinstance(npc, ThroughPlaneNPC):  # a trained state: its head continues, its 2-D part stays
        if config.head:
            raise ValueError(f"init={config.init!r} is a ThroughPlaneNPC; its head's settings cannot change (head={config.head}).")
        net = npc.with_label_evidence() if config.label_evidence and not npc.uses_label else npc
    elif config.label_evidence:
        raise ValueError(f"label_evidence trains a label head beside a trained images' head: init must be a ThroughPlaneNPC "
                         f"(e.g. acdc_through_plane), got {config.init!r}.")
    else:
        net = ThroughPlaneNPC.from_npc(npc, **config.head)
    net.npc.requires_grad_(False)
    net.npc.eval()  # the 2-D part's fields as register computes them (its flip ensemble acts in eval mode)
    net.set_flip_ensemble(config.flip_ensemble)
    if config.num_steps is not None:
        net.ode.set_steps(int(config.num_steps))
    augment = RandStackAugment(config.augment, torch.Generator().manual_seed(config.seed + 1))
    units = cache_stacks(net, train_data, config.draws, augment, progress=echo)
    log.message(f"cached {len(units)} stacks ({config.draws} draws of {len(train_data)}) in {time.monotonic() - start:.0f} s")
    loss = StackRegistrationLoss(config.loss_preset, label_weight=config.label_weight, volume_weight=config.volume_weight)
    trained = net.label_head if config.label_evidence else net.head
    net.head.requires_grad_(not config.label_evidence)
    optimizer = torch.optim.Adam(trained.parameters(), lr=config.learning_rate)

    def validate() -> Dict[str, float]:
        return validate_stacks(net, val_data, with_label=config.label_evidence)

    first = validate()
    initial = first["val_dice"]
    best, best_step = initial, 0
    best_path = out / "best.pt"
    # how register runs the 2-D weights (preprocessing, window, the bundle's settings), not where they came from
    meta = {k: v for k, v in dict(getattr(npc, "meta", {}) or {}).items() if k not in PROVENANCE}

    def save() -> None:
        save_pretrained(net, best_path, {**meta, "training": {
            "script": "monai_npc.engines.through_plane_training", "init": config.init, "step": step, "val_dice": best,
            "label_weight": config.label_weight, "volume_weight": config.volume_weight,
            "learning_rate": config.learning_rate, "draws": config.draws,
            "in_plane_settings": {"num_steps": config.num_steps, "flip_ensemble": config.flip_ensemble},
            "trained": "the label head only; the images' head and the 2-D network are init's" if config.label_evidence
            else "the through-plane head only; the 2-D network is init's"}})

    step, order, curve, sums = 0, [], [], {}
    save()
    log.message(f"step 0: validation mean 3-D Dice {initial:.4f}, EF error from the ED -> ES warp LV "
                f"{first.get('val_ef_error_lv', float('nan')):+.1f} / RV {first.get('val_ef_error_rv', float('nan')):+.1f} "
                f"points (the initial network: {config.init})")
    while time.monotonic() - start < config.minutes * 60 and (config.max_steps is None or step < config.max_steps):
        if not order:
            order = list(range(len(units)))
            rng.shuffle(order)
        b = _joined([units[order.pop()] for _ in range(min(config.stacks_per_step, len(order)))])
        trained.train()
        through = net.head(b["evidence"], b["group"], b["n_groups"])
        if config.label_evidence:  # the images' head as it is, plus the label head
            labels = label_evidence(b["moving_label"], b["in_plane"], b["group"], b["n_groups"])
            through = through + net.label_head(torch.cat([b["evidence"], labels], 1), b["group"], b["n_groups"])
        ddf = torch.cat([through, b["in_plane"]], 1)
        terms = loss(b["moving"], b["fixed"], b["moving_label"], b["fixed_label"], ddf, b["group"], b["n_groups"])
        # the rate follows a cosine from learning_rate to 0 over the wall-time budget (or max_steps)
        for g in optimizer.param_groups:
            g["lr"] = config.learning_rate * 0.5 * (1 + math.cos(math.pi * min(1.0, _progress(config, start, step))))
        optimizer.zero_grad(set_to_none=True)
        terms["loss"].backward()
        torch.nn.utils.clip_grad_norm_(trained.parameters(), config.grad_clip)
        optimizer.step()
        step += 1
        for k, v in terms.items():
            sums[k] = sums.get(k, 0.0) + float(v.detach())
        if step % config.val_every == 0:
            val = validate()
            record = {"epoch": step * config.stacks_per_step / len(units), "step": step, "lr": optimizer.param_groups[0]["lr"],
                      **{k: v / config.val_every for k, v in sums.items()}, **val,
                      "elapsed_min": (time.monotonic() - start) / 60}
            sums = {}
            curve.append(record)
            log.epoch(record, echo=echo)
            if val["val_dice"] > best:
                best, best_step = val["val_dice"], step
                save()
    curve_figure(curve, out / "curve.png", title=f"through-plane head on {config.init}: {step} steps")
    log.message(f"stopped after {step} steps, {(time.monotonic() - start) / 60:.1f} min; best validation {best:.4f} at "
                f"step {best_step} (initial {initial:.4f})")
    return {"best_val_dice": best, "initial_val_dice": initial, "steps": step, "best_step": best_step, "best": best_path}
