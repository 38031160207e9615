"""Shared builders of the weights reliability tests: a tiny NPCNet, its files and bundles, a booby-trapped pickle."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Dict

import torch

from monai_npc.networks.nets import NPCNet, save_pretrained

#: a network small enough to build, save and load in milliseconds
TINY: Dict[str, Any] = dict(kernel_size=8, stride=4, num_pairs=4, top_k=2, gate_dim=8, hidden_dim=8, num_pe=8,
                            head_channels=4, num_steps=1)


class Trap:
    """Unpickling this object creates ``marker`` (``open(marker, "w")``): what a malicious weights file would run."""

    def __init__(self, marker: Path) -> None:
        self.marker = str(marker)

    def __reduce__(self):
        return open, (self.marker, "w")


def tiny_net() -> NPCNet:
    return NPCNet(**TINY).eval()


def write_weights(path: Path, net: NPCNet = None, **meta: Any) -> Path:
    """A save_pretrained file of ``net`` (default: a new tiny one)."""
    return save_pretrained(net if net is not None else tiny_net(), path, meta)


def write_trap(path: Path, marker: Path, net: NPCNet = None) -> Path:
    """A file shaped like save_pretrained's whose ``meta`` holds a :class:`Trap` creating ``marker`` when unpickled."""
    net = net if net is not None else tiny_net()
    path.parent.mkdir(parents=True, exist_ok=True)
    torch.save({"model": net.state_dict(), "config": dict(net.config), "meta": {"note": Trap(marker)}}, path)
    return path


def write_bundle(folder: Path, weights: Any, metadata: Dict[str, Any] = None) -> Path:
    """A minimal MONAI bundle: ``configs/inference.json`` (tiny ``network_def``), ``models/model.pt`` = ``weights``
    (a state dict, or a callable writing the file), and ``configs/metadata.json`` when ``metadata`` is given."""
    (folder / "configs").mkdir(parents=True, exist_ok=True)
    (folder / "models").mkdir(parents=True, exist_ok=True)
    network_def = {"_target_": "monai_npc.networks.nets.NPCNet", "spatial_dims": 2, **TINY}
    (folder / "configs" / "inference.json").write_text(json.dumps({"network_def": network_def}))
    if metadata is not None:
        (folder / "configs" / "metadata.json").write_text(json.dumps(metadata))
    if callable(weights):
        weights(folder / "models" / "model.pt")
    else:
        torch.save(weights, folder / "models" / "model.pt")
    return folder
