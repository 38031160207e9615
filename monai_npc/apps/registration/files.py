"""Register image files with an NPC model and write results ITK, ANTs and 3D Slicer read.

:func:`register_files` is the Python face of ``monai-npc register``: a thin layer over the
in-memory :func:`monai_npc.apps.registration.api.register` (``monai_npc.register``) and
:meth:`~monai_npc.apps.registration.result.Registration.save`; :func:`register_batch` runs a CSV of pairs.
The output folder is checked before any work and written all at once
(:class:`~monai_npc.apps.registration.result.OutputFolder`).
"""

from __future__ import annotations

import csv
import inspect
import io
import logging
import os
from pathlib import Path
from typing import Any, Dict, List, Mapping, Optional, Union

import torch
from torch import nn

from monai_npc.io_safety import atomic_write_text, make_folder, remove_stale
from monai_npc.runtime import distributed, gather_shards, rank_desc, rank_device, shard
from monai_npc.utils import as_json, error_line, finished_summary

from .api import register
from .models import PHASE_CORRELATION, resolve_model
from .result import OUTPUTS, OutputFolder

__all__ = [
    "PHASE_CORRELATION", "OUTPUTS", "BATCH_COLUMNS", "resolve_model", "register_files", "register_batch", "read_pairs_csv",
    "duplicate_outs", "pair_request", "pair_done",
]

logger = logging.getLogger(__name__)

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
    request: Optional[Mapping[str, Any]] = None,
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
        request: recorded in ``summary.json`` as ``request`` (:func:`pair_request`: what ``register --batch``
            compares to skip a pair already done).
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
    if request is not None:
        result.summary["request"] = dict(request)
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


#: register's options that do not change a result (left out of a pair's ``request``)
_NOT_SETTINGS = ("device", "threads", "progress")
#: the keyword defaults of register_files and register (an option equal to its default asks for nothing)
_DEFAULTS = {k: p.default for fn in (register, register_files) for k, p in inspect.signature(fn).parameters.items()
             if p.default is not inspect.Parameter.empty}


def pair_request(row: Mapping[str, Optional[str]], model_name: str, options: Mapping[str, Any]) -> Dict[str, Any]:
    """What a pair of a batch is asked for, JSON-ready: its files (absolute paths), the model and the
    options that change the result (not ``device``, ``threads``); ``summary.json`` records it as
    ``request`` and a rerun of the batch skips a pair whose folder holds the same (:func:`pair_done`)."""
    files = {k: None if row.get(k) is None else os.path.abspath(str(row[k])) for k in ("moving", "fixed", "moving_label", "fixed_label")}
    # an option left at its default is not recorded: the command line's explicit defaults ask for what Python's omission does
    settings = {k: v for k, v in sorted(options.items()) if k not in _NOT_SETTINGS and not (k in _DEFAULTS and v == _DEFAULTS[k])}
    return as_json({**files, "model": model_name, "settings": settings})


def pair_done(out: PathLike, request: Optional[Mapping[str, Any]] = None) -> Optional[Dict[str, Any]]:
    """The ``summary.json`` of a finished registration in ``out`` (every listed file present and, with
    ``request``, the same :func:`pair_request`), else ``None`` (:func:`monai_npc.utils.finished_summary`)."""
    summary = finished_summary(out, OUTPUTS["summary"], request, logger, "registering the pair again")
    return summary if summary is not None and "outputs" in summary else None


def _register_row(row: Mapping[str, Optional[str]], net: nn.Module, name: str, kwargs: Mapping[str, Any],
                  settings: Mapping[str, Any]) -> Dict[str, Any]:
    """One pair of a batch: ``skipped`` when :func:`pair_done` (``settings``: the batch's options, for
    :func:`pair_request`), else registered (``ok``) or ``failed`` with a one-line ``error``; the
    error itself under ``_error`` (for ``strict``)."""
    request = pair_request(row, name, settings)
    summary = pair_done(row["out"], request)
    if summary is not None:
        logger.info("pair %s: skipped, already done (%s is complete)", row["out"], Path(str(row["out"])) / OUTPUTS["summary"])
        return dict(summary, status="skipped", out=row["out"])
    try:
        summary = register_files(row["moving"], row["fixed"], row["out"], row["moving_label"], row["fixed_label"],
                                 model=net, model_name=name, request=request, **kwargs)
    except Exception as err:  # noqa: BLE001 - one bad pair of many is reported, not fatal
        return {"moving": row["moving"], "fixed": row["fixed"], "status": "failed", "error": error_line(err), "out": row["out"], "_error": err}
    return dict(summary, status="ok", out=row["out"])


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
    (so a failed run never leaves an old one as if current). The model is loaded once per process.

    Resumable: a pair whose folder holds a complete ``summary.json`` of the same request
    (:func:`pair_done`: same files, model and options) gets ``status="skipped"`` and is not
    registered again. One bad pair (a corrupt or missing file, NaN values, a bad row ``out``...)
    does not stop the others: its summary gets ``status="failed"`` and ``error`` (file name and
    reason, one line); good pairs get ``status="ok"``. ``strict=True`` (or ``on_error="raise"``)
    makes the first bad pair fatal instead (after the merged table is written). With ``out``,
    ``out/batch_summary.csv`` lists every pair (:data:`BATCH_COLUMNS`), written all or nothing at
    the end. ``kwargs`` go to :func:`register_files` (``device`` ``"cuda"``: each rank's own GPU,
    :func:`monai_npc.runtime.rank_device`).

    Under ``torchrun --nproc_per_node N`` the pairs are shared (:func:`monai_npc.runtime.shard`:
    rank ``r`` registers rows ``r, r + N, ...`` into their folders; gloo on CPU, nccl on GPU) and
    rank 0 writes ``batch_summary.csv`` once every rank's rows are gathered; every rank returns all rows.
    """
    from tqdm.auto import tqdm

    if on_error not in ("skip", "raise"):
        raise ValueError(f"on_error must be 'skip' or 'raise', got {on_error!r}.")
    strict = strict or on_error == "raise"
    rows = read_pairs_csv(pairs_csv)
    duplicate_outs(rows, pairs_csv)
    report = None if out is None else make_folder(out, "batch output folder")
    with distributed() as (rank, world_size):
        if report is not None and rank == 0:
            remove_stale([report / "batch_summary.csv"])
        kwargs["device"] = rank_device(kwargs.get("device", "cpu"))
        refine, steps = kwargs.pop("refine_iterations", None), kwargs.pop("num_steps", None)
        net, name = resolve_model(model, kwargs["device"], refine, steps)
        settings = dict(kwargs, refine_iterations=refine, num_steps=steps)
        results: List[Dict[str, Any]] = []
        desc = rank_desc("register", rank, world_size)
        for row in tqdm(shard(rows, rank, world_size), desc=desc, unit="pair", disable=not progress):
            results.append(_register_row(row, net, name, kwargs, settings))
            if strict and results[-1]["status"] == "failed":
                break  # the merged table still gets every rank's rows
        error = next((r.pop("_error") for r in results if "_error" in r), None)
        results = gather_shards(results, world_size)
        if report is not None and rank == 0:
            atomic_write_text(report / "batch_summary.csv", _batch_csv(results))
    failed = [r for r in results if r["status"] == "failed"]
    if strict and failed:
        raise error if error is not None else ValueError(f"pair {failed[0]['out']} failed: {failed[0]['error']}")
    return results
