"""Whole short-axis stacks in folders: find the studies, register them, evaluate them against demons.

Everything here works on the images as the scanner wrote them (full field of view, native
spacing, every slice) through the public API :func:`monai_npc.register`; results are on the
FIXED image's own grid (same size, spacing, origin and direction).

Inputs :func:`find_studies` accepts under one root folder (mixed freely; one study each):

- official ACDC layout: ``patientNNN/patientNNN_frameFF.nii.gz`` (+ optional ``_gt.nii.gz``) and
  ``Info.cfg`` with ``ED:``/``ES:`` (1-based frame numbers) and optionally ``Group:``; without
  ``Info.cfg`` a folder with exactly two ``_frameFF`` images takes the lower frame as ED;
- a cine ``patientNNN/patientNNN_4d.nii.gz`` with ``Info.cfg``: a phase whose
  ``_frameFF.nii.gz`` is absent is taken from the 4-D file (frame ``FF`` = 4-D index ``FF - 1``);
- plain pairs: ``NAME_moving.nii.gz`` + ``NAME_fixed.nii.gz`` (+ optional
  ``NAME_moving_label.nii.gz`` / ``NAME_fixed_label.nii.gz``; ``.nii``, ``.mha``, ``.mhd``,
  ``.nrrd`` too) directly in the root: one direction, ``moving->fixed``;
- a cine DICOM series: a sub-folder of DICOM files with an ``Info.cfg`` naming the ``ED:`` and
  ``ES:`` phases (1-based, trigger-time order, as ACDC counts frames; ``ED`` defaults to 1).

ED/ES studies give two directions (``ED->ES``, ``ES->ED``). Only the MOVING label is ever passed
to the registration: the fixed frame's label is used for scoring only.

Layout of the outputs (:class:`StackInference`): ``OUT/<study>/<ED_to_ES>/`` holds the files of
:meth:`monai_npc.interop.api.Registration.save` and ``OUT/summary.json`` the status of every
study (``done`` or ``skipped`` with the reason). :class:`StackEvaluation` writes
``per_pair.jsonl`` (one row per pair and method, appended as it goes: reruns resume),
``per_pair.csv``, ``metrics.json``, ``results.md`` and ``groups.png``.
"""

from __future__ import annotations

import csv
import json
import logging
import math
import re
import time
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Dict, Iterable, List, Mapping, Optional, Sequence, Tuple, Union

import numpy as np
import SimpleITK as sitk
import torch
from torch import nn

from monai_npc.data.acdc import read_acdc_info
from monai_npc.data.io import find_image, read_sitk_file
from monai_npc.data.layout import cfg_frame, find_patient_dirs
from monai_npc.utils import as_json, changed_settings

__all__ = [
    "GROUPS",
    "STRUCTURES",
    "BUCKETS",
    "Phase",
    "StudyPair",
    "Study",
    "find_studies",
    "register_pair",
    "label_metrics",
    "demons_pair",
    "initial_bucket",
    "summarise",
    "results_table",
    "group_figure",
    "infer_studies",
    "evaluate_studies",
    "StackInference",
    "StackEvaluation",
]

logger = logging.getLogger(__name__)

PathLike = Union[str, Path]
#: ACDC pathology groups, in the order the tables list them
GROUPS: Tuple[str, ...] = ("NOR", "MINF", "DCM", "HCM", "RV")
#: label value -> structure name (ACDC)
STRUCTURES: Dict[int, str] = {1: "rv", 2: "myo", 3: "lv"}
#: difficulty buckets of the unregistered (initial) mean Dice, as in ``benchmarks/heldout.py``
BUCKETS: Tuple[Tuple[str, float, float], ...] = (
    ("large (< 0.55)", 0.0, 0.55), ("medium (0.55-0.70)", 0.55, 0.70), ("small (>= 0.70)", 0.70, 1.01),
)
_SUFFIX = r"\.(nii\.gz|nii|mha|mhd|nrrd)"
_PATIENT = re.compile(r"patient\d+")
_PAIR_FILE = re.compile(rf"(.+)_(moving|fixed)(_label)?{_SUFFIX}")


# ------------------------------------------------------------------------------------------ studies


@dataclass(frozen=True)
class Phase:
    """One 3-D frame: an image file or DICOM folder, the selection inside it (``"frame=K"`` of a
    4-D file, ``"phase=K"`` of a cine DICOM series; :func:`monai_npc.data.io.parse_select`), and
    its label map file (or ``None``)."""

    image: Path
    select: Optional[str] = None
    label: Optional[Path] = None


@dataclass(frozen=True)
class StudyPair:
    """One registration of a study: ``direction`` (``"ED->ES"``...) from ``moving`` onto ``fixed``."""

    direction: str
    moving: Phase
    fixed: Phase

    @property
    def tag(self) -> str:
        """File-system name of the direction: ``"ED->ES"`` -> ``"ED_to_ES"``."""
        return self.direction.replace("->", "_to_")


@dataclass(frozen=True)
class Study:
    """One study (a patient's stacks or a pair of files): its pairs, or the reason it cannot run.

    ``kind`` is ``"official"``, ``"cine4d"``, ``"pairs"`` or ``"dicom"``; ``group`` the pathology
    group of ``Info.cfg`` (``"unknown"`` without one); ``error`` is set when the study was found
    but is unusable (it is then skipped with that reason).
    """

    name: str
    kind: str
    folder: Path
    group: str = "unknown"
    pairs: Tuple[StudyPair, ...] = ()
    error: Optional[str] = None
    info: Mapping[str, str] = field(default_factory=dict)


def _ed_es_pairs(phases: Mapping[str, Phase], directions: Sequence[str]) -> Tuple[StudyPair, ...]:
    out = []
    for direction in directions:
        src, _, dst = direction.partition("->")
        if src not in phases or dst not in phases:
            raise ValueError(f"direction {direction!r}: expected 'ED->ES' or 'ES->ED'.")
        out.append(StudyPair(direction, phases[src], phases[dst]))
    return tuple(out)


def _official_study(folder: Path, directions: Sequence[str]) -> Study:
    """A ``patientNNN`` folder: frame files and/or a ``_4d`` file, labels when present."""
    name = folder.name
    cfg = folder / "Info.cfg"
    info: Dict[str, str] = {}
    four_d = find_image(folder / f"{name}_4d")
    try:
        if cfg.is_file():
            info = read_acdc_info(cfg)
            ed, es = cfg_frame(info, "ED", cfg), cfg_frame(info, "ES", cfg)
        else:
            frames = sorted(
                int(m.group(1)) for p in folder.iterdir() if (m := re.fullmatch(rf"{name}_frame(\d+){_SUFFIX}", p.name))
            )
            if len(frames) != 2:
                raise FileNotFoundError(
                    f"{folder}: no Info.cfg naming the ED and ES frames, and {len(frames)} frame images "
                    f"({name}_frameFF.nii.gz) instead of exactly two to take them from"
                )
            ed, es = frames
        phases = {}
        for phase, number in (("ED", ed), ("ES", es)):
            stem = folder / f"{name}_frame{number:02d}"
            image, label = find_image(stem), find_image(f"{stem}_gt")
            if image is not None:
                phases[phase] = Phase(image, None, label)
            elif four_d is not None:
                phases[phase] = Phase(four_d, f"frame={number - 1}", label)
            else:
                raise FileNotFoundError(
                    f"{stem}.nii.gz ({phase}, frame {number} of Info.cfg) is missing and there is no {name}_4d.nii.gz to take it from"
                )
        kind = "cine4d" if any(p.select for p in phases.values()) else "official"
        return Study(name, kind, folder, info.get("Group", "unknown"), _ed_es_pairs(phases, directions), info=info)
    except (OSError, ValueError) as err:
        return Study(name, "official", folder, info.get("Group", "unknown"), error=str(err), info=info)


def _is_dicom_folder(folder: Path) -> bool:
    from monai_npc.data.io import is_dicom_file

    return any(p.is_file() and is_dicom_file(p) for p in sorted(folder.iterdir())[:20])


def _dicom_study(folder: Path, directions: Sequence[str]) -> Study:
    """A cine DICOM series folder; ``Info.cfg`` gives the 1-based ED/ES phases."""
    cfg = folder / "Info.cfg"
    if not cfg.is_file():
        return Study(folder.name, "dicom", folder, error=f"{folder}: a cine DICOM folder needs an Info.cfg with 'ES:' (and 'ED:', default 1) phase numbers")
    try:
        info = read_acdc_info(cfg)
        ed, es = cfg_frame(info, "ED", cfg, default=1), cfg_frame(info, "ES", cfg)
        phases = {"ED": Phase(folder, f"phase={ed - 1}"), "ES": Phase(folder, f"phase={es - 1}")}
        return Study(folder.name, "dicom", folder, info.get("Group", "unknown"), _ed_es_pairs(phases, directions), info=info)
    except ValueError as err:
        return Study(folder.name, "dicom", folder, error=str(err))


def _pair_studies(root: Path) -> List[Study]:
    """``NAME_moving`` / ``NAME_fixed`` (+ ``_label``) files directly in ``root``."""
    found: Dict[str, Dict[str, Path]] = {}
    for p in sorted(root.iterdir()):
        m = _PAIR_FILE.fullmatch(p.name)
        if m and p.is_file():
            found.setdefault(m.group(1), {})[m.group(2) + (m.group(3) or "")] = p
    studies = []
    for name, files in sorted(found.items()):
        missing = [k for k in ("moving", "fixed") if k not in files]
        if missing:
            studies.append(Study(name, "pairs", root, error=f"{root}: {name}_{missing[0]}.nii.gz is missing (found {sorted(p.name for p in files.values())})"))
            continue
        pair = StudyPair(
            "moving->fixed", Phase(files["moving"], None, files.get("moving_label")), Phase(files["fixed"], None, files.get("fixed_label"))
        )
        studies.append(Study(name, "pairs", root, pairs=(pair,)))
    return studies


def find_studies(root: PathLike, directions: Sequence[str] = ("ED->ES", "ES->ED")) -> List[Study]:
    """Every study under ``root`` (see the module docstring for the layouts), sorted by name.

    Unusable studies are returned with ``error`` set (they are skipped, not fatal).

    Raises:
        FileNotFoundError: ``root`` is not a folder, or holds no study of any accepted layout.
    """
    root = Path(root).expanduser()
    if not root.is_dir():
        raise FileNotFoundError(f"study folder not found: {root}")
    studies = [_official_study(d, directions) for d in find_patient_dirs(root, _PATIENT)]
    studies += _pair_studies(root)
    for d in sorted(p for p in root.iterdir() if p.is_dir() and not _PATIENT.fullmatch(p.name) and not p.name.startswith(".")):
        if _is_dicom_folder(d):
            studies.append(_dicom_study(d, directions))
    if not studies:
        slices = any(root.glob("*_slice_*.h5")) or any(root.glob("data/*_slice_*.h5"))
        hint = ("; this folder holds SSL4MIS slice files (patientNNN_frameFF_slice_K.h5): the *_crops.json configs "
                "(evaluate_crops.json, inference_crops.json) read that layout") if slices else ""
        raise FileNotFoundError(
            f"no studies found under {root}: expected patientNNN/ folders (patientNNN_frameFF.nii.gz [+ _gt] + Info.cfg, "
            "or patientNNN_4d.nii.gz + Info.cfg), NAME_moving.nii.gz + NAME_fixed.nii.gz pairs, or DICOM cine folders with Info.cfg"
            + hint
        )
    names = [s.name for s in studies]
    dup = sorted({n for n in names if names.count(n) > 1})
    if dup:
        raise ValueError(f"study name {dup[0]} occurs twice under {root}; rename one of them")
    return sorted(studies, key=lambda s: s.name)


# ------------------------------------------------------------------------------------- registration


def _model(model: Union[str, PathLike, nn.Module], device: Union[str, torch.device], refine_iterations: Optional[int]) -> Tuple[nn.Module, str]:
    """``(network, name)`` resolved once, so that a run does not reload weights for every pair."""
    from monai_npc.interop.api import resolve_model

    return resolve_model(model, device, refine_iterations)


def register_pair(pair: StudyPair, model: Union[str, nn.Module] = "acdc", model_name: Optional[str] = None, **kwargs: Any):
    """Register one pair of a study with :func:`monai_npc.register`: only the moving label is given.

    ``kwargs`` go to :func:`monai_npc.register` (``device``, ``threads``, ``refine_iterations``...).
    Returns the :class:`~monai_npc.interop.api.Registration` (on the fixed image's grid).
    """
    import monai_npc

    return monai_npc.register(
        pair.moving.image, pair.fixed.image, model=model, moving_label=pair.moving.label,
        moving_select=pair.moving.select, fixed_select=pair.fixed.select, model_name=model_name, **kwargs,
    )


def basal_descent_label(pair: StudyPair, warped: np.ndarray, reference: np.ndarray, fixed: sitk.Image,
                        prior_label: Optional[np.ndarray] = None) -> np.ndarray:
    """The through-plane motion of the base on a carried label of a short-axis stack (3 slices or
    more; ``warped`` ``(Z, H, W)`` on ``fixed``'s grid, ``reference`` the moving label on the same grid):
    ``ED->ES``: the basal RV slices the base leaves in systole cleared
    (:func:`monai_npc.tracking.through_plane.apply_basal_descent`), and, with the label prior's
    segmentation of the fixed frame (``prior_label``, :attr:`~monai_npc.interop.api.Registration.prior_label`),
    the LV and myocardium cleared from the most basal LV slice when the prior finds the LV gone from it
    (:func:`~monai_npc.tracking.through_plane.clear_basal_by_prior`); ``ES->ED``: the basal slices
    the structures re-enter in diastole filled (:func:`~monai_npc.tracking.through_plane.apply_basal_ascent`).
    Other pairs (plain ``moving->fixed`` pairs, single slices) are returned as they are.
    """
    return _basal_moves(pair, warped, reference, fixed, prior_label)[0]


def _basal_moves(pair: StudyPair, warped: np.ndarray, reference: np.ndarray, fixed: sitk.Image,
                 prior_label: Optional[np.ndarray] = None) -> Tuple[np.ndarray, Optional[int]]:
    """:func:`basal_descent_label` and the slice the label prior found the LV gone from (``None``: none, or no prior)."""
    if pair.direction not in ("ED->ES", "ES->ED") or fixed.GetDimension() != 3 or warped.shape[0] < 3 or not (np.asarray(reference) > 0).any():
        return warped, None
    from monai_npc.tracking.through_plane import apply_basal_ascent, apply_basal_descent, clear_basal_by_prior

    if pair.direction == "ES->ED":
        return apply_basal_ascent(warped, reference, fixed.GetSpacing()[2]), None
    descended = apply_basal_descent(warped, reference, fixed.GetSpacing()[2])
    return clear_basal_by_prior(descended, reference, prior_label)  # no prior: nothing cleared


def _descend_registration(pair: StudyPair, reg: Any) -> None:
    """:func:`basal_descent_label` applied to ``reg.warped_label`` in place (recorded in ``reg.summary``)."""
    if reg.warped_label is None or pair.moving.label is None or pair.direction not in ("ED->ES", "ES->ED"):
        return
    on_fixed = reg.warped_label  # on the fixed grid
    # the moving label as register read it, on the fixed grid
    reference = sitk.GetArrayFromImage(sitk.Resample(reg.moving_label, on_fixed, sitk.Transform(), sitk.sitkNearestNeighbor, 0, sitk.sitkInt32))
    warped = sitk.GetArrayFromImage(on_fixed)
    prior = None if reg.prior_label is None else sitk.GetArrayFromImage(reg.prior_label)
    new, lv_left = _basal_moves(pair, warped, reference, on_fixed, prior)
    if new is warped:
        return
    image = sitk.GetImageFromArray(new.astype(warped.dtype))
    image.CopyInformation(on_fixed)
    reg.warped_label = image
    key = "cleared_voxels" if pair.direction == "ED->ES" else "filled_voxels"
    reg.summary["basal_descent"] = {key: int((warped != new).sum()), "direction": pair.direction, "module": "monai_npc.tracking.through_plane"}
    if prior is not None and pair.direction == "ED->ES":  # the slice the label prior found the LV gone from (or None)
        reg.summary["basal_descent"]["lv_left_slice"] = lv_left


def _read(phase: Phase, what: str) -> sitk.Image:
    from monai_npc.interop.api import as_image

    return as_image(phase.image, what, select=phase.select)


def _read_label(path: Path, reference: sitk.Image, what: str) -> np.ndarray:
    """``(Z, H, W)`` int array of a label file that must lie on ``reference``'s grid."""
    label = read_sitk_file(Path(path), "label")
    if label.GetSize() != reference.GetSize():
        raise ValueError(f"{what} {path} has size {label.GetSize()} but its image has {reference.GetSize()}")
    arr = sitk.GetArrayFromImage(label)
    if not np.all(arr == np.round(arr)) or arr.min() < 0:
        raise ValueError(f"{what} {path} holds values that are not label numbers (0, 1, 2, ...)")
    return arr.astype(np.int16)


def label_metrics(
    pred: np.ndarray, target: np.ndarray, spacing: Sequence[float], structures: Mapping[int, str] = STRUCTURES, suffix: str = ""
) -> Dict[str, float]:
    """3-D Dice and HD95 (mm) per structure of two label maps on one grid.

    Args:
        pred, target: ``(Z, H, W)`` (or ``(H, W)``) integer label maps (``target``: the fixed ground truth).
        spacing: mm per array axis (array order, e.g. ``(z, h, w)``).
        structures: label value -> name.
        suffix: appended to every key (``"_initial"``).

    Returns ``dice_<name>``, ``hd95_<name>`` and the means ``dice_mean``, ``hd95_mean`` over the
    structures present in ``target`` (absent ones give NaN; an empty prediction gives Dice 0 and
    HD95 NaN).
    """
    from monai_npc.metrics import dice_per_structure, hd95_per_structure

    values = list(structures)
    p = torch.from_numpy(np.ascontiguousarray(pred, dtype=np.float32))[None, None]
    t = torch.from_numpy(np.ascontiguousarray(target, dtype=np.float32))[None, None]
    dice = dice_per_structure(p, t, values)[0].numpy()
    with warnings.catch_warnings():  # MONAI warns about empty structures: they are NaN here
        warnings.simplefilter("ignore")
        hd = hd95_per_structure(p, t, values, spacing=[float(s) for s in spacing])[0].numpy()
    out: Dict[str, float] = {}
    for k, name in enumerate(structures.values()):
        out[f"dice_{name}{suffix}"] = float(dice[k])
        out[f"hd95_{name}{suffix}"] = float(hd[k]) if np.isfinite(hd[k]) and np.isfinite(dice[k]) and dice[k] > 0 else math.nan
    out[f"dice_mean{suffix}"] = _nanmean([out[f"dice_{n}{suffix}"] for n in structures.values()])
    out[f"hd95_mean{suffix}"] = _nanmean([out[f"hd95_{n}{suffix}"] for n in structures.values()])
    return out


def _nanmean(values: Iterable[float]) -> float:
    finite = [v for v in values if v is not None and np.isfinite(v)]
    return float(np.mean(finite)) if finite else math.nan


def _unit_slices(array: np.ndarray) -> np.ndarray:
    """Min-max each slice of ``(Z, H, W)`` to ``[0, 1]`` (constant slices become 0)."""
    lo = array.min(axis=(1, 2), keepdims=True)
    span = array.max(axis=(1, 2), keepdims=True) - lo
    return np.where(span > 0, (array - lo) / np.where(span > 0, span, 1.0), 0.0).astype(np.float32)


def demons_pair(
    moving: sitk.Image, fixed: sitk.Image, moving_label: sitk.Image, iterations: int = 200, smoothing: float = 1.5,
    label_sigma: Optional[float] = None,
) -> Tuple[np.ndarray, torch.Tensor]:
    """SimpleITK fast symmetric-forces demons, slice by slice at the fixed image's native grid.

    The moving image and label are resampled onto the fixed grid (identity, physical space;
    linear / nearest), each slice is scaled to ``[0, 1]``, and
    :class:`~monai_npc.networks.nets.DemonsNet` (``iterations``, Gaussian field smoothing of
    ``smoothing`` voxels) registers every slice. The label is carried as NPC's ``warped_label`` is, up
    to where the smoothing happens: each value smoothed in-plane by ``label_sigma`` voxels (``None``:
    ``register``'s ``acdc`` default, :data:`monai_npc.tracking.track.LABEL_SIGMA`), interpolated
    linearly, the largest wins (:func:`monai_npc.tracking.track.warp_label`); the label is first put on
    the fixed grid by nearest neighbour, so it is smoothed there (NPC's on the moving grid: the same
    grid for ACDC's ED/ES pairs), so the two methods differ by their fields.

    Returns ``(warped_label, ddf)``: ``(Z, H, W)`` int16 on the fixed grid and the ``(Z, 2, H, W)``
    displacement in fixed voxels (MONAI ``Warp`` convention, array axes H, W).
    """
    from monai_npc.networks.nets import DemonsNet
    from monai_npc.tracking.track import LABEL_SIGMA, warp_label

    ident = sitk.Transform()
    mov = sitk.GetArrayFromImage(sitk.Resample(moving, fixed, ident, sitk.sitkLinear, 0.0, sitk.sitkFloat32))
    lab = sitk.GetArrayFromImage(sitk.Resample(moving_label, fixed, ident, sitk.sitkNearestNeighbor, 0, sitk.sitkInt16))
    fix = sitk.GetArrayFromImage(fixed).astype(np.float32)
    if fix.ndim == 2:
        mov, lab, fix = mov[None], lab[None], fix[None]
    pairs = torch.from_numpy(np.stack([_unit_slices(mov), _unit_slices(fix)], 1))  # (Z, 2, H, W)
    ddf = DemonsNet(iterations=iterations, smoothing=smoothing)(pairs).float()
    sigma = LABEL_SIGMA if label_sigma is None else float(label_sigma)
    return warp_label(lab, ddf, np.unique(lab).tolist(), sigma).astype(np.int16), ddf


def initial_bucket(dice_initial: float) -> str:
    """Difficulty bucket (:data:`BUCKETS`) of a pair's unregistered mean Dice."""
    for name, lo, hi in BUCKETS:
        if lo <= dice_initial < hi:
            return name
    return BUCKETS[-1][0] if dice_initial >= 1.0 else BUCKETS[0][0]


# ----------------------------------------------------------------------------------------- inference


def _status_file(out: Path, name: str) -> Path:
    """``out/name`` with any previous one removed (results describe the current run only)."""
    out.mkdir(parents=True, exist_ok=True)
    path = out / name
    if path.exists():
        path.unlink()
    return path


def _progress(items: Sequence[Any], desc: str, enabled: bool, unit: str = "pair"):
    from tqdm.auto import tqdm

    return tqdm(items, desc=desc, unit=unit, disable=not enabled, dynamic_ncols=True)


def _fail(study: str, reason: str, strict: bool) -> Dict[str, str]:
    if strict:
        raise RuntimeError(f"study {study}: {reason}")
    logger.warning("study %s skipped: %s", study, reason)
    return {"study": study, "status": "skipped", "reason": reason}


def _one_line(err: BaseException) -> str:
    return f"{type(err).__name__}: {' '.join(str(err).split())}"


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
    :meth:`~monai_npc.interop.api.Registration.save`: ``warped.nii.gz``, ``warped_label.nii.gz``
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
    from monai_npc.apps.align import check_align

    check_align(align)  # before any study is read
    out = Path(out)
    status_path = _status_file(out, "summary.json")
    net, name = _model(model, device, refine_iterations)
    studies = find_studies(root, directions)
    records = []
    for study in _progress(studies, "register", progress, "study"):
        if study.error:
            records.append({**_fail(study.name, study.error, strict), "kind": study.kind})
            continue
        done: Dict[str, Any] = {}
        try:
            for pair in study.pairs:
                reg = register_pair(pair, net, model_name=model_name or name, device=device, threads=threads, align=align)
                if basal_descent:
                    _descend_registration(pair, reg)
                folder = out / study.name / pair.tag
                summary = reg.save(folder, overview=overview)
                done[pair.direction] = {"folder": str(folder), "seconds": summary["seconds"], "files": sorted(summary["outputs"].values())}
        except (OSError, ValueError, RuntimeError) as err:
            records.append({**_fail(study.name, _one_line(err), strict), "kind": study.kind})
            continue
        records.append({"study": study.name, "status": "done", "kind": study.kind, "group": study.group, "pairs": done})
    result = {
        "root": str(Path(root).resolve()), "model": name, "directions": list(directions), "basal_descent": bool(basal_descent),
        "n_done": sum(r["status"] == "done" for r in records), "n_skipped": sum(r["status"] == "skipped" for r in records),
        "studies": records,
    }
    status_path.write_text(json.dumps(result, indent=2))
    return result


# ---------------------------------------------------------------------------------------- evaluation


def _evaluate_pair(
    study: Study, pair: StudyPair, net: nn.Module, name: str, methods: Sequence[str], demons: Mapping[str, Any],
    device: Union[str, torch.device], threads: int, basal_descent: bool = True, field_of_view: Optional[str] = None,
) -> List[Dict[str, Any]]:
    """Rows (one per method) of one labelled pair: Dice/HD95 on the fixed grid, folding, seconds
    (``basal_descent``: :func:`basal_descent_label` on every method's ED->ES and ES->ED labels;
    ``field_of_view``: NPC's model grid, ``None``: the weights' register setting)."""
    from monai_npc.metrics import folding_percent
    from monai_npc.runtime import use_threads

    if pair.moving.label is None or pair.fixed.label is None:
        missing = pair.moving if pair.moving.label is None else pair.fixed
        raise FileNotFoundError(f"no label for {missing.image.name} (a _gt file): cannot evaluate {pair.direction}")
    fixed = _read(pair.fixed, "fixed image")
    moving = _read(pair.moving, "moving image")
    target = _read_label(pair.fixed.label, fixed, "fixed label")
    spacing = fixed.GetSpacing()[::-1]
    moving_label = read_sitk_file(Path(pair.moving.label), "moving label")
    initial = sitk.GetArrayFromImage(sitk.Resample(moving_label, fixed, sitk.Transform(), sitk.sitkNearestNeighbor, 0, sitk.sitkInt16))
    base = {
        "study": study.name, "group": study.group, "direction": pair.direction,
        "slices": int(fixed.GetSize()[2]) if fixed.GetDimension() == 3 else 1, "size": list(fixed.GetSize()),
        "spacing_mm": list(fixed.GetSpacing()), **label_metrics(initial, target, spacing, suffix="_initial"),
    }
    base["bucket"] = initial_bucket(base["dice_mean_initial"])
    rows = []
    for method in methods:
        t0 = time.perf_counter()
        if method == "npc":
            reg = register_pair(pair, net, model_name=name, device=device, threads=threads, field_of_view=field_of_view)
            seconds = time.perf_counter() - t0
            warped = sitk.GetArrayFromImage(reg.warped_label)
            folding = float(reg.summary["folding_percent"])
            prior = None if reg.prior_label is None else sitk.GetArrayFromImage(reg.prior_label)
        else:
            with use_threads(threads):
                warped, ddf = demons_pair(moving, fixed, sitk.Cast(moving_label, sitk.sitkInt16), **demons)
                seconds = time.perf_counter() - t0
            folding = float(folding_percent(ddf).mean())
        if basal_descent:
            warped = basal_descent_label(pair, warped, initial, fixed, prior if method == "npc" else None)
        rows.append({**base, "method": method, "seconds": seconds, "folding_percent": folding, **label_metrics(warped, target, spacing)})
    return rows


def _read_rows(path: Path) -> List[Dict[str, Any]]:
    if not path.is_file():
        return []
    rows = []
    for line in path.read_text().splitlines():
        try:
            rows.append(json.loads(line))
        except json.JSONDecodeError:  # a line cut by an interrupted run: that pair is redone
            continue
    return rows


def summarise(rows: Sequence[Mapping[str, Any]], structures: Mapping[int, str] = STRUCTURES) -> Dict[str, Any]:
    """Means per method: overall, per pathology group, per direction and per initial-Dice bucket.

    ``rows``: per-pair rows of :func:`evaluate_studies`. Each cell holds ``n`` (pairs), Dice per
    structure and mean, the initial mean Dice, HD95 per structure and mean (mm), ``folding_percent``
    and ``seconds`` (per pair), NaN-aware means.
    """
    keys = [f"dice_{n}" for n in structures.values()] + ["dice_mean", "dice_mean_initial"]
    keys += [f"hd95_{n}" for n in structures.values()] + ["hd95_mean", "folding_percent", "seconds"]

    def cell(sel: Sequence[Mapping[str, Any]]) -> Dict[str, float]:
        return {"n": len(sel), **{k: _nanmean(r.get(k, math.nan) for r in sel) for k in keys}}

    out: Dict[str, Any] = {}
    for method in sorted({r["method"] for r in rows}, key=lambda m: (m != "npc", m)):
        mine = [r for r in rows if r["method"] == method]
        groups = sorted({r["group"] for r in mine}, key=lambda g: (GROUPS.index(g) if g in GROUPS else len(GROUPS), g))
        out[method] = {
            "overall": cell(mine),
            "groups": {g: cell([r for r in mine if r["group"] == g]) for g in groups},
            "directions": {d: cell([r for r in mine if r["direction"] == d]) for d in sorted({r["direction"] for r in mine})},
            "buckets": {b: cell([r for r in mine if r["bucket"] == b]) for b, _, _ in BUCKETS if any(r["bucket"] == b for r in mine)},
        }
    return out


def _fmt(x: float, digits: int = 3) -> str:
    return "-" if x is None or not np.isfinite(x) else f"{x:.{digits}f}"


def results_table(summary: Mapping[str, Any], rows: Sequence[Mapping[str, Any]], structures: Mapping[int, str] = STRUCTURES) -> str:
    """Markdown tables of :func:`summarise`: per group and overall, then per initial-Dice bucket."""
    names = list(structures.values())
    methods = list(summary)
    head = "| group | method | pairs | " + " | ".join(f"Dice {n.upper() if len(n) < 3 else n.capitalize()}" for n in names)
    lines = [head + " | Dice mean | initial | HD95 mean (mm) | folding % | s/pair |", "|---|---|---|" + "---|" * (len(names) + 5)]
    first = summary[methods[0]] if methods else {"groups": {}}
    for group in list(first["groups"]) + ["all"]:
        for m in methods:
            c = summary[m]["overall"] if group == "all" else summary[m]["groups"].get(group)
            if c is None:
                continue
            g = f"**{group}**" if group == "all" else group
            lines.append(
                f"| {g} | {m} | {c['n']} | " + " | ".join(_fmt(c[f'dice_{n}']) for n in names)
                + f" | **{_fmt(c['dice_mean'])}** | {_fmt(c['dice_mean_initial'])} | {_fmt(c['hd95_mean'], 2)} | "
                f"{_fmt(c['folding_percent'], 3)} | {_fmt(c['seconds'], 2)} |"
            )
    lines += ["", "By difficulty (unregistered mean Dice of the pair), mean Dice:", ""]
    lines += ["| initial Dice | pairs | initial | " + " | ".join(methods) + (" | NPC >= demons |" if {"npc", "demons"} <= set(methods) else " |"),
              "|---|---|---|" + "---|" * (len(methods) + ({"npc", "demons"} <= set(methods)))]
    for bucket, _, _ in BUCKETS + (("all", 0.0, 1.01),):
        cells = [summary[m]["overall"] if bucket == "all" else summary[m]["buckets"].get(bucket) for m in methods]
        if not cells or cells[0] is None:
            continue
        line = f"| {bucket} | {cells[0]['n']} | {_fmt(cells[0]['dice_mean_initial'])} | " + " | ".join(_fmt(c['dice_mean']) if c else "-" for c in cells)
        if {"npc", "demons"} <= set(methods):
            line += f" | {_wins(rows, bucket)} |"
        else:
            line += " |"
        lines.append(line)
    return "\n".join(lines)


def _wins(rows: Sequence[Mapping[str, Any]], bucket: str) -> str:
    """``k/n``: pairs of ``bucket`` (or ``"all"``) where NPC's mean Dice is >= demons'."""
    by = {}
    for r in rows:
        if bucket in ("all", r["bucket"]):
            by.setdefault((r["study"], r["direction"]), {})[r["method"]] = r["dice_mean"]
    both = [v for v in by.values() if "npc" in v and "demons" in v]
    return f"{sum(v['npc'] >= v['demons'] for v in both)}/{len(both)}"


def group_figure(summary: Mapping[str, Any], path: PathLike) -> Path:
    """Bars of the mean Dice per pathology group (and overall) for each method, initial Dice as a line."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from monai_npc.viz.figures import save_figure

    methods = list(summary)
    groups = sorted({g for m in methods for g in summary[m]["groups"]}, key=lambda g: (GROUPS.index(g) if g in GROUPS else len(GROUPS), g))
    groups += ["all"]
    empty = {"dice_mean": float("nan"), "dice_mean_initial": float("nan"), "n": 0}
    fig, ax = plt.subplots(figsize=(1.4 * len(groups) + 2, 4))
    width = 0.8 / max(len(methods), 1)
    x = np.arange(len(groups))
    for i, m in enumerate(methods):
        cells = [summary[m]["overall"] if g == "all" else summary[m]["groups"].get(g, empty) for g in groups]
        ax.bar(x + (i - (len(methods) - 1) / 2) * width, [c["dice_mean"] for c in cells], width, label=m)
    init = [summary[methods[0]]["overall"] if g == "all" else summary[methods[0]]["groups"].get(g, empty) for g in groups]
    ax.plot(x, [c["dice_mean_initial"] for c in init], "k_", ms=25, mew=2, label="initial")
    ax.set_xticks(x, [f"{g}\n{c['n']} pairs" for g, c in zip(groups, init)])
    ax.set_ylim(0.4, 1.05)
    ax.set_ylabel("3-D Dice (mean of RV, Myo, LV)")
    ax.legend(fontsize=8, loc="upper left", ncol=len(methods) + 1)
    return save_figure(fig, path, title="whole stacks, fixed grid: mean Dice per pathology group")


def _write_csv(rows: Sequence[Mapping[str, Any]], path: Path) -> None:
    keys: List[str] = []
    for r in rows:
        keys += [k for k in r if k not in keys]
    with open(path, "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=keys)
        writer.writeheader()
        for r in rows:
            writer.writerow({k: (json.dumps(v) if isinstance(v, (list, dict)) else v) for k, v in r.items()})


def evaluate_studies(
    root: PathLike,
    out: PathLike,
    model: Union[str, PathLike, nn.Module] = "acdc",
    model_name: Optional[str] = None,
    with_demons: bool = True,
    demons_iterations: int = 100,
    demons_smoothing: float = 1.5,
    directions: Sequence[str] = ("ED->ES", "ES->ED"),
    max_studies: Optional[int] = None,
    device: Union[str, torch.device] = "cpu",
    threads: int = 1,
    refine_iterations: Optional[int] = None,
    field_of_view: Optional[str] = None,
    with_npc: bool = True,
    resume: bool = True,
    strict: bool = False,
    figure: bool = True,
    progress: bool = True,
    basal_descent: bool = True,
) -> Dict[str, Any]:
    """Register every labelled study under ``root`` (only the moving label given) and score it.

    Per pair and method (``npc``: ``model`` through :func:`monai_npc.register`, when ``with_npc``;
    ``demons``: :func:`demons_pair` when ``with_demons``): 3-D Dice per structure of the warped moving label
    against the fixed ``_gt`` on the fixed grid, HD95 (mm, header spacing), % folding
    (``det J <= 0`` over the fixed grid), seconds per pair (``threads`` threads) and the
    unregistered Dice and its bucket (:data:`BUCKETS`).

    Writes into ``out``: ``per_pair.jsonl`` (appended pair by pair; with ``resume`` a rerun skips
    the pairs and methods it holds, without it the file is started afresh), ``per_pair.csv``,
    ``metrics.json`` (removed at the start, rewritten at the end: summary, settings and the
    skipped studies with their reasons), ``results.md`` and ``groups.png``. ``strict=True`` makes
    the first bad study fatal. ``max_studies`` keeps the first N studies (sorted by name).
    ``field_of_view`` overrides the network's model grid (:mod:`monai_npc.apps.registration`;
    ``"image"`` reproduces the whole-image grid used before the heart window). ``basal_descent``
    (default): every method's label follows the base through the plane before it is scored
    (:func:`basal_descent_label`: ``ED->ES`` basal RV slices cleared, ``ES->ED`` the slices the
    structures re-enter filled). ``per_pair.settings.json`` records each method's settings (model,
    field of view, refinement steps, descent; demons' iterations): resuming rows of other settings is
    a ``ValueError`` (use a new ``out`` or ``resume=False`` when changing them).
    Returns the content of ``metrics.json``.
    """
    out = Path(out)
    metrics_path = _status_file(out, "metrics.json")
    rows_path = out / "per_pair.jsonl"
    if not resume and rows_path.exists():
        rows_path.unlink()
    methods = (["npc"] if with_npc else []) + (["demons"] if with_demons else [])
    if not methods:
        raise ValueError("nothing to evaluate: with_npc and with_demons are both False.")
    demons = {"iterations": int(demons_iterations), "smoothing": float(demons_smoothing)}
    net, name = _model(model, device, refine_iterations)
    settings = _run_settings(out, resume, {
        "npc": {"model": name, "field_of_view": field_of_view, "refine_iterations": refine_iterations, "basal_descent": bool(basal_descent)},
        "demons": {**demons, "basal_descent": bool(basal_descent)},
    }, methods)
    studies = find_studies(root, directions)[: None if max_studies is None else int(max_studies)]
    rows = [r for r in _read_rows(rows_path) if r.get("method") in methods]
    have = {(r["study"], r["direction"], r["method"]) for r in rows}
    skipped: List[Dict[str, str]] = []
    todo = [(s, p) for s in studies if not s.error for p in s.pairs]
    for study in studies:
        if study.error:
            skipped.append(_fail(study.name, study.error, strict))
    bar = _progress(todo, "evaluate", progress)
    bad = set()
    for study, pair in bar:
        need = [m for m in methods if (study.name, pair.direction, m) not in have]
        if not need or study.name in bad:
            continue
        try:
            new = _evaluate_pair(study, pair, net, name, need, demons, device, threads, basal_descent, field_of_view)
        except (OSError, ValueError, RuntimeError) as err:
            skipped.append(_fail(study.name, f"{pair.direction}: {_one_line(err)}", strict))
            bad.add(study.name)
            continue
        with open(rows_path, "a") as f:
            for r in new:
                f.write(json.dumps(r) + "\n")
        rows += new
        if progress and hasattr(bar, "set_postfix"):
            bar.set_postfix({m: f"{_nanmean(r['dice_mean'] for r in rows if r['method'] == m):.3f}" for m in methods})
    names = {s.name for s in studies} - bad
    rows = [r for r in rows if r["study"] in names]
    summary = summarise(rows)
    result: Dict[str, Any] = {
        "root": str(Path(root).resolve()), "model": name, "methods": methods, "directions": list(directions),
        "demons": {**demons, "grid": "native fixed grid, slice by slice, per-slice [0, 1] scaling"} if with_demons else None,
        "threads": threads, "basal_descent": bool(basal_descent), "settings": {m: settings[m] for m in methods},
        "n_studies": len({r["study"] for r in rows}), "n_pairs": len({(r["study"], r["direction"]) for r in rows}),
        "skipped": skipped, "summary": summary,
    }
    if "npc" in summary:
        result.update({k: summary["npc"]["overall"][k] for k in ("dice_mean", "dice_mean_initial", "hd95_mean", "folding_percent", "seconds")})
    _write_csv(rows, out / "per_pair.csv")
    if rows:
        (out / "results.md").write_text(results_table(summary, rows) + "\n")
        if figure:
            group_figure(summary, out / "groups.png")
    metrics_path.write_text(json.dumps(result, indent=2, default=float))
    return result


def _run_settings(out: Path, resume: bool, settings: Dict[str, Dict[str, Any]], methods: Sequence[str]) -> Dict[str, Any]:
    """``settings`` of ``methods``, recorded in ``out/per_pair.settings.json``; with ``resume``, rows of a
    method computed with other settings are an error (``ValueError`` naming what differs), not mixed in."""
    path = out / "per_pair.settings.json"
    recorded = json.loads(path.read_text()) if resume and path.is_file() and (out / "per_pair.jsonl").exists() else {}
    now = as_json(settings)
    for method in methods:
        if method in recorded and recorded[method] != now[method]:
            changed = changed_settings(recorded[method], now[method])
            raise ValueError(f"{out}/per_pair.jsonl holds {method} rows of other settings ({'; '.join(changed)}): use a new out "
                             "folder, or resume=False to start afresh.")
    merged = {**recorded, **{m: now[m] for m in methods}}
    out.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(merged, indent=2))
    return merged


# ------------------------------------------------------------------------------- bundle workflows


def _with_weights(kwargs: Mapping[str, Any], ckpt_path: Optional[PathLike], meta: Optional[Mapping[str, Any]]) -> Dict[str, Any]:
    """``kwargs`` with ``ckpt_path`` loaded into ``kwargs["model"]`` (a network) when given, and
    ``meta`` added to the network's ``meta`` (what :func:`monai_npc.register` reads of a model:
    ``bundle``, ``input_size``, ``preprocessing``, ``field_of_view``, ...)."""
    out = dict(kwargs)
    net = out["model"]
    if isinstance(net, nn.Module):
        if ckpt_path not in (None, ""):
            from monai_npc.engines import init_weights

            net = init_weights(net, ckpt_path, "ckpt_path")
        if meta:
            net.meta = {**(getattr(net, "meta", None) or {}), **dict(meta)}
        out["model"] = net.eval()
    return out


class StackInference:
    """:func:`infer_studies` as a bundle component (``evaluator`` of ``configs/inference.json``).

    Args:
        dataset_dir: folder of studies (:func:`find_studies`).
        output_dir: where the results go (``<study>/<direction>/`` and ``summary.json``).
        network: the network, or a model name / weights file (:func:`monai_npc.register`'s ``model``).
        ckpt_path: weights loaded into ``network`` when :meth:`run` starts (a bundle's
            ``models/model.pt`` or a checkpoint with a ``"model"`` entry); ``None`` uses it as it is.
        model_meta: added to ``network.meta``: how :func:`monai_npc.register` feeds the model
            (``{"bundle": "npc_acdc"}``: the heart window at the trained resolution).
        others: see :func:`infer_studies`.
    """

    def __init__(
        self, dataset_dir: PathLike, output_dir: PathLike, network: Union[str, nn.Module], ckpt_path: Optional[PathLike] = None,
        model_meta: Optional[Mapping[str, Any]] = None, model_name: Optional[str] = None,
        directions: Sequence[str] = ("ED->ES", "ES->ED"), device: Union[str, torch.device] = "cpu", threads: Optional[int] = 1,
        overview: bool = True, strict: bool = False, progress: bool = True, basal_descent: bool = True, align: str = "auto",
    ) -> None:
        self.kwargs = dict(
            root=dataset_dir, out=output_dir, model=network, model_name=model_name, directions=list(directions), device=device,
            threads=threads, overview=overview, strict=strict, progress=progress, basal_descent=bool(basal_descent), align=align,
        )
        self.ckpt_path, self.model_meta = ckpt_path, model_meta
        self.summary: Optional[Dict[str, Any]] = None

    def run(self) -> Dict[str, Any]:
        self.summary = infer_studies(**_with_weights(self.kwargs, self.ckpt_path, self.model_meta))
        return self.summary


class StackEvaluation:
    """:func:`evaluate_studies` as a bundle component (``evaluator`` of ``configs/evaluate.json``).

    ``resume`` defaults to ``False`` here: a bundle run's ``metrics.json`` describes that run only.
    ``ckpt_path``, ``model_meta``: as for :class:`StackInference`. Other arguments: see :func:`evaluate_studies`.
    """

    def __init__(
        self, dataset_dir: PathLike, output_dir: PathLike, network: Union[str, nn.Module], ckpt_path: Optional[PathLike] = None,
        model_meta: Optional[Mapping[str, Any]] = None, model_name: Optional[str] = None,
        with_demons: bool = False, demons_iterations: int = 100, demons_smoothing: float = 1.5,
        directions: Sequence[str] = ("ED->ES", "ES->ED"), max_studies: Optional[int] = None, device: Union[str, torch.device] = "cpu",
        threads: int = 1, resume: bool = False, strict: bool = False, figure: bool = True, progress: bool = True,
        basal_descent: bool = True,
    ) -> None:
        self.kwargs = dict(
            root=dataset_dir, out=output_dir, model=network, model_name=model_name, with_demons=bool(with_demons),
            demons_iterations=demons_iterations, demons_smoothing=demons_smoothing, directions=list(directions),
            max_studies=max_studies, device=device, threads=threads, resume=resume, strict=strict, figure=figure, progress=progress,
            basal_descent=bool(basal_descent),
        )
        self.ckpt_path, self.model_meta = ckpt_path, model_meta
        self.metrics: Optional[Dict[str, Any]] = None

    def run(self) -> Dict[str, Any]:
        self.metrics = evaluate_studies(**_with_weights(self.kwargs, self.ckpt_path, self.model_meta))
        return self.metrics
