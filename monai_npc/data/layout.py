"""Small helpers shared by the dataset layouts: patient folders and ``key: value`` config files."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Dict, List, Mapping, Optional, Union

__all__ = ["read_cfg", "cfg_frame", "find_patient_dirs"]


def read_cfg(path: Union[str, Path]) -> Dict[str, str]:
    """Parse an ACDC ``Info.cfg`` / CAMUS ``Info_2CH.cfg`` (``key: value`` lines) into strings.

    Raises ``ValueError`` naming the file when it cannot be read as text.
    """
    path = Path(path)
    try:
        text = path.read_text()
    except (OSError, UnicodeDecodeError) as err:
        raise ValueError(f"cannot read {path}: {err}") from err
    info = {}
    for line in text.splitlines():
        if ":" in line:
            key, _, value = line.partition(":")
            info[key.strip()] = value.strip()
    return info


def cfg_frame(info: Mapping[str, str], key: str, path: Union[str, Path], default: Optional[int] = None) -> int:
    """The frame number (counted from 1, as ACDC's ``ED: 1``) of ``key`` in a parsed ``Info.cfg``
    (:func:`read_cfg`); ``default`` when the line is missing, else a ``ValueError`` naming the file and the line."""
    if key not in info:
        if default is not None:
            return default
        raise ValueError(f"{path} has no '{key}:' line (the {key} frame number, counted from 1)")
    try:
        value = int(float(info[key]))
    except ValueError:
        raise ValueError(f"{path}: '{key}: {info[key]}' is not a frame number") from None
    if value < 1:
        raise ValueError(f"{path}: '{key}: {value}': frame numbers count from 1")
    return value


def find_patient_dirs(root: Path, pattern: "re.Pattern[str]", max_depth: int = 3) -> List[Path]:
    """Folders whose name matches ``pattern`` at the shallowest depth (``<= max_depth``) under
    ``root`` where any exists, e.g. ``root/patient001`` or ``root/database/training/patient001``.

    Raises ``ValueError`` when one name occurs twice (e.g. two releases side by side).
    """
    found: List[Path] = []
    frontier = [root]
    for _ in range(max_depth):
        nxt = []
        for d in frontier:
            for child in sorted(p for p in d.iterdir() if p.is_dir()):
                if pattern.fullmatch(child.name):
                    found.append(child)
                elif not child.name.startswith("."):
                    nxt.append(child)
        if found or not nxt:
            break
        frontier = nxt
    names = [d.name for d in found]
    dup = sorted({n for n in names if names.count(n) > 1})
    if dup:
        where = sorted({str(d.parent) for d in found if d.name == dup[0]})
        raise ValueError(f"patient folder {dup[0]} appears in several places under {root}: {where}; point root at one of them")
    return found
