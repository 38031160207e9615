"""The basal rules of an ED/ES pair made part of a registration's transform.

A 2-D model registers each short-axis slice in its own plane; the base of the heart moves through the slices.
:func:`basal_through_plane` applies the rules of :func:`monai_npc.cardiac.through_plane.basal_rules` to what the
in-plane transform carries and turns their changes into a through-plane component of the field
(:func:`~monai_npc.cardiac.through_plane.through_plane_field`): the written transform, the warped image and the
warped label then all say the same, and nothing edits the label afterwards.
"""

from __future__ import annotations

from typing import Any, Dict, Mapping, Optional

import SimpleITK as sitk

from monai_npc.cardiac.function import structure_values
from monai_npc.cardiac.through_plane import basal_rules, through_plane_field

from .result import Registration

__all__ = ["basal_through_plane"]


def basal_through_plane(reg: Registration, direction: str, structures: Optional[Mapping[str, int]] = None) -> Optional[Dict[str, Any]]:
    """Apply the basal rules of ``direction`` (``"ED->ES"`` or ``"ES->ED"``) to ``reg`` in place, as a through-plane part
    of its field; returns what ``reg.summary["basal_descent"]`` records (``None``: nothing to do: no moving label, not a
    3-D stack of 3 slices or more, another direction, or no rule changed anything). A stack network's field
    (``reg.summary["stack_network"]``) moves through the plane itself: no rule is applied, and
    ``reg.summary["basal_descent"]`` says so (``{"applied": False, "reason": ...}``, also returned).

    The summary gives the voxels cleared or filled, the slice the label prior found the LV gone from (``ED->ES`` with
    a prior) and ``rule_agreement``: the share of the labelled voxels on which the transform's label equals the rules'
    (below 1 where a rule could act only by folding the field, e.g. a voxel to clear under a structure the slice beside
    it towards the base keeps: :func:`~monai_npc.cardiac.through_plane.through_plane_field` leaves those out).
    ``structures``: the value of each structure (``"rv"``, ``"myo"``, ``"lv"``) in the moving label; ``None``: as the
    label prior named them (``reg.summary["label_prior"]["structures"]``: a label of another convention, M&Ms' LV 1 and
    RV 3 say, is recognised), else ACDC's; recorded as ``structures``.
    """
    stack = reg.summary.get("stack_network")
    if stack is not None:
        reg.summary["basal_descent"] = {"applied": False, "direction": direction,
                                        "reason": stack.get("not_applied", {}).get("basal_rules", "a stack network's field")}
        return reg.summary["basal_descent"]
    if reg.moving_label is None or reg.warped_label is None or reg.ddf_array is None or reg.ddf_array.shape[0] != 3:
        return None
    on_fixed = reg.warped_label
    # the moving label as register read it, on the fixed grid
    reference = sitk.GetArrayFromImage(sitk.Resample(reg.moving_label, on_fixed, sitk.Transform(), sitk.sitkNearestNeighbor, 0, sitk.sitkInt32))
    carried = sitk.GetArrayFromImage(on_fixed)
    prior = None if reg.prior_label is None else sitk.GetArrayFromImage(reg.prior_label)
    values = structure_values(structures or (reg.summary.get("label_prior") or {}).get("structures"))
    new, lv_left = basal_rules(direction, carried, reference, on_fixed.GetSpacing()[2], prior, values)
    if new is carried or not (new != carried).any():
        return None
    reg.set_field(through_plane_field(new, carried, reference, reg.ddf_array))
    result = sitk.GetArrayFromImage(reg.warped_label)
    labelled = (result > 0) | (new > 0)
    key = "cleared_voxels" if direction == "ED->ES" else "filled_voxels"
    info: Dict[str, Any] = {key: int((carried != new).sum()), "direction": direction, "module": "monai_npc.cardiac.through_plane",
                            "in_transform": True, "rule_agreement": float((result == new)[labelled].mean()) if labelled.any() else 1.0,
                            "structures": values}
    if prior is not None and direction == "ED->ES":
        info["lv_left_slice"] = lv_left
    reg.summary["basal_descent"] = info
    return info
