"""One pair of a study: registered by NPC (with the basal through-plane rules) or by the demons baseline."""

from __future__ import annotations

from typing import Any, Optional, Tuple, Union

import numpy as np
import SimpleITK as sitk
import torch
from torch import nn

from monai_npc.apps.registration.api import register
from monai_npc.apps.registration.through_plane import basal_through_plane
from monai_npc.cardiac.through_plane import basal_rules

from .studies import StudyPair

__all__ = ["register_pair", "basal_descent_label", "descend_registration", "demons_pair"]


def register_pair(pair: StudyPair, model: Union[str, nn.Module] = "acdc", model_name: Optional[str] = None, **kwargs: Any):
    """Register one pair of a study with :func:`monai_npc.register`: only the moving label is given.

    ``kwargs`` go to :func:`monai_npc.register` (``device``, ``threads``, ``refine_iterations``...).
    Returns the :class:`~monai_npc.apps.registration.result.Registration` (on the fixed image's grid).
    """
    return register(
        pair.moving.image, pair.fixed.image, model=model, moving_label=pair.moving.label,
        moving_select=pair.moving.select, fixed_select=pair.fixed.select, model_name=model_name, **kwargs,
    )


def basal_descent_label(pair: StudyPair, warped: np.ndarray, reference: np.ndarray, fixed: sitk.Image,
                        prior_label: Optional[np.ndarray] = None) -> np.ndarray:
    """The through-plane motion of the base on a carried label of a short-axis stack (3 slices or
    more; ``warped`` ``(Z, H, W)`` on ``fixed``'s grid, ``reference`` the moving label on the same grid):
    ``ED->ES``: the basal RV slices the base leaves in systole cleared
    (:func:`monai_npc.cardiac.through_plane.apply_basal_descent`), and, with the label prior's
    segmentation of the fixed frame (``prior_label``, :attr:`~monai_npc.apps.registration.result.Registration.prior_label`),
    the LV and myocardium cleared from the most basal LV slice when the prior finds the LV gone from it
    (:func:`~monai_npc.cardiac.through_plane.clear_basal_by_prior`); ``ES->ED``: the basal slices
    the structures re-enter in diastole filled (:func:`~monai_npc.cardiac.through_plane.apply_basal_ascent`).
    Other pairs (plain ``moving->fixed`` pairs, single slices) are returned as they are.
    """
    if fixed.GetDimension() != 3:
        return warped
    return basal_rules(pair.direction, warped, reference, fixed.GetSpacing()[2], prior_label)[0]


def descend_registration(pair: StudyPair, reg: Any) -> None:
    """The basal rules of :func:`basal_descent_label` made part of ``reg``'s transform (in place,
    :func:`monai_npc.apps.registration.through_plane.basal_through_plane`): ``reg.warped_label``, ``transform.h5``
    and the displacement all say the same; recorded in ``reg.summary["basal_descent"]``. A stack network's field
    (``reg.summary["stack_network"]``) moves through the plane itself: the rules are not applied on top of it
    (``basal_descent.applied`` false, with the reason)."""
    if pair.moving.label is not None:
        basal_through_plane(reg, pair.direction)


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
    ``register``'s ``acdc`` default, :data:`monai_npc.apps.tracking.track.LABEL_SIGMA`), interpolated
    linearly, the largest wins (:func:`monai_npc.functional.label_warp.warp_label`); the label is first put on
    the fixed grid by nearest neighbour, so it is smoothed there (NPC's on the moving grid: the same
    grid for ACDC's ED/ES pairs), so the two methods differ by their fields.

    Returns ``(warped_label, ddf)``: ``(Z, H, W)`` int16 on the fixed grid and the ``(Z, 2, H, W)``
    displacement in fixed voxels (MONAI ``Warp`` convention, array axes H, W).
    """
    from monai_npc.networks.nets import DemonsNet
    from monai_npc.apps.tracking.track import LABEL_SIGMA
    from monai_npc.functional.label_warp import warp_label

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
