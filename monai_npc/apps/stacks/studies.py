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
:meth:`monai_npc.apps.registration.result.Registration.save` and ``OUT/summary.json`` the status of every
study (``done`` or ``skipped`` with the reason). :class:`StackEvaluation` writes
``per_pair.jsonl`` (one row per pair and method, appended as it goes: reruns resume),
``per_pair.csv``, ``metrics.json``, ``results.md`` and ``groups.png``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Dict, List, Mapping, Optional, Sequence, Tuple, Union

import numpy as np
import SimpleITK as sitk

from monai_npc.data.acdc import read_acdc_info
from monai_npc.data.io import find_image, read_sitk_file
from monai_npc.data.layout import cfg_frame, find_patient_dirs

__all__ = ["GROUPS", "STRUCTURES", "Phase", "StudyPair", "Study", "find_studies", "read_phase", "read_phase_label"]

PathLike = Union[str, Path]


#: ACDC pathology groups, in the order the tables list them
GROUPS: Tuple[str, ...] = ("NOR", "MINF", "DCM", "HCM", "RV")


#: label value -> structure name (ACDC)
STRUCTURES: Dict[int, str] = {1: "rv", 2: "myo", 3: "lv"}


_SUFFIX = r"\.(nii\.gz|nii|mha|mhd|nrrd)"


_PATIENT = re.compile(r"patient\d+")


_PAIR_FILE = re.compile(rf"(.+)_(moving|fixed)(_label)?{_SUFFIX}")


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


def read_phase(phase: Phase, what: str) -> sitk.Image:
    from monai_npc.interop.inputs import as_image

    return as_image(phase.image, what, select=phase.select)


def read_phase_label(path: Path, reference: sitk.Image, what: str) -> np.ndarray:
    """``(Z, H, W)`` int array of a label file that must lie on ``reference``'s grid."""
    label = read_sitk_file(Path(path), "label")
    if label.GetSize() != reference.GetSize():
        raise ValueError(f"{what} {path} has size {label.GetSize()} but its image has {reference.GetSize()}")
    arr = sitk.GetArrayFromImage(label)
    if not np.all(arr == np.round(arr)) or arr.min() < 0:
        raise ValueError(f"{what} {path} holds values that are not label numbers (0, 1, 2, ...)")
    return arr.astype(np.int16)
