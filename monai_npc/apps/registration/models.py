"""Which network registers, and what it needs of its inputs.

:func:`resolve_model` turns a model argument (a shipped name such as ``"acdc"``, a ``save_pretrained`` file,
``"phase-correlation"`` or a network) into a network in eval mode with its register settings applied.
Everything a model needs of its inputs comes from its weights' metadata through :func:`model_profile` and two
registries, so the core never imports an extra:

- :data:`PREPROCESSING`: ``meta["preprocessing"]`` -> the function that turns resampled slices into
  network inputs (``"minmax"``: each slice to ``[0, 1]``; ``"sar"``: the SAR extra's
  log-amplitude preprocessing, imported by name only when a SAR model asks for it).
- :data:`FIELDS_OF_VIEW`: ``meta["field_of_view"]`` -> how the model grid is placed on the fixed
  image (:mod:`monai_npc.apps.registration.pipeline`). ``"image"``: the whole fixed field of view
  fitted into ``size x size`` (brain slices, echo sectors, SAR tiles). ``"heart"``: models trained on
  heart-centred crops at the scanner's own pixel size (ACDC): a ``size x size`` window at the native
  in-plane spacing (clamped to ``meta["spacing_mm"]``) on each slice, centred on where that slice's two
  frames differ most (:func:`~monai_npc.apps.registration.localize.motion_centre`; no label needed), the
  field tapered to zero over the window's outer ``taper`` voxels and identity outside it.
  ``"heart-stack"``: one window for the whole stack, from the frame difference of all its slices (a
  slice's own frame difference can peak far from its heart); the field of each slice is still computed
  from its own pair alone. ``"image+heart"`` and ``"image>heart"``: the whole image and the windows,
  averaged or coarse to fine. Why each shipped model has the settings it has: docs/design_notes.md,
  "Register settings of the shipped models".
"""

from __future__ import annotations

import importlib
import math
import os
import warnings
from dataclasses import dataclass
from typing import Any, Callable, Dict, Mapping, Optional, Tuple, Union

import numpy as np
import torch
from torch import nn

from monai_npc.functional.intensity import minmax_slices

from .settings import check_arguments, model_meta, network_settings, register_layer, remember

__all__ = [
    "PHASE_CORRELATION",
    "PREPROCESSING",
    "FIELDS_OF_VIEW",
    "ModelProfile",
    "model_profile",
    "register_settings",
    "model_label_structures",
    "resolve_model",
    "is_phase_correlation",
    "is_stack_network",
    "names_stack_network",
    "STACK_FIELDS_OF_VIEW",
    "model_input_size",
]

PathLike = Union[str, os.PathLike]


#: ``model`` value of the classical global phase-correlation baseline (no weights)
PHASE_CORRELATION = "phase-correlation"


def resolve_model(
    model: Union[str, PathLike, nn.Module], device: Union[str, torch.device] = "cpu", refine_iterations: Optional[int] = None,
    num_steps: Optional[int] = None, register_defaults: bool = True,
) -> Tuple[nn.Module, str]:
    """``(network, name)`` for a shipped model name (``"acdc"``...), a ``save_pretrained`` file,
    ``"phase-correlation"`` or an ``nn.Module`` (used as is). The network is in eval mode.

    For NPC weights, ``refine_iterations`` sets the test-time refinement steps after the network
    (:class:`~monai_npc.networks.blocks.InstanceRefinement`) and ``num_steps`` the learned ODE steps
    (:class:`~monai_npc.networks.blocks.WarpODE`, split evenly over its stages); ``None``: the
    weights' register settings (:func:`monai_npc.apps.registration.models.register_settings`; ``acdc``: 6 ODE
    and 30 refinement steps of 0.5 falling to 0.15 voxels, the refinement's residual 8 voxels apart, instead of the weights' own
    10, 50 and 4, the ODE's field averaged with the pair turned by 180 degrees
    (``flip_ensemble`` 2), and one heart window per stack, ``net.meta["field_of_view"] =
    "heart-stack"``), else their own; ``register_defaults=False``: the weights' own
    for everything the caller leaves unset (tracking between consecutive frames, which sets its own
    steps, keeps the weights' residual grid and per-slice heart windows). A module is not changed: either given with it warns that it is ignored.
    """
    check_arguments({"refine_iterations": refine_iterations, "num_steps": num_steps})
    from monai_npc.networks.nets.pretrained import load_pretrained

    if isinstance(model, nn.Module):
        ignored = [f"{k}={v}" for k, v in (("num_steps", num_steps), ("refine_iterations", refine_iterations)) if v is not None]
        if ignored:
            warnings.warn(f"{', '.join(ignored)} ignored: a network passed as a module is used as it is; set them on it "
                          "(net.ode.set_steps(N), net.refiner.iterations = N) or pass the weights by name or file.",
                          RuntimeWarning, stacklevel=3)
        return model.eval().to(device), type(model).__name__
    spec = str(model)
    if is_phase_correlation(spec):
        from monai_npc.networks.nets.baselines import PhaseCorrelationNet

        ignored = [f"{k}={v}" for k, v in (("num_steps", num_steps), ("refine_iterations", refine_iterations)) if v]
        if ignored:
            warnings.warn(f"{', '.join(ignored)} ignored: {PHASE_CORRELATION} has no learned steps and no refinement.",
                          RuntimeWarning, stacklevel=3)
        return PhaseCorrelationNet().eval(), PHASE_CORRELATION
    try:
        net = load_pretrained(spec, map_location=device, **({} if refine_iterations is None else {"refine_iterations": int(refine_iterations)}))
    except FileNotFoundError as err:
        raise FileNotFoundError(
            f"{err} Pass --model PATH to a file written by monai_npc.networks.nets.save_pretrained, "
            f"or --model {PHASE_CORRELATION} for the classical baseline."
        ) from err
    if getattr(net, "spatial_dims", 2) != 2 and not is_stack_network(net):
        raise ValueError(f"model {spec} is {net.spatial_dims}-D and not a stack network (stack_network = True); register needs a "
                         "2-D model or a network of whole stacks, (Z, 2, H, W) -> (Z, 3, H, W).")
    # acdc: 6 ODE + 30 refinement steps of 0.5 -> 0.15, grid stride 8, flip ensemble 2, heart-stack (its dataset's register settings)
    configured = network_settings(net, {"refine_iterations": refine_iterations, "num_steps": num_steps}, register_defaults)
    given = {k for k, v in (("refine_iterations", refine_iterations), ("num_steps", num_steps)) if v is not None}
    layer = register_settings(net) if register_defaults else {}
    _configure(net, {k: v for k, (v, _) in configured.items() if k in given or k in layer})
    remember(net, configured)
    return net.to(device), spec


def _configure(net: nn.Module, values: Mapping[str, Any]) -> None:
    """Set ``values`` (:data:`~monai_npc.apps.registration.settings.NETWORK_SETTINGS` and ``field_of_view``) on an NPC network."""
    if "field_of_view" in values:  # read by model_profile; register(field_of_view=...) still overrides it
        net.meta = {**(getattr(net, "meta", None) or {}), "field_of_view": values["field_of_view"]}
    for name, attr in (("refine_iterations", "iterations"), ("refine_learning_rate", "learning_rate"),
                       ("refine_learning_rate_end", "learning_rate_end"), ("refine_grid_stride", "grid_stride"),
                       ("label_model_mix", "label_model_mix")):
        if values.get(name) is not None:
            setattr(net.refiner, attr, values[name])
    if values.get("flip_ensemble") is not None and hasattr(net, "set_flip_ensemble"):
        net.set_flip_ensemble(values["flip_ensemble"])
    if values.get("num_steps") is not None:
        net.ode.set_steps(int(values["num_steps"]))


def is_phase_correlation(model: Any) -> bool:
    """Whether a model argument names the classical baseline (:data:`PHASE_CORRELATION`, or with an underscore)."""
    return isinstance(model, (str, os.PathLike)) and str(model).lower() in (PHASE_CORRELATION, "phase_correlation")


def is_stack_network(net: Any) -> bool:
    """Whether ``net`` registers a whole stack in one call (the class attribute ``stack_network = True``, e.g.
    :class:`~monai_npc.networks.nets.SliceContextNPC`): ``net(stack)`` with ``stack`` ``(Z, 2, h, w)`` (moving, fixed;
    the slices in order) -> ``ddf`` ``(Z, 3, h, w)`` in voxels of the stack's grid, MONAI ``Warp`` convention: channel
    0 through the plane in slices, channels 1-2 in-plane (along ``h`` and ``w``). ``register`` then pastes the
    through-plane channel back as it does the in-plane ones; when the network has a test-time refinement
    (``net.refiner``, an :class:`~monai_npc.networks.blocks.InstanceRefinement` with ``iterations`` > 0) it first
    refines the whole 3-D field with it (:meth:`~monai_npc.networks.blocks.InstanceRefinement.refine_stack`: the
    label-guided term and the label prior as for 2-D networks); no basal rule on top of it, and a flip ensemble only where
    the network has one (``set_flip_ensemble``: a ThroughPlaneNPC's in-plane part)."""
    return bool(getattr(net, "stack_network", False))


def names_stack_network(model: Any) -> bool:
    """Whether the model argument ``model`` (as for :func:`resolve_model`: a name, a ``save_pretrained`` file or a
    network) is a stack network (:func:`is_stack_network`), read from the weights' configuration without loading them;
    ``False`` for ``"phase-correlation"`` and for an argument that names no weights (:func:`resolve_model` says why)."""
    if isinstance(model, nn.Module):
        return is_stack_network(model)
    if is_phase_correlation(model):
        return False
    from monai_npc.networks.nets.pretrained import weights_network_class

    try:
        return is_stack_network(weights_network_class(model))
    except (FileNotFoundError, ValueError):
        return False


#: fields of view a stack network can register on: one grid whose slices are the fixed image's, in order
STACK_FIELDS_OF_VIEW = ("image", "heart-stack")


def model_input_size(net: nn.Module, default: int = 128) -> int:
    """In-plane grid size a network was trained at: ``net.meta["input_size"]`` when present, else ``default``."""
    return int((getattr(net, "meta", None) or {}).get("input_size", default))


#: ``meta["preprocessing"]`` -> ``f((Z, H, W) array, meta) -> (Z, H, W) float32``; a ``"module:function"``
#: string is imported on first use (extras register themselves by name, the core never imports them)
PREPROCESSING: Dict[str, Union[Callable[[np.ndarray, Mapping[str, Any]], np.ndarray], str]] = {
    "minmax": minmax_slices,
    "sar": "monai_npc.extras.sar.preprocess:model_inputs",
}

#: field-of-view policies (see the module docstring)
FIELDS_OF_VIEW = ("image", "heart", "heart-stack", "image+heart", "image>heart")


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
    """``net.meta`` over its bundle's defaults (for older shipped weights): the ``bundle_defaults`` of the dataset
    registered with that bundle (:func:`monai_npc.apps.registration.settings.model_meta`)."""
    own, dataset = model_meta(net)
    return {**dataset, **own}


def model_label_structures(model: Union[str, PathLike, nn.Module]) -> Optional[Dict[str, int]]:
    """``{structure name: label value}`` of the labels the weights were trained with (their meta's ``label_structures``,
    else their dataset's: ``acdc`` 1 RV, 2 myocardium, 3 LV; ``camus`` 1 LV, 2 myocardium), or ``None`` (a network
    without such meta, ``"phase-correlation"``). ``model`` as for :func:`resolve_model` (loaded here when not a module)."""
    net = model if isinstance(model, nn.Module) else resolve_model(model)[0]
    found = _model_meta(net).get("label_structures")
    return {str(k): int(v) for k, v in found.items()} if found else None


def register_settings(net: nn.Module) -> Dict[str, Union[int, float, str]]:
    """What ``register`` gives weights loaded by name or file where the caller sets nothing: their meta's
    ``register_settings``, else their dataset's (:mod:`monai_npc.apps.registration.settings`): ``{"num_steps",
    "refine_iterations", "refine_grid_stride", "flip_ensemble"}`` as integers, ``"label_sigma"`` (voxels,
    :func:`monai_npc.interop.label_resample.resample_label`), ``"refine_learning_rate"``, ``"refine_learning_rate_end"``,
    ``"label_model_mix"``
    (:class:`~monai_npc.networks.blocks.InstanceRefinement`) and ``"label_prior_weight"`` as floats, ``"field_of_view"``
    (checked where it is used, :func:`model_profile`) and ``"label_prior"`` (a
    :func:`~monai_npc.networks.nets.load_label_prior` name) as names; any may be absent;
    ``acdc``: 6 learned ODE steps averaged over the pair and the pair turned by 180 degrees, 30 refinement
    steps of 0.5 falling to 0.15 voxels on a residual grid 8 voxels apart, one heart window per stack, the carried label smoothed by
    1 voxel, the label term's models half from the fixed frame, the ``acdc_heart`` segmentation prior in
    the label term); ``{}``: the weights' own configuration."""
    return register_layer(net)[0]


def model_profile(net: nn.Module, size: Optional[int] = None, field_of_view: Optional[str] = None) -> ModelProfile:
    """The :class:`ModelProfile` of ``net`` from ``net.meta`` (keys ``input_size``, ``preprocessing``,
    ``field_of_view``, ``spacing_mm``, ``taper``; older shipped weights get their bundle's defaults).

    ``size`` / ``field_of_view`` override the weights' values (``register(size=..., field_of_view=...)``).

    Raises:
        ValueError: an unknown field of view or preprocessing, or a stack network with a field of view other than
            :data:`STACK_FIELDS_OF_VIEW` (``"heart"`` windows move from slice to slice; the mixes register twice).
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
    if is_stack_network(net) and fov not in STACK_FIELDS_OF_VIEW:
        raise ValueError(f"field_of_view {fov!r}: a stack network ({type(net).__name__}) registers one grid whose slices are the "
                         f"fixed image's, in order; use one of {STACK_FIELDS_OF_VIEW}.")
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
