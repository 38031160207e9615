"""Bundle arguments: checks of the training arguments, booleans from the command line, start weights.

The bundle configs (``bundles/*/configs/*.json``) call these before any data is read:
:func:`check_training_args`, :func:`as_bool` (``--resume true``), :func:`require_file`
(``--ckpt_path``) and :func:`init_weights` (``--init_weights``, fine-tuning).
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any, Callable, Dict, Mapping, Optional, Tuple, Union

import torch
from torch import nn

__all__ = ["check_training_args", "as_bool", "unwrap_network", "require_file", "init_weights"]

logger = logging.getLogger(__name__)


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
