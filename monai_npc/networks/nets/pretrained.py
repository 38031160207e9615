"""Shipped NPC weights: save and load ``NPCNet`` with its configuration."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Dict, List, Mapping, Optional

import torch

from .npc import NPCNet

__all__ = ["WEIGHTS_DIR", "available_models", "load_pretrained", "save_pretrained"]

#: folder of the weights shipped inside the package (``monai_npc/weights/NAME.pt``)
WEIGHTS_DIR = Path(__file__).resolve().parents[2] / "weights"


def available_models() -> List[str]:
    """Names of the shipped weight files."""
    return sorted(p.stem for p in WEIGHTS_DIR.glob("*.pt"))


def save_pretrained(net: NPCNet, path: str | Path, meta: Optional[Mapping[str, Any]] = None) -> Path:
    """Save ``{"config", "state_dict", "meta"}`` so :func:`load_pretrained` can rebuild ``net``."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    torch.save({"config": dict(net.config), "state_dict": net.state_dict(), "meta": dict(meta or {})}, path)
    return path


def load_pretrained(name_or_path: str | Path, map_location: str | torch.device = "cpu", **overrides: Any) -> NPCNet:
    """An ``NPCNet`` from a shipped name (``available_models()``) or a file saved by :func:`save_pretrained`.

    ``overrides`` replace configuration entries that do not change the parameters (e.g.
    ``num_steps``). The loaded network is in eval mode; ``net.meta`` holds the file's ``meta``.
    """
    path = Path(name_or_path)
    if not path.is_file() and not path.suffix and len(path.parts) == 1:  # a bare name: a shipped model
        path = WEIGHTS_DIR / f"{name_or_path}.pt"
        if not path.is_file():
            raise FileNotFoundError(
                f"no shipped weights named {str(name_or_path)!r} (looked for {path}); available: {available_models() or 'none'}."
            )
    if not path.is_file():
        raise FileNotFoundError(f"weights file {path} does not exist.")
    try:
        blob: Dict[str, Any] = torch.load(path, map_location=map_location, weights_only=False)
    except Exception as err:  # a corrupt or foreign file
        raise ValueError(f"cannot read NPC weights from {path}: {err}") from err
    if not isinstance(blob, dict) or "config" not in blob or "state_dict" not in blob:
        raise ValueError(f"{path} is not an NPC weights file (expected a dict with 'config' and 'state_dict').")
    config = dict(blob["config"])
    config.update(overrides)
    net = NPCNet(**config)
    net.load_state_dict(blob["state_dict"])
    net.meta = dict(blob.get("meta", {}))
    return net.eval()
