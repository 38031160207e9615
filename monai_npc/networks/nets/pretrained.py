"""NPC weights: save and load ``NPCNet`` with its configuration, from shipped names, files or MONAI bundles.

A *model argument* (``load_pretrained(model)``, ``monai-npc register --model``, the Slicer module
and the MONAI Label task) may be

- a shipped name (:func:`available_models`): ``monai_npc/weights/NAME.pt``, or, for the names of
  :data:`BUNDLE_MODELS` when that file is absent, the bundle of the same name in a clone's
  ``bundles/`` folder;
- a file written by :func:`save_pretrained` (``{"config", "state_dict", "meta"}``);
- a MONAI bundle folder (``configs/inference.json`` with ``network_def`` and ``models/model.pt``);
- a bundle's ``models/model.pt`` (a bare state dict): the network configuration then comes from
  ``configs/inference.json`` of that bundle (parsed with :class:`monai.bundle.ConfigParser`).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Dict, List, Mapping, Optional, Tuple

import torch

from monai_npc.utils import atomic_torch_save

from .npc import NPCNet

__all__ = [
    "BUNDLE_MODELS",
    "BUNDLES_DIR",
    "WEIGHTS_DIR",
    "available_models",
    "bundle_network_config",
    "export_bundle_weights",
    "load_pretrained",
    "model_argument_help",
    "save_pretrained",
]

#: folder of the weights shipped inside the package (``monai_npc/weights/NAME.pt``)
WEIGHTS_DIR = Path(__file__).resolve().parents[2] / "weights"
#: ``bundles/`` beside the package: present in a clone (or an editable install), not in a wheel
BUNDLES_DIR = Path(__file__).resolve().parents[3] / "bundles"
#: shipped names resolved from a bundle of the clone when ``WEIGHTS_DIR/NAME.pt`` is absent
BUNDLE_MODELS: Dict[str, str] = {"acdc": "npc_acdc", "camus": "npc_camus"}

_BUNDLE_CONFIG = Path("configs") / "inference.json"
_BUNDLE_WEIGHTS = Path("models") / "model.pt"


def available_models() -> List[str]:
    """Names usable as a model argument: the shipped weight files and the bundles of a clone."""
    names = {p.stem for p in WEIGHTS_DIR.glob("*.pt")}
    names.update(n for n, b in BUNDLE_MODELS.items() if _is_bundle(BUNDLES_DIR / b))
    return sorted(names)


def model_argument_help() -> str:
    """What a model argument may be (for error messages and ``--help``)."""
    return (
        f"a model may be a shipped name ({', '.join(available_models()) or 'none installed'}), a .pt file written by "
        "monai_npc.networks.nets.save_pretrained, a MONAI bundle folder (holding configs/inference.json and "
        "models/model.pt), or a bundle's models/model.pt"
    )


def save_pretrained(net: NPCNet, path: str | Path, meta: Optional[Mapping[str, Any]] = None) -> Path:
    """Save ``{"config", "state_dict", "meta"}`` so :func:`load_pretrained` can rebuild ``net`` (written atomically)."""
    return atomic_torch_save({"config": dict(net.config), "state_dict": net.state_dict(), "meta": dict(meta or {})}, path)


def _is_bundle(folder: Path) -> bool:
    return (folder / _BUNDLE_CONFIG).is_file() and (folder / _BUNDLE_WEIGHTS).is_file()


def bundle_network_config(bundle_dir: str | Path) -> Dict[str, Any]:
    """``NPCNet`` constructor arguments of a bundle: ``network_def`` of ``configs/inference.json``, references resolved.

    Raises:
        FileNotFoundError: no ``configs/inference.json``.
        ValueError: it has no ``network_def``, or one that is not an ``NPCNet``.
    """
    from monai.bundle import ConfigParser

    config_file = Path(bundle_dir) / _BUNDLE_CONFIG
    if not config_file.is_file():
        raise FileNotFoundError(f"{config_file} does not exist; {model_argument_help()}.")
    parser = ConfigParser()
    parser.read_config(str(config_file))
    if "network_def" not in parser.get():
        raise ValueError(f"{config_file} has no 'network_def'; cannot tell which network models/model.pt holds.")
    component = parser.get_parsed_content("network_def", instantiate=False)
    config = dict(component.get_config() if hasattr(component, "get_config") else component)
    target = str(config.pop("_target_", ""))
    if target.rsplit(".", 1)[-1] != "NPCNet":
        raise ValueError(f"{config_file}: network_def is {target or 'not a component'}, not monai_npc's NPCNet.")
    return {k: v for k, v in config.items() if not str(k).startswith("_")}


def _bundle_meta(bundle_dir: Path) -> Dict[str, Any]:
    """``meta`` of a model loaded from a bundle: its name, version, changelog entry and model grid size."""
    meta: Dict[str, Any] = {"bundle": str(bundle_dir)}
    meta_file = bundle_dir / "configs" / "metadata.json"
    if meta_file.is_file():
        info = json.loads(meta_file.read_text())
        version = info.get("version")
        meta.update(bundle_name=info.get("name"), version=version, changelog=info.get("changelog", {}).get(version))
        shape = info.get("network_data_format", {}).get("inputs", {}).get("image", {}).get("spatial_shape")
        if isinstance(shape, list) and shape and all(isinstance(s, int) and s == shape[0] for s in shape):
            meta["input_size"] = shape[0]
    return {k: v for k, v in meta.items() if v is not None}


def _state_dict(blob: Any, path: Path) -> Dict[str, torch.Tensor]:
    """The network state dict of a bundle weights file (bare, or ``{"model": ...}`` from a checkpoint)."""
    if isinstance(blob, dict) and len(blob) == 1 and isinstance(next(iter(blob.values())), dict):
        blob = next(iter(blob.values()))
    if not isinstance(blob, dict) or not blob or not all(isinstance(v, torch.Tensor) for v in blob.values()):
        raise ValueError(f"{path} is not an NPC weights file (neither save_pretrained's dict nor a state dict).")
    return blob


def _read(path: Path, map_location: Any) -> Any:
    if path.stat().st_size == 0:
        raise ValueError(f"weights file {path} is empty (0 bytes).")
    try:
        return torch.load(path, map_location=map_location, weights_only=False)
    except Exception as err:  # a corrupt or foreign file
        raise ValueError(f"cannot read NPC weights from {path}: {err}") from err


def _resolve(name_or_path: str | Path, map_location: Any) -> Tuple[Dict[str, Any], Dict[str, torch.Tensor], Dict[str, Any]]:
    """``(config, state_dict, meta)`` of a model argument (see the module docstring)."""
    spec = str(name_or_path).strip()
    if not spec:
        raise ValueError(f"the model argument is empty; {model_argument_help()}.")
    path = Path(spec).expanduser()
    if not path.suffix and len(path.parts) == 1 and (not path.exists() or spec in available_models()):  # a name
        shipped = WEIGHTS_DIR / f"{spec}.pt"
        bundle = BUNDLES_DIR / BUNDLE_MODELS.get(spec, "")
        if shipped.is_file():
            path = shipped
        elif spec in BUNDLE_MODELS and _is_bundle(bundle):
            path = bundle
        else:
            raise FileNotFoundError(f"no shipped weights named {spec!r}; {model_argument_help()}.")
    if path.is_dir():
        if not _is_bundle(path):
            raise FileNotFoundError(
                f"{path} is a folder but not a MONAI bundle (it needs {_BUNDLE_CONFIG} and {_BUNDLE_WEIGHTS}); "
                f"{model_argument_help()}."
            )
        path = path / _BUNDLE_WEIGHTS
    if not path.is_file():
        raise FileNotFoundError(f"weights file {path} does not exist; {model_argument_help()}.")
    blob = _read(path, map_location)
    if isinstance(blob, dict) and "config" in blob and "state_dict" in blob:
        return dict(blob["config"]), blob["state_dict"], dict(blob.get("meta", {}))
    state = _state_dict(blob, path)
    bundle_dir = path.resolve().parent.parent
    if not (bundle_dir / _BUNDLE_CONFIG).is_file():
        raise ValueError(
            f"{path} is a bare state dict without its network configuration: pass the bundle folder or a "
            f"models/model.pt inside a bundle (with {_BUNDLE_CONFIG}), or a file written by save_pretrained."
        )
    return bundle_network_config(bundle_dir), state, _bundle_meta(bundle_dir)


def load_pretrained(name_or_path: str | Path, map_location: str | torch.device = "cpu", **overrides: Any) -> NPCNet:
    """An ``NPCNet`` from a model argument: a shipped name, a :func:`save_pretrained` file, a bundle or its ``models/model.pt``.

    ``overrides`` replace configuration entries that do not change the parameters (e.g.
    ``num_steps``). The loaded network is in eval mode; ``net.meta`` holds the file's ``meta``
    (for a bundle: its name, version, changelog entry and ``input_size``).

    Raises:
        FileNotFoundError: no such name, file or bundle (the message says what a model argument may be).
        ValueError: an empty argument, or a file that is not NPC weights.
    """
    config, state, meta = _resolve(name_or_path, map_location)
    config.update(overrides)
    net = NPCNet(**config)
    try:
        net.load_state_dict(state)
    except RuntimeError as err:
        raise ValueError(f"the weights of {name_or_path} do not fit their NPCNet configuration: {err}") from err
    net.meta = meta
    return net.eval()


def export_bundle_weights(bundle_dir: str | Path, out: str | Path, meta: Optional[Mapping[str, Any]] = None) -> Path:
    """Write a bundle's ``models/model.pt`` with its ``network_def`` as a :func:`save_pretrained` file.

    ``meta`` is added to the bundle's (name, version, changelog entry, ``input_size``, and
    ``preprocessing: "minmax"``). This is how ``monai_npc/weights/camus.pt`` is made from
    ``bundles/npc_camus`` (``examples/export_bundle_weights.py``).
    """
    bundle_dir = Path(bundle_dir)
    if not _is_bundle(bundle_dir):
        raise FileNotFoundError(f"{bundle_dir} is not a MONAI bundle (it needs {_BUNDLE_CONFIG} and {_BUNDLE_WEIGHTS}).")
    net = load_pretrained(bundle_dir)
    info = {"preprocessing": "minmax", **net.meta, **dict(meta or {})}
    info["bundle"] = bundle_dir.resolve().name
    return save_pretrained(net, out, info)
