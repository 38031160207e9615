"""Inference over whole stacks: every pair of every study registered and its files written."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Dict, Optional, Sequence, Union

import torch
from torch import nn

from .pairs import descend_registration, register_pair
from .runs import load_model, one_line, progress_bar, skip_record, status_file
from .studies import Study, find_studies

__all__ = ["infer_studies"]

PathLike = Union[str, Path]


def infer_studies(
    root: PathLike,
    out: PathLike,
    model: Union[str, PathLike, nn.Module] = "acdc",
    model_name: Optional[str] = None,
    directions: Sequence[str] = ("ED->ES", "ES->ED"),
    device: Union[str, torch.device] = "cpu",
    threads: Optional[int] = 1,
    refine_iterations: Optional[int] = None,
    overview: bool = True,
    strict: bool = False,
    progress: bool = True,
    basal_descent: bool = True,
    align: str = "auto",
) -> Dict[str, Any]:
    """Register every study under ``root`` and write the results in the fixed images' own space.

    For each study and direction, ``out/<study>/<ED_to_ES>/`` gets the files of
    :meth:`~monai_npc.apps.registration.result.Registration.save`: ``warped.nii.gz``, ``warped_label.nii.gz``
    (when the moving frame has a label), ``transform.h5`` (ITK), ``displacement.nii.gz`` (ANTs),
    ``jacobian.nii.gz``, ``summary.json``..., every one on the fixed image's grid, every slice kept.
    With ``basal_descent`` (default), the warped label follows the base through the plane
    (:func:`basal_descent_label`; recorded in its ``summary.json``): ``ED->ES`` has the basal RV
    slices the base leaves in systole cleared, ``ES->ED`` the basal slices the structures re-enter filled.
    ``align``: :func:`monai_npc.register`'s rigid pre-alignment (``"auto"``: for the pairs of two
    acquisitions, e.g. a plain moving/fixed pair from two studies; the frames of one cine share a grid).

    ``out/summary.json`` (removed at the start of each run, written at the end) lists every study
    with ``status`` ``"done"`` or ``"skipped"`` and the ``reason``. ``strict=True`` raises on the
    first bad study instead. Returns that summary.

    Resumable: a pair whose folder holds a complete ``summary.json`` of the same request (its
    files, model name, direction and these settings; :func:`~monai_npc.apps.registration.files.pair_done`)
    is read back, not registered again (``"resumed": true`` in the record). Under ``torchrun
    --nproc_per_node N`` (or in a bundle's ``configs/multi_gpu_inference.json``) the studies are
    shared (:func:`monai_npc.runtime.shard`), each rank writes its own studies' folders and rank 0
    writes ``summary.json`` once every rank's records are gathered, in study order;
    ``device`` ``"cuda"`` is each rank's own GPU (:func:`monai_npc.runtime.rank_device`).
    """
    from monai_npc.apps.registration.align import check_align
    from monai_npc.io_safety import atomic_write_text
    from monai_npc.runtime import distributed, gather_shards, rank_desc, rank_device, shard

    check_align(align)  # before any study is read
    out = Path(out)
    studies = find_studies(root, directions)
    with distributed() as (rank, world_size):
        if rank == 0:
            status_file(out, "summary.json")  # a previous run's is removed
        device = rank_device(device)
        net, name = load_model(model, device, refine_iterations)
        settings = {"model_name": model_name or name, "basal_descent": bool(basal_descent), "align": align, "overview": bool(overview),
                    "refine_iterations": refine_iterations}
        records = [_infer_study(study, out, net, settings, device, threads, strict)
                   for study in progress_bar(shard(studies, rank, world_size), rank_desc("register", rank, world_size), progress, "study")]
        records = gather_shards(records, world_size)
        result = {
            "root": str(Path(root).resolve()), "model": name, "directions": list(directions), "basal_descent": bool(basal_descent),
            "n_done": sum(r["status"] == "done" for r in records), "n_skipped": sum(r["status"] == "skipped" for r in records),
            "studies": records,
        }
        if rank == 0:
            atomic_write_text(out / "summary.json", json.dumps(result, indent=2))
    return result


def _infer_study(study: Study, out: Path, net: nn.Module, settings: Dict[str, Any], device: Union[str, torch.device],
                 threads: Optional[int], strict: bool) -> Dict[str, Any]:
    """One study of :func:`infer_studies`: each pair registered and saved in ``out/<study>/<tag>/``, or
    read back when its folder already holds the same request (:func:`~monai_npc.apps.registration.files.pair_done`:
    ``"resumed": true``); the study's record (``done``, or ``skipped`` with the reason)."""
    from monai_npc.apps.registration.files import pair_done, pair_request

    if study.error:
        return {**skip_record(study.name, study.error, strict), "kind": study.kind}
    done: Dict[str, Any] = {}
    try:
        for pair in study.pairs:
            folder = out / study.name / pair.tag
            files = {"moving": pair.moving.image, "fixed": pair.fixed.image, "moving_label": pair.moving.label, "fixed_label": None}
            request = pair_request(files, settings["model_name"], {
                "moving_select": pair.moving.select, "fixed_select": pair.fixed.select, "direction": pair.direction, **settings})
            summary = pair_done(folder, request)
            resumed = summary is not None
            if summary is None:
                reg = register_pair(pair, net, model_name=settings["model_name"], device=device, threads=threads, align=settings["align"])
                if settings["basal_descent"]:
                    descend_registration(pair, reg)
                reg.summary["request"] = request
                summary = reg.save(folder, overview=settings["overview"])
            done[pair.direction] = {"folder": str(folder), "seconds": summary["seconds"], "files": sorted(summary["outputs"].values()),
                                    **({"resumed": True} if resumed else {})}
    except (OSError, ValueError, RuntimeError) as err:
        return {**skip_record(study.name, one_line(err), strict), "kind": study.kind}
    return {"study": study.name, "status": "done", "kind": study.kind, "group": study.group, "pairs": done}
