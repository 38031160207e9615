"""The input path of one registration, top to bottom: read -> canonical geometry -> (align two
acquisitions rigidly, :mod:`monai_npc.apps.align`) -> localise -> model grid -> register -> paste back.

:func:`monai_npc.register` (``monai_npc.interop.api``) reads the inputs and checks them, then calls
:func:`run_pipeline`; everything a model needs of its inputs comes from its weights' metadata
through :func:`model_profile` and two registries, so the core never imports an extra:

- :data:`PREPROCESSING`: ``meta["preprocessing"]`` -> the function that turns resampled slices into
  network inputs (``"minmax"``: each slice to ``[0, 1]``; ``"sar"``: the SAR extra's
  log-amplitude preprocessing, imported by name only when a SAR model asks for it).
- :data:`FIELDS_OF_VIEW`: ``meta["field_of_view"]`` -> how the model grid is placed on the fixed
  image. ``"image"``: the whole fixed field of view fitted into ``size x size`` (brain slices,
  echo sectors, SAR tiles). ``"heart"``: models trained on heart-centred crops at the scanner's
  own pixel size (ACDC): a ``size x size`` window at the native in-plane spacing (clamped to
  ``meta["spacing_mm"]``) on each slice, centred on where that slice's two frames differ most
  (:func:`~monai_npc.apps.localize.motion_centre`; no label needed), the field tapered to zero
  over the window's outer ``taper`` voxels and identity outside it. One window per slice, so no
  slice depends on another. ``"heart-stack"``: one window for the whole stack, from the frame
  difference of all its slices; what ``register`` gives ``acdc`` pairs (:func:`register_settings`):
  a slice's own frame difference can peak 40-150 mm from its heart (on 47 of 650 labelled slices
  of the 70 SSL4MIS patients), the stack's never did (at most 35 mm); +0.0047 Dice on the 88
  training pairs, the same on the 52 validation pairs. The field of each slice is still computed
  from its own pair alone: only the window's centre is shared.

Units: images are SimpleITK images (mm, LPS); arrays are in array order ``(Z, H, W)``; a ddf is in
voxels of its grid, MONAI ``Warp`` convention (channel ``k`` along array axis ``k``).
Slices are registered independently; with ``"image"`` or ``"heart"`` a slice gives the same field inside
its stack as alone (``"heart-stack"`` shares the window's centre).
"""

from __future__ import annotations

import importlib
import math
import os
import warnings
from dataclasses import dataclass
from typing import Any, Callable, Dict, List, Mapping, Optional, Sequence, Tuple, Union

import numpy as np
import SimpleITK as sitk
import torch
from torch import nn

from monai_npc.apps.align import RigidAlignment, rigid_in_plane
from monai_npc.apps.localize import motion_centre
from monai_npc.functional import dice_by_value, reliability_map, warp_image
from monai_npc.interop.images import model_grid, resample, resample_model_field
from monai_npc.interop.transforms import displacement_field_transform

__all__ = [
    "PREPROCESSING",
    "FIELDS_OF_VIEW",
    "ModelProfile",
    "model_profile",
    "minmax_slices",
    "register_settings",
    "heart_grid",
    "taper_window",
    "constant_slices",
    "PipelineResult",
    "run_pipeline",
    "PRIOR_CHECK_SLICES",
    "PRIOR_MIN_CHECK_VOXELS",
    "PRIOR_MIN_AGREEMENT",
    "prior_agreement",
]

#: a slice whose intensity range is below this fraction of its largest magnitude counts as constant (a few float32
#: steps: an image with a large offset, 241 grey levels on top of 1e6, still registers; it was 1e-3 before)
CONSTANT_RTOL = 1e-5


# ------------------------------------------------------------------------------------- registries


def minmax_slices(array: np.ndarray, meta: Optional[Mapping[str, Any]] = None) -> np.ndarray:
    """Min-max each slice of ``(Z, H, W)`` to ``[0, 1]``; NaN (outside the image) becomes 0."""
    out = np.zeros(array.shape, np.float32)
    for z, sl in enumerate(array):
        finite = np.isfinite(sl)
        if not finite.any():
            continue
        lo, hi = float(sl[finite].min()), float(sl[finite].max())
        out[z] = np.where(finite, (sl - lo) / (hi - lo) if hi > lo else 0.0, 0.0)
    return out


#: ``meta["preprocessing"]`` -> ``f((Z, H, W) array, meta) -> (Z, H, W) float32``; a ``"module:function"``
#: string is imported on first use (extras register themselves by name, the core never imports them)
PREPROCESSING: Dict[str, Union[Callable[[np.ndarray, Mapping[str, Any]], np.ndarray], str]] = {
    "minmax": minmax_slices,
    "sar": "monai_npc.extras.sar.preprocess:model_inputs",
}

#: field-of-view policies (see the module docstring)
FIELDS_OF_VIEW = ("image", "heart", "heart-stack", "image+heart", "image>heart")

#: ``meta["bundle"]`` -> profile defaults for weights written before the profile keys existed
_BUNDLE_DEFAULTS: Dict[str, Dict[str, Any]] = {
    # the ACDC crops are 128 x 128 at the scanner's pixel size; ACDC spacing is 1.37-1.68 mm (train and test)
    "npc_acdc": {
        "field_of_view": "heart", "spacing_mm": [1.3, 1.9],
        # the field falls to zero over the window's outer 12 voxels instead of 24: more of a large heart (the RV) inside
        # the fully registered part; +0.0007 +- 0.0002 Dice on the 52 validation pairs and +0.0004 +- 0.0001 on the 88
        # training pairs (8: +0.0009 / +0.0005, 16: +0.0005 on validation, 36: -0.0023), the LV EF error unchanged
        "taper": 12,
        # a pair through register: 6 learned ODE steps and 40 refinement steps instead of the weights' 10 and 50
        # have the same whole-stack Dice and ED->ES LV EF error on the validation and the training patients
        # in about 80 % of the time; the refinement's residual on a grid 6 voxels apart instead of 4 gained
        # 0.004 Dice on both with 0.5.0 (README, "Time"), 8 instead of 6 another 0.002 / 0.0015 with 0.7.0
        # (coarser grids: the same Dice, a larger LV EF error); one heart window per stack instead of one per slice: +0.0047
        # Dice on the training patients (a slice's own window can miss its heart by 40-150 mm), equal on
        # the validation ones (README, "Heart window")
        # the ODE's field averaged with that of the pair turned by 180 degrees (flip_ensemble 2): +0.0010 +- 0.0004 Dice on
        # the 88 training pairs (57 better), +0.0008 +- 0.0009 on the 52 validation pairs (36 better), ED->ES LV EF error
        # 5.06 / -2.28 -> 4.91 / -1.92 and 3.50 / -1.13 -> 3.36 / -0.79 (MAE / bias), 1.0 -> 1.3 s per pair (README, "Time")
        # the carried label smoothed in-plane by 1 voxel before its label-linear resampling
        # (monai_npc.interop.label_resample): +0.0012 +- 0.0001 Dice on the validation and on the training pairs;
        # the label term's intensity models half the moving image's, half the fixed image's own under the carried
        # labels eroded by 1 voxel (InstanceRefinement label_model_mix): +0.0033 +- 0.0007 validation (43 / 52 better),
        # +0.0021 +- 0.0005 training (69 / 88), ED->ES LV EF error 3.35 / +0.50 -> 3.20 / +0.12 and 4.29 / -0.39 ->
        # 4.43 / -0.79 (mix 0.3: +0.0025 / +0.0020; 0.7: +0.0032 on validation; 1: -0.0007 on training, LV EF bias -2.44;
        # erosion 0: +0.0028 / +0.0017 with mix 0.5; 2: +0.0020 / +0.0006)
        # the label term's segmentation prior of the fixed frame (networks.nets.LabelPrior "acdc_heart", trained on the 44
        # training patients only; examples/train_acdc_label_prior.py), weight 8 within the term (README, "Label prior"; chosen
        # on the 26 validation patients: +0.0324 +- 0.0034 Dice per pair with the first, 60-epoch prior, and still best with
        # the shipped 120-epoch one, docs/interop.md)
        "register_settings": {"num_steps": 6, "refine_iterations": 40, "refine_grid_stride": 8, "field_of_view": "heart-stack",
                              "flip_ensemble": 2, "label_sigma": 1.0, "label_model_mix": 0.5, "label_prior": "acdc_heart",
                              "label_prior_weight": 8.0},
    },
    "npc_camus": {
        # the carried label smoothed in-plane by 1 voxel before its label-linear resampling: +0.0035 Dice per pair on the
        # 100 pairs (ED->ES and ES->ED, 2CH and 4CH) of the split's 25 validation patients, better on all 100
        # (0.5: +0.0012, 1.5: +0.0036, 2: +0.0034, 3: +0.0028; the copy's labels were resized linearly and rounded)
        "register_settings": {"label_sigma": 1.0},
    },
}


def _preprocessing(name: str) -> Callable[[np.ndarray, Mapping[str, Any]], np.ndarray]:
    entry = PREPROCESSING.get(name)
    if entry is None:
        raise ValueError(f"unknown model preprocessing {name!r} in the weights' meta; known: {sorted(PREPROCESSING)}.")
    if isinstance(entry, str):
        module, _, attr = entry.partition(":")
        entry = getattr(importlib.import_module(module), attr)
        PREPROCESSING[name] = entry
    return entry


@dataclass(frozen=True)
class ModelProfile:
    """What a network needs of its inputs (from its weights' ``meta``).

    Attributes:
        input_size: in-plane grid size the network was trained at (voxels).
        preprocessing: key of :data:`PREPROCESSING`.
        field_of_view: one of :data:`FIELDS_OF_VIEW`.
        spacing_mm: ``(low, high)`` in-plane voxel sizes (mm) the network was trained at
            (``"heart"``: the window's spacing is the fixed image's, clamped to this range).
        taper: voxels over which a ``"heart"`` window's field falls to zero at its edge.
    """

    input_size: int = 128
    preprocessing: str = "minmax"
    field_of_view: str = "image"
    spacing_mm: Tuple[float, float] = (0.0, math.inf)
    taper: int = 24

    def inputs(self, array: np.ndarray, meta: Mapping[str, Any]) -> np.ndarray:
        """``(Z, H, W)`` resampled slices -> network inputs."""
        return _preprocessing(self.preprocessing)(array, meta)


def _model_meta(net: nn.Module) -> Dict[str, Any]:
    """``net.meta`` over its bundle's :data:`_BUNDLE_DEFAULTS` (for older shipped weights)."""
    bundle = str((getattr(net, "meta", None) or {}).get("bundle"))  # a name, or the folder of weights loaded from a bundle
    meta = dict(_BUNDLE_DEFAULTS.get(bundle, _BUNDLE_DEFAULTS.get(os.path.basename(bundle.rstrip("/\\")), {})))
    meta.update(getattr(net, "meta", None) or {})
    return meta


#: register settings that are numbers with a fraction, and those that are names (the others are integers)
_FLOAT_SETTINGS = ("label_sigma", "label_model_mix", "label_prior_weight")
_NAME_SETTINGS = ("field_of_view", "label_prior")


def register_settings(net: nn.Module) -> Dict[str, Union[int, float, str]]:
    """What ``register`` gives weights loaded by name or file where the caller sets nothing: their meta's
    ``register_settings`` (``{"num_steps", "refine_iterations", "refine_grid_stride", "flip_ensemble"}`` as
    integers, ``"label_sigma"`` (voxels, :func:`monai_npc.interop.label_resample.resample_label`) and
    ``"label_model_mix"`` (:class:`~monai_npc.networks.blocks.InstanceRefinement`) and ``"label_prior_weight"``
    as floats, ``"field_of_view"`` (checked where it is used, :func:`model_profile`) and ``"label_prior"`` (a
    :func:`~monai_npc.networks.nets.load_label_prior` name) as names; any may be absent;
    ``acdc``: 6 learned ODE steps averaged over the pair and the pair turned by 180 degrees, 40 refinement
    steps on a residual grid 8 voxels apart, one heart window per stack, the carried label smoothed by
    1 voxel, the label term's models half from the fixed frame, the ``acdc_heart`` segmentation prior in
    the label term); ``{}``: the weights' own configuration."""
    settings = dict(_model_meta(net).get("register_settings") or {})
    return {k: (str(v) if k in _NAME_SETTINGS else float(v) if k in _FLOAT_SETTINGS else int(v)) for k, v in settings.items()}


def model_profile(net: nn.Module, size: Optional[int] = None, field_of_view: Optional[str] = None) -> ModelProfile:
    """The :class:`ModelProfile` of ``net`` from ``net.meta`` (keys ``input_size``, ``preprocessing``,
    ``field_of_view``, ``spacing_mm``, ``taper``; older shipped weights get their bundle's defaults).

    ``size`` / ``field_of_view`` override the weights' values (``register(size=..., field_of_view=...)``).
    """
    meta = _model_meta(net)
    trained = meta.get("input_size")
    if size is not None and trained is not None and int(size) != int(trained):
        warnings.warn(
            f"size={size}: these weights were trained on {trained} x {trained} inputs, and their filter grid and positional "
            f"encoding are tied to that size; other sizes can register much worse (acdc on 52 validation pairs of whole stacks: Dice 0.825 "
            f"at 128, 0.823 at 160, 0.716 at 144). Leave size unset to use {trained}.", RuntimeWarning, stacklevel=3)
    fov = str(field_of_view or meta.get("field_of_view", "image"))
    if fov not in FIELDS_OF_VIEW:
        raise ValueError(f"field_of_view must be one of {FIELDS_OF_VIEW}, got {fov!r}.")
    low, high = meta.get("spacing_mm", (0.0, math.inf))
    profile = ModelProfile(
        input_size=int(size or meta.get("input_size", 128)),
        preprocessing=str(meta.get("preprocessing", "minmax")),
        field_of_view=fov,
        spacing_mm=(float(low), float(high)),
        taper=int(meta.get("taper", 24)),
    )
    _preprocessing(profile.preprocessing)  # an unknown name fails before any work
    return profile


# ------------------------------------------------------------------------------------ model grids


def heart_grid(fixed: sitk.Image, centre: Sequence[float], size: int, spacing_mm: Tuple[float, float]) -> sitk.Image:
    """A ``size x size`` in-plane window on ``fixed``'s slices, centred on ``centre``.

    Args:
        fixed: the fixed image (2-D or 3-D); the window keeps its direction and slices.
        centre: ``(row, col)`` fractional voxel index of the fixed image (array order ``H, W``).
        size: window size in voxels per in-plane axis.
        spacing_mm: ``(low, high)``: the window's isotropic in-plane spacing is the fixed image's
            (the mean of its two in-plane spacings) clamped to this range.

    When the clamped spacing equals the fixed image's, the window's voxels are fixed voxels
    (origin snapped to a fixed voxel), so resampling onto it interpolates nothing.
    """
    dims = fixed.GetDimension()
    sp = np.asarray(fixed.GetSpacing(), dtype=np.float64)
    new_sp = sp.copy()
    new_sp[:2] = float(np.clip(sp[:2].mean(), *spacing_mm))
    half = (size - 1) / 2.0 * new_sp[:2] / sp[:2]  # half window in fixed voxels (x, y)
    corner = np.asarray([centre[1], centre[0]], dtype=np.float64) - half  # index (x, y) of the window's voxel 0
    if np.allclose(new_sp[:2], sp[:2]):
        corner = np.round(corner)
    index = np.zeros(dims)
    index[:2] = corner
    direction = np.asarray(fixed.GetDirection(), dtype=np.float64).reshape(dims, dims)
    origin = np.asarray(fixed.GetOrigin(), dtype=np.float64) + direction @ (sp * index)
    n = list(fixed.GetSize())
    n[:2] = [size, size]
    grid = sitk.Image([int(v) for v in n], sitk.sitkFloat32)
    grid.SetSpacing([float(v) for v in new_sp])
    grid.SetOrigin([float(v) for v in origin])
    grid.SetDirection(fixed.GetDirection())
    return grid


def taper_window(shape: Sequence[int], margin: int) -> torch.Tensor:
    """``(H, W)`` weight: 1 inside, falling to 0 at the border over ``margin`` voxels (raised cosine).

    Multiplying a smooth field by it keeps the field smooth and makes it vanish at the window's
    edge, so a window's field pasted into a larger grid with identity outside has no seam.
    """
    axes = []
    for n in shape:
        d = torch.minimum(torch.arange(n, dtype=torch.float64), torch.arange(n - 1, -1, -1, dtype=torch.float64))
        t = (d / max(margin, 1)).clamp(0, 1) if margin > 0 else torch.ones(n, dtype=torch.float64)
        axes.append(0.5 - 0.5 * torch.cos(math.pi * t))
    return axes[0][:, None] * axes[1][None, :]


def constant_slices(array: np.ndarray, rtol: float = CONSTANT_RTOL) -> np.ndarray:
    """``(Z,)`` bool: slices of ``(Z, H, W)`` whose finite values span less than ``rtol`` of their magnitude (or none are finite)."""
    out = np.zeros(array.shape[0], bool)
    for z, sl in enumerate(array):
        finite = sl[np.isfinite(sl)]
        if finite.size == 0:
            out[z] = True
            continue
        lo, hi = float(finite.min()), float(finite.max())
        out[z] = hi - lo <= rtol * max(abs(lo), abs(hi)) or hi == lo
    return out


def slices_of(array: np.ndarray, dims: int) -> np.ndarray:
    """Array-order image -> ``(Z, H, W)`` (a 2-D image as one slice)."""
    return array[None] if dims == 2 else array


# --------------------------------------------------------------------------------------- network


def _net_dtype(net: nn.Module) -> torch.dtype:
    for p in net.parameters():
        if p.is_floating_point():
            return p.dtype
    return torch.float32


#: the label prior acts only when its segmentation of the moving image agrees with the moving label at least this much
#: (mean Dice over the label's values): ACDC labels on their own frames 0.87-0.94 per structure (validation); a map
#: of another convention (M&Ms: LV 1, RV 3) or of other anatomy falls far below, and the prior would pull it astray
PRIOR_MIN_AGREEMENT = 0.5
#: the agreement is measured on this many moving slices (those with the most label)
PRIOR_CHECK_SLICES = 3
#: ... holding at least this many labelled voxels of the model grid together (else it cannot be judged and does not act)
PRIOR_MIN_CHECK_VOXELS = 200


def prior_agreement(probabilities: torch.Tensor, label: torch.Tensor) -> Optional[float]:
    """Mean Dice, over the values ``1 .. K-1`` present in ``label`` ``(N, 1, h, w)``, of the most likely value of
    ``probabilities`` ``(N, K, h, w)`` against ``label``; values ``>= K`` (structures the prior does not know) are
    left out; ``None`` when ``label`` holds none of ``1 .. K-1``."""
    seen = probabilities.argmax(1).cpu().numpy()
    lab = label[:, 0].round().to(torch.int64).cpu().numpy()
    values = [int(v) for v in np.unique(lab) if 0 < v < probabilities.shape[1]]
    return float(np.mean(list(dice_by_value(seen, lab, values).values()))) if values else None


@torch.inference_mode()
def _predict(net: nn.Module, moving: torch.Tensor, fixed: torch.Tensor, chunk: int = 16, moving_label: Optional[torch.Tensor] = None,
             label_guidance: float = 0.0, fixed_prior: Optional[torch.Tensor] = None, prior_weight: float = 0.0):
    """``(Z, 1, h, w)`` pairs -> ``ddf (Z, 2, h, w)`` (model voxels), ``warped``, ``reliability (Z, 1, h, w)`` or ``None``.

    Each slice is one independent pair of the batch (chunks of ``chunk`` slices). ``moving_label``
    ``(Z, 1, h, w)`` with ``label_guidance`` > 0 reaches the refinement's label-guided term (NPC only),
    and with it ``fixed_prior`` ``(Z, K, h, w)`` (class probabilities of ``fixed``) weighted by ``prior_weight``.
    """
    ddfs, warps, rels = [], [], []
    for start in range(0, moving.shape[0], chunk):
        m, f = moving[start : start + chunk], fixed[start : start + chunk]
        if hasattr(net, "register"):
            guide = {} if moving_label is None or not label_guidance else {
                "moving_label": moving_label[start : start + chunk], "lambda_label": float(label_guidance)}
            if guide and fixed_prior is not None and prior_weight > 0:
                guide.update(fixed_prior=fixed_prior[start : start + chunk], prior_weight=float(prior_weight))
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
    return torch.cat(ddfs), torch.cat(warps), rel


# -------------------------------------------------------------------------------------- pipeline


@dataclass
class PipelineResult:
    """What :func:`run_pipeline` computes.

    Attributes:
        ddf: ``(D, *S)`` float64 on the fixed grid, fixed voxels, array order (3-D: channel 0, the
            through-plane component, is 0).
        ddf_model: ``(Z, 2, h, w)`` on the model grid (model voxels), tapered for ``"heart"``.
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
            has nothing, which the label term does not touch), when one acted, else ``None``.
        prior_agreement: mean Dice of the label prior's segmentation of the moving image against the
            moving label (:func:`prior_agreement`, on the :data:`PRIOR_CHECK_SLICES` slices with the most
            label) when a prior was given, else ``None``; below :data:`PRIOR_MIN_AGREEMENT` the prior did not act.
        prior_note: why a given prior did not act (:func:`_fixed_prior`), else ``None``.
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
    prior_note: Optional[str] = None


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
        profile: :func:`model_profile` of ``net``.
        keep_aspect: ``"image"`` field of view: isotropic grid (pad the short side).
        device: torch device of ``net``.
        moving_label: the moving image's label map (on its grid), for ``label_guidance``.
        label_guidance: weight of the refinement's label-guided term (0 = off;
            :data:`LABEL_GUIDANCE`); the ``"image>heart"`` windows, which register the coarsely
            warped moving image, do not use it.
        heart_centre: the heart windows' in-plane centres ``(row, col)`` in fixed voxels, one per
            slice (or one for all); ``None``: from the images
            (:func:`~monai_npc.apps.localize.motion_centre`): each slice's from its own pair for
            ``"heart"``, one from the whole stack for ``"heart-stack"`` (the ``acdc`` default).
        align: first a rigid in-plane alignment of the whole moving image
            (:func:`~monai_npc.apps.align.rigid_in_plane`), composed with the network's field.
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
    if guide and label_prior is not None and prior_weight > 0:
        guide.update(label_prior=label_prior, prior_weight=float(prior_weight))
    # 2. localise: a heart window per slice, from its own slice pair ("heart": slices stay independent) or from the
    #    whole stack ("heart-stack": one window for every slice); the field of each slice is still its own
    centres: List[Tuple[float, float]] = []
    if profile.field_of_view != "image" and heart_centre is not None:  # placed by the caller
        centres = _given_centres(heart_centre, fixed)
    elif profile.field_of_view != "image":
        spacing = tuple(fixed.GetSpacing()[1::-1])  # (row, col) mm
        if profile.field_of_view == "heart-stack":  # one window for the whole stack, from all its slices (couples them)
            centres = [motion_centre(moving_on_fixed, fixed_arr, spacing)] * fixed_arr.shape[0]
        else:
            centres = [motion_centre(moving_on_fixed[z : z + 1], fixed_arr[z : z + 1], spacing) for z in range(fixed_arr.shape[0])]
    whole = [(model_grid(fixed, profile.input_size, keep_aspect), fixed)]
    windows = [(heart_grid(target, c, profile.input_size, profile.spacing_mm), target) for target, c in zip(_slice_images(fixed), centres)]
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
        ddf_f = ddf_f + warp_image(torch.from_numpy(alignment.ddf), ddf_f, "bilinear", "border")
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
        prior_note=rated.prior_note,
    )


def _given_centres(heart_centre: Sequence[Tuple[float, float]], fixed: sitk.Image) -> List[Tuple[float, float]]:
    """``heart_centre`` checked: one ``(row, col)`` per slice of ``fixed`` (a single pair: every slice)."""
    arr = np.asarray(heart_centre, dtype=np.float64)
    slices = fixed.GetSize()[2] if fixed.GetDimension() == 3 else 1
    if arr.shape == (2,):
        arr = np.repeat(arr[None], slices, 0)
    if arr.shape != (slices, 2) or not np.isfinite(arr).all():
        raise ValueError(f"heart_centre must be one finite (row, col) pair or one per slice ({slices}), got shape {arr.shape}.")
    rows, cols = fixed.GetSize()[1], fixed.GetSize()[0]
    outside = (arr[:, 0] < 0) | (arr[:, 0] > rows - 1) | (arr[:, 1] < 0) | (arr[:, 1] > cols - 1)
    if outside.any():
        raise ValueError(f"heart_centre {arr[np.argmax(outside)].tolist()} (row, col) lies outside the fixed image's "
                         f"{rows} x {cols} voxels (array order: rows 0-{rows - 1}, columns 0-{cols - 1}).")
    return [(float(r), float(c)) for r, c in arr]


#: default weight of the refinement's label-guided term when ``register`` gets a moving label
#: (:mod:`monai_npc.functional.label_intensity`); chosen on the training patients (docs/tracking.md)
LABEL_GUIDANCE = 0.05

#: which fields of view register on the whole-image grid (False) and on the heart windows (True)
_USES = {False: ("image", "image+heart"), True: ("heart", "heart-stack", "image+heart")}


def _slice_images(fixed: sitk.Image) -> List[sitk.Image]:
    """The fixed image's slices as one-slice images with their own geometry (a 2-D image: itself)."""
    if fixed.GetDimension() == 2:
        return [fixed]
    return [fixed[:, :, z : z + 1] for z in range(fixed.GetSize()[2])]


def _with_z(ddf_f: torch.Tensor, dims: int) -> np.ndarray:
    """``(Z, 2, H, W)`` in-plane field -> ``(D, *S)`` array-order ddf of the fixed image (3-D: a zero through-plane channel first)."""
    out = ddf_f.permute(1, 0, 2, 3).numpy()  # (2, Z, H, W)
    out = np.concatenate([np.zeros_like(out[:1]), out], 0) if dims == 3 else out[:, 0]
    return np.ascontiguousarray(out)


@dataclass
class _GridRun:
    windowed: bool
    moving_model: np.ndarray
    fixed_model: np.ndarray
    still: np.ndarray
    ddf_model: torch.Tensor
    warped_model: torch.Tensor
    ddf_fixed: torch.Tensor  # (Z, 2, H, W) fixed voxels
    weight: Optional[torch.Tensor]  # (Z, 1, H, W) window weight on the fixed grid (windows only)
    reliability: Optional[np.ndarray]
    seen: np.ndarray  # (Z, H, W) bool: fixed voxels inside a model grid (where the network looked)
    seconds_network: float
    prior_label: Optional[np.ndarray] = None  # (Z, H, W) uint8 on the fixed grid: the label prior's segmentation
    prior_agreement: Optional[float] = None  # the prior against the moving label on the moving image (mean Dice)
    prior_note: Optional[str] = None  # why a prior that was given did not act (None: it acted, or had nothing to steer)


def _register_on_grids(net, moving, grids: Sequence[Tuple[sitk.Image, sitk.Image]], window: bool, profile: ModelProfile, device,
                       moving_label: Optional[sitk.Image] = None, label_guidance: float = 0.0, label_prior: Optional[nn.Module] = None,
                       prior_weight: float = 0.0) -> _GridRun:
    """Steps 3-5 of :func:`run_pipeline`: ``grids`` are ``(model grid, the fixed image or slice it covers)``
    pairs in slice order; all their slices go through the network as one batch of independent pairs."""
    import time

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
    rel_m: Optional[torch.Tensor] = None
    active = np.flatnonzero(~still)
    lab_t = prior_t = agreement = prior_note = None
    if moving_label is not None and label_guidance > 0:
        lab = np.concatenate([slices_of(resample(moving_label, grid, "nearest", 0.0), grid.GetDimension()) for grid, _ in grids])
        lab_t = torch.from_numpy(np.ascontiguousarray(lab, dtype=np.float32))[:, None].to(device=device)
        if label_prior is not None and prior_weight > 0 and active.size:  # what a segmentation network sees on the fixed slices
            prior_t, agreement, prior_note = _fixed_prior(label_prior.to(device), m_t[active], f_t[active], lab_t[active])
    if active.size:
        d, wp, r = _predict(net, m_t[active], f_t[active], moving_label=None if lab_t is None else lab_t[active],
                            label_guidance=label_guidance, fixed_prior=prior_t, prior_weight=prior_weight)
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
        prior_m[active] = prior_t.argmax(1).cpu().numpy().astype(np.uint8)
    ddf_f, weights, rels, seen, priors, start = [], [], [], [], [], 0
    for grid, target in grids:
        n = grid.GetSize()[2] if grid.GetDimension() == 3 else 1
        part = slice(start, start + n)
        ddf_f.append(resample_model_field(ddf_m[part], grid, target, displacement=True))  # (n, 2, H, W)
        if prior_m is not None:
            on_grid = sitk.GetImageFromArray(prior_m[part] if grid.GetDimension() == 3 else prior_m[part][0])
            on_grid.CopyInformation(grid)
            priors.append(slices_of(resample(on_grid, target, "nearest", 0.0), target.GetDimension()).astype(np.uint8))
        inside = torch.from_numpy(_inside(grid, target))[:, None] if window else None
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
                    rel, seen_fixed, seconds_network, np.concatenate(priors) if priors else None, agreement, prior_note)


def _fixed_prior(label_prior: nn.Module, moving: torch.Tensor, fixed: torch.Tensor, label: torch.Tensor
                 ) -> Tuple[Optional[torch.Tensor], Optional[float], Optional[str]]:
    """``(class probabilities (N, K, h, w) of the fixed slices or None, agreement, why not)`` for the label term.

    First on the moving slices: a label map of another convention (LV = 1, say) would be pulled onto the
    wrong structures, so the prior acts only where it agrees with the moving label on its own image
    (:func:`prior_agreement` on the :data:`PRIOR_CHECK_SLICES` slices with the most label; a U-Net pass costs
    about 20 ms per slice). The fixed slices are segmented where the moving label has something (the term's
    region is the label's); elsewhere the probabilities are uniform. ``(None, None, None)``: no labelled slice,
    nothing for the prior to steer; otherwise ``why not`` says why it does not act.
    """
    n, _, h, w = moving.shape
    area = (label > 0).flatten(1).sum(1).cpu().numpy()
    labelled = np.flatnonzero(area > 0)
    if labelled.size == 0:
        return None, None, None
    if h % 16 or w % 16:
        return None, None, f"the model grid ({h} x {w}) is not a multiple of 16 on each side, which its U-Net needs"
    check = np.argsort(-area, kind="stable")[: min(PRIOR_CHECK_SLICES, labelled.size)]
    if area[check].sum() < PRIOR_MIN_CHECK_VOXELS:
        return None, None, (f"too little of the moving label lies in the model grid to check the prior against it "
                            f"({int(area[check].sum())} voxels on its fullest slices, at least {PRIOR_MIN_CHECK_VOXELS} needed)")
    agreement = prior_agreement(label_prior.predict(moving[check]), label[check])
    known = label_prior.num_classes - 1
    if agreement is None:
        return None, None, f"the moving label has none of the values it knows (1-{known})"
    if agreement < PRIOR_MIN_AGREEMENT:
        return None, agreement, (f"its segmentation of the moving image does not match the moving label (mean Dice {agreement:.2f} "
                                 f"over the values 1-{known}, at least {PRIOR_MIN_AGREEMENT} needed): the label's values may "
                                 f"follow another convention than the prior's ({_named_values(label_prior)}) or show other anatomy")
    prior = torch.full((n, label_prior.num_classes, h, w), 1.0 / label_prior.num_classes, device=moving.device)
    prior[labelled] = label_prior.predict(fixed[labelled]).to(moving.device)
    return prior, agreement, None


def _named_values(label_prior: nn.Module) -> str:
    """``"1 rv, 2 myo, 3 lv"`` from the prior's ``meta["labels"]`` (its values without names when it has none)."""
    names = (getattr(label_prior, "meta", None) or {}).get("labels") or {}
    return ", ".join(f"{v} {names.get(str(v), '?')}" for v in range(1, label_prior.num_classes))


def _inside(grid: sitk.Image, fixed: sitk.Image) -> np.ndarray:
    """``(Z, H, W)`` float64: 1 where a fixed voxel lies inside the model grid, else 0."""
    ones = sitk.Image(grid.GetSize(), sitk.sitkFloat32) + 1.0
    ones.CopyInformation(grid)
    return slices_of(resample(ones, fixed, "nearest", 0.0), fixed.GetDimension()).astype(np.float64)
