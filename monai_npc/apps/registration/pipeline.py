"""The path of one registration, top to bottom: canonical geometry -> (align two acquisitions rigidly,
:mod:`~monai_npc.apps.registration.align`) -> localise (:mod:`~monai_npc.apps.registration.localize`) ->
model grid (:mod:`~monai_npc.apps.registration.grids`) -> register every slice -> paste the field back.

:func:`monai_npc.register` (:mod:`~monai_npc.apps.registration.api`) reads the inputs and checks them, then
calls :func:`run_pipeline` with the network's :class:`~monai_npc.apps.registration.models.ModelProfile`.

Units: images are SimpleITK images (mm, LPS); arrays are in array order ``(Z, H, W)``; a ddf is in
voxels of its grid, MONAI ``Warp`` convention (channel ``k`` along array axis ``k``).
Slices are registered independently; with ``"image"`` or ``"heart"`` a slice gives the same field inside
its stack as alone (``"heart-stack"`` shares the window's centre). A stack network
(:func:`~monai_npc.apps.registration.models.is_stack_network`) instead gets the grid's whole stack in one call and
returns a 3-D field whose through-plane channel 0 (slices; the model grid's slices are the fixed image's) is pasted
back with the in-plane channels.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Dict, List, NamedTuple, Optional, Sequence, Tuple, Union

import numpy as np
import SimpleITK as sitk
import torch
from torch import nn

from monai_npc.functional import reliability_map, warp_image
from monai_npc.functional.stack_field import warp_stack_slices
from monai_npc.functional.taper import taper_window
from monai_npc.functional.through_plane_evidence import reads_label
from monai_npc.interop.images import model_grid, resample, resample_model_field
from monai_npc.interop.transforms import displacement_field_transform

from .align import RigidAlignment, rigid_in_plane
from .grids import constant_slices, given_centres, heart_grid, inside_grid, slice_images, slices_of
from .label_prior import PRIOR_IMAGES_AGREEMENT, carried_prior_check, fill_unlabelled, fixed_prior, moving_prior, relabel
from .localize import motion_centre
from .models import ModelProfile, is_stack_network

__all__ = ["PipelineResult", "run_pipeline"]


def _net_dtype(net: nn.Module) -> torch.dtype:
    for p in net.parameters():
        if p.is_floating_point():
            return p.dtype
    return torch.float32


@torch.inference_mode()
def _predict(net: nn.Module, moving: torch.Tensor, fixed: torch.Tensor, chunk: int = 16, moving_label: Optional[torch.Tensor] = None,
             label_guidance: float = 0.0, fixed_prior: Optional[torch.Tensor] = None, prior_weight: float = 0.0,
             prior_agreement: Optional[float] = None, label_from_prior: bool = False):
    """``(Z, 1, h, w)`` pairs -> ``ddf (Z, 2, h, w)`` (model voxels), ``warped``, ``reliability (Z, 1, h, w)`` or ``None``,
    the prior's agreement with the label the network's field carries (``None``: not judged), why it stood aside
    (``None``: it acted or was not given).

    Each slice is one independent pair of the batch (chunks of ``chunk`` slices). ``moving_label``
    ``(Z, 1, h, w)`` with ``label_guidance`` > 0 reaches the refinement's label-guided term (NPC only),
    and with it ``fixed_prior`` ``(Z, K, h, w)`` (class probabilities of ``fixed``) weighted by ``prior_weight``,
    unless :func:`carried_prior_check` (given ``prior_agreement`` and the network's fields of all slices, before any
    refinement) says why not; ``label_from_prior``: ``moving_label`` is the prior's own segmentation of the moving
    slices (images only), and stands aside with it.
    """
    guided = hasattr(net, "register") and moving_label is not None and bool(label_guidance)
    prior = fixed_prior if guided and fixed_prior is not None and prior_weight > 0 else None
    chunks = [slice(start, start + chunk) for start in range(0, moving.shape[0], chunk)]
    fields = [net.network_field(moving[c], fixed[c], True) for c in chunks] if hasattr(net, "network_field") else None
    carried = aside = None
    if prior is not None and prior_agreement is not None and fields is not None:
        carried, aside = carried_prior_check(prior, prior_agreement, moving_label, torch.cat([f[0] for f in fields]))
        prior = None if aside else prior
        guided = guided and not (aside and label_from_prior)
    ddfs, warps, rels = [], [], []
    for i, c in enumerate(chunks):
        m, f = moving[c], fixed[c]
        if hasattr(net, "register"):
            guide = {"moving_label": moving_label[c], "lambda_label": float(label_guidance)} if guided else {}
            if prior is not None:
                guide.update(fixed_prior=prior[c], prior_weight=float(prior_weight))
            if fields is not None:
                guide["field"] = fields[i]
            warped, ddf, diagnostics = net.register(m, f, return_diagnostics=True, **guide)
            if diagnostics:
                last = diagnostics[-1]
                rels.append(reliability_map(last["residual"], last["mask"], size=list(m.shape[2:])))
        else:
            ddf = net(torch.cat([m, f], 1))
            warped = warp_image(m, ddf, "bilinear", "border")
        ddfs.append(ddf.float())
        warps.append(warped.float())
    rel = torch.cat(rels).float() if rels and len(rels) == len(ddfs) else None
    return torch.cat(ddfs), torch.cat(warps), rel, carried, aside


@torch.inference_mode()
def _predict_stack(net: nn.Module, moving: torch.Tensor, fixed: torch.Tensor, still: np.ndarray, moving_label: Optional[torch.Tensor] = None,
                   label_guidance: float = 0.0, fixed_prior: Optional[torch.Tensor] = None, prior_weight: float = 0.0,
                   prior_agreement: Optional[float] = None, network_label: Optional[torch.Tensor] = None,
                   label_from_prior: bool = False):
    """A stack network's field: ``moving``, ``fixed`` ``(Z, 1, h, w)``, the grid's slices in order, go through ``net``
    as ONE stack ``(Z, 2, h, w)`` -> ``ddf`` ``(Z, 3, h, w)`` float32 on the CPU (model voxels; channel 0 through the
    plane in slices, MONAI ``Warp`` convention), the moving stack warped by it in 3-D ``(Z, 1, h, w)``
    (:func:`~monai_npc.functional.stack_field.warp_stack_slices`), and as :func:`_predict` the prior's agreement with the
    label the network's field carries and why it stood aside.

    With ``net.refiner.iterations`` > 0 the field is refined in 3-D
    (:meth:`~monai_npc.networks.blocks.InstanceRefinement.refine_stack`), with ``moving_label`` ``(Z, 1, h, w)`` and
    ``label_guidance`` > 0 in its label-guided term, and there ``fixed_prior`` ``(Z, K, h, w)`` weighted by
    ``prior_weight`` unless :func:`carried_prior_check` (given ``prior_agreement``, on the network's 3-D field) says why
    not. ``still`` ``(Z,)`` slices (constant in either image) are left at the identity, as for 2-D models; with every
    slice still the network is not run. ``network_label`` ``(Z, 1, h, w)``: the moving label for a network that reads
    it (``net.uses_label``; :func:`_label_for_network`); ``label_from_prior``: as :func:`_predict`."""
    z, _, h, w = moving.shape
    if still.all():
        return torch.zeros(z, 3, h, w), moving.float().cpu().clone(), None, None
    pair = torch.cat([moving, fixed], 1)
    ddf = (net(pair) if network_label is None else net(pair, moving_label=network_label.to(moving.dtype))).float()
    if tuple(ddf.shape) != (z, 3, h, w):
        raise ValueError(f"a stack network must return ddf (Z, 3, h, w) = ({z}, 3, {h}, {w}) for a stack (Z, 2, h, w); "
                         f"{type(net).__name__} returned {tuple(ddf.shape)}.")
    carried = aside = None
    refiner = getattr(net, "refiner", None)
    if getattr(refiner, "iterations", 0) > 0:
        guided = moving_label is not None and label_guidance > 0
        prior = fixed_prior if guided and fixed_prior is not None and prior_weight > 0 else None
        if prior is not None and prior_agreement is not None:
            carried, aside = carried_prior_check(prior, prior_agreement, moving_label, ddf)
            prior = None if aside else prior
            guided = guided and not (aside and label_from_prior)
        ddf = refiner.refine_stack(moving.float(), fixed.float(), ddf, moving_label if guided else None, float(label_guidance),
                                   prior, float(prior_weight))
    ddf[torch.from_numpy(still).to(ddf.device)] = 0.0
    group = torch.zeros(z, dtype=torch.int64, device=ddf.device)
    return ddf.cpu(), warp_stack_slices(moving.float(), ddf, group, 1).cpu(), carried, aside


@dataclass
class PipelineResult:
    """What :func:`run_pipeline` computes.

    Attributes:
        ddf: ``(D, *S)`` float64 on the fixed grid, fixed voxels, array order (3-D: channel 0, the
            through-plane component in slices, is 0 but for a stack network's).
        ddf_model: ``(Z, 2, h, w)`` on the model grid (model voxels), tapered for ``"heart"``; a stack network's
            ``(Z, 3, h, w)`` (channel 0 through the plane, in slices).
        grid: the model grid (SimpleITK image, no pixels used).
        moving_model, fixed_model: ``(Z, h, w)`` network inputs; ``warped_model`` ``(Z, 1, h, w)``.
        reliability: ``(Z, H, W)`` on the fixed grid, or ``None`` for networks without one (0 where
            the network did not look: outside the heart windows).
        reliability_region: ``(Z, H, W)`` bool, the fixed voxels ``reliability`` was computed on
            (inside the model grids of the run it comes from).
        uncovered: ``(Z,)`` fixed slices the moving image does not reach at all (among ``still``).
        still: ``(Z,)`` slices left at the identity (constant in either image).
        overlap_percent: share of the fixed image's voxels that the moving image covers.
        centre: ``(row, col)`` of the middle slice's ``"heart"`` window in fixed voxels, else ``None``
            (``grid`` is that window on every slice: what the overview figure shows).
        seconds_network: time in the network.
        alignment: the rigid pre-alignment (step 0), composed into ``ddf``; ``None`` without one.
        aligned_label: the moving label on the fixed grid after that alignment (nearest), else ``None``.
        prior_label: ``(Z, H, W)`` uint8 on the fixed grid: the label prior's segmentation of the fixed
            image (the most likely value; 0 outside the model grid and on slices where the moving label
            has nothing, which the label term does not touch), when one acted, else ``None`` (without a moving
            label: set exactly when the prior's segmentation of the moving image steered the term).
        prior_agreement: mean Dice of the label prior's segmentation of the moving image against the
            moving label (:func:`prior_agreement`, on the :data:`PRIOR_CHECK_SLICES` slices with the most
            label) when a prior was given, else ``None``; below :data:`PRIOR_MIN_AGREEMENT` the prior did not act.
        prior_fixed_agreement: mean Dice of its segmentation of the fixed image against the moving label before
            registration (on the slices the label covers), when it was measured, else ``None``.
        prior_carried_agreement: mean Dice of its segmentation of the fixed image against the moving label carried by
            the network's field (:func:`~monai_npc.apps.registration.label_prior.carried_prior_check`), or ``None``.
        prior_note: why a given prior did not act (:func:`~monai_npc.apps.registration.label_prior.fixed_prior`), else ``None``.
        network_read_label: whether a stack network that reads the moving label got it (:func:`_label_for_network`).
        prior_values: ``{moving label value: the prior's}`` when the label follows another convention, found on the moving
            image (:func:`~monai_npc.apps.registration.label_prior.value_map`; the prior then steers with its values
            renamed, if it acts), else ``None``.
    """

    ddf: np.ndarray
    ddf_model: torch.Tensor
    grid: sitk.Image
    moving_model: np.ndarray
    fixed_model: np.ndarray
    warped_model: torch.Tensor
    reliability: Optional[np.ndarray]
    reliability_region: np.ndarray
    uncovered: np.ndarray
    still: np.ndarray
    overlap_percent: float
    centre: Optional[Tuple[float, float]]
    seconds_network: float
    alignment: Optional[RigidAlignment] = None
    aligned_label: Optional[sitk.Image] = None
    prior_label: Optional[np.ndarray] = None
    prior_agreement: Optional[float] = None
    prior_fixed_agreement: Optional[float] = None
    prior_note: Optional[str] = None
    prior_carried_agreement: Optional[float] = None
    network_read_label: bool = False
    prior_values: Optional[Dict[int, int]] = None


def _label_for_network(net: nn.Module, label: Optional[torch.Tensor]) -> Optional[torch.Tensor]:
    """The moving label ``(Z, 1, h, w)`` a stack network that reads it (``net.uses_label``) gets: the label-guided
    term's (given only with ``label_guidance`` > 0), when coded as the network was trained (:func:`reads_label`),
    else ``None`` (the images alone)."""
    return label if getattr(net, "uses_label", False) and label is not None and reads_label(label) else None


def run_pipeline(
    net: nn.Module,
    moving: sitk.Image,
    fixed: sitk.Image,
    profile: ModelProfile,
    keep_aspect: bool = True,
    device: Union[str, torch.device] = "cpu",
    moving_label: Optional[sitk.Image] = None,
    label_guidance: float = 0.0,
    heart_centre: Optional[Sequence[Tuple[float, float]]] = None,
    align: bool = False,
    label_prior: Optional[nn.Module] = None,
    prior_weight: float = 0.0,
) -> PipelineResult:
    """(Align,) localise, build the model grid, register every slice and paste the field back onto ``fixed``.

    Args:
        net: a network in eval mode, ``(B, 2, h, w) -> (B, 2, h, w)`` or with ``register``.
        moving, fixed: float32 images of one dimensionality (checked by the caller), mm / LPS.
        profile: :func:`model_profile` of ``net`` (a stack network: ``"image"`` or ``"heart-stack"``, checked there).
        keep_aspect: ``"image"`` field of view: isotropic grid (pad the short side).
        device: torch device of ``net``.
        moving_label: the moving image's label map (on its grid), for ``label_guidance``.
        label_guidance: weight of the refinement's label-guided term (0 = off;
            :data:`monai_npc.apps.registration.settings.LABEL_GUIDANCE`); the ``"image>heart"`` windows, which register the coarsely
            warped moving image, do not use it.
        heart_centre: the heart windows' in-plane centres ``(row, col)`` in fixed voxels, one per
            slice (or one for all); ``None``: from the images
            (:func:`~monai_npc.apps.registration.localize.motion_centre`): each slice's from its own pair for
            ``"heart"``, one from the whole stack for ``"heart-stack"`` (the ``acdc`` default).
        align: first a rigid in-plane alignment of the whole moving image
            (:func:`~monai_npc.apps.registration.align.rigid_in_plane`), composed with the network's field.
        label_prior, prior_weight: with ``moving_label`` and ``label_guidance``, a segmentation
            network of the fixed model-grid slices (:class:`~monai_npc.networks.nets.LabelPrior`)
            whose class probabilities join the label-guided term with this weight (0 = not used).
    """
    dims = fixed.GetDimension()
    nan = float("nan")
    # 1. canonical geometry: the moving image on the fixed grid (NaN outside it)
    moving_on_fixed = slices_of(resample(moving, fixed, "linear", nan), dims)
    fixed_arr = slices_of(sitk.GetArrayFromImage(fixed), dims)
    overlap = float(100.0 * np.isfinite(moving_on_fixed).mean())
    # 0. (two acquisitions) one rigid in-plane turn and shift of the whole moving image; the rest registers what is left
    alignment = aligned_label = None
    if align and overlap > 0:
        spacing_mm = tuple(fixed.GetSpacing()[1::-1]) + tuple(fixed.GetSpacing()[2:])  # (row, col[, slice]) mm
        alignment = rigid_in_plane(moving_on_fixed, fixed_arr.astype(np.float32), spacing_mm)
    if alignment is not None and alignment.applied:
        to_moving = displacement_field_transform(_with_z(torch.from_numpy(alignment.ddf), dims), fixed)
        moving = sitk.Resample(moving, fixed, to_moving, sitk.sitkLinear, nan, sitk.sitkFloat32)
        if moving_label is not None:
            moving_label = aligned_label = sitk.Resample(moving_label, fixed, to_moving, sitk.sitkNearestNeighbor, 0)
        moving_on_fixed = slices_of(sitk.GetArrayFromImage(moving), dims)
    guide = {"moving_label": moving_label, "label_guidance": float(label_guidance)} if moving_label is not None else {}
    if label_prior is not None and prior_weight > 0 and label_guidance > 0:  # without a moving label: its segmentation of the moving image
        guide.update(label_guidance=float(label_guidance), label_prior=label_prior, prior_weight=float(prior_weight))
    # 2. localise: a heart window per slice, from its own slice pair ("heart": slices stay independent) or from the
    #    whole stack ("heart-stack": one window for every slice); the field of each slice is still its own
    centres: List[Tuple[float, float]] = []
    if profile.field_of_view != "image" and heart_centre is not None:  # placed by the caller
        centres = given_centres(heart_centre, fixed)
    elif profile.field_of_view != "image":
        spacing = tuple(fixed.GetSpacing()[1::-1])  # (row, col) mm
        if profile.field_of_view == "heart-stack":  # one window for the whole stack, from all its slices (couples them)
            centres = [motion_centre(moving_on_fixed, fixed_arr, spacing)] * fixed_arr.shape[0]
        else:
            centres = [motion_centre(moving_on_fixed[z : z + 1], fixed_arr[z : z + 1], spacing) for z in range(fixed_arr.shape[0])]
    whole = [(model_grid(fixed, profile.input_size, keep_aspect), fixed)]
    windows = [(heart_grid(target, c, profile.input_size, profile.spacing_mm), target) for target, c in zip(slice_images(fixed), centres)]
    # 3-5. register on the grid(s), every slice in one batch, and paste back on the fixed grid
    if profile.field_of_view == "image>heart":  # coarse to fine: the windows register the coarsely warped moving image
        coarse = _register_on_grids(net, moving, whole, False, profile, device, **guide)
        pre = sitk.Resample(moving, fixed, displacement_field_transform(_with_z(coarse.ddf_fixed, dims), fixed), sitk.sitkLinear, nan, sitk.sitkFloat32)
        main = _register_on_grids(net, pre, windows, True, profile, device)
        ddf_f = main.ddf_fixed + warp_image(coarse.ddf_fixed, main.ddf_fixed, "bilinear", "border")  # u_c(x + u_f(x)) + u_f(x)
        runs = [coarse, main]
    else:
        runs = [_register_on_grids(net, moving, grids, window, profile, device, **guide)
                for grids, window in ((whole, False), (windows, True)) if grids and profile.field_of_view in _USES[window]]
        main = runs[-1]
        ddf_f = main.ddf_fixed
        if len(runs) == 2:  # "image+heart": inside the window the mean of the two fields (weight 0.5), tapered to the whole-image one
            ddf_f = runs[0].ddf_fixed + 0.5 * runs[1].weight * (runs[1].ddf_fixed - runs[0].ddf_fixed)
    if alignment is not None and alignment.applied:  # x -> x + u(x) -> rigid: a(x + u(x)) + u(x)
        ddf_f = _after_rigid(ddf_f, torch.from_numpy(alignment.ddf))
    mid = len(centres) // 2
    # the run whose reliability map is reported, and the one the label prior steered ("image>heart": the coarse one,
    # which gets the label)
    rated = runs[0] if profile.field_of_view == "image>heart" else main
    return PipelineResult(
        ddf=_with_z(ddf_f, dims), ddf_model=main.ddf_model,
        grid=heart_grid(fixed, centres[mid], profile.input_size, profile.spacing_mm) if main.windowed else whole[0][0],
        moving_model=main.moving_model, fixed_model=main.fixed_model, warped_model=main.warped_model,
        reliability=rated.reliability, reliability_region=rated.seen,
        uncovered=~np.isfinite(moving_on_fixed).reshape(moving_on_fixed.shape[0], -1).any(1),
        still=np.logical_or.reduce([r.still for r in runs]), overlap_percent=overlap,
        centre=centres[mid] if centres else None, seconds_network=sum(r.seconds_network for r in runs),
        alignment=alignment, aligned_label=aligned_label, prior_label=rated.prior_label, prior_agreement=rated.prior_agreement,
        prior_fixed_agreement=rated.prior_fixed_agreement, prior_note=rated.prior_note,
        prior_carried_agreement=rated.prior_carried_agreement, network_read_label=main.network_read_label,
        prior_values=rated.prior_values,
    )


#: which fields of view register on the whole-image grid (False) and on the heart windows (True)
_USES = {False: ("image", "image+heart"), True: ("heart", "heart-stack", "image+heart")}


def _with_z(ddf_f: torch.Tensor, dims: int) -> np.ndarray:
    """``(Z, 2, H, W)`` in-plane field -> ``(D, *S)`` array-order ddf of the fixed image (3-D: a zero through-plane channel
    first); a stack network's ``(Z, 3, H, W)`` keeps its own through-plane channel (2-D images: only the in-plane ones)."""
    out = ddf_f.permute(1, 0, 2, 3).numpy()  # (C, Z, H, W)
    if out.shape[0] == 3:
        return np.ascontiguousarray(out if dims == 3 else out[1:, 0])
    out = np.concatenate([np.zeros_like(out[:1]), out], 0) if dims == 3 else out[:, 0]
    return np.ascontiguousarray(out)


def _after_rigid(ddf_f: torch.Tensor, rigid: torch.Tensor) -> torch.Tensor:
    """The field ``u`` ``(Z, C, H, W)`` (fixed voxels) composed with the rigid pre-alignment ``a`` ``(Z, 2, H, W)``:
    ``a(x + u(x)) + u(x)``. A stack network's through-plane channel 0 stays as it is and ``a`` is read at the in-plane
    point: the alignment is one in-plane turn and shift of the whole stack, the same on every slice."""
    if ddf_f.shape[1] == 2:
        return ddf_f + warp_image(rigid, ddf_f, "bilinear", "border")
    return torch.cat([ddf_f[:, :1], ddf_f[:, 1:] + warp_image(rigid, ddf_f[:, 1:], "bilinear", "border")], 1)


def _paste_field(ddf_m: torch.Tensor, grid: sitk.Image, target: sitk.Image) -> torch.Tensor:
    """A model-grid field ``(n, C, h, w)`` (model voxels) -> ``(n, C, H, W)`` in ``target``'s voxels; a stack network's
    through-plane channel 0 (slices, the same on both grids) is resampled as a value, not rescaled."""
    if ddf_m.shape[1] == 2:
        return resample_model_field(ddf_m, grid, target, displacement=True)
    return torch.cat([resample_model_field(ddf_m[:, :1].contiguous(), grid, target),
                      resample_model_field(ddf_m[:, 1:].contiguous(), grid, target, displacement=True)], 1)


@dataclass
class _GridRun:
    windowed: bool
    moving_model: np.ndarray
    fixed_model: np.ndarray
    still: np.ndarray
    ddf_model: torch.Tensor
    warped_model: torch.Tensor
    ddf_fixed: torch.Tensor  # (Z, 2, H, W) fixed voxels (a stack network's: (Z, 3, H, W))
    weight: Optional[torch.Tensor]  # (Z, 1, H, W) window weight on the fixed grid (windows only)
    reliability: Optional[np.ndarray]
    seen: np.ndarray  # (Z, H, W) bool: fixed voxels inside a model grid (where the network looked)
    seconds_network: float
    prior_label: Optional[np.ndarray] = None  # (Z, H, W) uint8 on the fixed grid: the label prior's segmentation
    prior_agreement: Optional[float] = None  # the prior against the moving label on the moving image (mean Dice)
    prior_fixed_agreement: Optional[float] = None  # its fixed-image segmentation against the moving label, unregistered
    prior_note: Optional[str] = None  # why a prior that was given did not act (None: it acted, or had nothing to steer)
    prior_carried_agreement: Optional[float] = None  # its fixed-image segmentation against the label the network's field carries
    network_read_label: bool = False  # a stack network that reads the moving label got it
    prior_values: Optional[Dict[int, int]] = None  # how the moving label's values named the prior's (another convention)


class _LabelTerm(NamedTuple):
    """What the label-guided term steers on the model grid (:func:`_label_term_inputs`); ``None`` where it has none."""

    label: Optional[torch.Tensor] = None  # (Z, 1, h, w): the moving label, or images only the prior's segmentation of it
    prior: Optional[torch.Tensor] = None  # (N, K, h, w): the prior's class probabilities of the active fixed slices
    agreement: Optional[float] = None  # the prior against the moving label on the moving image
    judged: Optional[float] = None  # the agreement its last check judges by (carried_prior_check)
    fixed_agreement: Optional[float] = None  # its segmentation of the fixed image against the label, unregistered
    note: Optional[str] = None  # why it does not act
    values: Optional[Dict[int, int]] = None  # a label of another convention: its values -> the prior's (found on the moving image)


def _label_term_inputs(grids, m_t: torch.Tensor, f_t: torch.Tensor, active: np.ndarray, moving_label: Optional[sitk.Image],
                       label_guidance: float, label_prior: Optional[nn.Module], prior_weight: float) -> _LabelTerm:
    """What the label-guided term steers on the model grid (:class:`_LabelTerm`). With a ``moving_label``: that label and
    :func:`fixed_prior`; without one (images only), :func:`moving_prior`: the prior's segmentation of the moving slices,
    judged with :data:`PRIOR_IMAGES_AGREEMENT` (no expert's label: its agreement assumed)."""
    z, _, h, w = m_t.shape
    device = m_t.device
    if moving_label is not None and label_guidance > 0:
        lab = np.concatenate([slices_of(resample(moving_label, grid, "nearest", 0.0), grid.GetDimension()) for grid, _ in grids])
        lab_t = torch.from_numpy(np.ascontiguousarray(lab, dtype=np.float32))[:, None].to(device=device)
        if label_prior is not None and prior_weight > 0 and active.size:  # what a segmentation network sees on the fixed slices
            prior_t, agreement, on_fixed, note, values = fixed_prior(label_prior.to(device), m_t[active], f_t[active], lab_t[active])
            if values is not None and note is None:  # a label of another convention steers with the prior's values
                lab_t = relabel(lab_t, values, label_prior.num_classes)
            if note is None and prior_t is not None:  # slices the label leaves empty: steered as images only
                lab_t[active], prior_t = fill_unlabelled(label_prior, m_t[active], f_t[active], lab_t[active], prior_t)
            return _LabelTerm(lab_t, prior_t, agreement, agreement, on_fixed, note, values)
        return _LabelTerm(lab_t)
    if label_prior is not None and prior_weight > 0 and label_guidance > 0 and active.size:
        # images only: the prior's segmentation of the moving slices is the label the term steers (it writes nothing)
        seg, prior_t, on_fixed, note = moving_prior(label_prior.to(device), m_t[active], f_t[active])
        if seg is None:
            return _LabelTerm(fixed_agreement=on_fixed, note=note)
        lab_t = torch.zeros(z, 1, h, w, device=device)
        lab_t[active] = seg
        return _LabelTerm(lab_t, prior_t, None, PRIOR_IMAGES_AGREEMENT, on_fixed, note)
    return _LabelTerm()


def _register_on_grids(net, moving, grids: Sequence[Tuple[sitk.Image, sitk.Image]], window: bool, profile: ModelProfile, device,
                       moving_label: Optional[sitk.Image] = None, label_guidance: float = 0.0, label_prior: Optional[nn.Module] = None,
                       prior_weight: float = 0.0) -> _GridRun:
    """Steps 3-5 of :func:`run_pipeline`: ``grids`` are ``(model grid, the fixed image or slice it covers)``
    pairs in slice order; all their slices go through the network as one batch of independent pairs (a stack network:
    as one stack, :func:`_predict_stack`, its refinement and label term in 3-D)."""
    nan = float("nan")
    # 3. model inputs
    fixed_raw = np.concatenate([slices_of(resample(target, grid, "linear", nan), grid.GetDimension()) for grid, target in grids])
    moving_raw = np.concatenate([slices_of(resample(moving, grid, "linear", nan), grid.GetDimension()) for grid, _ in grids])
    meta = getattr(net, "meta", None) or {}
    fixed_m, moving_m = profile.inputs(fixed_raw, meta), profile.inputs(moving_raw, meta)
    still = constant_slices(fixed_raw) | constant_slices(moving_raw)
    # 4. every slice, independently
    t_net = time.perf_counter()
    dtype = _net_dtype(net)
    m_t = torch.from_numpy(np.ascontiguousarray(moving_m))[:, None].to(device=device, dtype=dtype)
    f_t = torch.from_numpy(np.ascontiguousarray(fixed_m))[:, None].to(device=device, dtype=dtype)
    z, h, w = moving_m.shape
    ddf_m, warped_m = torch.zeros(z, 2, h, w), m_t.detach().float().cpu().clone()
    active = np.flatnonzero(~still)
    carried_agreement = network_label = rel_m = None
    stack = is_stack_network(net)
    if stack:  # the whole stack is refined together: the label term and the prior see every slice
        active = np.arange(z) if active.size else active
    lab_t, prior_t, agreement, judged, fixed_agreement, prior_note, prior_values = _label_term_inputs(
        grids, m_t, f_t, active, moving_label, label_guidance, label_prior, prior_weight)
    if stack:
        network_label = _label_for_network(net, lab_t if moving_label is not None else None)
        ddf_m, warped_m, carried_agreement, aside = _predict_stack(net, m_t, f_t, still, lab_t, label_guidance, prior_t, prior_weight, judged, network_label,
                                                                      moving_label is None)
        if aside:
            prior_t, prior_note = None, aside
    elif active.size:
        d, wp, r, carried_agreement, aside = _predict(
            net, m_t[active], f_t[active], moving_label=None if lab_t is None else lab_t[active], label_guidance=label_guidance,
            fixed_prior=prior_t, prior_weight=prior_weight, prior_agreement=judged, label_from_prior=moving_label is None)
        if aside:
            prior_t, prior_note = None, aside
        ddf_m[active], warped_m[active] = d.cpu(), wp.cpu()
        if r is not None:
            rel_m = torch.zeros(z, 1, h, w)
            rel_m[active] = r.cpu()
    elif hasattr(net, "register"):
        rel_m = torch.zeros(z, 1, h, w)
    seconds_network = time.perf_counter() - t_net
    ddf_m = ddf_m.double()
    taper = taper_window((h, w), profile.taper) if window else None
    if window:
        ddf_m = ddf_m * taper
    # 5. paste back, grid by grid: ddf in fixed voxels on the whole fixed grid (0 outside a window)
    prior_m = None
    if prior_t is not None:  # the prior's most likely value per model-grid voxel (0 on slices left at the identity)
        prior_m = np.zeros((z, h, w), np.uint8)
        prior_m[active] = prior_t.max(1).indices.cpu().numpy().astype(np.uint8)
        prior_m[still] = 0
    ddf_f, weights, rels, seen, priors, start = [], [], [], [], [], 0
    for grid, target in grids:
        n = grid.GetSize()[2] if grid.GetDimension() == 3 else 1
        part = slice(start, start + n)
        ddf_f.append(_paste_field(ddf_m[part], grid, target))  # (n, 2 or 3, H, W)
        if prior_m is not None:
            on_grid = sitk.GetImageFromArray(prior_m[part] if grid.GetDimension() == 3 else prior_m[part][0])
            on_grid.CopyInformation(grid)
            priors.append(slices_of(resample(on_grid, target, "nearest", 0.0), target.GetDimension()).astype(np.uint8))
        inside = torch.from_numpy(inside_grid(grid, target))[:, None] if window else None
        if window:
            weights.append(resample_model_field(taper.expand(n, 1, h, w).contiguous(), grid, target) * inside)
            seen.append(inside[:, 0].numpy() > 0)
        if rel_m is not None:
            rels.append(resample_model_field(rel_m[part].double(), grid, target) * (inside if window else 1.0))
        start += n
    rel = None
    if rel_m is not None:
        rel = torch.cat(rels)[:, 0].float().numpy()
        rel[still] = 0.0
    ddf_fixed = torch.cat(ddf_f)
    seen_fixed = np.concatenate(seen) if window else np.ones((ddf_fixed.shape[0],) + tuple(ddf_fixed.shape[2:]), bool)
    return _GridRun(window, moving_m, fixed_m, still, ddf_m, warped_m, ddf_fixed, torch.cat(weights) if window else None,
                    rel, seen_fixed, seconds_network, np.concatenate(priors) if priors else None, agreement, fixed_agreement, prior_note,
                    carried_agreement, network_label is not None, prior_values)
