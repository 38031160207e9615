"""Register image files with an NPC model and write results ITK, ANTs and 3D Slicer read.

:func:`register_files` is the Python face of ``monai-npc register``: a thin layer over the
in-memory :func:`monai_npc.apps.registration.api.register` (``monai_npc.register``) and
:meth:`~monai_npc.apps.registration.result.Registration.save`; :func:`register_batch` runs a CSV of pairs.
The output folder is checked before any work and written all at once
(:class:`~monai_npc.apps.registration.result.OutputFolder`).
"""

from __future__ import annotations

import csv
import io
import os
from pathlib import Path
from typing import Any, Dict, List, Optional, Union

import torch
from torch import nn

from monai_npc.io_safety import atomic_write_text, make_folder, remove_stale
from monai_npc.utils import error_line

from .api import register
from .models import PHASE_CORRELATION, resolve_model
from .result import OUTPUTS, OutputFolder

__all__ = [
    "PHASE_CORRELATION", "OUTPUTS", "BATCH_COLUMNS", "resolve_model", "register_files", "register_batch", "read_pairs_csv",
    "duplicate_outs",
]

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
        model, size, keep_aspect, device, model_name: as :func:`monai_npc.apps.registration.api.register`.
        overview: write ``overview.png``.
        kwargs: more options of :func:`~monai_npc.apps.registration.result.register` (``threads``,
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


def duplicate_outs(rows: List[Dict[str, Optional[str]]], csv_path: PathLike = "pairs CSV") -> None:
    """``ValueError`` naming both rows (CSV line numbers) when two rows write the same ``out`` folder."""
    seen: Dict[str, int] = {}
    for k, row in enumerate(rows):
        key = os.path.normcase(os.path.abspath(str(row["out"])))
        if key in seen:
            raise ValueError(
                f"pairs CSV {csv_path}: rows {seen[key] + 2} and {k + 2} write the same output folder {row['out']}; "
                "the second would overwrite the first: give each row its own 'out'."
            )
        seen[key] = k


#: columns of ``batch_summary.csv``
BATCH_COLUMNS = ("moving", "fixed", "out", "status", "error", "seconds", "folding_percent", "dice_mean")


def _batch_csv(results: List[Dict[str, Any]]) -> str:
    buf = io.StringIO()
    writer = csv.writer(buf)
    writer.writerow(BATCH_COLUMNS)
    for s in results:
        writer.writerow([s.get(c, "") if s.get(c) is not None else "" for c in BATCH_COLUMNS])
    return buf.getvalue()


def register_batch(
    pairs_csv: PathLike,
    model: Union[str, PathLike, nn.Module] = "acdc",
    out: Optional[PathLike] = None,
    progress: bool = True,
    on_error: str = "skip",
    strict: bool = False,
    **kwargs: Any,
) -> List[Dict[str, Any]]:
    """Register every row of ``pairs_csv`` (:func:`read_pairs_csv`) with a tqdm progress bar.

    Before any work: the rows are read, two rows with one ``out`` folder are an error naming both
    (:func:`duplicate_outs`), ``out`` is checked and a previous ``out/batch_summary.csv`` removed
    (so a failed run never leaves an old one as if current). The model is loaded once.

    One bad pair (a corrupt or missing file, NaN values, a bad row ``out``...) does not stop the
    others: its summary gets ``status="failed"`` and ``error`` (file name and reason, one line);
    good pairs get ``status="ok"``. ``strict=True`` (or ``on_error="raise"``) makes the first bad
    pair fatal instead. With ``out``, ``out/batch_summary.csv`` lists every pair
    (:data:`BATCH_COLUMNS`), written all or nothing at the end. ``kwargs`` go to :func:`register_files`.
    """
    from tqdm.auto import tqdm

    if on_error not in ("skip", "raise"):
        raise ValueError(f"on_error must be 'skip' or 'raise', got {on_error!r}.")
    strict = strict or on_error == "raise"
    rows = read_pairs_csv(pairs_csv)
    duplicate_outs(rows, pairs_csv)
    report = None
    if out is not None:
        report = make_folder(out, "batch output folder")
        remove_stale([report / "batch_summary.csv"])
    net, name = resolve_model(model, kwargs.get("device", "cpu"), kwargs.pop("refine_iterations", None), kwargs.pop("num_steps", None))
    results: List[Dict[str, Any]] = []
    for row in tqdm(rows, desc="register", unit="pair", disable=not progress):
        try:
            summary = register_files(
                row["moving"], row["fixed"], row["out"], row["moving_label"], row["fixed_label"],
                model=net, model_name=name, **kwargs,
            )
            summary["status"] = "ok"
        except Exception as err:  # noqa: BLE001 - one bad pair of many is reported, not fatal
            if strict:
                raise
            summary = {"moving": row["moving"], "fixed": row["fixed"], "status": "failed", "error": error_line(err)}
        summary["out"] = row["out"]
        results.append(summary)
    if report is not None:
        atomic_write_text(report / "batch_summary.csv", _batch_csv(results))
    return results
