"""What inference and evaluation share: the model, the progress bar, the status file, a skipped study's record."""

from __future__ import annotations

import logging
import math
from pathlib import Path
from typing import Any, Dict, Iterable, Optional, Sequence, Tuple, Union

import numpy as np
import torch
from torch import nn

__all__ = ["load_model", "nanmean", "status_file", "progress_bar", "skip_record", "one_line"]

logger = logging.getLogger(__name__)

PathLike = Union[str, Path]


def load_model(model: Union[str, PathLike, nn.Module], device: Union[str, torch.device], refine_iterations: Optional[int]) -> Tuple[nn.Module, str]:
    """``(network, name)`` resolved once, so that a run does not reload weights for every pair."""
    from monai_npc.apps.registration.models import resolve_model

    return resolve_model(model, device, refine_iterations)


def nanmean(values: Iterable[float]) -> float:
    finite = [v for v in values if v is not None and np.isfinite(v)]
    return float(np.mean(finite)) if finite else math.nan


def status_file(out: Path, name: str) -> Path:
    """``out/name`` with any previous one removed (results describe the current run only)."""
    out.mkdir(parents=True, exist_ok=True)
    path = out / name
    if path.exists():
        path.unlink()
    return path


def progress_bar(items: Sequence[Any], desc: str, enabled: bool, unit: str = "pair"):
    from tqdm.auto import tqdm

    return tqdm(items, desc=desc, unit=unit, disable=not enabled, dynamic_ncols=True)


def skip_record(study: str, reason: str, strict: bool) -> Dict[str, str]:
    if strict:
        raise RuntimeError(f"study {study}: {reason}")
    logger.warning("study %s skipped: %s", study, reason)
    return {"study": study, "status": "skipped", "reason": reason}


def one_line(err: BaseException) -> str:
    return f"{type(err).__name__}: {' '.join(str(err).split())}"
