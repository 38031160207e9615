"""``register``'s last step: ``summary.json``, what a registration did, with every setting and where it came from."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Dict, List, Mapping, Optional, Sequence

import numpy as np
import SimpleITK as sitk
import torch

from monai_npc.functional import contrast_polarity, dice_by_value

from .inputs import Inputs
from .settings import RegisterSettings

if TYPE_CHECKING:
    from .result import Registration

__all__ = ["registration_summary", "label_dice", "opposite_contrast_slices"]

#: how the written transform maps points (``summary["convention"]``)
CONVENTION = ("transform.h5 and displacement.nii.gz: displacement u(p) in LPS mm on the fixed grid, "
              "p + u(p) = corresponding moving point (resample the moving image with it).")


def _dice(a: np.ndarray, b: np.ndarray, labels: Sequence[int]) -> Dict[str, Optional[float]]:
    """Dice of each label value, keyed by its string (``None`` when absent from both maps)."""
    return {str(v): d for v, d in dice_by_value(a, b, labels).items()}


def _mean(values: Mapping[str, Optional[float]]) -> Optional[float]:
    finite = [v for v in values.values() if v is not None]
    return float(np.mean(finite)) if finite else None


def label_dice(reg: "Registration", fixed_label: sitk.Image) -> Dict[str, Any]:
    """``{"dice", "dice_mean", "dice_initial", "dice_mean_initial"}``: ``warped_label`` and the moving label before
    registration (on the fixed grid, nearest) against ``fixed_label``, per label value."""
    fixed_arr = sitk.GetArrayFromImage(fixed_label)
    initial = sitk.GetArrayFromImage(
        sitk.Resample(reg.moving_label, reg.fixed, sitk.Transform(), sitk.sitkNearestNeighbor, 0, sitk.sitkInt32)
    )
    after = sitk.GetArrayFromImage(reg.warped_label)
    values = sorted(int(v) for v in set(np.unique(fixed_arr)) | set(np.unique(initial)) if v > 0)
    dice, dice_initial = _dice(after, fixed_arr, values), _dice(initial, fixed_arr, values)
    return {"dice": dice, "dice_mean": _mean(dice), "dice_initial": dice_initial, "dice_mean_initial": _mean(dice_initial)}


def _grid(image: sitk.Image, with_direction: bool = True) -> Dict[str, Any]:
    out = {"size": list(image.GetSize()), "spacing_mm": list(image.GetSpacing()), "origin_mm": list(image.GetOrigin())}
    if with_direction:
        out["direction"] = list(image.GetDirection())
    return out


def opposite_contrast_slices(moving: np.ndarray, fixed: np.ndarray) -> List[int]:
    """Slices of the model grid's ``(Z, h, w)`` inputs whose contrasts are opposite
    (:func:`~monai_npc.functional.polarity.contrast_polarity`): an NPC network compared those with the fixed one's
    responses negated (``match_polarity``), its label term read the fixed image upside down."""
    votes = contrast_polarity(torch.from_numpy(np.ascontiguousarray(moving, np.float32))[:, None],
                              torch.from_numpy(np.ascontiguousarray(fixed, np.float32))[:, None])
    return np.flatnonzero(votes.numpy() < 0).tolist()


def registration_summary(run: Any, inputs: Inputs, settings: RegisterSettings, name: str, reg: "Registration") -> Dict[str, Any]:
    """What ``summary.json`` says of one registration (``run``: the api's record of the pipeline's result, the label
    terms that acted and the warnings). The field's statistics (folding, Jacobian range, displacement) are ``reg``'s,
    of the field it writes (:meth:`~monai_npc.apps.registration.result.Registration.set_field` keeps them so)."""
    result = run.result
    summary: Dict[str, Any] = {"model": name, **{k: inputs.name(k) for k in ("moving", "fixed", "moving_label", "fixed_label")}}
    if settings.num_steps is not None or settings.refine_iterations is not None:  # an NPC network: its ODE and refinement steps
        summary["steps"] = {"num_steps": settings.num_steps, "refine_iterations": settings.refine_iterations}
    select = {k: inputs.given.get(k) for k in ("moving_select", "fixed_select")}
    if any(select.values()):
        summary["select"] = {"moving": select["moving_select"], "fixed": select["fixed_select"]}
    if inputs.given.get("pixel_space"):
        summary["pixel_space"] = True
    summary["alignment"] = result.alignment.as_dict() if result.alignment is not None else {"method": "none", "align": settings.align}
    if inputs.moving_label is not None and inputs.fixed_label is not None:
        summary.update(label_dice(reg, inputs.fixed_label))
    if result.reliability is not None:  # over the voxels the network looked at (a heart window: not the whole field of view)
        region = result.reliability_region.reshape(result.reliability.shape)
        summary["reliability_mean"] = float(result.reliability[region].mean()) if region.any() else 0.0
        summary["reliability_coverage_percent"] = float(100.0 * region.mean())
    elif result.still.all():
        summary["reliability_mean"] = 0.0
    summary["overlap_percent"] = result.overlap_percent
    if getattr(run, "stack", None) is not None:  # a stack network's field: its through-plane channel, no 2-D test-time step
        summary["stack_network"] = run.stack
    summary.update(reg.field_summary())
    if getattr(run, "fold_repair", None) is not None:  # what repair_folds did to the field before it was written
        summary["fold_repair"] = {**run.fold_repair, "module": "monai_npc.functional.fold_repair"}
    summary.update(
        identity_slices=np.flatnonzero(result.still).tolist(),
        opposite_contrast_slices=opposite_contrast_slices(result.moving_model, result.fixed_model),
        warnings=run.notes,
        seconds_network=result.seconds_network,
        label_guidance=run.guidance,
        label_prior=run.prior,
        label_sigma=settings.label_sigma if inputs.moving_label is not None else 0.0,
        settings=settings.record(),
        model_grid={**_grid(result.grid, False), "field_of_view": settings.field_of_view,
                    "centre_voxel": None if result.centre is None else [round(c, 2) for c in result.centre]},
        fixed_grid=_grid(inputs.fixed),
        convention=CONVENTION,
    )
    return summary
