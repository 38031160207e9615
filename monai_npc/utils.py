"""Small helpers shared by the training loops, the checkpoint handlers, the weight files and the resumable runs."""

from __future__ import annotations

import json
import logging
import os
import tempfile
from pathlib import Path
from typing import Any, Dict, Iterable, List, Mapping, Optional, Union

import torch

__all__ = ["atomic_torch_save", "as_json", "changed_settings", "error_line", "finished_summary"]


def as_json(value: Any) -> Any:
    """``value`` as it reads back from a JSON file (tuples become lists, other objects their ``str``):
    what a resumable run records of its settings, so that a later run compares like with like."""
    return json.loads(json.dumps(value, default=str))


def changed_settings(before: Mapping[str, Any], now: Mapping[str, Any], ignore: Iterable[str] = ()) -> List[str]:
    """``"key old -> new"`` for every key of ``now`` (except ``ignore``) whose value ``before`` differs
    (``"key.sub old -> new"`` inside two mappings): why a recorded run cannot be resumed or reused."""
    skip = set(ignore)
    out: List[str] = []
    for k, v in now.items():
        old = before.get(k)
        if k in skip or old == v:
            continue
        if isinstance(old, Mapping) and isinstance(v, Mapping):  # nested settings: the keys that differ, as "settings.size"
            out += [f"{k}.{c}" for c in changed_settings(old, {**dict.fromkeys(old), **v})]
        else:
            out.append(f"{k} {old!r} -> {v!r}")
    return out


def finished_summary(
    folder: Union[str, Path], name: str, request: Optional[Mapping[str, Any]] = None, log: Optional[logging.Logger] = None,
    again: str = "running it again",
) -> Optional[Dict[str, Any]]:
    """The JSON summary ``folder/name`` of a finished run (a study or pair of a cohort), else ``None``.

    Finished: the file parses as a JSON object, every file it lists under ``outputs`` exists in
    ``folder`` (such folders are written all at once) and, when ``request`` is given, its
    ``request`` is the same: a run of other inputs or settings is not finished, and ``log`` warns
    ``"<folder> holds a run of other inputs or settings (<what changed>): <again>"``. What makes a
    resumable cohort skip a study (``monai-npc track --batch``, ``register --batch``, stack inference).
    """
    folder = Path(folder)
    try:
        summary = json.loads((folder / name).read_text())
    except (OSError, ValueError):
        return None
    if not isinstance(summary, dict) or not all((folder / f).is_file() for f in (summary.get("outputs") or {}).values()):
        return None
    if request is not None and summary.get("request") != request:
        changed = changed_settings(summary.get("request") or {}, request)
        (log or logging.getLogger(__name__)).warning(
            "%s holds a run of other inputs or settings (%s): %s", folder, "; ".join(changed) or "no request recorded", again)
        return None
    return summary


def atomic_torch_save(obj: Any, path: Union[str, Path]) -> Path:
    """``torch.save(obj, path)`` that never leaves a partial ``path`` behind.

    The object is written to a temporary file in the same folder, flushed to disk, and renamed
    over ``path`` with :func:`os.replace` (atomic on POSIX and Windows). A crash or kill during
    the write leaves the previous ``path`` (if any) untouched and at most a ``.{name}.*.tmp`` file,
    which is removed when the write fails inside Python. The file gets the usual permissions
    (``0o666`` minus the umask), not the ``0o600`` of :func:`tempfile.mkstemp`.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp_name = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=str(path.parent))
    tmp = Path(tmp_name)
    try:
        with os.fdopen(fd, "wb") as f:
            torch.save(obj, f)
            f.flush()
            os.fsync(f.fileno())
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(tmp, 0o666 & ~umask)
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    return path


def error_line(err: BaseException) -> str:
    """One line for a failed item of a batch: the message of a user error, else the type and first line."""
    lines = str(err).strip().splitlines() or [""]
    return lines[0] if isinstance(err, (ValueError, FileNotFoundError)) else f"{type(err).__name__}: {lines[0]}"
