"""``monai_npc.track``: a label on one frame of a cine carried to every frame with :func:`monai_npc.register`.

Every frame shares the cine's grid, so displacements are composed in frame voxels (MONAI
``Warp`` convention: ``label_t(x) = label_ref(x + ddf_t(x))``, channel ``k`` = array axis ``k``,
channel 0 (through-plane) zero since the models are 2-D). With ``r`` the reference frame,
``T`` frames and ``k = (t - r) mod T`` the offset of frame ``t`` along the cycle:

- ``direct`` (default): ``ddf_t`` = registration of frame ``r`` onto frame ``t`` (``T - 1`` registrations), each
  ``register(frame_r, frame_t, moving_label=label)`` with register's settings (its label-guided refinement and label
  prior; ``label_guidance``): no chain, so nothing adds up along the cycle;
- ``sequential``: registrations of consecutive frames composed along the cycle,
  ``U_k(x) = s_k(x) + U_{k-1}(x + s_k(x))`` (``T`` registrations, the last one closes the cycle
  and measures the drift);
- ``average``: the mean of the ``direct`` and ``sequential`` fields;
- ``bidirectional``: the forward chain (``r -> r+1 -> ... -> t``) and the backward chain
  (``r -> r-1 -> ... -> t``, round the cycle) weighted by the other chain's length
  (``2 T`` registrations);
- ``anchored``: the ``sequential`` chain of the network's consecutive-frame fields (no
  refinement), each composed field refined against the reference frame before the next frame
  builds on it (:mod:`~monai_npc.apps.tracking.anchor`; ``T`` registrations and ``T`` refinements).

Labels are warped as one-hot maps with linear interpolation, then ``argmax`` (smoother
contours and volumes than nearest neighbour). The default scheme was chosen by measurement
(docs/tracking.md). With the ED frame as reference, the basal slices a structure leaves as the
base descends are then cleared; with the ES frame, those it re-enters as the base rises are
filled (:mod:`~monai_npc.cardiac.through_plane`; ``basal_descent``), as a through-plane part of
each frame's field: every carried label is what its field does to the reference label.
"""

from __future__ import annotations

import dataclasses
import logging
import time
from typing import TYPE_CHECKING, Any, Callable, Dict, List, Mapping, Optional, Sequence, Tuple, Union

import numpy as np
import SimpleITK as sitk
import torch

from monai_npc.apps.registration.api import register
from monai_npc.cardiac.function import cardiac_function, volume_curves
from monai_npc.cardiac.through_plane import BASAL_ASCENT_MM, BASAL_DESCENT_MM, apply_basal_ascent, apply_basal_descent, diastolic_phase, systolic_phase
from monai_npc.functional.label_warp import indicator_tensor, warp_indicators, warp_label
from monai_npc.functional.warp import compose

from .cine import Cine, label_frame, read_cine, read_frame_label
from .pair import track_pair
from .progress import progress_bar
from .result import Tracking, label_dice
from .schemes import DEFAULT_SCHEME, SCHEMES

if TYPE_CHECKING:  # the strain code (and scipy) load only when strain is asked for
    pass

logger = logging.getLogger(__name__)

__all__ = [
    "SCHEMES", "DEFAULT_SCHEME", "TRACK_NUM_STEPS", "TRACK_REFINE_ITERATIONS", "Tracking", "track", "track_schemes", "tracking_model",
    "label_dice", "LABEL_SIGMA",
]

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
#: in-plane Gaussian width (voxels) of each label before it is carried to a frame (:func:`warp_label`), as
#: ``register``'s ``label_sigma`` for ``acdc``: smoother carried outlines (docs/design_notes.md, "apps/tracking")
LABEL_SIGMA = 1.0


#: ``(moving, fixed, consecutive-frame network)`` -> ``(field, seconds, the label's weight and prior summary or None)``
_Cache = Dict[Tuple[int, int, bool], Tuple[torch.Tensor, float, Optional[Dict[str, Any]]]]


class _Fields:
    """Pairwise in-plane fields ``(Z, 2, H, W)`` (frame voxels) from :func:`monai_npc.register`, cached
    (the chains' consecutive frames registered with one network, the rest with register's settings)."""

    def __init__(
        self, cine: Cine, models: Mapping[bool, Tuple[torch.nn.Module, str]], register_kwargs: Dict[str, Any],
        progress: Optional[Callable[[], None]] = None, cache: Optional[_Cache] = None,
        reference: Optional[Tuple[int, np.ndarray]] = None, carry: bool = True,
    ) -> None:
        self.cine, self.kwargs, self.progress = cine, register_kwargs, progress
        #: ``{consecutive: (network, name)}``: for the chains' consecutive frames (``True``) and with register's settings
        self.models = models
        #: ``(frame, label)`` of the reference: registrations from the reference frame get its label
        #: (register's label-guided refinement and label prior), and with ``carry`` every other one gets
        #: its moving frame's label as carried there by the chain so far
        self.reference, self.carry = reference, carry
        #: the registrations so far (:data:`_Cache`); may be shared between schemes
        self.cache: _Cache = {} if cache is None else cache
        self.used: set = set()

    def __call__(self, moving: int, fixed: int, to_reference: Optional[torch.Tensor] = None, direct: bool = False) -> torch.Tensor:
        """The field of ``moving`` registered onto ``fixed``; ``to_reference``: the field of ``moving`` to
        the reference frame (what carries the reference label there), when ``moving`` is not the reference;
        ``direct``: with register's settings even between consecutive frames."""
        n = len(self.cine)
        near = not direct and (fixed - moving) % n in (1, n - 1)
        key = (moving % n, fixed % n, near)
        if key not in self.cache:
            t0 = time.perf_counter()
            if key[0] == key[1]:
                z, (h, w) = self.cine.frames[0].GetSize()[2], self.cine.frames[0].GetSize()[1::-1]
                field_, note = torch.zeros(z, 2, h, w), None
            else:
                net, name = self.models.get(near, self.models[True])
                kwargs = dict(self.kwargs, model=net)
                kwargs.setdefault("model_name", name)
                label = self._label(key[0], to_reference)
                reg = register(self.cine.frames[key[0]], self.cine.frames[key[1]], moving_label=label, **kwargs)
                field_ = reg.ddf[1:].permute(1, 0, 2, 3).contiguous().float()  # (3, Z, H, W) -> (Z, 2, H, W)
                note = ({"label_guidance": reg.summary["label_guidance"], "label_prior": reg.summary.get("label_prior")}
                        if label is not None and (reg.summary.get("label_guidance") or 0) > 0 else None)
            self.cache[key] = (field_, time.perf_counter() - t0, note)
            if self.progress is not None and key[0] != key[1]:
                self.progress()
        self.used.add(key)
        return self.cache[key][0]

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
            arr = warp_label(ref_label, to_reference, sorted(int(v) for v in np.unique(ref_label) if v != 0))
        image = sitk.GetImageFromArray(np.asarray(arr, dtype=np.int16))
        image.CopyInformation(self.cine.frames[frame])
        return image

    def settings(self) -> Dict[str, Dict[str, Any]]:
        """The network of each kind of pair this scheme registered (name, ODE steps, refinement steps; ``None``: not an
        NPC network) and, where registrations got a label, its guidance weight and what the label prior did: the
        prior's name and the frames it acted on and did not (``register``'s checks, per registration: it stood aside or
        was dropped)."""
        kinds = {near for m, f, near in self.used if m != f}
        out: Dict[str, Dict[str, Any]] = {}
        for near in sorted(kinds, reverse=True):
            net, name = self.models.get(near, self.models[True])
            out["consecutive frames" if near else "register's settings"] = {
                "model": name, "num_steps": getattr(getattr(net, "ode", None), "num_steps", None),
                "refine_iterations": getattr(getattr(net, "refiner", None), "iterations", None),
            }
        notes = {f: self.cache[(m, f, near)][2] for m, f, near in sorted(self.used) if self.cache[(m, f, near)][2] is not None}
        if notes:
            priors = {f: n["label_prior"] for f, n in notes.items() if n.get("label_prior")}
            out["label"] = {
                "label_guidance": sorted({n["label_guidance"] for n in notes.values()}),
                "label_prior": sorted({p["name"] for p in priors.values()}) or None,
                "prior_acted_on_frames": [f for f, p in priors.items() if p.get("weight", 0) > 0],
                "prior_did_not_act_on_frames": [f for f, p in priors.items() if not p.get("weight", 0) > 0],
            }
        return out

    @property
    def seconds(self) -> float:
        """Registration seconds of the pairs this scheme used."""
        return float(sum(self.cache[k][1] for k in self.used))


def _chain(fields: _Fields, ref: int, n: int, step: int, anchor: Optional[Callable[[int, torch.Tensor], torch.Tensor]] = None) -> List[torch.Tensor]:
    """Fields of the frames ``ref, ref + step, ..., ref + n step`` (mod T) to ``ref`` by composing consecutive
    registrations; ``anchor(frame, field)``: each composed field corrected before the next frame builds on it."""
    out = [fields(ref, ref)]
    frames = len(fields.cine)
    for k in range(1, n + 1):
        prev, cur = ref + (k - 1) * step, ref + k * step
        composed = compose(out[-1], fields(prev, cur, out[-1]))
        out.append(composed if anchor is None else anchor(cur % frames, composed))
    return out


def scheme_fields(fields: _Fields, scheme: str, ref: int, frames: int,
                  anchor: Optional[Callable[[int, torch.Tensor], torch.Tensor]] = None) -> Tuple[List[torch.Tensor], Optional[torch.Tensor]]:
    """``(per-frame fields to the reference in frame order, cycle field or None)`` for ``scheme``
    (``anchored``: ``anchor``, a :class:`~monai_npc.apps.tracking.anchor.ReferenceAnchor`, corrects the chain)."""
    t_of = [(ref + k) % frames for k in range(frames)]  # frame at offset k
    by_offset: List[torch.Tensor]
    cycle = None
    if scheme == "direct":
        by_offset = [fields(ref, t, direct=True) for t in t_of]
    elif scheme in ("sequential", "average", "anchored"):
        if scheme == "anchored" and anchor is None:
            raise ValueError("the anchored scheme needs an anchor (monai_npc.apps.tracking.anchor.ReferenceAnchor).")
        chain = _chain(fields, ref, frames, +1, anchor if scheme == "anchored" else None)
        cycle, by_offset = chain[-1], chain[:-1]
        if scheme == "average":
            by_offset = [0.5 * (c + fields(ref, t, direct=True)) for c, t in zip(by_offset, t_of)]
    elif scheme == "bidirectional":
        fwd, bwd = _chain(fields, ref, frames, +1), _chain(fields, ref, frames, -1)
        cycle = fwd[-1]
        by_offset = [fwd[k] * ((frames - k) / frames) + bwd[frames - k] * (k / frames) for k in range(frames)]
    else:
        raise ValueError(f"scheme {scheme!r} is not one of {SCHEMES}.")
    out: List[Optional[torch.Tensor]] = [None] * frames
    for k, t in enumerate(t_of):
        out[t] = by_offset[k]
    return out, cycle  # type: ignore[return-value]


def tracking_model(
    model: Any = "acdc", device: Union[str, torch.device] = "cpu", refine_iterations: Optional[int] = None, num_steps: Optional[int] = None,
    consecutive: bool = True,
) -> Tuple[torch.nn.Module, str]:
    """``(network, name)`` that :func:`track` registers two frames with. NPC weights by name or file
    get ``num_steps`` ODE steps and ``refine_iterations`` refinement steps; ``None``:
    :data:`TRACK_NUM_STEPS` and :data:`TRACK_REFINE_ITERATIONS` (and the :data:`TRACK_FLIP_ENSEMBLE`) for ``consecutive`` frames,
    ``register``'s otherwise (:func:`monai_npc.apps.registration.models.register_settings`; 6 and
    40 for ``acdc``: ``direct`` registers the reference onto every frame, up to the whole motion of
    the cycle). A network is used as it is (:func:`monai_npc.apps.registration.models.resolve_model`)."""
    from monai_npc.apps.registration.models import is_phase_correlation, resolve_model

    if isinstance(model, torch.nn.Module):
        return resolve_model(model, device, refine_iterations, num_steps)  # used as it is (warns if steps were given)
    if consecutive and not is_phase_correlation(model):  # tracking's own steps, on the weights' residual grid (register's
        # coarser grid registered consecutive frames worse, docs/design_notes.md); phase correlation has no steps to set
        refine_iterations = TRACK_REFINE_ITERATIONS if refine_iterations is None else refine_iterations
        num_steps = TRACK_NUM_STEPS if num_steps is None else num_steps
    net, name = resolve_model(model, device, refine_iterations, num_steps, register_defaults=not consecutive)
    if consecutive and TRACK_FLIP_ENSEMBLE is not None and hasattr(net, "set_flip_ensemble"):
        net.set_flip_ensemble(TRACK_FLIP_ENSEMBLE)
    return net, name


def _prepare(cine: Any, label: Any, reference_frame: Optional[int], spacing) -> Tuple[Cine, int, np.ndarray]:
    data = cine if isinstance(cine, Cine) else read_cine(cine, spacing)
    ref, how = label_frame(cine, label, reference_frame)
    if reference_frame is None:
        from monai_npc.interop.inputs import describe_input

        logger.info("label %s: frame %d (%s)", describe_input(label), ref, how)
    return data, ref, read_frame_label(label, data, ref)


def _descent(basal_descent: Any, slices: int) -> Tuple[Dict[str, float], Dict[str, float]]:
    """``track``'s ``basal_descent`` argument as ``({structure: mm} descending from ED, {structure: mm}
    rising from ES)`` (``{}`` = off); ``None``: on for stacks of 3 slices or more; a mapping sets both."""
    if basal_descent is None:
        basal_descent = slices >= 3
    if basal_descent is True:
        return dict(BASAL_DESCENT_MM), dict(BASAL_ASCENT_MM)
    if basal_descent is False:
        return {}, {}
    if not isinstance(basal_descent, Mapping):
        raise ValueError(f"basal_descent must be True, False or {{structure: mm}}, got {basal_descent!r}.")
    table = {str(k): float(v) for k, v in basal_descent.items()}
    return table, dict(table)


def _result(data: Cine, ref: int, ref_label: np.ndarray, scheme: str, fields: _Fields, ed_frame, es_frame,
            descent: Tuple[Mapping[str, float], Mapping[str, float]], anchor: Any = None) -> Tracking:
    """Compose ``scheme``'s fields (registering what the cache lacks; ``anchor`` for ``anchored``) into a :class:`Tracking`."""
    t0 = time.perf_counter()
    cached = set(fields.cache)
    values = sorted(int(v) for v in np.unique(ref_label) if v != 0)
    per_frame, cycle = scheme_fields(fields, scheme, ref, len(data), anchor)
    indicators = indicator_tensor(ref_label, values, LABEL_SIGMA)  # smoothed once for every frame
    labels = np.stack([ref_label if t == ref else warp_indicators(*indicators, f) for t, f in enumerate(per_frame)])
    ddf = torch.stack([torch.cat([torch.zeros_like(f[:, :1]), f], 1).permute(1, 0, 2, 3) for f in per_frame]).float()  # (T, 3, Z, H, W)
    through_plane = None
    if any(descent) and values:
        labels, through_plane = _basal_rules_in_field(labels, ddf, ref_label, ref, data.spacing, descent, indicators)
    drift = label_dice(warp_indicators(*indicators, cycle), ref_label) if cycle is not None else None
    volumes = volume_curves(labels, data.spacing)
    function = cardiac_function(volumes, ed_frame, es_frame)
    # registration seconds of every pair the scheme uses (also those cached by another scheme) + composition
    new = sum(sec for key, (_, sec, _) in fields.cache.items() if key not in cached)
    seconds = fields.seconds + (time.perf_counter() - t0) - new
    return Tracking(labels=labels, ddf=ddf.float(), volumes=volumes, function=function, reference_frame=ref, scheme=scheme,
                    drift=drift, seconds=seconds, cine=data, registrations=sum(k[0] != k[1] for k in fields.used),
                    settings=dict(fields.settings(), **({} if anchor is None else {"anchored to the reference": anchor.settings}),
                                  **({} if through_plane is None else {"basal rules in the transform": through_plane})))


def _basal_rules_in_field(labels: np.ndarray, ddf: torch.Tensor, ref_label: np.ndarray, ref: int, spacing: Sequence[float],
                          descent: Tuple[Mapping[str, float], Mapping[str, float]], indicators: Tuple[np.ndarray, torch.Tensor]
                          ) -> Tuple[np.ndarray, Dict[str, Any]]:
    """The basal rules of every frame made part of its field (``ddf`` ``(T, 3, Z, H, W)``, changed in place):
    ``(labels, what the settings record)``. The phase of each frame comes from the in-plane LV curve: towards ES from
    an ED reference (the base descends: basal slices cleared), towards ED from an ES reference (it rises: filled);
    where a rule changes a frame's label, :func:`~monai_npc.cardiac.through_plane.through_plane_field` gives the field
    that does the same and the frame's label is the reference label carried by that field (trilinear, as every
    other frame's): nothing edits a label afterwards."""
    from monai_npc.cardiac.through_plane import through_plane_field
    from monai_npc.functional.label_warp import warp_indicators_volume

    lv = volume_curves(labels, spacing)["lv"]
    down, up = systolic_phase(lv, ref), diastolic_phase(lv, ref)
    out, agreement, changed = labels.copy(), [], []
    for t, (lab, d, u) in enumerate(zip(labels, down, up)):
        edited = apply_basal_ascent(apply_basal_descent(lab, ref_label, spacing[0], d, descent[0]), ref_label, spacing[0], u, descent[1])
        if t == ref or not (edited != lab).any():
            continue
        ddf[t] = torch.from_numpy(through_plane_field(edited, lab, ref_label, ddf[t].double().numpy())).float()
        out[t] = warp_indicators_volume(*indicators, ddf[t]).astype(labels.dtype)
        labelled = (out[t] > 0) | (edited > 0)
        agreement.append(float((out[t] == edited)[labelled].mean()) if labelled.any() else 1.0)
        changed.append(t)
    return out, {"frames": changed, "rule_agreement_min": min(agreement) if agreement else None,
                 "module": "monai_npc.cardiac.through_plane"}


def _anchored(data: Cine, ref: int, ref_label: np.ndarray, model: Any, device: Any, refine_iterations: Optional[int], num_steps: Optional[int],
              kwargs: Dict[str, Any], progress: Optional[Callable[[], None]], guided: Optional[Tuple[int, np.ndarray]]) -> Tuple[_Fields, Any]:
    """The consecutive-frame registrations (the network alone: 0 refinement steps) and the
    :class:`~monai_npc.apps.tracking.anchor.ReferenceAnchor` (``refine_iterations`` steps, default
    :data:`~monai_npc.apps.tracking.anchor.ANCHOR_ITERATIONS`) of the ``anchored`` scheme."""
    from .anchor import ReferenceAnchor

    net, name = tracking_model(model, device, None if isinstance(model, torch.nn.Module) else 0, num_steps, consecutive=True)
    anchor = ReferenceAnchor(data.arrays(), ref, ref_label, getattr(net, "refiner", None), refine_iterations)
    return _Fields(data, {True: (net, name)}, kwargs, progress, None, guided), anchor


def track(
    cine: Any,
    label: Any,
    reference_frame: Optional[int] = None,
    scheme: str = DEFAULT_SCHEME,
    model: Any = "acdc",
    *,
    spacing: Optional[Sequence[float]] = None,
    refine_iterations: Optional[int] = None,
    num_steps: Optional[int] = None,
    ed_frame: Optional[int] = None,
    es_frame: Optional[int] = None,
    basal_descent: Union[None, bool, Mapping[str, float]] = None,
    label_guidance: Optional[float] = None,
    progress: bool = True,
    **register_kwargs: Any,
) -> Tracking:
    """Carry the label of one frame of a 4-D short-axis cine to every frame.

    A cine of two frames (an ED/ES pair) is one :func:`monai_npc.register` of the reference frame onto the other with
    the label, register's settings and the basal rules as part of its field (:mod:`~monai_npc.apps.tracking.pair`):
    ``track([ED, ES], ED_label)`` carries the label as ``register(ED, ES, moving_label=ED_label)`` does, whatever the
    scheme (a network given as a module, or a ``basal_descent`` mapping, takes the general path).

    Args:
        cine: a 4-D file (NIfTI ``(X, Y, Z, T)``), a cine DICOM folder, a 4-D ``sitk.Image``, a
            ``(T, Z, H, W)`` array (with ``spacing``) or a list of 3-D frames (:func:`read_cine`).
        label: the label map (0 bg, 1 RV, 2 Myo, 3 LV) of frame ``reference_frame``: a file,
            ``sitk.Image`` or ``(Z, H, W)`` array on the frame grid (a 4-D label: that frame of it).
        reference_frame: 0-based frame the label belongs to; ``None``: the frame an ACDC label file
            names (``patient090_frame04_gt.nii.gz``: 3), else ED of an ACDC ``Info.cfg`` beside the
            cine (``ED: n`` is frame ``n - 1``), else 0 (:func:`~monai_npc.apps.tracking.cine.label_frame`).
        scheme: one of :data:`SCHEMES` (module docstring).
        model: the registration model as for :func:`monai_npc.register`; NPC weights by name or
            file are loaded once with the tracking settings (:func:`tracking_model`), a network is
            used as it is.
        refine_iterations, num_steps: test-time refinement steps and learned ODE steps of each
            registration; ``None``: for the consecutive-frame schemes (``sequential``,
            ``bidirectional``) :data:`TRACK_REFINE_ITERATIONS` (10) and :data:`TRACK_NUM_STEPS` (4),
            in less time than the pair defaults (docs/design_notes.md, "apps/tracking"); for ``direct`` and
            ``average`` ``register``'s (40 and 6 for ``acdc``); for ``anchored``, ``num_steps`` of
            the network between consecutive frames (no refinement there) and ``refine_iterations``
            of the correction against the reference
            (:data:`~monai_npc.apps.tracking.anchor.ANCHOR_ITERATIONS`, 6; its label-guided term, weight
            :data:`~monai_npc.apps.tracking.anchor.ANCHOR_LABEL_GUIDANCE` on the frame farthest from the
            reference and less on nearer ones, sees the reference label). Ignored
            for a network given as a module (used as it is between frames), except ``anchored``'s
            correction steps.
        **register_kwargs: passed to :func:`monai_npc.register` (``threads``, ``device``, ``size``...).
        spacing: mm per array axis ``(Z, H, W)`` for array inputs.
        ed_frame, es_frame: override the ED / ES frames the function figures use (default: the
            largest and the smallest tracked LV volume).
        basal_descent: follow the base through the plane (:mod:`~monai_npc.cardiac.through_plane`):
            from an ED reference (the largest LV volume) clear the basal slices a structure leaves
            as the base descends towards the apex, from an ES reference (the smallest) fill those
            it re-enters as the base rises. ``None`` (default): on for short-axis stacks (3 slices
            or more), off for single-slice cines such as CAMUS views; ``True`` uses
            :data:`~monai_npc.cardiac.through_plane.BASAL_DESCENT_MM` (the RV, 12 mm at ES) and
            :data:`~monai_npc.cardiac.through_plane.BASAL_ASCENT_MM` (RV, myocardium and LV, 12 mm
            at ED), scaled by each frame's phase on the LV curve; a ``{structure: mm}`` mapping
            sets both; ``False`` keeps the in-plane result. A reference between ED and ES gets neither.
        label_guidance: the label-guided term of each registration's refinement (:func:`monai_npc.register`).
            ``None`` (default): every registration whose moving frame is the reference frame (all of
            ``direct``'s, ``average``'s direct half, a two-frame pair) gets the reference label with
            ``register``'s own label settings, i.e. its label-guided refinement and its label prior where
            the weights have one (each frame is then what ``register(reference, frame, moving_label=label)``
            gives); the others (consecutive frames of the chained schemes) get no label. A number ``W > 0``:
            every registration gets its moving frame's label with weight ``W`` (the reference label, or it
            carried there by the chain so far: chaining carried labels into the term made ``sequential``
            worse, docs/design_notes.md, "apps/tracking"); ``0``: no registration gets a label.
            ``anchored``'s consecutive registrations are the network alone unless ``W > 0``; its
            correction against the reference frame has its own term
            (:data:`~monai_npc.apps.tracking.anchor.ANCHOR_LABEL_GUIDANCE`).
        progress: a tqdm bar over the registrations.

    Returns:
        :class:`Tracking` (labels and displacements on every frame, volumes, function, drift).

    Raises:
        FileNotFoundError: a missing cine or label file.
        ValueError: a 3-D input, a label frame out of range, a label off the frame grid, an unknown scheme.
    """
    return track_schemes(cine, label, reference_frame, (scheme,), model, spacing=spacing, refine_iterations=refine_iterations,
                         num_steps=num_steps, ed_frame=ed_frame, es_frame=es_frame, basal_descent=basal_descent, label_guidance=label_guidance, progress=progress,
                         **register_kwargs)[scheme]


def track_schemes(
    cine: Any,
    label: Any,
    reference_frame: Optional[int] = None,
    schemes: Sequence[str] = SCHEMES,
    model: Any = "acdc",
    *,
    spacing: Optional[Sequence[float]] = None,
    refine_iterations: Optional[int] = None,
    num_steps: Optional[int] = None,
    ed_frame: Optional[int] = None,
    es_frame: Optional[int] = None,
    basal_descent: Union[None, bool, Mapping[str, float]] = None,
    label_guidance: Optional[float] = None,
    progress: bool = True,
    **register_kwargs: Any,
) -> Dict[str, Tracking]:
    """:func:`track` with several schemes sharing their registrations (``{scheme: Tracking}``);
    each result's ``seconds`` counts every registration its scheme uses, as if run alone."""
    if not schemes:
        raise ValueError(f"no scheme given; use one or more of {SCHEMES}.")
    for s in schemes:
        if s not in SCHEMES:
            raise ValueError(f"scheme {s!r} is not one of {SCHEMES}.")
    guidance = None if label_guidance is None else float(label_guidance)
    if guidance is not None and not guidance >= 0:
        raise ValueError(f"label_guidance (--label-guidance) must be >= 0 or None, got {label_guidance}.")
    data, ref, ref_label = _prepare(cine, label, reference_frame, spacing)
    descent = _descent(basal_descent, ref_label.shape[0])
    if len(data) == 2 and not isinstance(model, torch.nn.Module) and not isinstance(basal_descent, Mapping):
        # two frames (an ED/ES pair) are one registration: register's own, so that track([ED, ES]) is register(ED, ES)
        pair = track_pair(data, ref, ref_label, model, any(descent), refine_iterations, num_steps, guidance, ed_frame, es_frame, progress,
                     register_kwargs)
        return {s: dataclasses.replace(pair, scheme=s, _lazy={}) for s in schemes}
    device = register_kwargs.get("device") or "cpu"
    # consecutive frames get tracking's settings, registrations across more frames (direct, average) register's
    nears = [True] + ([False] if any(s in ("direct", "average") for s in schemes) else [])
    models = ({near: tracking_model(model, device, refine_iterations, num_steps, consecutive=near) for near in nears}
              if any(s != "anchored" for s in schemes) else {})  # anchored builds its own (refine_iterations: its correction's)
    kwargs = dict(register_kwargs)
    if guidance is not None:
        kwargs["label_guidance"] = guidance
    frames = len(data)
    # registrations: direct's from the reference (register's settings), the chains' between consecutive frames
    # (forwards; backwards too for bidirectional), anchored's own consecutive ones
    total = ((frames - 1) * any(s in ("direct", "average") for s in schemes) + frames * any(s not in ("direct", "anchored") for s in schemes)
             + frames * ("bidirectional" in schemes) + frames * ("anchored" in schemes))
    bar = progress_bar(progress, total, f"track ({', '.join(schemes)})")
    cache: _Cache = {}
    try:
        carry = guidance is not None and guidance > 0  # every registration gets its moving frame's label
        guided = (ref, ref_label) if guidance is None or carry else None
        out = {}
        for s in schemes:
            if s == "anchored":  # the network alone between consecutive frames, refined against the reference instead
                fields, anchor = _anchored(data, ref, ref_label, model, device, refine_iterations, num_steps, kwargs, bar.update if bar else None,
                                           guided if carry else None)
                out[s] = _result(data, ref, ref_label, s, fields, ed_frame, es_frame, descent, anchor)
            else:
                out[s] = _result(data, ref, ref_label, s, _Fields(data, models, kwargs, bar.update if bar else None, cache, guided, carry),
                                 ed_frame, es_frame, descent)
        return out
    finally:
        if bar is not None:
            bar.close()
