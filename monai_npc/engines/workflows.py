"""MONAI workflows for learned registration: the training step, the evaluator and bundle helpers.

:class:`RegistrationTrainer` and :class:`RegistrationEvaluator` are the engines of the NPC
bundles (``bundles/npc_acdc``, ``bundles/npc_camus``). Both read a batch of *pair items*
(:mod:`monai_npc.data.pairs`): ``moving``, ``fixed`` ``(B, 1, *S)``, and for evaluation
``moving_label``, ``fixed_label`` ``(B, 1, *S)``. Displacements are in voxels, MONAI ``Warp``
convention (``warped(x) = moving(x + ddf(x))``).

The helpers :func:`prepare_dataset_dir` and :func:`load_pairs` turn the bundle arguments
``dataset_dir`` / ``phantom_dir`` into pair lists, writing phantom patients on first use when
no ``dataset_dir`` is given, so that every bundle config runs out of the box.
"""

from __future__ import annotations

import json
import logging
import time
from pathlib import Path
from typing import Any, Callable, Dict, Iterable, List, Mapping, Optional, Sequence, Tuple, Union

import torch
from monai.engines import SupervisedEvaluator, SupervisedTrainer
from monai.engines.utils import IterationEvents, default_metric_cmp_fn, default_prepare_batch
from monai.inferers import Inferer
from monai.transforms import Transform
from monai.utils import ForwardMode
from monai.utils.enums import CommonKeys as Keys
from torch import nn

from monai_npc.functional.reliability import reliability_map
from monai_npc.functional.warp import warp_image
from monai_npc.metrics.registration import dice_per_structure, registration_metrics

__all__ = [
    "RegistrationTrainer",
    "RegistrationEvaluator",
    "prepare_dataset_dir",
    "load_pairs",
    "as_bool",
    "unwrap_network",
    "init_weights",
    "META_KEYS",
]

logger = logging.getLogger(__name__)

#: batch keys copied into ``output["meta"]`` by the evaluator (those present in the batch)
META_KEYS = ("patient", "slice", "view", "direction", "spacing")


#: :func:`check_training_args`: (test, what the argument must be) per bundle training argument
_TRAINING_RULES: Dict[str, Tuple[Callable[[float], bool], str]] = {
    "epochs": (lambda v: v >= 1 and float(v).is_integer(), "a whole number >= 1"),
    "batch_size": (lambda v: v >= 1 and float(v).is_integer(), "a whole number >= 1"),
    "val_interval": (lambda v: v >= 1 and float(v).is_integer(), "a whole number >= 1"),
    "max_iterations_per_epoch": (lambda v: v >= 1 and float(v).is_integer(), "a whole number >= 1 (or None: whole epochs)"),
    "learning_rate": (lambda v: 0 < v < float("inf"), "a number > 0"),
    "lr_decay": (lambda v: 0 < v <= 1, "in (0, 1]"),
    "flip_prob": (lambda v: 0 <= v <= 1, "a probability in [0, 1]"),
    "deform_prob": (lambda v: 0 <= v <= 1, "a probability in [0, 1]"),
    "label_weight": (lambda v: 0 <= v < float("inf"), "a number >= 0"),
}


def check_training_args(**args: Any) -> None:
    """One ``ValueError`` naming every bad bundle training argument (``--epochs 0``, ``--learning_rate -1``...),
    before any data is read; ``None`` is accepted where the bundle allows it (``max_iterations_per_epoch``)."""
    bad = []
    for name, value in args.items():
        if value is None and name == "max_iterations_per_epoch":
            continue
        test, rule = _TRAINING_RULES[name]
        try:
            ok = not isinstance(value, bool) and bool(test(float(value)))
        except (TypeError, ValueError):
            ok = False
        if not ok:
            bad.append(f"--{name} must be {rule}, got {value!r}")
    if bad:
        raise ValueError("bundle training arguments: " + "; ".join(bad) + ".")


def as_bool(value: Any, name: str = "value") -> bool:
    """A boolean from a config or command-line value (``True``, ``"true"``, ``"0"``, ...).

    ``python -m monai.bundle run ... --resume true`` passes the *string* ``"true"`` (fire only
    parses ``True``/``False``); this accepts both spellings and raises on anything else.
    """
    if isinstance(value, bool):
        return value
    if isinstance(value, (int, float)) and value in (0, 1):
        return bool(value)
    if isinstance(value, str) and value.strip().lower() in ("true", "yes", "1", "on", "false", "no", "0", "off", "none", ""):
        return value.strip().lower() in ("true", "yes", "1", "on")
    if value is None:
        return False
    raise ValueError(f"{name} must be a boolean (True/False), got {value!r}.")


def unwrap_network(network: nn.Module) -> nn.Module:
    """The module inside ``DistributedDataParallel`` / ``DataParallel`` wrappers."""
    while isinstance(network, (nn.parallel.DistributedDataParallel, nn.DataParallel)):
        network = network.module
    return network


def require_file(path: Union[str, Path], argument: str) -> Path:
    """``path`` as a ``Path`` when it is a file, else ``FileNotFoundError`` naming the bundle argument (``--ckpt_path``)."""
    if not Path(path).is_file():
        raise FileNotFoundError(f"--{argument} {path}: no such file.")
    return Path(path)


def init_weights(network: nn.Module, path: Optional[Union[str, Path]] = None, argument: str = "init_weights") -> nn.Module:
    """Load the network weights of ``path`` into ``network`` to start a training from them (fine-tuning).

    ``path`` is a bundle ``models/model.pt`` (a bare state dict) or a training checkpoint with a
    ``"model"`` entry; ``None`` or ``""`` leaves the network as initialised. Unlike ``resume``, the
    optimizer, scheduler and epoch start afresh, so a fine-tune can use its own learning rate and
    decay. The network is loaded unwrapped (DDP-safe) and strictly: a file made for another
    architecture (``stages``, ``kernel_size``, ...) fails with the missing and unexpected keys.
    ``argument`` names the bundle argument in errors (``init_weights``, ``ckpt_path``).
    Returns ``network``.
    """
    if path is None or str(path) == "":
        return network
    path = require_file(path, argument)
    state = torch.load(path, map_location="cpu", weights_only=True)
    if isinstance(state, Mapping) and "model" in state and isinstance(state["model"], Mapping):
        state = state["model"]
    try:
        unwrap_network(network).load_state_dict(state)
    except RuntimeError as err:
        raise RuntimeError(f"--{argument} {path} does not fit the configured network: {err}") from err
    logger.info("init_weights: network initialised from %s", path)
    return network


def _to_device(x: torch.Tensor, device: Union[str, torch.device], non_blocking: bool = False) -> torch.Tensor:
    return torch.as_tensor(x).to(device=device, dtype=torch.float32, non_blocking=non_blocking)


class RegistrationTrainer(SupervisedTrainer):
    """Unsupervised registration training: each iteration minimises ``loss_function`` of the warped pair.

    The batch must hold ``moving_key`` and ``fixed_key`` images ``(B, 1, *S)``. The network gets
    ``cat(moving, fixed)`` ``(B, 2, *S)`` through ``inferer`` and returns the displacement
    ``(B, D, *S)`` in voxels. With ``bidirectional`` (the paper's ACDC recipe) both directions go
    through the network in one batch of ``2B`` and the loss is their average
    (:func:`~monai_npc.losses.bidirectional_loss`); otherwise only ``moving -> fixed``.

    ``loss_function`` is a :class:`~monai_npc.losses.RegistrationLoss` (its ``components`` are
    logged) or any callable ``(warped, fixed, ddf) -> scalar``.

    Weak supervision (optional): with ``label_loss`` (e.g.
    :class:`~monai_npc.losses.WarpedLabelDiceLoss`, a callable ``(moving_label, fixed_label, ddf)
    -> scalar``) the batch must also hold ``moving_label_key`` and ``fixed_label_key`` maps
    ``(B, 1, *S)``, and ``label_weight * label_loss`` is added to the loss (logged as ``label``).
    Segmentations are then needed for the training pairs only, never at inference.

    ``engine.state.output`` after an iteration: ``image`` ``(B, 2, *S)``, ``pred`` the
    displacement ``(B or 2B, D, *S)``, ``loss`` (scalar, with graph freed) and ``loss_terms``
    (dict of detached scalars: ``loss``, ``similarity``, ``regularization``, ``fold``, ``logj``).

    All other arguments are those of :class:`monai.engines.SupervisedTrainer` (``amp`` uses
    CUDA autocast; ``accumulation_steps`` accumulates gradients over iterations). ``decollate``
    defaults to ``False``: nothing is post-processed per item.
    """

    def __init__(
        self,
        device: Union[str, torch.device],
        max_epochs: int,
        train_data_loader: Iterable,
        network: nn.Module,
        optimizer: torch.optim.Optimizer,
        loss_function: Callable,
        epoch_length: Optional[int] = None,
        non_blocking: bool = False,
        prepare_batch: Callable = default_prepare_batch,
        iteration_update: Optional[Callable] = None,
        inferer: Optional[Inferer] = None,
        postprocessing: Optional[Transform] = None,
        key_train_metric: Optional[dict] = None,
        additional_metrics: Optional[dict] = None,
        metric_cmp_fn: Callable = default_metric_cmp_fn,
        train_handlers: Optional[Sequence] = None,
        amp: bool = False,
        event_names: Optional[list] = None,
        event_to_attr: Optional[dict] = None,
        decollate: bool = False,
        optim_set_to_none: bool = False,
        to_kwargs: Optional[dict] = None,
        amp_kwargs: Optional[dict] = None,
        accumulation_steps: int = 1,
        moving_key: str = "moving",
        fixed_key: str = "fixed",
        bidirectional: bool = True,
        label_loss: Optional[Callable] = None,
        label_weight: float = 1.0,
        moving_label_key: str = "moving_label",
        fixed_label_key: str = "fixed_label",
    ) -> None:
        super().__init__(
            device=device,
            max_epochs=max_epochs,
            train_data_loader=train_data_loader,
            network=network,
            optimizer=optimizer,
            loss_function=loss_function,
            epoch_length=epoch_length,
            non_blocking=non_blocking,
            prepare_batch=prepare_batch,
            iteration_update=iteration_update,
            inferer=inferer,
            postprocessing=postprocessing,
            key_train_metric=key_train_metric,
            additional_metrics=additional_metrics,
            metric_cmp_fn=metric_cmp_fn,
            train_handlers=train_handlers,
            amp=amp,
            event_names=event_names,
            event_to_attr=event_to_attr,
            decollate=decollate,
            optim_set_to_none=optim_set_to_none,
            to_kwargs=to_kwargs,
            amp_kwargs=amp_kwargs,
            accumulation_steps=accumulation_steps,
        )
        self.moving_key = moving_key
        self.fixed_key = fixed_key
        self.bidirectional = as_bool(bidirectional, "bidirectional")
        self.label_loss = label_loss
        self.label_weight = float(label_weight)
        self.moving_label_key = moving_label_key
        self.fixed_label_key = fixed_label_key

    def _stack(self, moving: torch.Tensor, fixed: torch.Tensor) -> torch.Tensor:
        """``(B, 2, *S)`` moving + fixed, or ``(2B, 2, *S)`` with the reversed pairs when ``bidirectional``."""
        pair = torch.cat([moving, fixed], 1)
        return torch.cat([pair, torch.cat([fixed, moving], 1)], 0) if self.bidirectional else pair

    def _terms(
        self, engine: "RegistrationTrainer", moving: torch.Tensor, fixed: torch.Tensor, labels: Optional[tuple] = None
    ) -> Dict[str, torch.Tensor]:
        """Loss terms of one batch (both directions stacked when ``bidirectional``)."""
        image = self._stack(moving, fixed)
        ddf = engine.inferer(image, engine.network)
        warped = warp_image(image[:, 0:1], ddf.to(image.dtype), "bilinear", "border")
        if hasattr(engine.loss_function, "components"):
            terms = dict(engine.loss_function.components(warped, image[:, 1:2], ddf))
        else:
            terms = {"loss": engine.loss_function(warped, image[:, 1:2], ddf)}
        if self.label_loss is not None and labels is not None:
            label_pair = self._stack(*labels)
            terms["label"] = self.label_weight * self.label_loss(label_pair[:, 0:1], label_pair[:, 1:2], ddf)
            terms["loss"] = terms["loss"] + terms["label"]
        terms["ddf"] = ddf
        return terms

    def _iteration(self, engine: "RegistrationTrainer", batchdata: Dict[str, Any]) -> dict:  # type: ignore[override]
        if batchdata is None:
            raise ValueError("Must provide batch data for current iteration.")
        for key in (self.moving_key, self.fixed_key):
            if key not in batchdata:
                raise KeyError(f"RegistrationTrainer: the batch has no {key!r} image; keys are {sorted(batchdata)}.")
        device = engine.state.device
        moving = _to_device(batchdata[self.moving_key], device, engine.non_blocking)
        fixed = _to_device(batchdata[self.fixed_key], device, engine.non_blocking)
        engine.state.output = {Keys.IMAGE: torch.cat([moving, fixed], 1)}
        labels = None
        if self.label_loss is not None:
            for key in (self.moving_label_key, self.fixed_label_key):
                if key not in batchdata:
                    raise KeyError(f"RegistrationTrainer: label_loss is set but the batch has no {key!r} label map; keys are {sorted(batchdata)}.")
            labels = tuple(_to_device(batchdata[k], device, engine.non_blocking) for k in (self.moving_label_key, self.fixed_label_key))

        def _compute() -> None:
            terms = self._terms(engine, moving, fixed, labels)
            engine.state.output[Keys.PRED] = terms.pop("ddf")
            engine.fire_event(IterationEvents.FORWARD_COMPLETED)
            engine.state.output[Keys.LOSS] = terms["loss"]
            engine.state.output["loss_terms"] = {k: v.detach() for k, v in terms.items() if torch.is_tensor(v) and v.dim() == 0}
            engine.fire_event(IterationEvents.LOSS_COMPLETED)

        acc = engine.accumulation_steps
        local = engine.state.iteration - 1
        if engine.state.epoch_length is not None:
            local = local % engine.state.epoch_length
        should_zero = acc == 1 or local % acc == 0
        should_step = acc == 1 or (local + 1) % acc == 0 or (
            engine.state.epoch_length is not None and local + 1 == engine.state.epoch_length
        )
        engine.network.train()
        if should_zero:
            engine.optimizer.zero_grad(set_to_none=engine.optim_set_to_none)
        if engine.amp and engine.scaler is not None:
            with torch.autocast("cuda", **engine.amp_kwargs):
                _compute()
            loss = engine.state.output[Keys.LOSS]
            engine.scaler.scale(loss / acc).backward()
            engine.fire_event(IterationEvents.BACKWARD_COMPLETED)
            if should_step:
                engine.scaler.step(engine.optimizer)
                engine.scaler.update()
        else:
            _compute()
            loss = engine.state.output[Keys.LOSS]
            (loss / acc).backward()
            engine.fire_event(IterationEvents.BACKWARD_COMPLETED)
            if should_step:
                engine.optimizer.step()
        engine.state.output[Keys.LOSS] = loss.detach()
        engine.state.output[Keys.PRED] = engine.state.output[Keys.PRED].detach()
        engine.fire_event(IterationEvents.MODEL_COMPLETED)
        return engine.state.output


class RegistrationEvaluator(SupervisedEvaluator):
    """Register every pair of a loader, warp its labels (nearest) and compute per-pair metrics.

    Each batch item is registered in its own direction (``moving -> fixed``); the pair builders
    yield both directions of a slice as separate items (``direction`` ``"ED->ES"`` / ``"ES->ED"``),
    so a loader over them evaluates both directions.

    ``engine.state.output`` after an iteration (batched, ``decollate=False``):

    - ``image`` ``(B, 2, *S)`` (moving, fixed), ``moving``, ``fixed`` ``(B, 1, *S)``;
    - ``pred`` = ``ddf`` ``(B, D, *S)`` in voxels; ``warped`` ``(B, 1, *S)`` (bilinear);
    - with labels: ``warped_label``, ``label`` (= fixed label), ``moving_label`` ``(B, 1, *S)``;
    - with ``compute_metrics``: ``metrics``, a dict of ``(B,)`` CPU tensors: those of
      :func:`~monai_npc.metrics.registration_metrics` (``dice_<name>``, ``dice_mean``, ``hd95``
      in voxels, ``sdlogj`` x1e-2, ``ndv`` per 10k foreground voxels, ``folding_percent``),
      ``dice_mean_initial`` (unregistered), and when the batch holds the true ``true_ddf_key``
      field (phantoms) ``epe`` / ``epe_initial`` (mean endpoint error in voxels over the union
      of both label maps);
    - with ``return_reliability``: ``reliability`` ``(B, 1, *S)``, the residual reliability
      map of the last ODE step (:func:`~monai_npc.functional.reliability_map`), which needs a
      network with ``register`` (``NPCNet``, possibly DDP-wrapped);
    - ``seconds``: wall time of the network call for the batch; ``meta``: the batch's
      ``patient``, ``slice``, ``view``, ``direction``, ``spacing`` entries present.

    Args (besides those of :class:`monai.engines.SupervisedEvaluator`):
        moving_key, fixed_key, moving_label_key, fixed_label_key, true_ddf_key: batch keys.
        labels: label values of the evaluated structures; ``label_names`` their short names
            (``dice_<name>`` keys; default the values).
        compute_metrics: compute ``metrics`` (needs both label maps).
        return_reliability: compute the reliability map.
    """

    def __init__(
        self,
        device: Union[str, torch.device],
        val_data_loader: Iterable,
        network: nn.Module,
        epoch_length: Optional[int] = None,
        non_blocking: bool = False,
        prepare_batch: Callable = default_prepare_batch,
        iteration_update: Optional[Callable] = None,
        inferer: Optional[Inferer] = None,
        postprocessing: Optional[Transform] = None,
        key_val_metric: Optional[dict] = None,
        additional_metrics: Optional[dict] = None,
        metric_cmp_fn: Callable = default_metric_cmp_fn,
        val_handlers: Optional[Sequence] = None,
        amp: bool = False,
        mode: Union[ForwardMode, str] = ForwardMode.EVAL,
        event_names: Optional[list] = None,
        event_to_attr: Optional[dict] = None,
        decollate: bool = False,
        to_kwargs: Optional[dict] = None,
        amp_kwargs: Optional[dict] = None,
        moving_key: str = "moving",
        fixed_key: str = "fixed",
        moving_label_key: str = "moving_label",
        fixed_label_key: str = "fixed_label",
        true_ddf_key: str = "ddf",
        labels: Sequence[int] = (1, 2, 3),
        label_names: Optional[Sequence[str]] = None,
        compute_metrics: bool = True,
        return_reliability: bool = False,
    ) -> None:
        super().__init__(
            device=device if isinstance(device, torch.device) else torch.device(device),
            val_data_loader=val_data_loader,
            network=network,
            epoch_length=epoch_length,
            non_blocking=non_blocking,
            prepare_batch=prepare_batch,
            iteration_update=iteration_update,
            inferer=inferer,
            postprocessing=postprocessing,
            key_val_metric=key_val_metric,
            additional_metrics=additional_metrics,
            metric_cmp_fn=metric_cmp_fn,
            val_handlers=val_handlers,
            amp=amp,
            mode=mode,
            event_names=event_names,
            event_to_attr=event_to_attr,
            decollate=decollate,
            to_kwargs=to_kwargs,
            amp_kwargs=amp_kwargs,
        )
        self.moving_key, self.fixed_key = moving_key, fixed_key
        self.moving_label_key, self.fixed_label_key = moving_label_key, fixed_label_key
        self.true_ddf_key = true_ddf_key
        self.labels = [int(v) for v in labels]
        self.label_names = [str(n) for n in label_names] if label_names is not None else [str(v) for v in self.labels]
        if len(self.label_names) != len(self.labels):
            raise ValueError(f"label_names {self.label_names} must have one name per label {self.labels}.")
        self.compute_metrics = as_bool(compute_metrics, "compute_metrics")
        self.return_reliability = as_bool(return_reliability, "return_reliability")

    def _register(self, engine: "RegistrationEvaluator", moving: torch.Tensor, fixed: torch.Tensor) -> Dict[str, torch.Tensor]:
        out: Dict[str, torch.Tensor] = {}
        if self.return_reliability:
            net = unwrap_network(engine.network)
            if not hasattr(net, "register"):
                raise TypeError(
                    f"return_reliability needs a network with register(moving, fixed, return_diagnostics=True) "
                    f"(NPCNet); got {type(net).__name__}."
                )
            _, ddf, diagnostics = net.register(moving, fixed, return_diagnostics=True)
            last = diagnostics[-1]
            out["reliability"] = reliability_map(last["residual"], last["mask"], size=list(moving.shape[2:]))
        elif engine.amp:
            with torch.autocast("cuda", **engine.amp_kwargs):
                ddf = engine.inferer(torch.cat([moving, fixed], 1), engine.network)
        else:
            ddf = engine.inferer(torch.cat([moving, fixed], 1), engine.network)
        out["ddf"] = ddf.float()
        return out

    def _iteration(self, engine: "RegistrationEvaluator", batchdata: Dict[str, Any]) -> dict:  # type: ignore[override]
        if batchdata is None:
            raise ValueError("Must provide batch data for current iteration.")
        for key in (self.moving_key, self.fixed_key):
            if key not in batchdata:
                raise KeyError(f"RegistrationEvaluator: the batch has no {key!r} image; keys are {sorted(batchdata)}.")
        device = engine.state.device
        moving = _to_device(batchdata[self.moving_key], device, engine.non_blocking)
        fixed = _to_device(batchdata[self.fixed_key], device, engine.non_blocking)
        output: Dict[str, Any] = {Keys.IMAGE: torch.cat([moving, fixed], 1), "moving": moving, "fixed": fixed}
        start = time.perf_counter()
        with engine.mode(engine.network):
            registered = self._register(engine, moving, fixed)
        if moving.is_cuda:
            torch.cuda.synchronize(moving.device)
        output["seconds"] = time.perf_counter() - start
        ddf = registered.pop("ddf")
        output.update(registered)
        output[Keys.PRED] = ddf
        output["ddf"] = ddf
        with torch.no_grad():
            output["warped"] = warp_image(moving, ddf, "bilinear", "border")
            if self.moving_label_key in batchdata and self.fixed_label_key in batchdata:
                moving_label = _to_device(batchdata[self.moving_label_key], device, engine.non_blocking)
                fixed_label = _to_device(batchdata[self.fixed_label_key], device, engine.non_blocking)
                warped_label = warp_image(moving_label, ddf, "nearest", "border")
                output.update({"warped_label": warped_label, Keys.LABEL: fixed_label, "moving_label": moving_label})
                if self.compute_metrics:
                    output["metrics"] = self._metrics(batchdata, warped_label, fixed_label, moving_label, ddf, device)
            elif self.compute_metrics:
                raise KeyError(
                    f"RegistrationEvaluator: compute_metrics needs {self.moving_label_key!r} and {self.fixed_label_key!r} "
                    f"in the batch; keys are {sorted(batchdata)}."
                )
        output["meta"] = {k: batchdata[k] for k in META_KEYS if k in batchdata}
        engine.state.output = output
        engine.fire_event(IterationEvents.FORWARD_COMPLETED)
        engine.fire_event(IterationEvents.MODEL_COMPLETED)
        return engine.state.output

    def _metrics(self, batchdata, warped_label, fixed_label, moving_label, ddf, device) -> Dict[str, torch.Tensor]:
        metrics = registration_metrics(warped_label, fixed_label, moving_label, ddf, self.labels, self.label_names)
        metrics["dice_mean_initial"] = torch.nanmean(dice_per_structure(moving_label, fixed_label, self.labels), 1)
        if self.true_ddf_key in batchdata:
            true = _to_device(batchdata[self.true_ddf_key], device)
            fg = ((moving_label > 0) | (fixed_label > 0)).float()[:, 0]
            denom = fg.flatten(1).sum(1).clamp(min=1)
            metrics["epe"] = ((ddf - true).norm(dim=1) * fg).flatten(1).sum(1) / denom
            metrics["epe_initial"] = (true.norm(dim=1) * fg).flatten(1).sum(1) / denom
        return {k: v.detach().float().cpu() for k, v in metrics.items()}


# ---------------------------------------------------------------------------------------------
# bundle data helpers
# ---------------------------------------------------------------------------------------------

_DATASETS = ("acdc", "camus")


def _phantom_writer(dataset: str) -> Callable:
    from monai_npc.data.phantom_layouts import write_acdc_phantom, write_camus_phantom

    return write_acdc_phantom if dataset == "acdc" else write_camus_phantom


def prepare_dataset_dir(
    dataset_dir: Optional[Union[str, Path]],
    dataset: str = "acdc",
    phantom_dir: Optional[Union[str, Path]] = None,
    patients: int = 12,
    first_id: int = 1,
    seed: int = 0,
    max_slices: Optional[int] = None,
) -> Path:
    """The data folder a bundle reads: ``dataset_dir`` when given, else phantom patients.

    Args:
        dataset_dir: folder in a supported layout of ``dataset`` (see ``docs/data.md``); ``None``
            or ``""`` selects the phantom fallback.
        dataset: ``"acdc"`` or ``"camus"``.
        phantom_dir: parent folder of the phantom cache; the phantoms go to
            ``phantom_dir/{dataset}_seed{seed}_patients{first}-{last}[_slices{max_slices}]`` and are
            written once (a ``.complete`` marker records them) and reused afterwards.
        patients, first_id, seed, max_slices: phantom patients ``first_id .. first_id+patients-1``
            (:func:`~monai_npc.data.write_acdc_phantom` / :func:`~monai_npc.data.write_camus_phantom`);
            ``max_slices`` caps the ACDC slices per patient (quick runs).

    Raises:
        FileNotFoundError: ``dataset_dir`` is given but is not a folder.
        ValueError: unknown ``dataset``, or no ``dataset_dir`` and no ``phantom_dir``.
    """
    if dataset not in _DATASETS:
        raise ValueError(f"dataset must be one of {_DATASETS}, got {dataset!r}.")
    if dataset_dir not in (None, ""):
        path = Path(str(dataset_dir)).expanduser()
        if not path.is_dir():
            raise FileNotFoundError(
                f"dataset_dir={str(dataset_dir)!r} is not a folder; pass --dataset_dir pointing to the {dataset.upper()} "
                f"data (see docs/README.md of the bundle), or leave it unset to use phantom data."
            )
        return path
    if phantom_dir in (None, ""):
        raise ValueError("no dataset_dir given and no phantom_dir to write phantom data to.")
    patients, first_id = int(patients), int(first_id)
    name = f"{dataset}_seed{int(seed)}_patients{first_id}-{first_id + patients - 1}"
    if max_slices is not None and dataset == "acdc":
        name += f"_slices{int(max_slices)}"
    out = Path(str(phantom_dir)).expanduser() / name
    marker = out / ".complete"
    distributed = torch.distributed.is_available() and torch.distributed.is_initialized()
    # under torchrun only rank 0 writes; the others wait for it
    writer = not distributed or torch.distributed.get_rank() == 0
    failure: List[Optional[str]] = [None]
    if writer and not marker.is_file():
        logger.info("dataset_dir not set: writing %d %s phantom patients to %s", patients, dataset.upper(), out)
        try:
            out.mkdir(parents=True, exist_ok=True)
            kwargs: Dict[str, Any] = dict(patients=patients, seed=int(seed), first_id=first_id, progress=False)
            if dataset == "acdc" and max_slices is not None:
                kwargs["max_slices"] = int(max_slices)
            _phantom_writer(dataset)(out, **kwargs)
            marker.write_text(json.dumps({"dataset": dataset, **{k: v for k, v in kwargs.items() if k != "progress"}}))
        except Exception as err:  # noqa: BLE001 - told to the other ranks, then raised
            if not distributed:
                raise
            failure[0] = f"{type(err).__name__}: {err}"
    if distributed:  # the other ranks learn rank 0's failure instead of waiting for it at a barrier forever
        torch.distributed.broadcast_object_list(failure, src=0)
        if failure[0] is not None:
            raise RuntimeError(f"writing the phantom data to {out} failed on rank 0: {failure[0]}")
    return out


def load_pairs(
    dataset: str,
    root: Union[str, Path],
    split: str = "all",
    max_pairs: Optional[int] = None,
    **kwargs: Any,
) -> List[Dict]:
    """Pair items of one split of ``root`` (:func:`~monai_npc.data.build_acdc_pairs` or
    :func:`~monai_npc.data.build_camus_pairs`), optionally only the first ``max_pairs``.

    ``kwargs`` go to the builder (``roi_size``, ``n_train``, ``n_val``, ``n_test``, ``seed``,
    ``directions``, ...). ``split="all"`` takes every patient of the folder. Errors of the
    builder are re-raised naming ``dataset_dir`` and the split.
    """
    if dataset not in _DATASETS:
        raise ValueError(f"dataset must be one of {_DATASETS}, got {dataset!r}.")
    if dataset == "acdc":
        from monai_npc.data.acdc import build_acdc_pairs as build
    else:
        from monai_npc.data.camus import build_camus_pairs as build
    kwargs = {k: (list(v) if isinstance(v, tuple) else v) for k, v in kwargs.items()}
    try:
        pairs = build(root, split=split, **kwargs)
    except (FileNotFoundError, ValueError) as err:
        raise type(err)(f"dataset_dir={str(root)!r} (split {split!r}): {err}") from err
    if max_pairs is not None:
        if int(max_pairs) < 1:
            raise ValueError(f"max_pairs must be >= 1 or None, got {max_pairs}.")
        pairs = pairs[: int(max_pairs)]
    if not pairs:
        raise ValueError(f"dataset_dir={str(root)!r} (split {split!r}) gave no registration pairs.")
    return pairs
