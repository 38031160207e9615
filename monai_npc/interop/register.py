"""Register image files with an NPC model and write results ITK, ANTs and 3D Slicer read.

:func:`register_files` is the Python face of ``monai-npc register``: a thin layer over the
in-memory :func:`monai_npc.interop.api.register` (``monai_npc.register``) and
:meth:`~monai_npc.interop.api.Registration.save`; :func:`register_batch` runs a CSV of pairs.
The output folder is checked before any work and written all at once
(:class:`~monai_npc.interop.api.OutputFolder`).
"""

from __future__ import annotations

import csv
import os
from pathlib import Path
from typing import Any, Dict, List, Optional, Union

import torch
from torch import nn

from .api import OUTPUTS, PHASE_CORRELATION, OutputFolder, register, resolve_model

__all__ = ["PHASE_CORRELATION", "OUTPUTS", "resolve_model", "register_files", "register_batch", "read_pairs_csv"]

PathLike = Union[str, os.PathLike]

def register_files(
    moving: PathLike,
    fixed: PathLike,
    out: PathLike,
    moving_label: Optional[PathLike] = None,
    fixed_label: Optional[PathLike] = None,
    model: Union[str, PathLike, nn.Module] = "acdc",
    size: Optional[int] = None,
    keep_aspect: bool = True,
    device: Union[str, torch.device] = "cpu",
    overview: bool = True,
    model_name: Optional[str] = None,
    **kwargs: Any,
) -> Dict[str, Any]:
    """Register ``moving`` onto ``fixed`` and write the results into ``out`` (see :data:`OUTPUTS`).

    Args:
        moving, fixed: image files (NIfTI, MHD/MHA, NRRD, DICOM file or series folder, PNG/TIFF),
            both 2-D or both 3-D (3-D: registered slice by slice).
        out: output folder; checked first (an existing file, a folder holding other files or an
            unwritable parent is a ``ValueError`` before any work) and replaced as a whole.
        moving_label, fixed_label: optional label maps on their image's grid.
        model, size, keep_aspect, device, model_name: as :func:`monai_npc.interop.api.register`.
        overview: write ``overview.png``.
        kwargs: more options of :func:`~monai_npc.interop.api.register` (``threads``,
            ``moving_select``, ``fixed_select``, ``pixel_space``).

    Returns:
        the summary dict written to ``summary.json`` (seconds, folding %, Dice, files...).

    Raises:
        FileNotFoundError: a missing image, label or weights file.
        ValueError: a bad ``out``, unreadable or truncated files, different dimensionality,
            NaN/Inf values, label maps off their image's grid, images that do not overlap in
            physical space, unusable models.
    """
    folder = OutputFolder(out)
    try:
        result = register(
            moving, fixed, model, moving_label, fixed_label, size=size, keep_aspect=keep_aspect, device=device,
            model_name=model_name, **kwargs,
        )
    except BaseException:
        folder.discard()
        raise
    return result.save(folder, overview=overview)


def read_pairs_csv(path: PathLike) -> List[Dict[str, Optional[str]]]:
    """Rows of a pairs CSV (columns ``moving,fixed[,moving_label,fixed_label],out``).

    Relative paths are relative to the CSV's folder; empty label cells mean no label.
    """
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"pairs CSV not found: {path}")
    with path.open(newline="") as f:
        reader = csv.DictReader(f)
        columns = [c.strip() for c in reader.fieldnames or []]
        missing = [c for c in ("moving", "fixed", "out") if c not in columns]
        if missing:
            raise ValueError(f"pairs CSV {path} lacks column(s) {missing}; it has {columns} (need moving,fixed[,moving_label,fixed_label],out).")
        rows = []
        for k, raw in enumerate(reader):
            row = {str(key).strip(): (v or "").strip() for key, v in raw.items() if key is not None}
            item: Dict[str, Optional[str]] = {}
            for key in ("moving", "fixed", "moving_label", "fixed_label", "out"):
                value = row.get(key) or None
                if value is None and key in ("moving", "fixed", "out"):
                    raise ValueError(f"pairs CSV {path}, row {k + 2}: empty '{key}'.")
                item[key] = str(path.parent / value) if value and not Path(value).is_absolute() else value
            rows.append(item)
    if not rows:
        raise ValueError(f"pairs CSV {path} has no rows.")
    return rows


def register_batch(
    pairs_csv: PathLike,
    model: Union[str, PathLike, nn.Module] = "acdc",
    out: Optional[PathLike] = None,
    progress: bool = True,
    on_error: str = "skip",
    **kwargs: Any,
) -> List[Dict[str, Any]]:
    """Register every row of ``pairs_csv`` (:func:`read_pairs_csv`) with a tqdm progress bar.

    The model is loaded once. ``on_error="skip"`` records a failing pair's error (``"error"`` in
    its summary; a bad row ``out`` included) and goes on; ``"raise"`` stops. With ``out``,
    ``out/batch_summary.csv`` lists every pair (seconds, folding %, mean Dice, error); ``out`` is
    checked before the first pair. ``kwargs`` go to :func:`register_files`.
    """
    from tqdm.auto import tqdm

    if on_error not in ("skip", "raise"):
        raise ValueError(f"on_error must be 'skip' or 'raise', got {on_error!r}.")
    report = None
    if out is not None:
        report = Path(out)
        if report.exists() and not report.is_dir():
            raise ValueError(f"batch output folder {report} is an existing file; give a folder path for --out.")
        try:
            report.mkdir(parents=True, exist_ok=True)
        except OSError as err:
            raise ValueError(f"cannot create batch output folder {report}: {err.strerror or err}.") from None
        if not os.access(report, os.W_OK):
            raise ValueError(f"batch output folder {report} is not writable.")
    rows = read_pairs_csv(pairs_csv)
    net, name = resolve_model(model, kwargs.get("device", "cpu"), kwargs.pop("refine_iterations", None))
    results: List[Dict[str, Any]] = []
    for row in tqdm(rows, desc="register", unit="pair", disable=not progress):
        try:
            summary = register_files(
                row["moving"], row["fixed"], row["out"], row["moving_label"], row["fixed_label"],
                model=net, model_name=name, **kwargs,
            )
        except (ValueError, FileNotFoundError, OSError, RuntimeError) as err:
            if on_error == "raise":
                raise
            message = str(err) if isinstance(err, (ValueError, FileNotFoundError)) else f"{type(err).__name__}: {err}"
            summary = {"moving": row["moving"], "fixed": row["fixed"], "error": message}
        summary["out"] = row["out"]
        results.append(summary)
    if report is not None:
        tmp = report / f".batch_summary.csv.tmp-{os.getpid()}"
        with tmp.open("w", newline="") as f:
            writer = csv.writer(f)
            writer.writerow(["moving", "fixed", "out", "seconds", "folding_percent", "dice_mean", "error"])
            for s in results:
                writer.writerow([s.get("moving"), s.get("fixed"), s.get("out"), s.get("seconds"), s.get("folding_percent"), s.get("dice_mean"), s.get("error", "")])
        os.replace(tmp, report / "batch_summary.csv")
    return results
