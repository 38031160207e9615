"""MONAI workflows for learned registration: the training step and the evaluator.

:class:`RegistrationTrainer` and :class:`RegistrationEvaluator` are the engines of the NPC
bundles (``bundles/npc_acdc``, ``bundles/npc_camus``). Both read a batch of *pair items*
(:mod:`monai_npc.data.pairs`): ``moving``, ``fixed`` ``(B, 1, *S)``, and for evaluation
``moving_label``, ``fixed_label`` ``(B, 1, *S)``. Displacements are in voxels, MONAI ``Warp``
convention (``warped(x) = moving(x + ddf(x))``).

The bundle arguments are checked in :mod:`monai_npc.engines.bundle_args`; the data folder and
pair lists come from :mod:`monai_npc.data.bundle_data`.
"""

from __future__ import annotations

import time
from typing import Any, Callable, Dict, Iterable, Optional, Sequence, Union

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

from .bundle_args import as_bool, unwrap_network

__all__ = ["RegistrationTrainer", "RegistrationEvaluator", "META_KEYS"]

#: batch keys copied into ``output["meta"]`` by the evaluator (those present in the batch)
META_KEYS = ("patient", "slice", "view", "direction", "spacing")


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
