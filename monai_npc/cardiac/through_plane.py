"""Through-plane motion of the base: basal slices that leave a structure as the heart contracts.

A 2-D model registers each short-axis slice in its own plane. During systole the base of the
heart (the atrioventricular plane) moves towards the apex, so the most basal slice that cuts the
right ventricle at ED cuts the right atrium at ES. An in-plane registration cannot remove a
structure from a slice: it keeps most of the ED area there, and the carried RV label
over-states the ES volume (the RV EF is biased low).

This module makes that explicit with a slab model of the stack. Slice ``z`` holds the slab
``[t, t + s]`` (``s`` = slice spacing in mm, ``t`` = distance in mm from the most basal slice that
holds the structure on the reference label, positive towards the apex; the slab starts at the slice
and reaches the next one: the population descent below was chosen with this definition). When the base
has descended by ``d`` mm, the share of that slab that has left the structure is
``clip((d - t) / s, 0, 1)`` (:func:`slab_fractions`); a slice whose share is at least one half
is cleared of the structure (:func:`apply_basal_descent`). The base end of the stack is the one
nearer the reference label's area-weighted centre along the slice axis (ventricles are widest at
the base; :func:`base_end`).

The descent is a population value per structure, :data:`BASAL_DESCENT_MM`, chosen on the ACDC
training patients with the ED label carried to ES by ``monai_npc.register``: 12 mm for the RV;
clearing LV or myocardium slices lowered their Dice at every descent tried, so they keep 0.
Patient-specific descent from the images did not work with in-plane fields (each slice's field
already fits its own slice best), and is left open.

The other way, from ES to ED (:func:`apply_basal_ascent`), the base rises: a label carried from
ES to ED lacks the basal slices the structures re-enter. Slice ``k`` slabs basal of the most
basal slice holding a structure on the ES label gets ``clip((a - (k - 1) s) / s, 0, 1)`` of its
slab back after an ascent of ``a`` mm, and a slice that gets at least one half takes the
structure's in-plane outline from that most basal slice (on background voxels only).
:data:`BASAL_ASCENT_MM` (12 mm for the RV, myocardium and LV, as the descent's RV) was chosen on
the same training patients (ES label carried to ED). The LV and myocardium gain here though
clearing them lost: most ACDC stacks start at the ED base, so their basal slice usually keeps the
LV at ES (clearing it is then wrong), while a slice above the ES label's first LV slice exists only
where the LV did leave it.

The LV and myocardium are not cleared by a population descent (above), but per patient when the
target frame's own segmentation says so (:func:`basal_left_by_prior`, :func:`clear_basal_by_prior`): the
label prior of ``register`` (:attr:`monai_npc.apps.registration.result.Registration.prior_label`) segments the ES
frame, and where it finds less than :data:`PRIOR_LEFT_SHARE` (30 %) of the ED label's LV area in the ED
label's most basal LV slice, the base has left that slice (chosen on the validation patients). A slice
the prior did not look at (outside its heart window, or constant) reads as empty and is cleared too:
pass ``prior_label`` only from a registration whose window holds the heart.

The measurements behind each value: docs/design_notes.md, "cardiac/through_plane.py".

Pure numpy; label maps ``(Z, H, W)`` with the slice axis first (as :mod:`monai_npc.apps.tracking` uses).
"""

from __future__ import annotations

from typing import Any, Dict, Mapping, Optional, Tuple

import numpy as np

from .function import ACDC_STRUCTURES

__all__ = [
    "BASAL_DESCENT_MM", "BASAL_ASCENT_MM", "PRIOR_LEFT_SHARE", "RULE_SLICE_MARGIN", "base_end", "basal_left_by_prior", "clear_basal_by_prior", "slab_fractions", "apply_basal_descent", "ascent_fractions",
    "apply_basal_ascent", "systolic_phase", "diastolic_phase", "volume_error_by_position", "through_plane_field", "basal_rules",
]

#: descent of the base at end-systole in mm per structure name (:data:`ACDC_STRUCTURES`), chosen
#: on the ACDC training patients (module docstring); structures not named keep every slice
BASAL_DESCENT_MM: Dict[str, float] = {"rv": 12.0}
#: rise of the base from end-systole to end-diastole in mm per structure name, for labels carried
#: from ES to ED (:func:`apply_basal_ascent`; chosen on the same training patients, module docstring)
BASAL_ASCENT_MM: Dict[str, float] = {"rv": 12.0, "myo": 12.0, "lv": 12.0}
#: :func:`basal_left_by_prior`: the LV has left the most basal slice when the label prior finds less than this
#: share of the reference label's LV area there (chosen on the ACDC validation patients, module docstring)
PRIOR_LEFT_SHARE = 0.3
#: :func:`through_plane_field`: a voxel a rule changed reads this share of a slice short of the slice it takes its value
#: from (towards its own), so that the written field keeps the slices in order (det J > 0) and label-linear
#: interpolation still takes that slice's value (weight 0.9)
RULE_SLICE_MARGIN = 0.1


def base_end(reference_label: np.ndarray) -> Tuple[int, int]:
    """``(index of the most basal labelled slice, +1 or -1 = the step towards the apex)``.

    The base is the end of the labelled slices nearer the area-weighted centre of all labels
    along axis 0 (the ventricles are widest at the base, so the centre lies basal of the middle).

    Raises:
        ValueError: a label that is not ``(Z, H, W)`` or is empty.
    """
    lab = np.asarray(reference_label)
    if lab.ndim != 3:
        raise ValueError(f"reference_label must be (Z, H, W), got shape {lab.shape}.")
    area = (lab > 0).reshape(lab.shape[0], -1).sum(1).astype(np.float64)
    if area.sum() == 0:
        raise ValueError("reference_label is empty: no slice holds a structure, so the base cannot be found.")
    z = np.nonzero(area)[0]
    centre = float((area * np.arange(lab.shape[0])).sum() / area.sum())
    return (int(z.min()), +1) if centre - z.min() <= z.max() - centre else (int(z.max()), -1)


def slab_fractions(reference_label: np.ndarray, value: int, slice_spacing_mm: float, descent_mm: float) -> np.ndarray:
    """``(Z,)`` share of each slice's slab that has left structure ``value`` after a basal descent of ``descent_mm``.

    ``t`` is measured from the most basal slice holding ``value`` on ``reference_label`` (0 for
    every slice when the structure is absent: nothing to clear).
    """
    offset = _basal_offsets(reference_label, value, slice_spacing_mm)
    if offset is None or descent_mm <= 0:
        return np.zeros(np.shape(reference_label)[0])
    t = offset * float(slice_spacing_mm)
    return np.clip((float(descent_mm) - t) / float(slice_spacing_mm), 0.0, 1.0)


def apply_basal_descent(
    label: np.ndarray,
    reference_label: np.ndarray,
    slice_spacing_mm: float,
    phase: float = 1.0,
    descent_mm: Optional[Mapping[str, float]] = None,
    structures: Mapping[str, int] = ACDC_STRUCTURES,
) -> np.ndarray:
    """Clear the basal slices a structure has left: ``label`` with those voxels set to 0 (a copy).

    Args:
        label: ``(Z, H, W)`` the reference label carried in-plane to a frame.
        reference_label: ``(Z, H, W)`` the label of the reference frame (ED), which places the base.
        slice_spacing_mm: distance between slice centres (the spacing of axis 0).
        phase: how far the frame is from ED towards ES, 0..1 (:func:`systolic_phase`; 1 = ES):
            the descent used is ``phase * descent_mm``.
        descent_mm: ``{structure name: mm at ES}``; default :data:`BASAL_DESCENT_MM`.
        structures: name -> label value.
    """
    out, table, phase = _prepared(label, reference_label, phase, BASAL_DESCENT_MM if descent_mm is None else descent_mm, "descent_mm", structures)
    for name, mm in table.items():
        value = structures[name]
        cleared = slab_fractions(reference_label, value, slice_spacing_mm, phase * float(mm)) >= 0.5
        out[cleared[:, None, None] & (out == value)] = 0
    return out


def basal_left_by_prior(reference_label: np.ndarray, prior_label: np.ndarray, value: int = 3,
                        share: float = PRIOR_LEFT_SHARE) -> Optional[int]:
    """The most basal slice holding ``value`` on ``reference_label`` if the target frame's own
    segmentation there (``prior_label``: :attr:`monai_npc.apps.registration.result.Registration.prior_label`, on the
    same grid) holds less than ``share`` of the reference's area of ``value`` in that slice: the base
    has left the slice, which an in-plane field cannot express; else ``None``.

    Raises:
        ValueError: shapes that differ or are not ``(Z, H, W)``.
    """
    ref, seen = np.asarray(reference_label), np.asarray(prior_label)
    if ref.shape != seen.shape or ref.ndim != 3:
        raise ValueError(f"reference_label {ref.shape} and prior_label {seen.shape} must be one (Z, H, W) shape.")
    first = _first_slice(ref, value)
    if first is None:
        return None
    z = first[0]
    return z if float((seen[z] == value).sum()) < float(share) * float((ref[z] == value).sum()) else None


def clear_basal_by_prior(label: np.ndarray, reference_label: np.ndarray, prior_label: Optional[np.ndarray],
                         structures: Mapping[str, int] = ACDC_STRUCTURES) -> Tuple[np.ndarray, Optional[int]]:
    """``(label with the LV and myocardium cleared from the most basal LV slice, that slice)`` when
    :func:`basal_left_by_prior` finds the LV gone from it at the target frame, else ``(a copy of label, None)``.
    ``prior_label`` ``None`` (no prior acted): nothing is cleared."""
    out = np.array(label, copy=True)
    if prior_label is None:
        return out, None
    z = basal_left_by_prior(reference_label, prior_label, structures["lv"])
    if z is not None:
        out[z][np.isin(out[z], [structures["lv"], structures["myo"]])] = 0
    return out, z


def _first_slice(reference_label: np.ndarray, value: int) -> Optional[Tuple[int, int]]:
    """``(most basal slice holding value, step towards the apex)``, ``None`` when ``value`` is absent."""
    lab = np.asarray(reference_label)
    present = np.nonzero((lab == value).reshape(lab.shape[0], -1).any(1))[0]
    if present.size == 0:
        return None
    _, step = base_end(lab)
    return int(present.min() if step > 0 else present.max()), step


def _basal_offsets(reference_label: np.ndarray, value: int, slice_spacing_mm: float) -> Optional[np.ndarray]:
    """``(Z,)`` each slice's distance in slices from the most basal slice holding ``value``, positive
    towards the apex; ``None`` when ``value`` is absent."""
    if not slice_spacing_mm > 0:
        raise ValueError(f"slice_spacing_mm must be > 0, got {slice_spacing_mm}.")
    found = _first_slice(reference_label, value)
    if found is None:
        return None
    first, step = found
    return (np.arange(np.shape(reference_label)[0]) - first) * step


def _prepared(label: np.ndarray, reference_label: np.ndarray, phase: float, table: Mapping[str, float], what: str,
              structures: Mapping[str, int]) -> Tuple[np.ndarray, Mapping[str, float], float]:
    """``(a copy of label, table, phase clipped to 0..1)`` after checking the shapes and the table's structure names."""
    out = np.array(label, copy=True)
    if out.shape != np.shape(reference_label):
        raise ValueError(f"label {out.shape} and reference_label {np.shape(reference_label)} differ in shape.")
    for name in table:
        if name not in structures:
            raise ValueError(f"{what} names {name!r}, which is not one of the structures {sorted(structures)}.")
    return out, table, float(np.clip(phase, 0.0, 1.0))


def ascent_fractions(reference_label: np.ndarray, value: int, slice_spacing_mm: float, ascent_mm: float) -> np.ndarray:
    """``(Z,)`` share of each slice's slab that structure ``value`` has re-entered after the base rose ``ascent_mm``.

    Only slices basal of the most basal slice holding ``value`` on ``reference_label`` (the ES
    label) get a share: ``clip((ascent_mm - (k - 1) s) / s, 0, 1)`` for the ``k``-th one; all 0
    when the structure is absent.
    """
    offset = _basal_offsets(reference_label, value, slice_spacing_mm)
    if offset is None or ascent_mm <= 0:
        return np.zeros(np.shape(reference_label)[0])
    k = -offset  # slices basal of the first one: 1, 2, ...
    share = np.clip((float(ascent_mm) - (k - 1) * float(slice_spacing_mm)) / float(slice_spacing_mm), 0.0, 1.0)
    return np.where(k >= 1, share, 0.0)


def apply_basal_ascent(
    label: np.ndarray,
    reference_label: np.ndarray,
    slice_spacing_mm: float,
    phase: float = 1.0,
    ascent_mm: Optional[Mapping[str, float]] = None,
    structures: Mapping[str, int] = ACDC_STRUCTURES,
) -> np.ndarray:
    """Fill the basal slices a structure re-enters from ES to ED: ``label`` with them filled (a copy).

    Each slice basal of the structure's most basal slice on ``reference_label`` with an
    :func:`ascent_fractions` share of at least one half takes the structure's outline on ``label``
    at that most basal slice, on background voxels only.

    Args:
        label: ``(Z, H, W)`` the ES label carried in-plane to a frame (ED).
        reference_label: ``(Z, H, W)`` the label of the reference frame (ES), which places the base.
        slice_spacing_mm: distance between slice centres (the spacing of axis 0).
        phase: how far the frame is from ES towards ED, 0..1 (1 = ED): the ascent used is ``phase * ascent_mm``.
        ascent_mm: ``{structure name: mm at ED}``; default :data:`BASAL_ASCENT_MM`.
        structures: name -> label value.
    """
    out, table, phase = _prepared(label, reference_label, phase, BASAL_ASCENT_MM if ascent_mm is None else ascent_mm, "ascent_mm", structures)
    outlines = {}
    for name, mm in table.items():  # every outline from the carried label before any slice is filled
        value = structures[name]
        first = _first_slice(reference_label, value)
        filled = ascent_fractions(reference_label, value, slice_spacing_mm, phase * float(mm)) >= 0.5
        if first is not None and filled.any():
            outlines[value] = (filled, label[first[0]] == value)
    for value, (filled, outline) in outlines.items():
        for z in np.nonzero(filled)[0]:
            out[z][outline & (out[z] == 0)] = value
    return out


def systolic_phase(lv_volume: np.ndarray, reference_frame: int, tolerance: float = 0.1) -> np.ndarray:
    """``(T,)`` phase of each frame between the reference (0) and the smallest LV volume (1).

    ``(V_ref - V_t) / (V_ref - V_min)`` on the in-plane tracked LV volume curve, clipped to 0..1;
    all 0 when the reference is not within ``tolerance`` of the stroke range of the largest
    volume (not ED: the base is then not known to descend) or the curve is flat.
    """
    v = np.asarray(lv_volume, dtype=np.float64)
    if v.size == 0:
        return v
    ref = float(v[int(reference_frame)])
    if ref - v.min() <= 0 or ref < v.max() - float(tolerance) * (v.max() - v.min()):
        return np.zeros(v.shape)
    return np.clip((ref - v) / (ref - v.min()), 0.0, 1.0)


def diastolic_phase(lv_volume: np.ndarray, reference_frame: int, tolerance: float = 0.2) -> np.ndarray:
    """``(T,)`` phase of each frame between the reference (0) and the largest LV volume (1):
    :func:`systolic_phase` with the roles of ED and ES swapped, all 0 unless the reference is ES
    (within ``tolerance`` of the stroke range of the smallest volume; wider than ED's, as the end-systolic
    plateau is flat: the smallest tracked volume can be a frame beside the ES frame)."""
    return systolic_phase(-np.asarray(lv_volume, dtype=np.float64), reference_frame, tolerance)


def volume_error_by_position(reference_label: np.ndarray, carried: np.ndarray, target: np.ndarray, value: int = 3) -> Dict[str, float]:
    """Where a carried label's volume error lies along the stack: ``(carried - target)`` voxels of ``value`` as
    % of its volume on ``reference_label``, summed over the most basal slice holding it on ``reference_label``
    (``"basal"``), the two most apical ones (``"apical"``) and the others (``"mid"``); ``"basal_left"`` is 1.0
    when ``target`` has none of it in that basal slice (the base left the slice, which an in-plane field cannot
    express), else 0.0. All ``(Z, H, W)`` label maps on one grid; e.g. the ED label, the ED label carried to
    ES and the expert ES label (the sum of the three positions is then the EF error with its sign flipped).

    Raises:
        ValueError: shapes that differ, or ``value`` absent from ``reference_label``.
    """
    ref, car, tgt = (np.asarray(a) for a in (reference_label, carried, target))
    if not ref.shape == car.shape == tgt.shape or ref.ndim != 3:
        raise ValueError(f"reference_label {ref.shape}, carried {car.shape} and target {tgt.shape} must be one (Z, H, W) shape.")
    holds = np.nonzero((ref == value).reshape(ref.shape[0], -1).any(1))[0]
    if holds.size == 0:
        raise ValueError(f"value {value} is absent from reference_label: no volume to compare against.")
    volume = float((ref == value).sum())
    ordered = holds if base_end(ref)[1] > 0 else holds[::-1]  # basal to apical
    error = {"basal": 0.0, "mid": 0.0, "apical": 0.0}
    for k, z in enumerate(ordered):
        where = "basal" if k == 0 else ("apical" if k >= len(ordered) - 2 else "mid")
        error[where] += 100.0 * (float((car[z] == value).sum()) - float((tgt[z] == value).sum())) / volume
    error["basal_left"] = float(not (tgt[ordered[0]] == value).any())
    return error


def through_plane_field(edited: np.ndarray, carried: np.ndarray, reference_label: np.ndarray, ddf: np.ndarray) -> np.ndarray:
    """The displacement that carries the moving label to ``edited``: the in-plane field ``ddf`` with a through-plane
    component where a basal rule changed the carried label, so that the transform itself does what the rule did, and
    keeps the slices in their order (no fixed slice reads beyond its neighbour: the field does not fold where it
    changed).

    A cleared voxel reads where the slice next to it towards the base reads (that slice's whole displacement), moved
    :data:`RULE_SLICE_MARGIN` of a slice towards its own: that slice's written label is background there (carried so,
    or cleared before it: the slices are done from the base on); at the stack's basal end it reads one slice beyond the
    image. A filled voxel reads where the slice next to it towards the apex reads, :data:`RULE_SLICE_MARGIN` short of it,
    when that slice's written label there is the fill's value (slices done from the apex on, so a fill can chain over
    several slices). Label-linear resampling then takes the value read (weight ``1 - margin`` per chained slice), and the
    through-plane map rises by at least the margin from slice to slice where a rule acted (``det J`` > 0 along the
    slices; a one-slice copy would give 0). A change that no neighbouring slice can give without reversing the slices'
    order (a voxel to clear whose basal neighbour keeps a structure, a fill whose apical neighbour lacks the value) is
    left out: the label written is the field's, and ``basal_through_plane``'s ``rule_agreement`` counts it.

    Args:
        edited: ``(Z, H, W)`` the carried label after the basal rules (:func:`apply_basal_descent`,
            :func:`clear_basal_by_prior`, :func:`apply_basal_ascent`).
        carried: ``(Z, H, W)`` the label the in-plane field carries (before the rules).
        reference_label: ``(Z, H, W)`` the moving label on the same grid (it places the base).
        ddf: ``(3, Z, H, W)`` fixed voxels, MONAI ``Warp`` convention (``label(x + ddf(x))``); channel 0, through-plane, 0.

    Returns:
        ``(3, Z, H, W)`` float64 (a copy); ``ddf`` where no rule acted.

    Raises:
        ValueError: arrays of other shapes, or a change that is neither a clearing nor a filling.
    """
    edited, carried, reference = (np.asarray(a) for a in (edited, carried, reference_label))
    field = np.array(ddf, dtype=np.float64, copy=True)
    if not (edited.shape == carried.shape == reference.shape == field.shape[1:]) or field.shape[0] != 3:
        raise ValueError(f"edited {edited.shape}, carried {carried.shape}, reference_label {reference.shape} must share one (Z, H, W) "
                         f"grid and ddf {field.shape} be (3, Z, H, W).")
    changed = edited != carried
    if not changed.any():
        return field
    if (changed & (edited != 0) & (carried != 0)).any():
        raise ValueError("a basal rule may only clear a carried structure or fill background; this one changed one structure into another.")
    _, step = base_end(reference)
    slices = edited.shape[0]
    written = carried.copy()  # the label the field carries so far
    base_first = list(range(slices)) if step > 0 else list(range(slices - 1, -1, -1))
    for k in base_first:  # clearings, from the base on
        _read_beside(field, written, k, k - step, changed[k] & (edited[k] == 0), 0, step * RULE_SLICE_MARGIN)
    for k in reversed(base_first):  # fillings, from the apex on
        _read_beside(field, written, k, k + step, changed[k] & (edited[k] != 0), edited[k], -step * RULE_SLICE_MARGIN)
    return field


def _read_beside(field: np.ndarray, written: np.ndarray, k: int, j: int, where: np.ndarray, value: Any, margin: float) -> None:
    """In place: voxels ``where`` of slice ``k`` read where slice ``j`` reads, ``margin`` slices towards ``k``, where
    ``j``'s written label is ``value`` (``value`` an int or a ``(H, W)`` map); ``j`` outside the stack (clearing only):
    one slice beyond it (no label there). ``written`` is updated to what the field now carries."""
    if not where.any():
        return
    if not 0 <= j < field.shape[1]:
        field[0, k][where] += j - k
        written[k][where] = 0
        return
    ok = where & (written[j] == value)
    field[:, k][:, ok] = field[:, j][:, ok]
    field[0, k][ok] += (j - k) + margin
    written[k][ok] = np.broadcast_to(value, ok.shape)[ok]


def basal_rules(direction: str, carried: np.ndarray, reference_label: np.ndarray, slice_spacing_mm: float,
                prior_label: Optional[np.ndarray] = None, structures: Mapping[str, int] = ACDC_STRUCTURES
                ) -> Tuple[np.ndarray, Optional[int]]:
    """The basal rules of an ED/ES pair of short-axis stacks: ``(label, the slice the prior found the LV gone from)``.

    ``"ED->ES"``: the basal RV slices the base leaves cleared (:func:`apply_basal_descent`) and, with the label
    prior's segmentation of the ES frame (``prior_label``), the LV and myocardium of the most basal LV slice when the
    prior finds the LV gone (:func:`clear_basal_by_prior`); ``"ES->ED"``: the basal slices the structures re-enter
    filled (:func:`apply_basal_ascent`). Any other direction, fewer than 3 slices or an empty reference: ``carried``
    as it is (the same object) and ``None``. ``structures``: the value of each structure in the labels (``prior_label``
    numbered the same).
    """
    carried = np.asarray(carried)
    if direction not in ("ED->ES", "ES->ED") or carried.ndim != 3 or carried.shape[0] < 3 or not (np.asarray(reference_label) > 0).any():
        return carried, None
    if direction == "ES->ED":
        return apply_basal_ascent(carried, reference_label, slice_spacing_mm, structures=structures), None
    return clear_basal_by_prior(apply_basal_descent(carried, reference_label, slice_spacing_mm, structures=structures), reference_label,
                                prior_label, structures)
