"""Inference over whole stacks: every pair of every study registered and its files written."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Dict, Optional, Sequence, Union

import torch
from torch import nn

from .pairs import descend_registration, register_pair
from .runs import load_model, one_line, progress_bar, skip_record, status_file
from .studies import find_studies

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

    ``out/summary.json`` (replaced at the start of each run) lists every study with
    ``status`` ``"done"`` or ``"skipped"`` and the ``reason``. ``strict=True`` raises on the first
    bad study instead. Returns that summary.
    """
    from monai_npc.apps.registration.align import check_align

    check_align(align)  # before any study is read
    out = Path(out)
    status_path = status_file(out, "summary.json")
    net, name = load_model(model, device, refine_iterations)
    studies = find_studies(root, directions)
    records = []
    for study in progress_bar(studies, "register", progress, "study"):
        if study.error:
            records.append({**skip_record(study.name, study.error, strict), "kind": study.kind})
            continue
        done: Dict[str, Any] = {}
        try:
            for pair in study.pairs:
                reg = register_pair(pair, net, model_name=model_name or name, device=device, threads=threads, align=align)
                if basal_descent:
                    descend_registration(pair, reg)
                folder = out / study.name / pair.tag
                summary = reg.save(folder, overview=overview)
                done[pair.direction] = {"folder": str(folder), "seconds": summary["seconds"], "files": sorted(summary["outputs"].values())}
        except (OSError, ValueError, RuntimeError) as err:
            records.append({**skip_record(study.name, one_line(err), strict), "kind": study.kind})
            continue
        records.append({"study": study.name, "status": "done", "kind": study.kind, "group": study.group, "pairs": done})
    result = {
        "root": str(Path(root).resolve()), "model": name, "directions": list(directions), "basal_descent": bool(basal_descent),
        "n_done": sum(r["status"] == "done" for r in records), "n_skipped": sum(r["status"] == "skipped" for r in records),
        "studies": records,
    }
    status_path.write_text(json.dumps(result, indent=2))
    return result
