"""The files of a whole-stack training run (:mod:`monai_npc.engines.stack_training`): the resumable
``checkpoint.pt``, its random streams, the meta of the weights it ships, and :func:`export_weights` (any
checkpoint of a run -> the shipped weights format that ``register`` and ``load_pretrained`` read).

A checkpoint is a plain dict (``torch.load(..., weights_only=True)``): ``format`` (:data:`CHECKPOINT_FORMAT`),
``model``, ``optimizer``, ``epoch``, ``step``, ``curve``, ``best_dice``, ``network_config``, ``network_class``,
``train_config`` and ``generators`` (``order`` and ``augment``: ``{"device", "state"}``).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Callable, Dict, Mapping, Optional

import torch
from torch import nn

from monai_npc.networks.nets import load_pretrained, save_pretrained
from monai_npc.networks.nets.pretrained import ARCHITECTURES
from monai_npc.serialization import safe_load

__all__ = ["CHECKPOINT_FORMAT", "PROVENANCE", "network_from_config", "read_checkpoint", "generator_state", "restore_generator",
           "training_meta", "export_weights"]

CHECKPOINT_FORMAT = 1
#: meta entries about where other weights came from, not carried over by ``export_weights(meta_from=...)``
PROVENANCE = ("bundle_name", "version", "changelog", "heldout_test", "trained_on", "training", "weights_sha256")


def network_from_config(network_config: Mapping[str, Any]) -> nn.Module:
    """A fresh network of a saved configuration: the class its ``architecture`` entry names (absent: NPCNet)."""
    config = dict(network_config)
    architecture = config.get("architecture", "npc2d")
    if architecture not in ARCHITECTURES:
        raise ValueError(f"unknown network architecture {architecture!r}; known: {sorted(ARCHITECTURES)}.")
    if architecture == "npc2d":
        config.pop("architecture", None)
    return ARCHITECTURES[architecture](**config)


def read_checkpoint(path: str | Path) -> Dict[str, Any]:
    """The state of a ``checkpoint.pt`` to resume (``resume=path``). Raises ``ValueError`` naming ``resume`` when it is
    not a checkpoint of ``train_stacks``, and :func:`~monai_npc.serialization.safe_load`'s errors."""
    state = safe_load(path, what="training checkpoint")
    if not isinstance(state, dict) or state.get("format") != CHECKPOINT_FORMAT:
        raise ValueError(f"resume={str(path)!r} is not a checkpoint of train_stacks (format {CHECKPOINT_FORMAT}).")
    return state


def generator_state(gen: torch.Generator) -> Dict[str, Any]:
    """``{"device", "state"}`` of a random stream, for a checkpoint."""
    return {"device": str(gen.device), "state": gen.get_state()}


def restore_generator(gen: torch.Generator, saved: Mapping[str, Any], reseed: int, message: Callable[[str], None]) -> None:
    """Continue a saved stream on ``gen`` when both are on the same kind of device (a CUDA stream saved by rank 0 on
    ``cuda:0`` continues on ``cuda:1``); else reseed ``gen`` with ``reseed`` and say so through ``message``."""
    if torch.device(str(saved.get("device"))).type == gen.device.type:
        gen.set_state(saved["state"])
    else:
        gen.manual_seed(reseed)
        message(f"random stream saved on {saved.get('device')}, now on {gen.device}: reseeded with {reseed}")


def training_meta(pack: str, epoch: int, val_dice: float, train_slices: int, size: int, label_weight: float,
                  learning_rate: float, bf16: bool) -> Dict[str, Any]:
    """The weights' ``meta`` of a whole-stack training state: what ``register`` reads (``preprocessing`` per-slice
    min-max, ``input_size`` the window, ``field_of_view`` one heart window per stack) and how it was trained."""
    return {"preprocessing": "minmax", "input_size": int(size), "field_of_view": "heart-stack",
            "trained_on": f"whole ACDC stacks of {Path(pack).name} ({train_slices} training slices), labels in the loss only",
            "training": {"epoch": int(epoch), "val_dice": float(val_dice), "label_weight": label_weight,
                         "learning_rate": learning_rate, "bf16": bf16, "script": "monai_npc.engines.stack_training"}}


def export_weights(checkpoint: str | Path, path: str | Path, meta: Optional[Mapping[str, Any]] = None,
                   meta_from: Optional[str] = None, **overrides: Any) -> Path:
    """A ``checkpoint.pt`` (or ``best.pt``) of :func:`~monai_npc.engines.stack_training.train_stacks` -> weights in the
    shipped format (:func:`~monai_npc.networks.nets.save_pretrained`: ``{"model", "config", "meta"}``), loadable by
    ``load_pretrained`` / ``register(model=path)``.

    ``overrides``: NPCNet arguments for inference (e.g. ``refine_iterations=50``); ``meta_from``: weights whose meta
    to start from (e.g. ``"acdc"``: how ``register`` runs them, their ``bundle`` included, which names the register
    settings of their dataset; without their provenance, :data:`PROVENANCE`);
    ``meta``: entries over both.
    """
    state = safe_load(checkpoint, what="training checkpoint")
    if not isinstance(state, dict) or "model" not in state:
        raise ValueError(f"{checkpoint} holds no 'model' state; not a file of train_stacks.")
    network_config = state.get("network_config") or state.get("config")
    if network_config is None:
        raise ValueError(f"{checkpoint} records no NPCNet configuration (a custom network): export it with its own code.")
    net = network_from_config({**dict(network_config), "detach_steps": False, **overrides})
    net.load_state_dict(state["model"])
    base = {k: v for k, v in dict(load_pretrained(meta_from).meta if meta_from else {}).items() if k not in PROVENANCE}
    recorded = dict(state.get("meta") or {})
    if "curve" in state:
        done = [r for r in state["curve"] if r.get("val_dice") is not None]
        recorded["training"] = {"epoch": int(state["epoch"]), "steps": int(state["step"]),
                                "val_dice": done[-1]["val_dice"] if done else None, "script": "monai_npc.engines.stack_training"}
    return save_pretrained(net, path, {**base, **recorded, **dict(meta or {})})
