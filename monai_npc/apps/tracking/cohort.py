"""Cohorts: :func:`monai_npc.track` over the studies of a CSV, resumable, sharded over ``torchrun`` ranks.

A cohort CSV has the columns ``cine,label[,label_frame][,out][,name]`` (:func:`read_cohort`):
relative paths are relative to the CSV's folder; ``label_frame`` is 0-based (empty: the frame an
ACDC label file names, else ED of an ACDC ``Info.cfg`` beside the cine, else 0); ``out`` defaults to ``DIR/<name>`` and ``name`` to
the cine's file name without its extension (``patient001_4d.nii.gz`` -> ``patient001_4d``).

:func:`track_cohort` writes each study's files (:func:`~monai_npc.apps.tracking.outputs.write_tracking`)
into its ``out`` folder and one merged ``DIR/cohort.csv`` (:data:`COHORT_COLUMNS`, one row per
study in CSV order), written atomically at the end. A study whose folder already holds a complete
``function.json`` of the same request (:func:`study_done`: same cine, label, label frame, scheme,
model and settings) is not tracked again (``status`` ``skipped``, its figures read back), so an
interrupted run is resumed by running it again; a row whose inputs or settings changed is tracked
again, with a warning naming what changed. A bad study (missing or corrupt
file, label off the grid...) gets ``status`` ``failed`` and a one-line ``error`` and the others go
on; ``strict=True`` makes it fatal.

Under ``torchrun --nproc_per_node N`` (``WORLD_SIZE`` / ``RANK`` set) the work is shared with
``torch.distributed`` as the bundles' multi-GPU configs do (gloo on CPU, nccl on GPU,
:func:`monai_npc.runtime.distributed`): rank ``r`` takes studies ``r, r + N, ...``
(:func:`monai_npc.runtime.shard`), writes their folders, and rank 0 writes the merged CSV after
gathering every rank's rows (:func:`monai_npc.runtime.gather_shards`).
"""

from __future__ import annotations

import csv
import io
import json
import logging
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence, Tuple, Union

import torch

from monai_npc.io_safety import atomic_write_text, make_folder, remove_stale
from monai_npc.runtime import distributed, gather_shards, rank_desc, rank_device, shard
from monai_npc.utils import finished_summary

from .outputs import TRACK_OUTPUTS
from .schemes import DEFAULT_SCHEME

__all__ = [
    "COHORT_COLUMNS", "COHORT_FILE", "FUNCTION_COLUMNS", "STRAIN_COLUMNS", "CohortRow", "read_cohort", "study_done", "shard", "distributed", "track_cohort",
]

logger = logging.getLogger(__name__)

PathLike = Union[str, os.PathLike]

#: the merged table's file name (in the cohort's output folder)
COHORT_FILE = "cohort.csv"
#: the function figures of a study (:func:`~monai_npc.cardiac.function.cardiac_function`)
FUNCTION_COLUMNS = ("ed_frame", "es_frame", "lv_edv", "lv_esv", "lv_sv", "lv_ef", "rv_edv", "rv_esv", "rv_sv", "rv_ef", "lv_mass_g")
#: columns of ``cohort.csv``
#: the global strain peaks of a study tracked with ``strain`` (percent; empty without)
STRAIN_COLUMNS = ("peak_circumferential_strain", "peak_radial_strain")
COHORT_COLUMNS = ("name", "status", "error") + FUNCTION_COLUMNS + STRAIN_COLUMNS + ("seconds", "reference_frame", "frames", "out")
_EXTENSIONS = (".nii.gz", ".nii", ".mha", ".mhd", ".nrrd", ".nhdr")


@dataclass(frozen=True)
class CohortRow:
    """One row of a cohort CSV (paths resolved)."""

    name: str
    cine: str
    label: str
    label_frame: Optional[int]
    out: str
    row: int  # CSV line number, for messages


def study_name(cine: PathLike) -> str:
    """A study's default name: the cine's file (or folder) name without its image extension."""
    name = Path(str(cine).rstrip("/\\")).name
    for ext in _EXTENSIONS:
        if name.lower().endswith(ext):
            return name[: -len(ext)]
    return name


def read_cohort(path: PathLike, out: PathLike) -> List[CohortRow]:
    """The studies of a cohort CSV (columns ``cine,label[,label_frame][,out][,name]``, module docstring).

    Raises:
        FileNotFoundError: no such CSV.
        ValueError: missing columns, empty cells, a ``label_frame`` that is not an integer >= 0,
            no rows, two studies with one name or one output folder (naming their CSV lines).
    """
    from monai_npc.apps.registration.files import duplicate_outs

    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"cohort CSV not found: {path}")
    studies: List[CohortRow] = []
    with path.open(newline="") as f:
        reader = csv.DictReader(f)
        columns = [c.strip() for c in reader.fieldnames or []]
        missing = [c for c in ("cine", "label") if c not in columns]
        if missing:
            raise ValueError(f"cohort CSV {path} lacks column(s) {missing}; it has {columns} (need cine,label[,label_frame][,out][,name]).")
        for k, raw in enumerate(reader):
            row = {str(key).strip(): (v or "").strip() for key, v in raw.items() if key is not None}
            line = k + 2
            for key in ("cine", "label"):
                if not row.get(key):
                    raise ValueError(f"cohort CSV {path}, row {line}: empty '{key}'.")
            cine, label = (str(path.parent / row[key]) if not Path(row[key]).is_absolute() else row[key] for key in ("cine", "label"))
            frame = row.get("label_frame") or None
            if frame is not None:
                try:
                    frame = int(frame)
                except ValueError:
                    frame = -1
                if frame < 0:
                    raise ValueError(f"cohort CSV {path}, row {line}: label_frame {row['label_frame']!r} is not an integer >= 0 (0-based frame).")
            name = row.get("name") or study_name(cine)
            folder = row.get("out") or str(Path(out) / name)
            if not Path(folder).is_absolute() and row.get("out"):
                folder = str(path.parent / folder)
            studies.append(CohortRow(name=name, cine=cine, label=label, label_frame=frame, out=folder, row=line))
    if not studies:
        raise ValueError(f"cohort CSV {path} has no rows.")
    names: Dict[str, int] = {}
    for s in studies:
        if s.name in names:
            raise ValueError(f"cohort CSV {path}: rows {names[s.name]} and {s.row} are both study {s.name!r}; give them a 'name' or 'out' column.")
        names[s.name] = s.row
    duplicate_outs([{"out": s.out} for s in studies], path)
    return studies


def study_done(out: PathLike, request: Optional[Dict[str, Any]] = None) -> Optional[Dict[str, Any]]:
    """The ``function.json`` summary of a finished study in ``out``, else ``None``.

    Finished: ``function.json`` parses, holds the function figures, every file it lists under
    ``outputs`` exists (the folder is written all at once), and, when ``request`` is given
    (:func:`~monai_npc.apps.tracking.outputs.tracking_request`), it was asked the same: a study whose
    cine, label, label frame, scheme, model or settings changed is not done (a warning names what
    changed).
    """
    summary = finished_summary(out, TRACK_OUTPUTS["function"], request, logger, "tracking the study again")
    if summary is None or not isinstance(summary.get("function"), dict):
        return None
    if not all(k in summary["function"] for k in ("ed_frame", "es_frame", "lv_edv", "lv_esv")):
        return None
    return summary


def _row(study: CohortRow, status: str, error: str = "", summary: Optional[Dict[str, Any]] = None, seconds: float = float("nan")) -> Dict[str, Any]:
    row: Dict[str, Any] = dict.fromkeys(COHORT_COLUMNS)
    row.update(name=study.name, status=status, error=error, seconds=seconds, out=study.out)
    if summary is not None:
        row.update({k: summary["function"].get(k) for k in FUNCTION_COLUMNS})
        row.update(reference_frame=summary.get("reference_frame"), frames=summary.get("frames"))
        peaks = summary.get("strain") or {}
        row.update({c: (peaks.get(c.split("_")[1]) or {}).get("peak") for c in STRAIN_COLUMNS})
    return row


def cohort_csv(rows: Sequence[Dict[str, Any]]) -> str:
    """The text of ``cohort.csv`` (:data:`COHORT_COLUMNS`; missing values empty, floats at full precision)."""
    buf = io.StringIO()
    writer = csv.writer(buf, lineterminator="\n")
    writer.writerow(COHORT_COLUMNS)
    for row in rows:
        writer.writerow(["" if row.get(c) is None else row[c] for c in COHORT_COLUMNS])
    return buf.getvalue()


def _track_study(study: CohortRow, net: Any, name: str, scheme: str, figure: bool, register_kwargs: Dict[str, Any],
                 strain: Dict[str, Any]) -> Dict[str, Any]:
    """Track one study and write its files; returns its ``function.json`` summary."""
    from .outputs import track_to_folder

    _, files = track_to_folder(study.cine, study.label, study.out, study.label_frame, scheme, net, figure=figure, progress=False,
                               model_name=name, **strain, **register_kwargs)
    return json.loads(Path(files["function"]).read_text())


def _request(study: CohortRow, net: Any, name: str, scheme: str, register_kwargs: Dict[str, Any],
             strain: Dict[str, Any]) -> Optional[Dict[str, Any]]:
    """What :func:`_track_study` would record as ``request`` for ``study`` (``None`` when its label frame cannot be told)."""
    from .cine import label_frame
    from .outputs import tracking_request

    try:
        frame, _ = label_frame(study.cine, study.label, study.label_frame)
    except (OSError, ValueError):
        return None
    return tracking_request(study.cine, study.label, frame, scheme, net, model_name=name, **strain, **register_kwargs)


def _track_studies(studies: Any, cohort: PathLike, net: Any, name: str, scheme: str, figure: bool, kwargs: Dict[str, Any],
                   strain: Dict[str, Any], strict: bool) -> Tuple[List[Dict[str, Any]], Optional[str]]:
    """This rank's rows of :func:`track_cohort` (each study skipped when done, else tracked, or failed) and,
    with ``strict``, the message of the bad study it stopped at (else ``None``)."""
    from monai_npc.utils import error_line

    rows: List[Dict[str, Any]] = []
    for study in studies:
        done = study_done(study.out, _request(study, net, name, scheme, kwargs, strain))
        if done is not None:
            logger.info("study %s: skipped, already done (%s is complete)", study.name, Path(study.out) / TRACK_OUTPUTS["function"])
            rows.append(_row(study, "skipped", summary=done, seconds=done.get("seconds", float("nan"))))
            continue
        t0 = time.perf_counter()
        try:
            summary = _track_study(study, net, name, scheme, figure, kwargs, strain)
            rows.append(_row(study, "ok", summary=summary, seconds=time.perf_counter() - t0))
        except Exception as err:  # noqa: BLE001 - one bad study of many is reported, not fatal
            error = error_line(err)
            logger.error("study %s (cohort CSV row %d) failed: %s", study.name, study.row, error)
            rows.append(_row(study, "failed", error, seconds=time.perf_counter() - t0))
            if strict:  # the merged CSV still gets every rank's rows
                return rows, f"study {study.name} (cohort CSV {cohort}, row {study.row}) failed: {error}"
    return rows, None


def track_cohort(
    cohort: PathLike,
    out: PathLike,
    model: Any = "acdc",
    scheme: str = DEFAULT_SCHEME,
    *,
    refine_iterations: Optional[int] = None,
    num_steps: Optional[int] = None,
    strict: bool = False,
    figure: bool = True,
    progress: bool = True,
    threads: Optional[int] = 1,
    device: Optional[Union[str, torch.device]] = None,
    strain: bool = False,
    frame_ms: Optional[float] = None,
    **register_kwargs: Any,
) -> List[Dict[str, Any]]:
    """Track every study of the cohort CSV ``cohort`` (:func:`read_cohort`); write ``out/cohort.csv``.

    Args:
        cohort: the cohort CSV; out: folder of ``cohort.csv`` and of the studies without an ``out``.
        model, scheme, refine_iterations, num_steps, register_kwargs: as :func:`monai_npc.track`
            (the model is loaded once per process, :func:`~monai_npc.apps.tracking.track.tracking_model`).
        strict: a bad study is fatal instead of a ``failed`` row: its rank stops, the rows so far
            are merged and written, then every rank raises ``ValueError``.
        figure: write each study's ``function.png``.
        progress: a tqdm bar over this rank's studies.
        threads: CPU threads per process (default 1: one per ``torchrun`` rank).
        device: ``None`` (default): ``cuda:LOCAL_RANK`` (``cuda:0`` without ``torchrun``) with CUDA, else ``cpu``;
            ``"cuda"``: the local rank's GPU (:func:`monai_npc.runtime.rank_device`).
        strain, frame_ms: also each study's myocardial strain files
            (:func:`~monai_npc.apps.tracking.outputs.write_tracking`) and its peaks in ``cohort.csv``.

    Returns:
        The rows of ``cohort.csv`` (:data:`COHORT_COLUMNS`; ``status`` ``ok``, ``skipped`` (done by an
        earlier run) or ``failed``), in CSV order, on every rank.

    Raises:
        FileNotFoundError, ValueError: a bad CSV (before any work), an unusable model; with
        ``strict``, the first bad study.
    """
    from tqdm.auto import tqdm

    from .track import tracking_model

    if os.path.abspath(cohort) == os.path.abspath(Path(out) / COHORT_FILE):
        raise ValueError(f"the cohort CSV {cohort} is the merged table this run writes ({COHORT_FILE} in --out {out}): rename it or choose another --out.")
    studies = read_cohort(cohort, out)
    report = make_folder(out, "cohort output folder")
    with distributed() as (rank, world_size):
        if rank == 0:
            remove_stale([report / COHORT_FILE])
        device = rank_device(device)
        net, name = tracking_model(model, device, refine_iterations, num_steps)  # a bad model fails here, before any study
        if not isinstance(model, torch.nn.Module):
            net = model  # by name or file: track() loads it per study (milliseconds) with the settings for each pair's frames
        kwargs = dict(register_kwargs, device=device, threads=threads, refine_iterations=refine_iterations, num_steps=num_steps)
        desc = rank_desc("track cohort", rank, world_size)
        mine = tqdm(shard(studies, rank, world_size), desc=desc, unit="study", disable=not progress, position=rank if world_size > 1 else None)
        rows, fatal = _track_studies(mine, cohort, net, name, scheme, figure, kwargs, {"strain": bool(strain), "frame_ms": frame_ms}, strict)
        rows = gather_shards(rows, world_size)  # a rank stopped by strict sent its first rows only
        if rank == 0:
            atomic_write_text(report / COHORT_FILE, cohort_csv(rows))
    failed = [r for r in rows if r["status"] == "failed"]
    if strict and failed:
        raise ValueError(fatal or f"study {failed[0]['name']} failed: {failed[0]['error']}")
    return rows
