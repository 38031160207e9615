"""Train a registration network on whole ACDC stacks for a fixed wall time, on one CUDA GPU or the CPU.

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

The network: by default (``architecture="npc2d"``) the ``train.json`` / ``acdc`` NPCNet (:data:`DEFAULT_NETWORK`)
applied to every slice (the batch is the slices); ``architecture="slice_context"`` the
:class:`~monai_npc.networks.nets.SliceContextNPC` of the same 2-D configuration, from the ``init``
weights' 2-D parameters when given. ``network_factory`` is the extension point for other networks: a module with
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
from pathlib import Path
from typing import Any, Callable, Dict, List, Mapping, Optional, Tuple

import torch
from torch import nn

from monai_npc.data.stack_pack import load_stack_pack
from monai_npc.functional.stack_field import warp_stack_slices
from monai_npc.functional.warp import warp_image
from monai_npc.losses.label import one_hot_labels
from monai_npc.losses.stack import StackRegistrationLoss, group_overlap
from monai_npc.networks.nets import NPCNet, SliceContextNPC, load_pretrained, save_pretrained
from monai_npc.networks.nets.pretrained import ARCHITECTURES
from monai_npc.serialization import plain, safe_load
from monai_npc.transforms.stack_augment import RandStackAugment, StackAugmentConfig
from monai_npc.utils import atomic_torch_save

from .stack_data import DeviceStacks, StackBatch
from .stack_report import GpuUtilisation, RunLog, curve_figure

__all__ = ["DEFAULT_NETWORK", "NETWORKS", "StackTrainingConfig", "build_network", "predict", "warp_batch", "train_step", "validate_stacks",
           "measure_step_seconds", "train_stacks", "export_weights"]

CHECKPOINT_FORMAT = 1
#: the ``train.json`` network (and the ``acdc`` weights' architecture), without test-time refinement
DEFAULT_NETWORK: Dict[str, Any] = dict(kernel_size=16, stride=4, num_pairs=128, top_k=64, gate_dim=128, hidden_dim=128,
                                       num_pe=256, num_steps=10, head="unet", head_channels=16,
                                       stages=[{"kernel_size": 32, "stride": 8}, {"kernel_size": 16, "stride": 4}],
                                       refine_iterations=0)
NetworkFactory = Callable[["StackTrainingConfig"], nn.Module]
#: ``StackTrainingConfig.architecture`` values: the 2-D NPC slice by slice, or the slice-context NPC (3-D field)
NETWORKS = ("npc2d", "slice_context")
#: meta entries about where other weights came from, not carried over by ``export_weights(meta_from=...)``
_PROVENANCE = ("bundle", "bundle_name", "version", "changelog", "heldout_test", "trained_on", "training", "weights_sha256")


@dataclass
class StackTrainingConfig:
    """Settings of :func:`train_stacks` (times in minutes, rates per step, decay per epoch).

    ``architecture``: one of :data:`NETWORKS`; ``network``: NPCNet arguments over :data:`DEFAULT_NETWORK` (or over
    the ``init`` weights' configuration; with ``"slice_context"`` also ``context_channels``);
    ``init``: weights to start from (2-D weights start a slice-context network's shared part) (a :func:`~monai_npc.networks.nets.load_pretrained` argument), ``None``: from
    scratch. ``resume``: a ``checkpoint.pt`` to continue (its network configuration wins). ``label_weight``: the
    3-D Dice term's weight. ``minutes``: the run's wall-time budget, set-up included; ``max_epochs``: an optional
    cap. ``timing_steps``: steps timed apart for the network's own step time.
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

    def __post_init__(self) -> None:
        if not (isinstance(self.minutes, (int, float)) and 0 < self.minutes <= 600):
            raise ValueError(f"minutes must be in (0, 600], got {self.minutes!r}.")
        positive = dict(stacks_per_batch=self.stacks_per_batch, val_every=self.val_every, save_every=self.save_every,
                        val_stacks_per_batch=self.val_stacks_per_batch, timing_steps=self.timing_steps)
        for name, value in positive.items():
            if not isinstance(value, int) or value < 1:
                raise ValueError(f"{name} must be an integer >= 1, got {value!r}.")
        if self.max_epochs is not None and self.max_epochs < 1:
            raise ValueError(f"max_epochs must be >= 1 or None, got {self.max_epochs!r}.")
        if not (self.learning_rate > 0 and 0 < self.lr_decay <= 1 and self.weight_decay >= 0 and self.label_weight >= 0):
            raise ValueError(f"need learning_rate > 0, 0 < lr_decay <= 1, weight_decay >= 0, label_weight >= 0; got "
                             f"{self.learning_rate}, {self.lr_decay}, {self.weight_decay}, {self.label_weight}.")
        if self.architecture not in NETWORKS:
            raise ValueError(f"architecture must be one of {', '.join(NETWORKS)}, got {self.architecture!r}.")
        if isinstance(self.augment, Mapping):
            self.augment = StackAugmentConfig(**self.augment)


def resolve_device(name: str) -> torch.device:
    """``"auto"``: ``cuda:0`` when available, else the CPU; otherwise ``torch.device(name)`` (checked)."""
    if name == "auto":
        return torch.device("cuda:0" if torch.cuda.is_available() else "cpu")
    device = torch.device(name)
    if device.type == "cuda" and not torch.cuda.is_available():
        raise ValueError(f"device={name!r} but CUDA is not available here; use device='cpu' or 'auto'.")
    if device.type == "cuda" and device.index is None:  # one spelling, so tensors and random streams compare equal
        device = torch.device("cuda", torch.cuda.current_device())
    return device


def _from_config(network_config: Mapping[str, Any]) -> nn.Module:
    """A fresh network of a saved configuration: the class its ``architecture`` entry names (absent: NPCNet)."""
    config = dict(network_config)
    architecture = config.get("architecture", "npc2d")
    if architecture not in ARCHITECTURES:
        raise ValueError(f"unknown network architecture {architecture!r}; known: {sorted(ARCHITECTURES)}.")
    if architecture == "npc2d":
        config.pop("architecture", None)
    return ARCHITECTURES[architecture](**config)


def build_network(config: StackTrainingConfig, network_config: Optional[Mapping[str, Any]] = None) -> nn.Module:
    """The network to train: ``network_config`` (a checkpoint's) as it is, else ``init``'s weights or
    :data:`DEFAULT_NETWORK`, with ``config.network`` over it and no test-time refinement; with
    ``architecture="slice_context"`` that 2-D network becomes the shared part of a
    :class:`~monai_npc.networks.nets.SliceContextNPC` (``init`` may also be slice-context weights)."""
    if network_config is not None:
        return _from_config(network_config)
    overrides = {**dict(config.network), "refine_iterations": 0}
    context = {"context_channels": overrides.pop("context_channels")} if "context_channels" in overrides else {}
    if context and config.architecture != "slice_context":
        raise ValueError("network option context_channels is for architecture='slice_context' only.")
    net = load_pretrained(config.init, **overrides) if config.init else NPCNet(**{**DEFAULT_NETWORK, **overrides})
    if config.architecture == "npc2d":
        if not isinstance(net, NPCNet):
            raise ValueError(f"init={config.init!r} holds a {type(net).__name__}; train it with architecture='slice_context'.")
        return net
    if isinstance(net, SliceContextNPC):
        if context and context["context_channels"] != net.config["context_channels"]:
            raise ValueError(f"init={config.init!r} has context_channels={net.config['context_channels']}; it cannot change.")
        return net
    return SliceContextNPC.from_npc(net, **context)


def predict(model: nn.Module, batch: StackBatch) -> torch.Tensor:
    """``ddf`` ``(N, 2, H, W)`` (in-plane) or ``(N, 3, H, W)`` (a 3-D field per stack, channel 0 in slices), voxels,
    of the batch's registrations: ``model.forward_stacks(pair, group, n_groups)`` when the model has it (a
    slice-context network), else ``model(pair)`` slice by slice."""
    if hasattr(model, "forward_stacks"):
        ddf = model.forward_stacks(batch.pair, batch.group, batch.n_groups)
    else:
        ddf = model(batch.pair)
    n, size = batch.moving.shape[0], tuple(batch.moving.shape[2:])
    if ddf.shape not in ((n, 2) + size, (n, 3) + size):
        raise ValueError(f"the network returned a field of shape {tuple(ddf.shape)}; the whole-stack loop warps in-plane "
                         f"fields (N, 2, H, W) = {(n, 2, *size)} or 3-D fields per stack (N, 3, H, W) = {(n, 3, *size)} "
                         "(channel 0 through the plane, in slices).")
    return ddf


def warp_batch(image: torch.Tensor, ddf: torch.Tensor, batch: StackBatch, mode: str = "bilinear") -> torch.Tensor:
    """``image`` ``(N, C, H, W)`` of ``batch`` warped by ``ddf``: in-plane slice by slice (2 channels, border padding)
    or through each stack in 3-D (3 channels, :func:`~monai_npc.functional.warp_stack_slices`)."""
    if ddf.shape[1] == 3:
        return warp_stack_slices(image, ddf, batch.group, batch.n_groups, mode)
    return warp_image(image, ddf, mode, "border")


def _autocast(device: torch.device, amp_dtype: Optional[torch.dtype]):
    return torch.autocast(device_type=device.type, dtype=amp_dtype or torch.float32, enabled=amp_dtype is not None)


def train_step(model: nn.Module, optimizer: torch.optim.Optimizer, loss: StackRegistrationLoss, batch: StackBatch,
               amp_dtype: Optional[torch.dtype] = None) -> Dict[str, torch.Tensor]:
    """One optimiser step on ``batch``: the network under autocast when ``amp_dtype`` is given (e.g. ``torch.bfloat16``),
    the loss in float32. Returns the detached loss terms (device scalars: no host synchronisation)."""
    with _autocast(batch.moving.device, amp_dtype):
        ddf = predict(model, batch)
    terms = loss(batch.moving, batch.fixed, batch.moving_label, batch.fixed_label, ddf.float(), batch.group, batch.n_groups)
    optimizer.zero_grad(set_to_none=True)
    terms["loss"].backward()
    optimizer.step()
    return {k: v.detach() for k, v in terms.items()}


@torch.no_grad()
def validate_stacks(model: nn.Module, data: DeviceStacks, labels: Tuple[int, ...] = (1, 2, 3), stacks_per_batch: int = 6,
                    amp_dtype: Optional[torch.dtype] = None) -> Dict[str, float]:
    """Mean 3-D Dice (the structures of ``labels`` present in either stack, averaged) of the moving labels warped
    by the network's field (nearest neighbour), both directions of every stack of ``data``, no augmentation.

    Returns ``val_dice`` (all registrations), ``val_dice_ed_es``, ``val_dice_es_ed`` and ``val_dice_initial``
    (no registration)."""
    was_training = model.training
    model.eval()
    dice: List[torch.Tensor] = []
    initial: List[torch.Tensor] = []
    for stacks in data.batches(range(len(data)), stacks_per_batch):
        batch = data.batch(stacks)
        with _autocast(batch.moving.device, amp_dtype):
            ddf = predict(model, batch).float()
        fixed = one_hot_labels(batch.fixed_label, labels)
        for moving_label, out in ((warp_batch(batch.moving_label, ddf, batch, "nearest"), dice), (batch.moving_label, initial)):
            inter, pred, target = group_overlap(one_hot_labels(moving_label, labels), fixed, batch.group, batch.n_groups)
            per = torch.where(pred + target > 0, 2 * inter / (pred + target).clamp(min=1), torch.nan)
            out.append(per.nanmean(1).view(2, -1))  # (direction, stack)
    model.train(was_training)
    d, d0 = torch.cat(dice, 1).cpu(), torch.cat(initial, 1).cpu()
    return {"val_dice": float(d.nanmean()), "val_dice_ed_es": float(d[0].nanmean()), "val_dice_es_ed": float(d[1].nanmean()),
            "val_dice_initial": float(d0.nanmean())}


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


def _generator_state(gen: torch.Generator) -> Dict[str, Any]:
    return {"device": str(gen.device), "state": gen.get_state()}


def _restore_generator(gen: torch.Generator, saved: Mapping[str, Any], reseed: int, log: RunLog) -> None:
    if str(saved.get("device")) == str(gen.device):
        gen.set_state(saved["state"])
    else:
        gen.manual_seed(reseed)
        log.message(f"random stream saved on {saved.get('device')}, now on {gen.device}: reseeded with {reseed}")


class _Run:
    """The state of one :func:`train_stacks` call (set-up, resume, epochs, files)."""

    def __init__(self, config: StackTrainingConfig, network_factory: Optional[NetworkFactory], echo: bool) -> None:
        self.start = time.perf_counter()
        self.config, self.echo = config, echo
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
        self.log = RunLog(self.out)
        pack = load_stack_pack(config.pack)
        self.train_data = DeviceStacks(pack, pack.indices("train"), self.device)
        self.val_data = DeviceStacks(pack, pack.indices("val"), self.device) if pack.indices("val") else None
        torch.manual_seed(config.seed)  # the initial weights (a resumed run loads its own)
        factory = network_factory or (lambda cfg: build_network(cfg, state.get("network_config") if state else None))
        self.model = factory(config).to(self.device).train()
        self.optimizer = torch.optim.AdamW(self.model.parameters(), lr=config.learning_rate, weight_decay=config.weight_decay)
        self.loss = StackRegistrationLoss(config.loss_preset, config.label_weight)
        self.order_gen = torch.Generator().manual_seed(config.seed)
        self.augment = RandStackAugment(config.augment, torch.Generator(device=self.device).manual_seed(config.seed + 1))
        self.epoch, self.step, self.curve, self.best = 0, 0, [], -math.inf
        if state:
            self._load(state)
        self.gpu = GpuUtilisation(self.device)

    def _resume_state(self) -> Dict[str, Any]:
        resume = self.config.resume
        if resume is None:
            if self.ckpt_path.is_file():
                raise FileExistsError(f"out_dir {self.out} already holds checkpoint.pt: pass resume={str(self.ckpt_path)!r} "
                                      "to continue it, or another out_dir.")
            return {}
        state = safe_load(resume, what="training checkpoint")
        if not isinstance(state, dict) or state.get("format") != CHECKPOINT_FORMAT:
            raise ValueError(f"resume={resume!r} is not a checkpoint of train_stacks (format {CHECKPOINT_FORMAT}).")
        return state

    def _load(self, state: Mapping[str, Any]) -> None:
        self.model.load_state_dict(state["model"])
        self.optimizer.load_state_dict(state["optimizer"])
        self.epoch, self.step = int(state["epoch"]), int(state["step"])
        self.curve, self.best = list(state["curve"]), float(state["best_dice"])
        _restore_generator(self.order_gen, state["generators"]["order"], self.config.seed + self.epoch, self.log)
        _restore_generator(self.augment.generator, state["generators"]["augment"], self.config.seed + 1 + self.epoch, self.log)
        self.log.message(f"resumed from {self.config.resume}: epoch {self.epoch}, step {self.step}, best val Dice {self.best:.4f}",
                         self.echo)

    def elapsed(self) -> float:
        return time.perf_counter() - self.start

    def network_config(self) -> Optional[Dict[str, Any]]:
        return plain(dict(self.model.config)) if isinstance(getattr(self.model, "config", None), Mapping) else None

    def save_checkpoint(self) -> None:
        state = {"format": CHECKPOINT_FORMAT, "model": self.model.state_dict(), "optimizer": self.optimizer.state_dict(),
                 "epoch": self.epoch, "step": self.step, "curve": plain(self.curve), "best_dice": self.best,
                 "network_config": self.network_config(), "network_class": type(self.model).__name__,
                 "train_config": plain(asdict(self.config)),
                 "generators": {"order": _generator_state(self.order_gen), "augment": _generator_state(self.augment.generator)}}
        atomic_torch_save(state, self.ckpt_path)

    def save_best(self, dice: float) -> None:
        meta = training_meta(self.config, self.epoch, dice, self.train_data.num_slices, int(self.train_data.images.shape[-1]))
        if self.network_config() is not None:
            save_pretrained(self.model, self.out / "best.pt", meta)
        else:  # a custom network without a config: its state and the meta
            atomic_torch_save({"model": self.model.state_dict(), "meta": plain(meta)}, self.out / "best.pt")


def training_meta(config: StackTrainingConfig, epoch: int, val_dice: float, train_slices: int, size: int) -> Dict[str, Any]:
    """The weights' ``meta`` of a whole-stack training state: what ``register`` reads (``preprocessing`` per-slice
    min-max, ``input_size`` the window, ``field_of_view`` one heart window per stack) and how it was trained."""
    return {"preprocessing": "minmax", "input_size": int(size), "field_of_view": "heart-stack",
            "trained_on": f"whole ACDC stacks of {Path(config.pack).name} ({train_slices} training slices), labels in the loss only",
            "training": {"epoch": int(epoch), "val_dice": float(val_dice), "label_weight": config.label_weight,
                         "learning_rate": config.learning_rate, "bf16": config.bf16, "script": "examples/train_stacks_gpu.py"}}


def _epoch_terms(sums: Dict[str, torch.Tensor], steps: int) -> Dict[str, float]:
    if not sums:
        return {}
    keys = list(sums)
    values = (torch.stack([sums[k] for k in keys]) / steps).tolist()  # one host synchronisation per epoch
    return {k: round(float(v), 6) for k, v in zip(keys, values)}


def _run_epoch(run: _Run, budget: float) -> Tuple[Dict[str, float], int, bool]:
    """One pass over the training stacks in a random order. Returns the mean loss terms, the steps taken and
    whether the wall-time budget ran out before the pass ended."""
    cfg = run.config
    lr = cfg.learning_rate * cfg.lr_decay ** run.epoch  # epoch 0-based: resumable without a scheduler state
    for group in run.optimizer.param_groups:
        group["lr"] = lr
    order = torch.randperm(len(run.train_data), generator=run.order_gen).tolist()
    on_device = run.train_data.positions(order)  # one upload per epoch
    sums: Dict[str, torch.Tensor] = {}
    steps, done = 0, 0
    for stacks in run.train_data.batches(order, cfg.stacks_per_batch):
        if run.elapsed() > budget:
            return _epoch_terms(sums, max(steps, 1)), steps, True
        batch = run.train_data.batch(stacks, run.augment, on_device[done : done + len(stacks)])
        done += len(stacks)
        terms = train_step(run.model, run.optimizer, run.loss, batch, run.amp_dtype)
        for k, v in terms.items():
            sums[k] = sums[k] + v if k in sums else v.clone()
        steps += 1
        run.step += 1
        run.gpu.sample()
    return {**_epoch_terms(sums, steps), "lr": lr}, steps, False


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


def train_stacks(config: StackTrainingConfig, network_factory: Optional[NetworkFactory] = None, echo: bool = True) -> Dict[str, Any]:
    """Train for at most ``config.minutes`` of wall time (or ``max_epochs``), then save; see the module docstring.

    Returns a summary: ``epoch`` (last completed), ``step``, ``best_val_dice``, ``stopped`` (``"budget"`` or
    ``"max_epochs"``), ``step_seconds`` and the written ``files``.
    Raises ``ValueError`` for bf16 without CUDA, ``FileExistsError`` when ``out_dir`` holds a checkpoint that
    ``resume`` does not name, and the pack's / checkpoint's read errors.
    """
    run = _Run(config, network_factory, echo)
    budget = config.minutes * 60.0
    reserve = min(10.0, 0.05 * budget)  # the last save and the figure
    run.log.message(f"training on {run.device}: {len(run.train_data)} training stacks ({run.train_data.num_slices} slices), "
                    f"{len(run.val_data) if run.val_data else 0} validation stacks; budget {config.minutes} min", echo)
    step_seconds = _time_network(run)
    epoch_estimate, val_seconds, stopped = 1.5 * step_seconds * math.ceil(len(run.train_data) / config.stacks_per_batch), 0.0, "budget"
    while True:
        if config.max_epochs is not None and run.epoch >= config.max_epochs:
            stopped = "max_epochs"
            break
        validating = run.val_data is not None and (run.epoch + 1) % config.val_every == 0
        if run.elapsed() + epoch_estimate + (val_seconds if validating else 0.0) > budget - reserve:
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
        if validating:
            t1 = time.perf_counter()
            record.update(validate_stacks(run.model, run.val_data, stacks_per_batch=config.val_stacks_per_batch, amp_dtype=run.amp_dtype))
            val_seconds = time.perf_counter() - t1
            record["val_seconds"] = round(val_seconds, 3)
            if record["val_dice"] > run.best:
                run.best = record["val_dice"]
                run.save_best(run.best)
        run.curve.append(record)
        run.log.epoch(record, echo)
        if run.epoch % config.save_every == 0:
            run.save_checkpoint()
    run.save_checkpoint()
    files = [run.ckpt_path, run.log.jsonl, run.log.text]
    figure = curve_figure(run.curve, run.out / "curve.png", f"{Path(config.pack).name}, {run.device}, epoch {run.epoch}")
    files += [p for p in (figure, run.out / "best.pt") if p is not None and p.is_file()]
    run.log.message(f"stopped ({stopped}) after epoch {run.epoch}, step {run.step}, {run.elapsed() / 60:.2f} min; "
                    f"best val Dice {run.best:.4f}; files: {', '.join(p.name for p in files)}", echo)
    return {"epoch": run.epoch, "step": run.step, "best_val_dice": run.best if math.isfinite(run.best) else None,
            "stopped": stopped, "step_seconds": step_seconds, "files": [str(p) for p in files]}


def export_weights(checkpoint: str | Path, path: str | Path, meta: Optional[Mapping[str, Any]] = None,
                   meta_from: Optional[str] = None, **overrides: Any) -> Path:
    """A ``checkpoint.pt`` (or ``best.pt``) of :func:`train_stacks` -> weights in the shipped format
    (:func:`~monai_npc.networks.nets.save_pretrained`: ``{"model", "config", "meta"}``), loadable by
    ``load_pretrained`` / ``register(model=path)``.

    ``overrides``: NPCNet arguments for inference (e.g. ``refine_iterations=50``); ``meta_from``: weights whose meta
    to start from (e.g. ``"acdc"``: how ``register`` runs them, without their provenance, :data:`_PROVENANCE`);
    ``meta``: entries over both.
    """
    state = safe_load(checkpoint, what="training checkpoint")
    if not isinstance(state, dict) or "model" not in state:
        raise ValueError(f"{checkpoint} holds no 'model' state; not a file of train_stacks.")
    network_config = state.get("network_config") or state.get("config")
    if network_config is None:
        raise ValueError(f"{checkpoint} records no NPCNet configuration (a custom network): export it with its own code.")
    net = _from_config({**dict(network_config), "detach_steps": False, **overrides})
    net.load_state_dict(state["model"])
    base = {k: v for k, v in dict(load_pretrained(meta_from).meta if meta_from else {}).items() if k not in _PROVENANCE}
    recorded = dict(state.get("meta") or {})
    if "curve" in state:
        done = [r for r in state["curve"] if r.get("val_dice") is not None]
        recorded["training"] = {"epoch": int(state["epoch"]), "steps": int(state["step"]),
                                "val_dice": done[-1]["val_dice"] if done else None, "script": "examples/train_stacks_gpu.py"}
    return save_pretrained(net, path, {**base, **recorded, **dict(meta or {})})
