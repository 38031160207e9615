"""Weights are data, never code: safe ``torch.load``, state-dict checksums and the one-off conversion of old files.

Every weights or checkpoint file of the package is read by :func:`safe_load`
(``torch.load(weights_only=True)``): tensors, and metadata in plain types (dict, list, str, int,
float, bool, None) only. A file that needs anything else unpickled (a numpy scalar, a custom
class, or a payload that runs code) is refused with a :class:`UnsafeWeightsError` that names the
offending object and the command converting a file the user trusts (:func:`convert_trusted`,
``monai-npc convert-weights``).

A weights checksum (:func:`state_dict_sha256`) hashes the tensors of a state dict, not the file,
so that it can be stored inside the file (``meta["weights_sha256"]`` of a
:func:`~monai_npc.networks.nets.save_pretrained` file) as well as beside it (``weights_sha256``
of a bundle's ``configs/metadata.json``), and any changed byte of any tensor changes it.
"""

from __future__ import annotations

import hashlib
import json
import logging
import pickle
import re
import shutil
from pathlib import Path
from typing import Any, Iterable, List, Mapping, Optional, Union

import torch

from monai_npc.utils import atomic_torch_save

__all__ = [
    "CHECKSUM_KEY",
    "ChecksumError",
    "UnsafeWeightsError",
    "convert_trusted",
    "plain",
    "remove_leftovers",
    "safe_load",
    "state_dict_sha256",
]

logger = logging.getLogger(__name__)

#: a temporary of :func:`~monai_npc.utils.atomic_torch_save` for ``path``: ``.{path.name}.{8 random characters}.tmp``
_TEMPORARY = re.compile(r"^\.(?P<name>.+)\.[a-z0-9_]{8}\.tmp$")

#: key of the weights checksum: in a save_pretrained file's ``meta`` and in a bundle's ``configs/metadata.json``
CHECKSUM_KEY = "weights_sha256"

#: the explicit command that rewrites a trusted old-format file (shown in :class:`UnsafeWeightsError`)
CONVERT_COMMAND = "python -m monai_npc.cli.main convert-weights --i-trust-this-file {src} {dst}"


class UnsafeWeightsError(ValueError):
    """A file whose loading would need objects other than tensors and plain types unpickled (never done)."""


class ChecksumError(ValueError):
    """The tensors of a weights file do not match the SHA-256 recorded for them."""


def state_dict_sha256(state: Mapping[str, torch.Tensor]) -> str:
    """SHA-256 (hex) of a state dict's tensors in a canonical order, independent of the file holding them.

    For each entry in sorted name order, a JSON header ``[name, dtype, shape, number of bytes]``
    and a newline, then the tensor's raw bytes (contiguous, on the CPU, native little-endian
    layout). Any flipped byte of any tensor, a renamed entry, a changed dtype or shape changes it.

    Raises:
        TypeError: an entry is not a tensor.
    """
    digest = hashlib.sha256()
    for name in sorted(state):
        tensor = state[name]
        if not isinstance(tensor, torch.Tensor):
            raise TypeError(f"state dict entry {name!r} is a {type(tensor).__name__}, not a tensor.")
        tensor = tensor.detach().to("cpu").contiguous()
        data = tensor.reshape(-1).view(torch.uint8).numpy() if tensor.numel() else b""
        header = json.dumps([str(name), str(tensor.dtype), list(tensor.shape), len(data)])
        digest.update(header.encode() + b"\n")
        digest.update(data)
    return digest.hexdigest()


def _unsafe_message(path: Path, err: Exception) -> str:
    names = sorted(set(re.findall(r"GLOBAL ([\w.]+)", str(err))))
    return (
        f"{path} is not a data-only weights file: loading it would unpickle Python objects"
        f"{' (' + ', '.join(names) + ')' if names else ''}, which can run arbitrary code, so monai_npc refuses it. "
        "Files written by earlier monai_npc releases may hold numpy values in their metadata; if you trust "
        f"this file (you made it, or know where it comes from), convert it once with: "
        f"{CONVERT_COMMAND.format(src=path, dst=path.with_name(path.stem + '_safe' + path.suffix))}"
    )


def safe_load(path: Union[str, Path], map_location: Any = "cpu", mmap: bool = False, what: str = "weights") -> Any:
    """``torch.load(path, weights_only=True)`` with errors that name the file and what is wrong.

    ``mmap`` maps the tensors from the file instead of reading them (faster for a state dict that
    is copied into a network right away). ``what`` names the file's role in messages.

    Raises:
        FileNotFoundError: no such file.
        UnsafeWeightsError: the file needs objects other than tensors and plain types (nothing is unpickled).
        ValueError: an empty, truncated or foreign file.
    """
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"{what} file {path} does not exist.")
    if path.stat().st_size == 0:
        raise ValueError(f"{what} file {path} is empty (0 bytes).")
    try:
        return torch.load(path, map_location=map_location, weights_only=True, mmap=mmap)
    except pickle.UnpicklingError as err:
        if re.search(r"GLOBAL [\w.]+", str(err)):  # it names an object to import: refused, never unpickled
            raise UnsafeWeightsError(_unsafe_message(path, err)) from None
        reason = next((line.strip() for line in str(err).splitlines() if "Unsupported" in line), str(err).splitlines()[0])
        raise ValueError(f"cannot read {what} from {path}: not a data-only torch file ({reason}).") from None
    except RuntimeError as err:  # e.g. "PytorchStreamReader failed ...": truncated or not a torch file
        if mmap and "mmap" in str(err):  # a legacy (non-zip) torch file cannot be mapped: read it instead
            return safe_load(path, map_location, mmap=False, what=what)
        raise ValueError(f"cannot read {what} from {path} ({path.stat().st_size} bytes): {err}") from err
    except Exception as err:  # EOFError, zipfile errors, ...
        raise ValueError(f"cannot read {what} from {path} ({path.stat().st_size} bytes): {type(err).__name__}: {err}") from err


def plain(obj: Any) -> Any:
    """``obj`` with its containers and scalars as plain Python types (tensors kept), loadable with ``weights_only=True``.

    numpy scalars and arrays become numbers and lists, tuples and sets lists, paths strings, mapping
    keys strings (except integer keys, e.g. optimizer state ids), and other objects their ``str``.
    """
    if isinstance(obj, torch.Tensor) or obj is None or type(obj) in (bool, int, float, str):  # not numpy's float64
        return obj
    if isinstance(obj, Mapping):
        return {(k if isinstance(k, (int, str)) else str(k)): plain(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple, set, frozenset)):
        return [plain(v) for v in obj]
    if hasattr(obj, "tolist") and hasattr(obj, "dtype"):  # numpy scalar or array
        return plain(obj.tolist())
    for kind in (bool, int, float):  # subclasses, e.g. an IntEnum
        if isinstance(obj, kind):
            return kind(obj)
    return str(obj)  # paths and any other object


def convert_trusted(src: Union[str, Path], dst: Union[str, Path]) -> Path:
    """Rewrite an old-format file the user trusts as a data-only one (``dst``, written atomically).

    Still no arbitrary unpickling: the file is read with ``weights_only=True`` plus numpy's array,
    scalar and dtype types (what metadata of earlier releases held); anything else is refused with
    :class:`UnsafeWeightsError` as in :func:`safe_load`. Call it only on a file you trust. Metadata become plain types (:func:`plain`); a
    :func:`~monai_npc.networks.nets.save_pretrained` file (``config`` with ``state_dict`` or
    ``model``) is rewritten in the current format with its weights checksum in ``meta``.
    The result is read back with :func:`safe_load` before the function returns.
    """
    src, dst = Path(src), Path(dst)
    import numpy as np

    numpy_types = [np.ndarray, np.dtype, np.core.multiarray._reconstruct, np.core.multiarray.scalar]
    numpy_types += [type(np.dtype(t)) for t in ("float32", "float64", "int32", "int64", "bool")]
    try:
        with torch.serialization.safe_globals(numpy_types):
            raw = torch.load(src, map_location="cpu", weights_only=True)
    except pickle.UnpicklingError as err:
        raise UnsafeWeightsError(f"{src}: cannot convert, it needs objects beyond tensors and numpy values ({err}).") from None
    blob = plain(raw)
    if isinstance(blob, dict) and "config" in blob and ("state_dict" in blob or "model" in blob):
        state = blob.get("model", blob.get("state_dict"))
        meta = {**dict(blob.get("meta") or {}), CHECKSUM_KEY: state_dict_sha256(state)}
        blob = {"model": state, "config": blob["config"], "meta": meta}
    atomic_torch_save(blob, dst)
    safe_load(dst, what="converted weights")
    return dst


def remove_leftovers(folder: Union[str, Path], names: Optional[Iterable[str]] = None) -> List[Path]:
    """Delete the temporary files (or folders) that killed atomic writes left in ``folder``; return them.

    A write of ``folder/NAME`` by :func:`~monai_npc.utils.atomic_torch_save` goes through
    ``folder/.NAME.XXXXXXXX.tmp`` and a kill during it leaves that file behind; earlier writers
    used ``folder/STEM.tmp``. With ``names`` only the temporaries of those targets are removed,
    otherwise every ``.*.XXXXXXXX.tmp`` of ``folder``. Call it when a run starts, before it writes.
    """
    folder = Path(folder)
    if not folder.is_dir():
        return []
    wanted = None if names is None else set(names)
    stale = [p for p in folder.iterdir() if (m := _TEMPORARY.match(p.name)) and (wanted is None or m.group("name") in wanted)]
    stale += [folder / (Path(n).stem + ".tmp") for n in wanted or () if (folder / (Path(n).stem + ".tmp")).exists()]
    for path in stale:
        if path.is_dir() and not path.is_symlink():
            shutil.rmtree(path, ignore_errors=True)
        else:
            path.unlink(missing_ok=True)
    if stale:
        logger.warning("removed %d leftover temporary file(s) of an interrupted run: %s", len(stale), [str(p) for p in stale])
    return stale
