"""Train a registration network on whole ACDC stacks for a fixed wall time, on one CUDA GPU, several (``torchrun``) or the CPU.

:func:`train_stacks` reads a packed file (:mod:`monai_npc.data.stack_pack`) onto the device once
(:class:`~monai_npc.engines.stack_data.DeviceStacks`), builds each batch there (``stacks_per_batch`` training
stacks, both directions, :class:`~monai_npc.transforms.stack_augment.RandStackAugment` on the device), and
trains with AdamW on :class:`~monai_npc.losses.StackRegistrationLoss` (LNCC + diffusion regulariser + fold
penalty on the images, plus the soft 3-D RV / Myo / LV Dice per stack; labels in the loss only), with optional
bf16 autocast on CUDA. It stops cleanly before ``minutes`` of wall time and writes into ``out_dir``:

- ``checkpoint.pt``: model, optimiser, epoch, step, curve, random streams, settings (``torch.load(...,
  weights_only=True)``; a later run resumes from it with ``resume``);
- ``best.pt``: the best validation state in the shipped weights format
  (:func:`~monai_npc.networks.nets.save_pretrained`; :func:`export_weights` converts any checkpoint);
- ``train_log.jsonl`` / ``train.log``: per epoch the loss terms, the validation mean 3-D Dice (every
  ``val_every`` epochs), the epoch's seconds, the network's own seconds for the same steps (one step timed
  apart on a fixed batch, times the steps), their ratio, the GPU utilisation (``torch.cuda.utilization``) or
  ``n/a``, the learning rate;
- ``curve.png``: loss and validation Dice against the epoch.

Checkpoint I/O and :func:`export_weights`: :mod:`~monai_npc.engines.stack_checkpoint`. Under ``torchrun`` each rank
trains its share of every step with DistributedDataParallel and rank 0 validates and writes the files
(:mod:`~monai_npc.engines.stack_distributed`).

The network: by default (``architecture="npc2d"``) the ``train_crops.json`` / ``acdc`` NPCNet (:data:`DEFAULT_NETWORK`)
applied to every slice (the batch is the slices); ``architecture="slice_context"`` / ``"through_plane"`` the
:class:`~monai_npc.networks.nets.SliceContextNPC` / :class:`~monai_npc.networks.nets.ThroughPlaneNPC` of the same 2-D
configuration, from the ``init`` weights' 2-D parameters when given. ``network_factory`` is the extension point for other networks: a module with
``forward_stacks(pair (N, 2, H, W), group (N,), n_groups) -> ddf`` sees which slices form a stack (contiguous, in
order); a plain module is called as ``model(pair)``. A field of 2 channels ``(N, 2, H, W)`` is in-plane, slice by
slice; one of 3 ``(N, 3, H, W)`` is a 3-D field per stack (channel 0 through the plane in slices), which the loss
and the validation apply with a trilinear warp of each stack (:func:`~monai_npc.functional.warp_stack_slices`).
"""

from __future__ import annotations

import copy
import math
import time
from dataclasses import asdict, dataclass, field
from functools import partial
from pathlib import Path
from typing import Any, Callable, Dict, List, Mapping, Optional, Tuple

import torch
from torch import nn
from torch.nn.parallel import DistributedDataParallel

from monai_npc.data.stack_pack import load_stack_pack
from monai_npc.functional.stack_field import warp_stack_slices
from monai_npc.functional.warp import warp_image
from monai_npc.losses.label import one_hot_labels
from monai_npc.losses.stack import PER_STACK_TERMS, StackRegistrationLoss, group_overlap
from monai_npc.networks.nets import save_pretrained
from monai_npc.runtime import rank_device
from monai_npc.serialization import plain
from monai_npc.transforms.stack_augment import RandStackAugment, StackAugmentConfig
from monai_npc.utils import atomic_torch_save

from .stack_checkpoint import (CHECKPOINT_FORMAT, export_weights, generator_state, read_checkpoint, restore_generator,
                               training_meta)
from .stack_data import DeviceStacks, StackBatch
from .stack_distributed import EpochShares, RankGroup, stack_forward
from .stack_networks import DEFAULT_NETWORK, NETWORKS, SLICE_CONTEXT_TRAINING, TRAINABLE, build_network
from .stack_optim import group_rates, parameter_groups
from .stack_report import GpuUtilisation, RunLog, curve_figure

__all__ = ["DEFAULT_NETWORK", "SLICE_CONTEXT_TRAINING", "NETWORKS", "StackTrainingConfig", "build_network", "predict", "warp_batch", "train_step", "validate_stacks",
           "measure_step_seconds", "train_stacks", "export_weights"]

NetworkFactory = Callable[["StackTrainingConfig"], nn.Module]


@dataclass
class StackTrainingConfig:
    """Settings of :func:`train_stacks` (times in minutes, rates per step, decay per epoch).

    ``architecture``: one of :data:`NETWORKS`; ``network``: NPCNet arguments over :data:`DEFAULT_NETWORK` (or over
    the ``init`` weights' configuration; with ``"slice_context"`` also ``context_channels``, with ``"through_plane"``
    ``head_width``, ``head_pool``, ``evidence_window``);
    ``init``: weights to start from (2-D weights start a slice-context network's shared part) (a :func:`~monai_npc.networks.nets.load_pretrained` argument), ``None``: from
    scratch. ``resume``: a ``checkpoint.pt`` to continue (its network configuration wins). ``label_weight``: the
    3-D Dice term's weight; ``volume_weight``: the warped structures' relative volume error's
    (:func:`~monai_npc.losses.stack.volume_error`; 0: none). ``minutes``: the run's wall-time budget, set-up
    included; ``max_epochs``: an optional cap. ``timing_steps``: steps timed apart for the network's own step time. ``trainable``: one of :data:`TRAINABLE`:
    ``"all"`` parameters, or ``"context"``: only a slice-context network's heads, its shared 2-D part frozen (what
    the through-plane context adds to given 2-D weights, apart from any change of their in-plane field). ``grad_clip``:
    the largest total gradient norm per step (``None``: not clipped; the log's ``grad_norm`` is the epoch's mean; 1
    kept the fine-tuning of ``acdc`` stable where it diverged without, docs/training_gpu.md). ``context_lr_scale``:
    a slice-context network's heads learn at this multiple of the rate (:func:`~.stack_optim.parameter_groups`).
    """

    pack: str
    out_dir: str
    minutes: float = 7.5
    max_epochs: Optional[int] = None
    stacks_per_batch: int = 4
    learning_rate: float = 1e-3
    lr_decay: float = 0.995
    weight_decay: float = 1e-4
    label_weight: float = 1.0
    volume_weight: float = 0.0
    loss_preset: str = "acdc"
    val_every: int = 5
    val_stacks_per_batch: int = 6
    save_every: int = 10
    bf16: bool = False
    tf32: bool = True
    device: str = "auto"
    seed: int = 0
    init: Optional[str] = None
    resume: Optional[str] = None
    network: Dict[str, Any] = field(default_factory=dict)
    architecture: str = "npc2d"
    augment: StackAugmentConfig = field(default_factory=StackAugmentConfig)
    timing_steps: int = 5
    trainable: str = "all"
    context_lr_scale: float = 1.0
    grad_clip: Optional[float] = 1.0

    def __post_init__(self) -> None:
        if not (isinstance(self.minutes, (int, float)) and 0 < self.minutes <= 600):
            raise ValueError(f"minutes must be in (0, 600], got {self.minutes!r}.")
        positive = dict(stacks_per_batch=self.stacks_per_batch, val_every=self.val_every, save_every=self.save_every,
                        val_stacks_per_batch=self.val_stacks_per_batch, timing_steps=self.timing_steps)
        for name, value in positive.items():
            if not isinstance(value, int) or value < 1:
                raise ValueError(f"{name} must be an integer >= 1, got {value!r}.")
        if self.trainable not in TRAINABLE or (self.trainable == "context" and self.architecture == "npc2d"):
            raise ValueError(f"trainable must be one of {TRAINABLE} ('context' with a stack architecture), got "
                             f"{self.trainable!r} with architecture={self.architecture!r}.")
        if not self.context_lr_scale > 0:
            raise ValueError(f"context_lr_scale must be > 0, got {self.context_lr_scale!r}.")
        if self.grad_clip is not None and not self.grad_clip > 0:
            raise ValueError(f"grad_clip must be > 0 or None, got {self.grad_clip!r}.")
        if self.max_epochs is not None and self.max_epochs < 1:
            raise ValueError(f"max_epochs must be >= 1 or None, got {self.max_epochs!r}.")
        if not (self.learning_rate > 0 and 0 < self.lr_decay <= 1 and self.weight_decay >= 0 and self.label_weight >= 0
                and self.volume_weight >= 0):
            raise ValueError(f"need learning_rate > 0, 0 < lr_decay <= 1, weight_decay >= 0, label_weight >= 0, volume_weight "
                             f">= 0; got {self.learning_rate}, {self.lr_decay}, {self.weight_decay}, {self.label_weight}, "
                             f"{self.volume_weight}.")
        if self.architecture not in NETWORKS:
            raise ValueError(f"architecture must be one of {', '.join(NETWORKS)}, got {self.architecture!r}.")
        if isinstance(self.augment, Mapping):
            self.augment = StackAugmentConfig.from_mapping(self.augment)


def resolve_device(name: str) -> torch.device:
    """``"auto"``: ``cuda:LOCAL_RANK`` when CUDA is available (``cuda:0`` without ``torchrun``), else the CPU;
    ``"cuda"``: ``cuda:LOCAL_RANK``; otherwise ``torch.device(name)`` (checked,
    :func:`~monai_npc.runtime.rank_device`)."""
    device = torch.device(rank_device(None if name == "auto" else name))
    if device.type == "cuda" and device.index is None:  # one spelling, so tensors and random streams compare equal
        device = torch.device("cuda", torch.cuda.current_device())
    return device


def predict(model: nn.Module, batch: StackBatch, with_label: bool = False) -> torch.Tensor:
    """``ddf`` ``(N, 2, H, W)`` (in-plane) or ``(N, 3, H, W)`` (a 3-D field per stack, channel 0 in slices), voxels,
    of the batch's registrations: ``model.forward_stacks(pair, group, n_groups)`` when the model has it (a
    slice-context network), else ``model(pair)`` slice by slice; a
    :class:`~torch.nn.parallel.DistributedDataParallel` of :class:`~monai_npc.engines.stack_distributed.StackForward`
    as ``model(pair, group, n_groups)``. ``with_label``: a network that reads the moving label
    (``model.uses_label``) gets the batch's."""
    if with_label and getattr(model, "uses_label", False):
        ddf = model.forward_stacks(batch.pair, batch.group, batch.n_groups, moving_label=batch.moving_label)
    else:
        forward = model if isinstance(model, DistributedDataParallel) else partial(stack_forward, model)
        ddf = forward(batch.pair, batch.group, batch.n_groups)
    n, size = batch.moving.shape[0], tuple(batch.moving.shape[2:])
    if ddf.shape not in ((n, 2) + size, (n, 3) + size):
        raise ValueError(f"the network returned a field of shape {tuple(ddf.shape)}; the whole-stack loop warps in-plane "
                         f"fields (N, 2, H, W) = {(n, 2, *size)} or 3-D fields per stack (N, 3, H, W) = {(n, 3, *size)} "
                         "(channel 0 through the plane, in slices).")
    return ddf


def warp_batch(image: torch.Tensor, ddf: torch.Tensor, batch: StackBatch, mode: str = "bilinear",
               through_padding: str = "border") -> torch.Tensor:
    """``image`` ``(N, C, H, W)`` of ``batch`` warped by ``ddf``: in-plane slice by slice (2 channels, border padding)
    or through each stack in 3-D (3 channels, :func:`~monai_npc.functional.warp_stack_slices`; ``through_padding``
    ``"zeros"`` for labels)."""
    if ddf.shape[1] == 3:
        return warp_stack_slices(image, ddf, batch.group, batch.n_groups, mode, through_padding)
    return warp_image(image, ddf, mode, "border")


def _autocast(device: torch.device, amp_dtype: Optional[torch.dtype]):
    return torch.autocast(device_type=device.type, dtype=amp_dtype or torch.float32, enabled=amp_dtype is not None)


def train_step(model: nn.Module, optimizer: torch.optim.Optimizer, loss: StackRegistrationLoss, batch: StackBatch,
               amp_dtype: Optional[torch.dtype] = None, scale: Optional[Tuple[float, float]] = None,
               grad_clip: Optional[float] = None) -> Dict[str, torch.Tensor]:
    """One optimiser step on ``batch``: the network under autocast when ``amp_dtype`` is given (e.g. ``torch.bfloat16``),
    the loss in float32. ``scale``: ``(image, label)`` factors of the image terms and the Dice term (a rank's share
    of a step, :class:`~monai_npc.engines.stack_distributed.EpochShares`); ``grad_clip``: the gradient's largest
    total norm (``None``: not clipped). Returns the detached (scaled) loss terms and ``grad_norm``, the gradient's
    total norm before clipping (device scalars: no host synchronisation)."""
    with _autocast(batch.moving.device, amp_dtype):
        ddf = predict(model, batch)
    terms = loss(batch.moving, batch.fixed, batch.moving_label, batch.fixed_label, ddf.float(), batch.group, batch.n_groups)
    if scale is not None:
        terms = {k: v * (scale[1] if k in PER_STACK_TERMS else scale[0]) for k, v in terms.items() if k != "loss"}
        terms["loss"] = sum(v for k, v in terms.items())
    optimizer.zero_grad(set_to_none=True)
    terms["loss"].backward()
    grads = [p for p in model.parameters() if p.grad is not None]
    norm = torch.nn.utils.clip_grad_norm_(grads, grad_clip if grad_clip else math.inf)  # inf: measured, not clipped
    optimizer.step()
    return {**{k: v.detach() for k, v in terms.items()}, "grad_norm": norm.detach()}


@torch.no_grad()
def validate_stacks(model: nn.Module, data: DeviceStacks, labels: Tuple[int, ...] = (1, 2, 3), stacks_per_batch: int = 6,
                    amp_dtype: Optional[torch.dtype] = None, with_label: bool = False) -> Dict[str, float]:
    """Mean 3-D Dice (the structures of ``labels`` present in either stack, averaged) of the moving labels warped
    by the network's field (nearest neighbour; background beyond a stack's ends, as ``register``'s written transform
    carries them), both directions of every stack of ``data``, no augmentation.

    Returns ``val_dice`` (all registrations), ``val_dice_ed_es``, ``val_dice_es_ed``, ``val_dice_initial``
    (no registration), and the ejection fractions read from the ED -> ES registrations (the ED label and its warp
    onto ES, in voxels), their error against the expert's ES label in points: ``val_ef_error_{name}`` (mean) and
    ``val_ef_mae_{name}`` for LV (value 3) and RV (value 1) when ``labels`` hold them. ``with_label``: a network that
    reads the moving label gets it (:func:`predict`)."""
    was_training = model.training
    model.eval()
    dice: List[torch.Tensor] = []
    initial: List[torch.Tensor] = []
    volumes: List[torch.Tensor] = []  # (3, direction, stack, K): moving, warped, fixed
    for stacks in data.batches(range(len(data)), stacks_per_batch):
        batch = data.batch(stacks)
        with _autocast(batch.moving.device, amp_dtype):
            ddf = predict(model, batch, with_label).float()
        fixed = one_hot_labels(batch.fixed_label, labels)
        sums = []  # per stack and structure: the warped label's voxels, then the moving label's; the fixed label's
        for moving_label, out in ((warp_batch(batch.moving_label, ddf, batch, "nearest", "zeros"), dice), (batch.moving_label, initial)):
            inter, pred, target = group_overlap(one_hot_labels(moving_label, labels), fixed, batch.group, batch.n_groups)
            per = torch.where(pred + target > 0, 2 * inter / (pred + target).clamp(min=1), torch.nan)
            out.append(per.nanmean(1).view(2, -1))  # (direction, stack)
            sums.append(pred)
        warped, moving = sums
        volumes.append(torch.stack([moving, warped, target]).view(3, 2, -1, len(labels)))
    model.train(was_training)
    d, d0 = torch.cat(dice, 1).cpu(), torch.cat(initial, 1).cpu()
    out = {"val_dice": float(d.nanmean()), "val_dice_ed_es": float(d[0].nanmean()), "val_dice_es_ed": float(d[1].nanmean()),
           "val_dice_initial": float(d0.nanmean())}
    ed, es_warped, es = torch.cat(volumes, 2)[:, 0].cpu().double()  # ED -> ES: moving ED, its warp, the ES label
    for name, value in (("lv", 3), ("rv", 1)):
        if value in labels:
            k = labels.index(value)
            error = 100.0 * (es[:, k] - es_warped[:, k]) / ed[:, k].clamp(min=1.0)  # EF from the warp minus the expert's
            out[f"val_ef_error_{name}"], out[f"val_ef_mae_{name}"] = float(error.mean()), float(error.abs().mean())
    return out


def _synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def measure_step_seconds(model: nn.Module, loss: StackRegistrationLoss, batch: StackBatch, steps: int,
                         amp_dtype: Optional[torch.dtype] = None) -> float:
    """The network's own training step time (s) on a fixed, already built ``batch``: forward, loss, backward and an
    AdamW step of a copy of ``model`` (the model itself is untouched), mean of ``steps`` after one warm-up step."""
    twin = copy.deepcopy(model).train()
    opt = torch.optim.AdamW(twin.parameters(), lr=1e-6)
    device = batch.moving.device
    train_step(twin, opt, loss, batch, amp_dtype)
    _synchronize(device)
    start = time.perf_counter()
    for _ in range(steps):
        train_step(twin, opt, loss, batch, amp_dtype)
    _synchronize(device)
    seconds = (time.perf_counter() - start) / steps
    del twin, opt
    return seconds


class _Run:
    """The state of one :func:`train_stacks` call (set-up, resume, epochs, files) on this rank."""

    def __init__(self, config: StackTrainingConfig, network_factory: Optional[NetworkFactory], echo: bool) -> None:
        self.start = time.perf_counter()
        self.config, self.ranks = config, RankGroup()
        self.echo = echo and self.ranks.main
        self.device = resolve_device(config.device)
        if config.bf16 and self.device.type != "cuda":
            raise ValueError(f"bf16=True needs a CUDA device (this run is on {self.device}); drop --bf16 on the CPU.")
        self.amp_dtype = torch.bfloat16 if config.bf16 else None
        if self.device.type == "cuda" and config.tf32:
            torch.backends.cuda.matmul.allow_tf32 = True
            torch.backends.cudnn.allow_tf32 = True
        self.out = Path(config.out_dir)
        self.ckpt_path = self.out / "checkpoint.pt"
        state = self._resume_state()
        self.log = RunLog(self.out, active=self.ranks.main)
        pack = load_stack_pack(config.pack)
        self.train_data = DeviceStacks(pack, pack.indices("train"), self.device)
        self.val_data = DeviceStacks(pack, pack.indices("val"), self.device) if pack.indices("val") else None
        torch.manual_seed(config.seed)  # the initial weights (a resumed run loads its own)
        factory = network_factory or (lambda cfg: build_network(cfg, state.get("network_config") if state else None))
        self.model = factory(config).to(self.device).train()
        self.optimizer = torch.optim.AdamW(parameter_groups(self.model, config.trainable, config.context_lr_scale),
                                           lr=config.learning_rate, weight_decay=config.weight_decay)
        self.loss = StackRegistrationLoss(config.loss_preset, config.label_weight, volume_weight=config.volume_weight)
        self.order_gen = torch.Generator().manual_seed(config.seed)
        self.augment = RandStackAugment(config.augment, torch.Generator(device=self.device).manual_seed(config.seed + 1))
        self.epoch, self.step, self.curve, self.best = 0, 0, [], -math.inf
        if state:
            self._load(state)
        self.runner = self.ranks.wrap(self.model, self.device)  # what trains: the model, or its DDP
        self.gpu = GpuUtilisation(self.device)

    def _resume_state(self) -> Dict[str, Any]:
        if self.config.resume is None:
            if self.ckpt_path.is_file():
                raise FileExistsError(f"out_dir {self.out} already holds checkpoint.pt: pass resume={str(self.ckpt_path)!r} "
                                      "to continue it, or another out_dir.")
            return {}
        return read_checkpoint(self.config.resume)

    def _load(self, state: Mapping[str, Any]) -> None:
        self.model.load_state_dict(state["model"])
        self.optimizer.load_state_dict(state["optimizer"])
        self.epoch, self.step = int(state["epoch"]), int(state["step"])
        self.curve, self.best = list(state["curve"]), float(state["best_dice"])
        say = lambda line: self.log.message(line, self.echo)  # noqa: E731
        restore_generator(self.order_gen, state["generators"]["order"], self.config.seed + self.epoch, say)
        restore_generator(self.augment.generator, state["generators"]["augment"], self.config.seed + 1 + self.epoch, say)
        say(f"resumed from {self.config.resume}: epoch {self.epoch}, step {self.step}, best val Dice {self.best:.4f}")

    def elapsed(self) -> float:
        return time.perf_counter() - self.start

    def network_config(self) -> Optional[Dict[str, Any]]:
        return plain(dict(self.model.config)) if isinstance(getattr(self.model, "config", None), Mapping) else None

    def save_checkpoint(self) -> None:
        """``checkpoint.pt`` (rank 0; every rank holds the same state)."""
        if not self.ranks.main:
            return
        state = {"format": CHECKPOINT_FORMAT, "model": self.model.state_dict(), "optimizer": self.optimizer.state_dict(),
                 "epoch": self.epoch, "step": self.step, "curve": plain(self.curve), "best_dice": self.best,
                 "network_config": self.network_config(), "network_class": type(self.model).__name__,
                 "train_config": plain(asdict(self.config)),
                 "generators": {"order": generator_state(self.order_gen), "augment": generator_state(self.augment.generator)}}
        atomic_torch_save(state, self.ckpt_path)

    def save_best(self, dice: float) -> None:
        cfg = self.config
        meta = training_meta(cfg.pack, self.epoch, dice, self.train_data.num_slices, int(self.train_data.images.shape[-1]),
                             cfg.label_weight, cfg.learning_rate, cfg.bf16)
        if self.network_config() is not None:
            save_pretrained(self.model, self.out / "best.pt", meta)
        else:  # a custom network without a config: its state and the meta
            atomic_torch_save({"model": self.model.state_dict(), "meta": plain(meta)}, self.out / "best.pt")


def _epoch_terms(run: _Run, sums: Dict[str, torch.Tensor], steps: int) -> Dict[str, float]:
    """The epoch's mean loss terms (of the whole steps: the ranks' scaled terms averaged)."""
    if not sums:
        return {}
    keys = list(sums)
    values = (run.ranks.mean(torch.stack([sums[k] for k in keys])) / steps).tolist()  # one host synchronisation per epoch
    return {k: round(float(v), 6) for k, v in zip(keys, values)}


def _run_epoch(run: _Run, budget: float) -> Tuple[Dict[str, float], int, bool]:
    """One pass over the training stacks in a random order (steps of ``stacks_per_batch`` stacks per rank). Returns
    the mean loss terms, the steps taken and whether the wall-time budget ran out before the pass ended."""
    cfg = run.config
    lr = cfg.learning_rate * cfg.lr_decay ** run.epoch  # epoch 0-based: resumable without a scheduler state
    group_rates(run.optimizer, lr)
    order = torch.randperm(len(run.train_data), generator=run.order_gen).tolist()
    on_device = run.train_data.positions(order)  # one upload per epoch
    steps_stacks = run.train_data.batches(order, cfg.stacks_per_batch * run.ranks.world_size)
    shares: Optional[EpochShares] = run.ranks.shares(steps_stacks, run.train_data.counts, run.device)
    sums: Dict[str, torch.Tensor] = {}
    steps, done = 0, 0
    for stacks in steps_stacks:
        if run.ranks.agree(run.elapsed() > budget):
            return _epoch_terms(run, sums, max(steps, 1)), steps, True
        batch = run.train_data.batch(stacks, run.augment, on_device[done : done + len(stacks)])
        batch, scale = shares.take(steps, batch) if shares is not None else (batch, None)
        done += len(stacks)
        terms = train_step(run.runner, run.optimizer, run.loss, batch, run.amp_dtype, scale, cfg.grad_clip)
        for k, v in terms.items():
            sums[k] = sums[k] + v if k in sums else v.clone()
        steps += 1
        run.step += 1
        run.gpu.sample()
    return {**_epoch_terms(run, sums, steps), "lr": lr}, steps, False


def _time_network(run: _Run) -> float:
    """Seconds of one training step of the network alone, on a batch of median-sized training stacks."""
    by_size = sorted(range(len(run.train_data)), key=lambda i: -run.train_data.counts[i])
    typical = by_size[len(by_size) // 2 :][: run.config.stacks_per_batch]  # median-sized stacks
    batch = run.train_data.batch(typical)  # no augmentation: the random streams stay those of the epochs (resume)
    seconds = measure_step_seconds(run.model, run.loss, batch, run.config.timing_steps, run.amp_dtype)
    run.log.message(f"network step: {seconds * 1e3:.1f} ms for {batch.moving.shape[0]} slice pairs "
                    f"({len(typical)} stacks, both directions) on {run.device}" + (" with bf16" if run.amp_dtype else ""), run.echo)
    return seconds


def _epoch_record(run: _Run, terms: Dict[str, float], steps: int, seconds: float, step_seconds: float) -> Dict[str, Any]:
    network = step_seconds * steps
    return {"epoch": run.epoch, "step": run.step, **terms, "seconds": round(seconds, 3), "network_seconds": round(network, 3),
            "epoch_over_network": round(seconds / network, 3) if network > 0 else None, "gpu_util": run.gpu.mean(),
            "elapsed_min": round(run.elapsed() / 60.0, 3)}


def _validate(run: _Run, record: Dict[str, Any]) -> float:
    """Rank 0: the validation Dice into ``record`` and ``best.pt`` when it is the best so far. Returns its seconds."""
    t1 = time.perf_counter()
    cfg = run.config
    record.update(validate_stacks(run.model, run.val_data, stacks_per_batch=cfg.val_stacks_per_batch, amp_dtype=run.amp_dtype))
    seconds = time.perf_counter() - t1
    record["val_seconds"] = round(seconds, 3)
    if record["val_dice"] > run.best:
        run.best = record["val_dice"]
        run.save_best(run.best)
    return seconds


def train_stacks(config: StackTrainingConfig, network_factory: Optional[NetworkFactory] = None, echo: bool = True) -> Dict[str, Any]:
    """Train for at most ``config.minutes`` of wall time (or ``max_epochs``), then save; see the module docstring.
    Under ``torchrun`` (an initialised process group) every rank calls it: DistributedDataParallel, each rank
    ``stacks_per_batch`` stacks of every step (:mod:`~monai_npc.engines.stack_distributed`); rank 0 validates and
    writes the files.

    Returns a summary: ``epoch`` (last completed), ``step``, ``best_val_dice``, ``stopped`` (``"budget"`` or
    ``"max_epochs"``), ``step_seconds`` and the written ``files`` (none on ranks other than 0).
    Raises ``ValueError`` for bf16 without CUDA, ``FileExistsError`` when ``out_dir`` holds a checkpoint that
    ``resume`` does not name, and the pack's / checkpoint's read errors.
    """
    run = _Run(config, network_factory, echo)
    echo = run.echo
    budget = config.minutes * 60.0
    reserve = min(10.0, 0.05 * budget)  # the last save and the figure
    run.log.message(f"training on {run.device}" + (f" and {run.ranks.world_size - 1} more processes" if run.ranks.active else "")
                    + f": {len(run.train_data)} training stacks ({run.train_data.num_slices} slices), "
                    f"{len(run.val_data) if run.val_data else 0} validation stacks; budget {config.minutes} min", echo)
    step_seconds = _time_network(run)
    steps_per_epoch = math.ceil(len(run.train_data) / (config.stacks_per_batch * run.ranks.world_size))
    epoch_estimate, val_seconds, stopped = 1.5 * step_seconds * steps_per_epoch, 0.0, "budget"
    if run.epoch == 0 and config.init and run.val_data is not None and run.ranks.main:
        # the starting weights' own validation: the curve's first point, and best.pt until training beats it
        record: Dict[str, Any] = {"epoch": 0, "step": 0, "elapsed_min": round(run.elapsed() / 60.0, 3)}
        val_seconds = _validate(run, record)
        run.curve.append(record)
        run.log.epoch(record, echo)
    while True:
        if config.max_epochs is not None and run.epoch >= config.max_epochs:
            stopped = "max_epochs"
            break
        validating = run.val_data is not None and (run.epoch + 1) % config.val_every == 0
        if run.ranks.agree(run.elapsed() + epoch_estimate + (val_seconds if validating else 0.0) > budget - reserve):
            break
        t0 = time.perf_counter()
        terms, steps, cut = _run_epoch(run, budget - reserve)
        if cut:
            run.log.message(f"budget reached after {steps} steps of epoch {run.epoch + 1}: that partial epoch is not recorded", echo)
            break
        _synchronize(run.device)
        run.epoch += 1
        seconds = time.perf_counter() - t0
        epoch_estimate = seconds
        record = _epoch_record(run, terms, steps, seconds, step_seconds)
        if validating and run.ranks.main:
            val_seconds = _validate(run, record)
        run.curve.append(record)
        run.log.epoch(record, echo)
        if run.epoch % config.save_every == 0:
            run.save_checkpoint()
    run.save_checkpoint()
    files: List[Path] = []
    if run.ranks.main:
        files = [run.ckpt_path, run.log.jsonl, run.log.text]
        figure = curve_figure(run.curve, run.out / "curve.png", f"{Path(config.pack).name}, {run.device}, epoch {run.epoch}")
        files += [p for p in (figure, run.out / "best.pt") if p is not None and p.is_file()]
    run.log.message(f"stopped ({stopped}) after epoch {run.epoch}, step {run.step}, {run.elapsed() / 60:.2f} min; "
                    f"best val Dice {run.best:.4f}; files: {', '.join(p.name for p in files)}", echo)
    return {"epoch": run.epoch, "step": run.step, "best_val_dice": run.best if math.isfinite(run.best) else None,
            "stopped": stopped, "step_seconds": step_seconds, "files": [str(p) for p in files]}
