"""The bundles' handlers of whole stacks: :class:`StackInference` and :class:`StackEvaluation` (``inference.json``, ``evaluate.json``)."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Dict, Mapping, Optional, Sequence, Union

import torch
from torch import nn

from .evaluation import evaluate_studies
from .inference import infer_studies

__all__ = ["StackInference", "StackEvaluation"]

PathLike = Union[str, Path]


def _with_weights(kwargs: Mapping[str, Any], ckpt_path: Optional[PathLike], meta: Optional[Mapping[str, Any]]) -> Dict[str, Any]:
    """``kwargs`` with ``ckpt_path`` loaded into ``kwargs["model"]`` (a network) when given, and
    ``meta`` added to the network's ``meta`` (what :func:`monai_npc.register` reads of a model:
    ``bundle``, ``input_size``, ``preprocessing``, ``field_of_view``, ...). ``model_name`` names the config's network
    (a module); a network given by name or weights file (``--network acdc_through_plane``) is recorded by that name."""
    out = dict(kwargs)
    net = out["model"]
    if not isinstance(net, nn.Module):
        out["model_name"] = None
    else:
        if ckpt_path not in (None, ""):
            from monai_npc.engines import init_weights

            net = init_weights(net, ckpt_path, "ckpt_path")
        if meta:
            net.meta = {**(getattr(net, "meta", None) or {}), **dict(meta)}
        out["model"] = net.eval()
    return out


class StackInference:
    """:func:`infer_studies` as a bundle component (``evaluator`` of ``configs/inference.json``).

    Args:
        dataset_dir: folder of studies (:func:`find_studies`).
        output_dir: where the results go (``<study>/<direction>/`` and ``summary.json``).
        network: the network, or a model name / weights file (:func:`monai_npc.register`'s ``model``).
        ckpt_path: weights loaded into ``network`` when :meth:`run` starts (a bundle's
            ``models/model.pt`` or a checkpoint with a ``"model"`` entry); ``None`` uses it as it is.
        model_meta: added to ``network.meta``: how :func:`monai_npc.register` feeds the model
            (``{"bundle": "npc_acdc"}``: the heart window at the trained resolution).
        model_name: the name the outputs record for ``network`` when it is a module (the bundle's ``"acdc"``); a
            network given by name or file is recorded by that name.
        others: see :func:`infer_studies`.
    """

    def __init__(
        self, dataset_dir: PathLike, output_dir: PathLike, network: Union[str, nn.Module], ckpt_path: Optional[PathLike] = None,
        model_meta: Optional[Mapping[str, Any]] = None, model_name: Optional[str] = None,
        directions: Sequence[str] = ("ED->ES", "ES->ED"), device: Union[str, torch.device] = "cpu", threads: Optional[int] = 1,
        overview: bool = True, strict: bool = False, progress: bool = True, basal_descent: bool = True, align: str = "auto",
    ) -> None:
        self.kwargs = dict(
            root=dataset_dir, out=output_dir, model=network, model_name=model_name, directions=list(directions), device=device,
            threads=threads, overview=overview, strict=strict, progress=progress, basal_descent=bool(basal_descent), align=align,
        )
        self.ckpt_path, self.model_meta = ckpt_path, model_meta
        self.summary: Optional[Dict[str, Any]] = None

    def run(self) -> Dict[str, Any]:
        self.summary = infer_studies(**_with_weights(self.kwargs, self.ckpt_path, self.model_meta))
        return self.summary


class StackEvaluation:
    """:func:`evaluate_studies` as a bundle component (``evaluator`` of ``configs/evaluate.json``).

    ``resume`` defaults to ``False`` here: a bundle run's ``metrics.json`` describes that run only.
    ``ckpt_path``, ``model_meta``: as for :class:`StackInference`. Other arguments: see :func:`evaluate_studies`.
    """

    def __init__(
        self, dataset_dir: PathLike, output_dir: PathLike, network: Union[str, nn.Module], ckpt_path: Optional[PathLike] = None,
        model_meta: Optional[Mapping[str, Any]] = None, model_name: Optional[str] = None,
        with_demons: bool = False, demons_iterations: int = 100, demons_smoothing: float = 1.5,
        directions: Sequence[str] = ("ED->ES", "ES->ED"), max_studies: Optional[int] = None, device: Union[str, torch.device] = "cpu",
        threads: int = 1, resume: bool = False, strict: bool = False, figure: bool = True, progress: bool = True,
        basal_descent: bool = True,
    ) -> None:
        self.kwargs = dict(
            root=dataset_dir, out=output_dir, model=network, model_name=model_name, with_demons=bool(with_demons),
            demons_iterations=demons_iterations, demons_smoothing=demons_smoothing, directions=list(directions),
            max_studies=max_studies, device=device, threads=threads, resume=resume, strict=strict, figure=figure, progress=progress,
            basal_descent=bool(basal_descent),
        )
        self.ckpt_path, self.model_meta = ckpt_path, model_meta
        self.metrics: Optional[Dict[str, Any]] = None

    def run(self) -> Dict[str, Any]:
        self.metrics = evaluate_studies(**_with_weights(self.kwargs, self.ckpt_path, self.model_meta))
        return self.metrics
