"""The pairwise registrations of a tracking run: what it gives them (:class:`TrackSettings`), the networks tracking
loads (:func:`tracking_model`), the registrations cached between schemes (:class:`FrameRegistrations`) and what the
schemes of one run share (:class:`TrackingRun`)."""

from __future__ import annotations

import dataclasses
import time
from typing import Any, Callable, Dict, Mapping, Optional, Tuple, Union

import numpy as np
import SimpleITK as sitk
import torch

from monai_npc.apps.registration.api import register
from monai_npc.apps.registration.models import is_stack_network
from monai_npc.functional.label_warp import indicator_tensor

from .cine import Cine
from .fields import carry_label, zero_field
from .structures import found_structures

__all__ = ["TrackSettings", "TRACK_NUM_STEPS", "TRACK_REFINE_ITERATIONS", "TRACK_FLIP_ENSEMBLE", "tracking_model", "FrameRegistrations", "TrackingRun"]

#: learned ODE steps of each registration when tracking loads NPC weights (their own setting is for
#: any pair, 10 for ``acdc``). Consecutive frames move little, so fewer steps keep the accuracy in less
#: time (docs/design_notes.md, "apps/tracking").
TRACK_NUM_STEPS = 4
#: test-time refinement steps of each registration when tracking loads NPC weights (``acdc``: 50 for pairs)
TRACK_REFINE_ITERATIONS = 10
#: the learned field of each consecutive-frame registration averaged with that of the pair turned by 180 degrees (as
#: ``register`` does for ``acdc`` pairs): the network's small systematic displacement on nearly still pairs cancels
#: instead of adding up along the chain (docs/design_notes.md, "apps/tracking"); ``None``: the weights' own setting
TRACK_FLIP_ENSEMBLE: Optional[int] = 2

#: ``{consecutive: (network, name)}``: the network for the chains' consecutive frames (``True``) and the one with
#: register's settings (``False``)
Models = Mapping[bool, Tuple[torch.nn.Module, str]]
#: ``(moving, fixed, consecutive-frame network)`` -> ``(field, seconds, the label's weight and prior summary or None)``
_Cache = Dict[Tuple[int, int, bool], Tuple[torch.Tensor, float, Optional[Dict[str, Any]]]]


@dataclasses.dataclass(frozen=True)
class TrackSettings:
    """What a tracking run gives its registrations (each scheme says what they mean for it).

    Args:
        model: the registration model as for :func:`monai_npc.register` (a name, a file or a network).
        refine_iterations, num_steps: test-time refinement steps and learned ODE steps of each registration
            (``None``: the defaults of the network each scheme registers with; ``anchored``: ``refine_iterations``
            is its correction's, :class:`~monai_npc.apps.tracking.schemes.Anchored`).
        label_guidance: ``None``, ``0`` or a weight ``W > 0`` (:meth:`~monai_npc.apps.tracking.schemes.TrackingScheme.labels`).
        register_kwargs: passed to every :func:`monai_npc.register` (``threads``, ``device``, ``size``...).

    Raises:
        ValueError: a negative ``label_guidance``.
    """

    model: Any = "acdc"
    refine_iterations: Optional[int] = None
    num_steps: Optional[int] = None
    label_guidance: Optional[float] = None
    register_kwargs: Mapping[str, Any] = dataclasses.field(default_factory=dict)

    def __post_init__(self) -> None:
        guidance = None if self.label_guidance is None else float(self.label_guidance)
        if guidance is not None and not guidance >= 0:
            raise ValueError(f"label_guidance (--label-guidance) must be >= 0 or None, got {self.label_guidance}.")
        object.__setattr__(self, "label_guidance", guidance)

    @property
    def device(self) -> Any:
        return self.register_kwargs.get("device") or "cpu"

    @property
    def carried(self) -> bool:
        """Every registration gets its moving frame's label (``label_guidance > 0``)."""
        return self.label_guidance is not None and self.label_guidance > 0

    def registration_kwargs(self) -> Dict[str, Any]:
        """The keywords of each :func:`monai_npc.register` (``label_guidance`` only where given: ``None`` is register's own)."""
        kwargs = dict(self.register_kwargs)
        if self.label_guidance is not None:
            kwargs["label_guidance"] = self.label_guidance
        return kwargs


def tracking_model(
    model: Any = "acdc", device: Union[str, torch.device] = "cpu", refine_iterations: Optional[int] = None, num_steps: Optional[int] = None,
    consecutive: bool = True,
) -> Tuple[torch.nn.Module, str]:
    """``(network, name)`` that :func:`~monai_npc.apps.tracking.track.track` registers two frames with. NPC weights by
    name or file get ``num_steps`` ODE steps and ``refine_iterations`` refinement steps; ``None``:
    :data:`TRACK_NUM_STEPS` and :data:`TRACK_REFINE_ITERATIONS` (and the :data:`TRACK_FLIP_ENSEMBLE`) for ``consecutive`` frames,
    ``register``'s otherwise (:func:`monai_npc.apps.registration.models.register_settings`; 6 and
    30 for ``acdc``: ``direct`` registers the reference onto every frame, up to the whole motion of
    the cycle). A network is used as it is (:func:`monai_npc.apps.registration.models.resolve_model`); weights of a
    stack network are loaded as ``register`` loads them, without tracking's steps (:func:`_stack_model`)."""
    from monai_npc.apps.registration.models import is_phase_correlation, names_stack_network, resolve_model

    if isinstance(model, torch.nn.Module):
        return resolve_model(model, device, refine_iterations, num_steps)  # used as it is (warns if steps were given)
    if names_stack_network(model):  # weights of a stack network: its own steps, none of tracking's 2-D test-time options
        return _stack_model(model, device, refine_iterations, num_steps)
    from monai_npc.apps.registration.settings import mark_defaults

    defaults = []  # tracking's own defaults, recorded as such (not as the caller's arguments)
    if consecutive and not is_phase_correlation(model):  # tracking's own steps, on the weights' residual grid (register's
        # coarser grid registered consecutive frames worse, docs/design_notes.md); phase correlation has no steps to set
        defaults = [k for k, v in (("refine_iterations", refine_iterations), ("num_steps", num_steps)) if v is None]
        refine_iterations = TRACK_REFINE_ITERATIONS if refine_iterations is None else refine_iterations
        num_steps = TRACK_NUM_STEPS if num_steps is None else num_steps
    net, name = resolve_model(model, device, refine_iterations, num_steps, register_defaults=not consecutive)
    if consecutive and TRACK_FLIP_ENSEMBLE is not None and hasattr(net, "set_flip_ensemble"):
        net.set_flip_ensemble(TRACK_FLIP_ENSEMBLE)
        defaults.append("flip_ensemble")
    if defaults:
        values = {"refine_iterations": net.refiner.iterations, "num_steps": net.ode.num_steps, "flip_ensemble": TRACK_FLIP_ENSEMBLE}
        mark_defaults(net, {k: values[k] for k in defaults})
    return net, name


def _stack_model(model: Any, device: Union[str, torch.device], refine_iterations: Optional[int], num_steps: Optional[int]
                 ) -> Tuple[torch.nn.Module, str]:
    """:func:`tracking_model` of weights that build a stack network: loaded as ``register(model=...)`` loads them for
    every pair (register's settings: one heart window per stack, which a stack network needs, and its 3-D refinement),
    ``refine_iterations`` / ``num_steps`` where given; tracking's own steps and flip ensemble between consecutive
    frames are the 2-D network's (``Tracking.settings["stack_network"]``)."""
    from monai_npc.apps.registration.models import resolve_model

    return resolve_model(model, device, refine_iterations, num_steps)


class FrameRegistrations:
    """Pairwise fields from :func:`monai_npc.register`, cached (the chains' consecutive frames registered with one
    network, the rest with register's settings): in-plane ``(Z, 2, H, W)`` (frame voxels), or ``(Z, 3, H, W)`` from a
    stack network (channel 0 through the plane in slices; :attr:`channels`; its refinement's label term moves the
    in-plane channels only, as ``register``'s does).

    Args:
        cine: the frames.
        models: :data:`Models`, the networks of the kinds of pairs the scheme registers.
        register_kwargs: passed to every :func:`monai_npc.register`.
        progress: called after each new registration.
        cache: the registrations so far (:data:`_Cache`), shared between schemes; ``None``: a new one.
        reference: ``(frame, label)`` of the reference: registrations from the reference frame get its label
            (register's label-guided refinement and label prior), and with ``carry`` every other one gets its moving
            frame's label as carried there by the chain so far; ``None``: no registration gets a label.
    """

    def __init__(
        self, cine: Cine, models: Models, register_kwargs: Dict[str, Any], progress: Optional[Callable[[], None]] = None,
        cache: Optional[_Cache] = None, reference: Optional[Tuple[int, np.ndarray]] = None, carry: bool = True,
    ) -> None:
        self.cine, self.models, self.kwargs, self.progress = cine, models, register_kwargs, progress
        self.reference, self.carry = reference, carry
        #: channels of every field: 3 for a stack network (:func:`~monai_npc.apps.registration.models.is_stack_network`), else 2
        self.channels = 3 if any(is_stack_network(net) for net, _ in models.values()) else 2
        self.cache: _Cache = {} if cache is None else cache
        self.used: set = set()
        #: registration seconds of the pairs this object registered itself (not found in the cache)
        self.new_seconds = 0.0

    def __call__(self, moving: int, fixed: int, to_reference: Optional[torch.Tensor] = None, direct: bool = False) -> torch.Tensor:
        """The field of ``moving`` registered onto ``fixed``; ``to_reference``: the field of ``moving`` to
        the reference frame (what carries the reference label there), when ``moving`` is not the reference;
        ``direct``: with register's settings even between consecutive frames."""
        n = len(self.cine)
        near = not direct and (fixed - moving) % n in (1, n - 1)
        key = (moving % n, fixed % n, near)
        if key not in self.cache:
            t0 = time.perf_counter()
            field_, note = self._register(key, to_reference)
            self.cache[key] = (field_, time.perf_counter() - t0, note)
            self.new_seconds += self.cache[key][1]
            if self.progress is not None and key[0] != key[1]:
                self.progress()
        self.used.add(key)
        return self.cache[key][0]

    def _register(self, key: Tuple[int, int, bool], to_reference: Optional[torch.Tensor]) -> Tuple[torch.Tensor, Optional[Dict[str, Any]]]:
        """``(field, note)`` of the pair ``key`` (zero from a frame onto itself, with no note); the note holds register's
        settings record (``settings``) and, for a registration that got a label, its weight and prior summary (``label``)."""
        moving, fixed, near = key
        if moving == fixed:
            return zero_field(self.cine.frames[0].GetSize()[::-1], self.channels), None
        net, name = self.models[near]
        kwargs = dict(self.kwargs, model=net)
        kwargs.setdefault("model_name", name)
        label = self._label(moving, to_reference)
        if label is None:  # a frame-to-frame link of the chain: the images alone, as the schemes were measured (without a
            kwargs["label_prior"] = 0.0  # label register would let the prior segment the moving frame)
        reg = register(self.cine.frames[moving], self.cine.frames[fixed], moving_label=label, **kwargs)
        # (3, Z, H, W) -> (Z, 2, H, W); a stack network's through-plane channel 0 too: (Z, 3, H, W)
        field_ = reg.ddf[3 - self.channels:].permute(1, 0, 2, 3).contiguous().float()
        guided = label is not None and (reg.summary.get("label_guidance") or 0) > 0
        note = {"settings": reg.summary.get("settings"), "fold_repair": reg.summary.get("fold_repair"),
                "label": {"label_guidance": reg.summary["label_guidance"], "label_prior": reg.summary.get("label_prior")} if guided else None}
        return field_, note

    def _label(self, frame: int, to_reference: Optional[torch.Tensor]) -> Optional[sitk.Image]:
        """The label of ``frame`` as an image on its grid (``None`` without a reference or a field to carry it)."""
        if self.reference is None:
            return None
        ref, ref_label = self.reference
        if frame == ref % len(self.cine):
            arr = ref_label
        elif to_reference is None or not self.carry:
            return None
        else:
            # in-plane, or through the slices by a stack network's (Z, 3, H, W) field
            arr = carry_label(indicator_tensor(ref_label, sorted(int(v) for v in np.unique(ref_label) if v != 0)), to_reference)
        image = sitk.GetImageFromArray(np.asarray(arr, dtype=np.int16))
        image.CopyInformation(self.cine.frames[frame])
        return image

    def settings(self) -> Dict[str, Dict[str, Any]]:
        """The network of each kind of pair this scheme registered (name, ODE steps, refinement steps; ``None``: not an
        NPC network; ``settings``: register's settings record of those registrations, :mod:`monai_npc.apps.registration.settings`)
        and, where registrations got a label, its guidance weight and what the label prior did: the
        prior's name and the frames it acted on and did not (``register``'s checks, per registration: it stood aside or
        was dropped); ``fold_repair``: the (moving, fixed) frame pairs whose field register smoothed folds out of, and the
        largest folding before and after (:func:`~monai_npc.functional.fold_repair.repair_folds`)."""
        kinds = {near for m, f, near in self.used if m != f}
        out: Dict[str, Dict[str, Any]] = {}
        for near in sorted(kinds, reverse=True):
            net, name = self.models[near]
            records = [self.cache[k][2]["settings"] for k in sorted(self.used) if k[2] == near and k[0] != k[1]]
            out["consecutive frames" if near else "register's settings"] = {
                "model": name, "num_steps": getattr(getattr(net, "ode", None), "num_steps", None),
                "refine_iterations": getattr(getattr(net, "refiner", None), "iterations", None),
                "settings": records[0] if records else None,  # register's record (value and source of each setting)
            }
        repairs = {(m, f): self.cache[(m, f, near)][2].get("fold_repair") for m, f, near in sorted(self.used) if m != f}
        repaired = {k: r for k, r in repairs.items() if r and r["rounds"] > 0}
        if repairs:  # register smoothed each field's few folds away before the tracking used it
            out["fold_repair"] = {"pairs_repaired": [list(k) for k in repaired], "registrations": len(repairs),
                                  "largest_folding_percent_before": max((r["folding_percent_before"] for r in repaired.values()), default=0.0),
                                  "largest_folding_percent_after": max((r["folding_percent_after"] for r in repaired.values()), default=0.0)}
        notes = {f: self.cache[(m, f, near)][2]["label"] for m, f, near in sorted(self.used)
                 if m != f and self.cache[(m, f, near)][2]["label"] is not None}
        if notes:
            priors = {f: n["label_prior"] for f, n in notes.items() if n.get("label_prior")}
            out["label"] = {
                "label_guidance": sorted({n["label_guidance"] for n in notes.values()}),
                "label_prior": sorted({p["name"] for p in priors.values()}) or None,
                "prior_acted_on_frames": [f for f, p in priors.items() if p.get("weight", 0) > 0],
                "prior_did_not_act_on_frames": [f for f, p in priors.items() if not p.get("weight", 0) > 0],
            }
            found = found_structures(priors.values())  # the label's numbering, as the prior found it on the moving frame
            if found:
                out["label"]["structures"] = found
        return out

    @property
    def seconds(self) -> float:
        """Registration seconds of the pairs this scheme used."""
        return float(sum(self.cache[k][1] for k in self.used))


@dataclasses.dataclass
class TrackingRun:
    """What the schemes of one tracking run share: the cine, the reference frame and its ``(Z, H, W)`` label, the
    :class:`TrackSettings`, the networks loaded once (:data:`Models`), the progress bar's update and the registrations
    so far (:data:`_Cache`)."""

    cine: Cine
    reference: int
    label: np.ndarray
    settings: TrackSettings
    models: Models
    progress: Optional[Callable[[], None]] = None
    cache: _Cache = dataclasses.field(default_factory=dict)

    def pairs(self, labels: Tuple[bool, bool], models: Optional[Models] = None) -> FrameRegistrations:
        """The registrations of a scheme; ``labels``: ``(registrations from the reference frame get its label, every
        other one gets its moving frame's carried label)`` (:meth:`~monai_npc.apps.tracking.schemes.TrackingScheme.labels`);
        ``models``: the scheme's own networks, with registrations of its own (``None``: the run's, shared)."""
        labelled, carry = labels
        reference = (self.reference, self.label) if labelled else None
        kwargs = self.settings.registration_kwargs()
        if models is not None:
            return FrameRegistrations(self.cine, models, kwargs, self.progress, None, reference, carry)
        return FrameRegistrations(self.cine, self.models, kwargs, self.progress, self.cache, reference, carry)
