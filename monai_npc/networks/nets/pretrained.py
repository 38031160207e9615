"""NPC weights: save and load ``NPCNet`` with its configuration, from shipped names, files or MONAI bundles.

A *model argument* (``load_pretrained(model)``, ``monai-npc register --model``, the Slicer module
and the MONAI Label task) may be

- a shipped name (:func:`available_models`): ``monai_npc/weights/NAME.pt``, or, for the names of
  :data:`BUNDLE_MODELS` when that file is absent, the bundle of the same name in a clone's
  ``bundles/`` folder;
- a file written by :func:`save_pretrained` (``{"model", "config", "meta"}``; earlier releases wrote
  ``state_dict`` for ``model``);
- a MONAI bundle folder (``configs/inference.json`` with ``network_def`` and ``models/model.pt``);
- a bundle's ``models/model.pt`` (a bare state dict): the network configuration then comes from
  ``configs/inference.json`` of that bundle (parsed with :class:`monai.bundle.ConfigParser`).

Weights are data, never code: every file is read with ``torch.load(weights_only=True)``
(:func:`monai_npc.serialization.safe_load`), and weights with a recorded SHA-256 (``meta["weights_sha256"]``
of the file, ``weights_sha256`` of a bundle's ``configs/metadata.json``) are checked before use
(:func:`check_weights`, ``monai-npc verify-weights``). The shipped ``acdc`` and ``camus`` files are
also the bundles' ``models/model.pt`` (byte-identical copies of ``monai_npc/weights/NAME.pt``, which git
stores once: a bundle folder copied or zipped elsewhere keeps its weights; :func:`mirror_bundle_weights`).
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Dict, List, Mapping, Optional, Tuple

import torch

from monai_npc.io_safety import atomic_copy
from monai_npc.serialization import CHECKSUM_KEY, ChecksumError, plain, safe_load, state_dict_sha256
from monai_npc.utils import atomic_torch_save

from .npc import NPCNet
from .npc_slice_context import SLICE_CONTEXT, SliceContextNPC
from .npc_through_plane import THROUGH_PLANE, ThroughPlaneNPC
from .stack_npc import StackNPC

__all__ = [
    "BUNDLE_MODELS",
    "BUNDLES_DIR",
    "WEIGHTS_DIR",
    "WeightsCheck",
    "available_models",
    "bundle_network_config",
    "check_weights",
    "export_bundle_weights",
    "link_bundle_weights",
    "load_pretrained",
    "mirror_bundle_weights",
    "model_argument_help",
    "record_checksum",
    "save_pretrained",
    "weights_network_class",
]

#: folder of the weights shipped inside the package (``monai_npc/weights/NAME.pt``)
WEIGHTS_DIR = Path(__file__).resolve().parents[2] / "weights"
#: ``bundles/`` beside the package: present in a clone (or an editable install), not in a wheel
BUNDLES_DIR = Path(__file__).resolve().parents[3] / "bundles"
#: shipped names resolved from a bundle of the clone when ``WEIGHTS_DIR/NAME.pt`` is absent
BUNDLE_MODELS: Dict[str, str] = {"acdc": "npc_acdc", "camus": "npc_camus"}

_BUNDLE_CONFIG = Path("configs") / "inference.json"
_BUNDLE_WEIGHTS = Path("models") / "model.pt"
_BUNDLE_METADATA = Path("configs") / "metadata.json"


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


def save_pretrained(net: torch.nn.Module, path: str | Path, meta: Optional[Mapping[str, Any]] = None) -> Path:
    """Save ``{"model", "config", "meta"}`` so :func:`load_pretrained` can rebuild ``net`` (written atomically;
    any module with a ``config`` dict of its constructor arguments, e.g. ``NPCNet`` or ``LabelPrior``).

    ``model`` is the state dict, ``config`` the constructor arguments, ``meta`` the given metadata
    plus the weights checksum ``meta["weights_sha256"]`` (:func:`~monai_npc.serialization.state_dict_sha256`);
    config and meta are stored as plain types, so the file loads with ``torch.load(weights_only=True)``.
    The ``model`` key also lets MONAI's ``CheckpointLoader(load_dict={"model": net})`` read the file.
    """
    state = net.state_dict()
    info = {**dict(meta or {}), CHECKSUM_KEY: state_dict_sha256(state)}
    return atomic_torch_save({"model": state, "config": plain(dict(net.config)), "meta": plain(info)}, path)


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
    meta_file = bundle_dir / _BUNDLE_METADATA
    if meta_file.is_file():
        info = json.loads(meta_file.read_text(encoding="utf-8"))
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
    elif isinstance(blob, dict) and isinstance(blob.get("model"), dict) and "trainer" in blob:  # a training checkpoint_epoch=N.pt
        blob = blob["model"]
    if not isinstance(blob, dict) or not blob or not all(isinstance(v, torch.Tensor) for v in blob.values()):
        raise ValueError(f"{path} is not an NPC weights file (neither save_pretrained's dict nor a state dict).")
    return blob


def _locate(name_or_path: str | Path) -> Path:
    """The weights file of a model argument: a shipped name, a bundle folder (its ``models/model.pt``) or a file."""
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
        elif spec == "phase-correlation":  # register's classical baseline: a network without weights
            raise FileNotFoundError("'phase-correlation' has no weights to load: it is monai_npc.networks.nets.PhaseCorrelationNet() "
                                    "(monai_npc.register(..., model='phase-correlation') builds it).")
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
    return path


def _contents(path: Path, map_location: Any = "cpu") -> Tuple[Optional[Dict[str, Any]], Dict[str, torch.Tensor], Dict[str, Any]]:
    """``(config or None, state_dict, meta)`` of a weights file, read as data only (:func:`~monai_npc.serialization.safe_load`)."""
    blob = safe_load(path, map_location=map_location, mmap=True, what="NPC weights")
    if isinstance(blob, dict) and "config" in blob and ("model" in blob or "state_dict" in blob):
        state = blob["model"] if "model" in blob else blob["state_dict"]  # "state_dict": files of earlier releases
        return dict(blob["config"]), state, dict(blob.get("meta") or {})
    return None, _state_dict(blob, path), {}


def _bundle_of(path: Path) -> Optional[Path]:
    """The bundle folder of a weights file two levels below it (e.g. ``models/model.pt``), else ``None``.

    The path is made absolute without following links: a bundle's link to the package's copy stays in the bundle.
    """
    bundle = Path(os.path.abspath(path)).parent.parent
    return bundle if (bundle / _BUNDLE_CONFIG).is_file() else None


def _recorded_checksums(path: Path, meta: Mapping[str, Any]) -> Dict[str, str]:
    """Where a checksum of ``path``'s weights is recorded, and its value: the file's ``meta``, its bundle's metadata.json."""
    found: Dict[str, str] = {}
    if meta.get(CHECKSUM_KEY):
        found[f"meta of {path}"] = str(meta[CHECKSUM_KEY])
    bundle = _bundle_of(path)
    meta_file = bundle / _BUNDLE_METADATA if bundle is not None else None
    if meta_file is not None and meta_file.is_file():
        value = json.loads(meta_file.read_text(encoding="utf-8")).get(CHECKSUM_KEY)
        if value:
            found[str(meta_file)] = str(value)
    return found


def _verify(path: Path, state: Mapping[str, torch.Tensor], recorded: Mapping[str, str]) -> str:
    """The weights checksum of ``state``, checked against every ``recorded`` one.

    Raises:
        ChecksumError: a recorded checksum differs (the message names the file and what to do).
    """
    actual = state_dict_sha256(state)
    wrong = {source: value for source, value in recorded.items() if value != actual}
    if wrong:
        listed = "; ".join(f"{source} records {value}" for source, value in wrong.items())
        raise ChecksumError(
            f"{path}: the weights do not match their recorded SHA-256 ({listed}; the tensors hash to {actual}). "
            "The file is corrupt or was modified: restore it (git checkout, or reinstall monai_npc). If you changed "
            f"the weights on purpose (e.g. retrained a bundle), record the new checksum with "
            f"`python -m monai_npc.cli.main verify-weights --record {path}`."
        )
    return actual


@dataclass
class WeightsCheck:
    """Result of :func:`check_weights`: ``status`` is ``"ok"``, ``"mismatch"`` or ``"no checksum"``."""

    path: Path
    status: str
    actual: str
    recorded: Dict[str, str] = field(default_factory=dict)
    message: str = ""


def check_weights(name_or_path: str | Path) -> WeightsCheck:
    """Check the weights of a model argument (name, file or bundle folder) against their recorded SHA-256.

    Raises:
        FileNotFoundError, ValueError: as :func:`load_pretrained` (no such model, unreadable or unsafe file).
    """
    path = _locate(name_or_path)
    _, state, meta = _contents(path)
    recorded = _recorded_checksums(path, meta)
    if not recorded:
        return WeightsCheck(path, "no checksum", state_dict_sha256(state), message=f"{path}: no recorded checksum.")
    try:
        actual = _verify(path, state, recorded)
    except ChecksumError as err:
        return WeightsCheck(path, "mismatch", state_dict_sha256(state), recorded, str(err))
    return WeightsCheck(path, "ok", actual, recorded, f"{path}: OK, the weights match their recorded SHA-256 {actual}.")


def record_checksum(name_or_path: str | Path) -> WeightsCheck:
    """Record the current weights checksum of a model argument: in a bundle's metadata.json and in a save_pretrained file's meta.

    A bundle's ``models/model.pt`` that links to the package's copy has that file rewritten (the
    link stays); a bundle's own copy (:func:`mirror_bundle_weights`) is rewritten alone, so mirror it
    again afterwards. Use it after changing the weights on purpose (e.g. a retrained bundle).
    """
    path = _locate(name_or_path)
    config, state, meta = _contents(path, map_location="cpu")
    actual = state_dict_sha256(state)
    bundle = _bundle_of(path)
    if bundle is not None:
        meta_file = bundle / _BUNDLE_METADATA
        info = json.loads(meta_file.read_text(encoding="utf-8")) if meta_file.is_file() else {}
        info[CHECKSUM_KEY] = actual
        meta_file.write_text(json.dumps(info, indent=4, ensure_ascii=False) + "\n", encoding="utf-8")
    if config is not None and meta.get(CHECKSUM_KEY) != actual:
        state = {k: v.clone() for k, v in state.items()}  # detach from the mapped file before replacing it
        atomic_torch_save({"model": state, "config": plain(config), "meta": plain({**meta, CHECKSUM_KEY: actual})},
                          path.resolve())
    return check_weights(path)


def _resolve(
    name_or_path: str | Path, map_location: Any, verify: bool = True
) -> Tuple[Dict[str, Any], Dict[str, torch.Tensor], Dict[str, Any]]:
    """``(config, state_dict, meta)`` of a model argument (see the module docstring), its checksum verified if ``verify``."""
    path = _locate(name_or_path)
    config, state, meta = _contents(path, map_location)
    if verify:
        _verify(path, state, _recorded_checksums(path, meta))
    if config is not None:
        return config, state, meta
    bundle_dir = _bundle_of(path)
    if bundle_dir is None:
        raise ValueError(
            f"{path} is a bare state dict without its network configuration: pass the bundle folder or a "
            f"models/model.pt inside a bundle (with {_BUNDLE_CONFIG}), or a file written by save_pretrained; weights a "
            "bundle training wrote outside its bundle (--ckpt_dir) become one with "
            "`python examples/export_bundle_weights.py BUNDLE_DIR OUT.pt --weights THAT_FILE`."
        )
    return bundle_network_config(bundle_dir), state, _bundle_meta(bundle_dir)


#: network classes by the ``architecture`` entry of a saved configuration (absent: ``NPCNet``)
ARCHITECTURES: Dict[str, type] = {"npc2d": NPCNet, SLICE_CONTEXT: SliceContextNPC, THROUGH_PLANE: ThroughPlaneNPC}


def _network_to_load(config: Mapping[str, Any]) -> NPCNet | StackNPC:
    """An ``NPCNet`` (or the class of ``config["architecture"]``, :data:`ARCHITECTURES`) of ``config`` whose
    parameters are about to be replaced by loaded weights.

    Its filters start random instead of running the Fourier initialisation (most of the build time)
    that the weights overwrite anyway; the global random state is left as it was, and ``net.config``
    keeps the configured ``init``.
    """
    architecture = config.get("architecture", "npc2d")
    if architecture not in ARCHITECTURES:
        raise ValueError(f"unknown network architecture {architecture!r} in the weights' configuration; known: {sorted(ARCHITECTURES)}.")
    options = {k: v for k, v in config.items() if architecture != "npc2d" or k != "architecture"}
    with torch.random.fork_rng(devices=[]):
        net = ARCHITECTURES[architecture](**{**options, "init": "random"})
    net.config["init"] = config.get("init", "fourier")
    return net


def weights_network_class(name_or_path: str | Path) -> type:
    """The network class :func:`load_pretrained` builds for a model argument (from the ``architecture`` entry of its
    configuration, :data:`ARCHITECTURES`), read without building the network or verifying the checksum.

    Raises:
        FileNotFoundError, ValueError: as :func:`load_pretrained` (no such weights, not NPC weights, an unknown
            architecture).
    """
    config, _, _ = _resolve(name_or_path, "cpu", verify=False)
    architecture = config.get("architecture", "npc2d")
    if architecture not in ARCHITECTURES:
        raise ValueError(f"unknown network architecture {architecture!r} in the weights' configuration; known: {sorted(ARCHITECTURES)}.")
    return ARCHITECTURES[architecture]


def load_pretrained(name_or_path: str | Path, map_location: str | torch.device = "cpu", **overrides: Any) -> NPCNet | StackNPC:
    """An ``NPCNet`` from a model argument: a shipped name, a :func:`save_pretrained` file, a bundle or its ``models/model.pt``.

    Weights whose configuration says ``"architecture": "slice_context"`` or ``"through_plane"`` rebuild a
    :class:`~monai_npc.networks.nets.SliceContextNPC` or :class:`~monai_npc.networks.nets.ThroughPlaneNPC` (a 3-D field
    per stack, which ``register`` writes).

    ``overrides`` replace configuration entries that do not change the parameters (e.g.
    ``num_steps``). The loaded network is in eval mode; ``net.meta`` holds the file's ``meta``
    (for a bundle: its name, version, changelog entry and ``input_size``).

    Raises:
        FileNotFoundError: no such name, file or bundle (the message says what a model argument may be).
        ValueError: an empty argument, or a file that is not NPC weights.
        UnsafeWeightsError: a file that would need code unpickled (a ``ValueError``; nothing is unpickled).
        ChecksumError: weights that do not match their recorded SHA-256 (a ``ValueError``).
    """
    return _load(name_or_path, map_location, True, overrides)


def _load(name_or_path: str | Path, map_location: Any, verify: bool, overrides: Mapping[str, Any]) -> NPCNet | StackNPC:
    """:func:`load_pretrained`, with the checksum check optional (an export of a retrained bundle skips it)."""
    config, state, meta = _resolve(name_or_path, map_location, verify)
    config.update(overrides)
    net = _filled(config, state, f"the weights of {name_or_path}", "their NPCNet configuration")
    net.meta = meta
    return net.eval()


def _filled(config: Mapping[str, Any], state: Mapping[str, torch.Tensor], what: str, against: str) -> NPCNet | StackNPC:
    """An ``NPCNet`` of ``config`` holding ``state``; ``ValueError`` naming ``what`` and ``against`` when they do not fit."""
    net = _network_to_load(dict(config))
    try:
        net.load_state_dict(state)
    except RuntimeError as err:
        raise ValueError(f"{what} do not fit {against}: {err}") from err
    return net


def link_bundle_weights(bundle_dir: str | Path, weights: str | Path) -> Path:
    """Make a bundle's ``models/model.pt`` a relative link to ``weights`` (one stored copy) and record its checksum.

    ``weights`` is a :func:`save_pretrained` file (e.g. ``monai_npc/weights/acdc.pt``), which MONAI's
    ``CheckpointLoader(load_dict={"model": net})`` reads too; the bundle's ``configs/metadata.json``
    gets its ``weights_sha256``. Returns the link. A linked bundle works in place only: copied or zipped
    elsewhere, its link dangles (the shipped bundles hold copies instead, :func:`mirror_bundle_weights`).
    """
    link = Path(bundle_dir) / _BUNDLE_WEIGHTS
    link.parent.mkdir(parents=True, exist_ok=True)
    staged = link.with_name(f".{link.name}.link")
    staged.unlink(missing_ok=True)
    staged.symlink_to(os.path.relpath(Path(weights).resolve(), link.parent.resolve()))
    os.replace(staged, link)
    record_checksum(bundle_dir)
    return link


def mirror_bundle_weights(bundle_dir: str | Path, weights: str | Path) -> Path:
    """Make a bundle's ``models/model.pt`` a byte-identical copy of ``weights`` and record its checksum.

    As :func:`link_bundle_weights`, but the bundle then holds its weights itself, so the folder can be
    copied, zipped and run anywhere; in a git repository the two identical files are one stored blob.
    ``weights`` is a :func:`save_pretrained` file whose recorded SHA-256 matches its tensors (so that
    recording the checksum leaves the copy as it is, byte for byte). The copy is written to a temporary
    file and renamed into place (a link already there is replaced, the file it pointed to is left alone).
    Returns the copy.

    Raises:
        FileNotFoundError: no file ``weights``.
        ValueError: ``weights`` is not a :func:`save_pretrained` file, or its checksum is missing or wrong.
    """
    target = Path(bundle_dir) / _BUNDLE_WEIGHTS
    source = Path(weights)
    if not source.is_file():
        raise FileNotFoundError(f"weights {source}: no such file.")
    config, _, meta = _contents(source)
    if config is None or not meta.get(CHECKSUM_KEY):
        raise ValueError(f"weights {source}: not a save_pretrained file with a recorded {CHECKSUM_KEY} (export_bundle_weights writes one).")
    check = check_weights(source)
    if check.status != "ok":
        raise ValueError(f"weights {source}: {check.message}")
    atomic_copy(source, target)
    record_checksum(bundle_dir)
    return target


def export_bundle_weights(
    bundle_dir: str | Path, out: str | Path, meta: Optional[Mapping[str, Any]] = None, link: bool = False,
    weights: Optional[str | Path] = None, mirror: bool = False,
) -> Path:
    """Write a bundle's ``models/model.pt`` with its ``network_def`` as a :func:`save_pretrained` file.

    ``meta`` is added to the bundle's (name, version, changelog entry, ``input_size``, and
    ``preprocessing: "minmax"``). This is how ``monai_npc/weights/camus.pt`` is made from
    ``bundles/npc_camus`` (``examples/export_bundle_weights.py``); the bundle's weights are not checked
    against its recorded checksum (after a retraining it is the old one). With ``mirror``, the bundle's
    ``models/model.pt`` then becomes a byte-identical copy of ``out`` (:func:`mirror_bundle_weights`, how
    the shipped bundles are kept); with ``link``, a link to it (:func:`link_bundle_weights`).
    ``weights``: take the weights from this file instead (a bundle training's ``model.pt`` or
    ``checkpoint_epoch=N.pt`` written outside the bundle with ``--ckpt_dir`` / ``--output_dir``), with the
    bundle's ``network_def``.
    """
    if link and mirror:
        raise ValueError("export_bundle_weights: link and mirror exclude each other (a link to out, or a copy of it).")
    bundle_dir = Path(bundle_dir)
    if not (_is_bundle(bundle_dir) if weights is None else (bundle_dir / _BUNDLE_CONFIG).is_file()):
        needs = _BUNDLE_CONFIG if weights is not None else f"{_BUNDLE_CONFIG} and {_BUNDLE_WEIGHTS}"
        raise FileNotFoundError(f"{bundle_dir} is not a MONAI bundle (it needs {needs}).")
    if weights is None:
        net = _load(bundle_dir, "cpu", False, {})  # retrained on purpose: its metadata.json may hold the old checksum
    else:
        path = Path(weights)
        if not path.is_file():
            raise FileNotFoundError(f"weights {path}: no such file.")
        config, state, file_meta = _contents(path)
        net = _filled(config if config is not None else bundle_network_config(bundle_dir), state, f"the weights of {path}",
                      f"{bundle_dir}'s network_def")
        bundle = _bundle_meta(bundle_dir)  # its version and changelog describe the bundle's own weights, not these
        released = {"network_def_version": bundle.pop("version", None)}
        bundle.pop("changelog", None)
        net.meta = {**bundle, **released, **file_meta, "weights_file": str(path.resolve())}
    info = {"preprocessing": "minmax", **net.meta, **dict(meta or {})}
    info.pop(CHECKSUM_KEY, None)
    info["bundle"] = bundle_dir.resolve().name
    save_pretrained(net, out, info)
    if mirror:
        mirror_bundle_weights(bundle_dir, out)
    elif link:
        link_bundle_weights(bundle_dir, out)
    return Path(out)
