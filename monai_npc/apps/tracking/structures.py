"""Which value of a tracked label is which structure: the RV, myocardium and LV whose volumes, function, basal rules,
strain and figures :func:`monai_npc.track` reports.

ACDC numbers them 1 RV, 2 myocardium, 3 LV; M&Ms 1 LV, 2 myocardium, 3 RV; CAMUS 1 LV, 2 myocardium (3 left atrium);
other tools use 10 / 20 / 30 or 500 / 600. ``track`` takes them from its ``structures`` argument, else from what the
label prior found when the registrations carried the label (``register``'s ``summary["label_prior"]["structures"]``:
its segmentation of the moving frame against the label, :func:`~monai_npc.apps.registration.label_prior.value_map`),
else from the model's training labels (:func:`~monai_npc.apps.registration.models.model_label_structures`: ``camus``'s
are CAMUS's), else it assumes ACDC's numbering and warns when the label holds other values. The labels themselves keep
the user's values throughout.
"""

from __future__ import annotations

import logging
from typing import Any, Dict, Iterable, Mapping, Optional, Tuple

import numpy as np

from monai_npc.apps.registration.models import model_label_structures
from monai_npc.cardiac.function import ACDC_STRUCTURES, structure_values

logger = logging.getLogger(__name__)

__all__ = ["STRUCTURE_NAMES", "parse_structures", "check_structures", "found_structures", "resolve_structures", "without_absent"]

#: the structures tracking reports (:data:`~monai_npc.cardiac.function.ACDC_STRUCTURES`' names)
STRUCTURE_NAMES = tuple(ACDC_STRUCTURES)


def parse_structures(text: str) -> Dict[str, int]:
    """``"lv=1,myo=2,rv=3"`` (the CLI's ``--structures``, MONAI Label's ``structures``) -> ``{"lv": 1, "myo": 2, "rv": 3}``
    (the names checked by :func:`check_structures`).

    Raises:
        ValueError: a part that is not ``NAME=VALUE`` with an integer ``VALUE``, or no part at all.
    """
    out: Dict[str, int] = {}
    for part in filter(None, (p.strip() for p in str(text).split(","))):
        name, sep, value = part.partition("=")
        if not sep or not value.strip().isdigit():
            raise ValueError(f"{part!r}: expected NAME=VALUE with NAME one of {', '.join(STRUCTURE_NAMES)} and VALUE an integer > 0 "
                             "(e.g. lv=1,myo=2,rv=3)")
        out[name.strip().lower()] = int(value)
    if not out:
        raise ValueError("expected NAME=VALUE[,NAME=VALUE], e.g. lv=1,myo=2,rv=3")
    return out


def check_structures(structures: Optional[Mapping[str, Any]]) -> Optional[Dict[str, int]]:
    """``structures`` (``{"lv": 1, "myo": 2, "rv": 3}``, some of :data:`STRUCTURE_NAMES`) as ``{name: int}``, or ``None``.

    Raises:
        ValueError: another name, a value that is not an integer > 0, or one value for two structures.
    """
    if structures is None:
        return None
    if not isinstance(structures, Mapping) or not structures:
        raise ValueError(f"structures (--structures) must map some of {list(STRUCTURE_NAMES)} to label values, e.g. "
                         f"{{'lv': 1, 'myo': 2, 'rv': 3}} (M&Ms); got {structures!r}.")
    out: Dict[str, int] = {}
    for name, value in structures.items():
        key = str(name).strip().lower()
        if key not in STRUCTURE_NAMES:
            raise ValueError(f"structures (--structures) names {name!r}; the structures are {list(STRUCTURE_NAMES)}.")
        try:
            number = int(value)
        except (TypeError, ValueError):
            number = 0
        if number <= 0 or number != value:
            raise ValueError(f"structures (--structures): the value of {key!r} must be an integer > 0, got {value!r}.")
        out[key] = number
    if len(set(out.values())) < len(out):
        raise ValueError(f"structures (--structures) gives one value to two structures: {out}.")
    return out


def found_structures(prior_summaries: Iterable[Optional[Mapping[str, Any]]]) -> Optional[Dict[str, int]]:
    """The first ``structures`` among ``register``'s ``summary["label_prior"]`` records (``None`` entries skipped) whose
    names are tracking's, or ``None``."""
    for summary in prior_summaries:
        found = (summary or {}).get("structures")
        if found and set(found) <= set(STRUCTURE_NAMES):
            return {str(k): int(v) for k, v in found.items()}
    return None


def resolve_structures(given: Optional[Mapping[str, int]], found: Optional[Mapping[str, int]], label: np.ndarray,
                       model: Any = None) -> Tuple[Dict[str, int], Dict[str, Any]]:
    """``({name: value} for every name of :data:`STRUCTURE_NAMES`, what the settings record)``: ``given`` (the
    ``structures`` argument), else ``found`` (:func:`found_structures`), else ``model``'s training labels (a name, file
    or network; looked up only then), else ACDC's numbering; a name left out gets
    :data:`~monai_npc.cardiac.function.ABSENT_STRUCTURE` (:func:`~monai_npc.cardiac.function.structure_values`), and the
    names whose value ``label`` ``(Z, H, W)`` does not hold are recorded (``absent``). A label holding values the
    numbering taken does not name (10 / 20 / 30, say), where ACDC's was assumed or none of its structures is found, is
    logged as a warning and recorded (``warning``): its volumes would be 0."""
    declared = None if given or found or model is None else model_label_structures(model)
    if given:
        chosen, source = dict(given), "the structures argument"
    elif found:
        chosen, source = dict(found), "the label prior's segmentation of the labelled frame"
    elif declared:
        chosen, source = dict(declared), "the model's training labels"
    else:
        chosen, source = dict(ACDC_STRUCTURES), "assumed: ACDC numbering"
    record: Dict[str, Any] = {"values": dict(chosen), "from": source}
    values = structure_values(chosen)
    absent = [name for name, value in values.items() if not np.any(np.asarray(label) == value)]
    if absent:  # a label of some structures: the others' figures are not defined (without_absent)
        record["absent"] = absent
    unnamed = sorted(int(v) for v in np.unique(label) if v > 0 and int(v) not in chosen.values())
    named = ", ".join(f"{v} {k}" for k, v in sorted(chosen.items(), key=lambda kv: kv[1]))
    if unnamed and not given and not found and (source.startswith("assumed") or len(absent) == len(values)):
        record["warning"] = (f"the label holds values {unnamed} that the numbering taken ({source}: {named}) does not name, and no "
                             "label prior named them: their volumes are not counted; give structures (--structures lv=1,myo=2,rv=3)")
        logger.warning("track: %s", record["warning"])
    return values, record


#: the figures of :func:`~monai_npc.cardiac.function.cardiac_function` that each structure defines
_FIGURES = {"lv": ("lv_edv", "lv_esv", "lv_sv", "lv_ef"), "rv": ("rv_edv", "rv_esv", "rv_sv", "rv_ef"), "myo": ("lv_mass_g",)}


def without_absent(function: Mapping[str, float], absent: Iterable[str]) -> Dict[str, float]:
    """``function`` (:func:`~monai_npc.cardiac.function.cardiac_function`) with the figures of the structures the label
    does not hold (``absent``, :func:`resolve_structures`' record) NaN: an LV-only label has no RV EF and no LV
    mass, rather than 0 mL and 0 g."""
    out = dict(function)
    for name in absent:
        out.update({key: float("nan") for key in _FIGURES.get(name, ()) if key in out})
    return out
