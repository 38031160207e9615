"""``monai_npc.track``: a label on one frame of a cine carried to every frame with :func:`monai_npc.register`.

Every frame shares the cine's grid, so displacements are composed in frame voxels (MONAI
``Warp`` convention: ``label_t(x) = label_ref(x + ddf_t(x))``, channel ``k`` = array axis ``k``,
channel 0 (through-plane) zero for the 2-D models; a stack network's fields move through the plane too and are
composed, averaged and applied on the ``(Z, H, W)`` grid, :mod:`~monai_npc.apps.tracking.fields`). The schemes (``direct``, the default, ``sequential``,
``average``, ``bidirectional``, ``anchored``) are objects of :mod:`~monai_npc.apps.tracking.schemes`: each builds every
frame's field from the pairwise registrations of :mod:`~monai_npc.apps.tracking.registrations`.

Labels are warped as one-hot maps with linear interpolation, then ``argmax`` (smoother
contours and volumes than nearest neighbour). The default scheme was chosen by measurement
(docs/tracking.md). With the ED frame as reference, the basal slices a structure leaves as the
base descends are then cleared; with the ES frame, those it re-enters as the base rises are
filled (:mod:`~monai_npc.cardiac.through_plane`; ``basal_descent``), as a through-plane part of
each frame's field: every carried label is what its field does to the reference label.

With a stack network (:func:`~monai_npc.apps.registration.models.is_stack_network`, ``model`` given as one or as its
weights) every scheme runs on its 3-D fields, the labels carried trilinearly through the slices; what cannot apply to
it (the 2-D refinement and its label terms, tracking's own steps and flip ensemble, the basal rules, ``anchored``'s
correction) is left out and recorded in ``Tracking.settings["stack_network"]["not_applied"]`` with the reason, as
``register`` records it in ``summary["stack_network"]``.
"""

from __future__ import annotations

import dataclasses
import logging
import time
from typing import Any, Dict, Mapping, Optional, Sequence, Tuple, Union

import numpy as np
import torch

from monai_npc.cardiac.function import cardiac_function, volume_curves
from monai_npc.cardiac.through_plane import BASAL_ASCENT_MM, BASAL_DESCENT_MM, apply_basal_ascent, apply_basal_descent, diastolic_phase, systolic_phase
from monai_npc.functional.label_warp import indicator_tensor

from .cine import Cine, label_frame, read_cine, read_frame_label
from .fields import carry_label, frame_ddf, stack_record
from .pair import track_pair
from .progress import progress_bar
from .registrations import TRACK_FLIP_ENSEMBLE, TRACK_NUM_STEPS, TRACK_REFINE_ITERATIONS, TrackingRun, TrackSettings, tracking_model
from .result import Tracking, label_dice
from .schemes import DEFAULT_SCHEME, SCHEMES, TrackingScheme, registration_count
from .schemes import scheme as find_scheme
from .structures import check_structures, resolve_structures, without_absent

logger = logging.getLogger(__name__)

__all__ = [
    "SCHEMES", "DEFAULT_SCHEME", "TRACK_NUM_STEPS", "TRACK_REFINE_ITERATIONS", "TRACK_FLIP_ENSEMBLE", "Tracking", "track", "track_schemes",
    "tracking_model", "label_dice", "LABEL_SIGMA",
]

#: in-plane Gaussian width (voxels) of each label before it is carried to a frame (:func:`warp_label`), as
#: ``register``'s ``label_sigma`` for ``acdc``: smoother carried outlines (docs/design_notes.md, "apps/tracking")
LABEL_SIGMA = 1.0


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


def _result(run: TrackingRun, method: TrackingScheme, ed_frame: Optional[int], es_frame: Optional[int],
            descent: Tuple[Mapping[str, float], Mapping[str, float]], structures: Optional[Dict[str, int]]) -> Tracking:
    """Compose ``method``'s fields (registering what the run's cache lacks) into a :class:`Tracking`; ``structures``: the
    label's numbering as given, else as the registrations' label prior found it (:func:`resolve_structures`)."""
    t0 = time.perf_counter()
    data, ref, ref_label = run.cine, run.reference, run.label
    values = sorted(int(v) for v in np.unique(ref_label) if v != 0)
    built = method.fields(run)
    numbered, numbering = resolve_structures(structures, (built.settings.get("label") or {}).get("structures"), ref_label,
                                             next(iter(run.models.values()))[0] if run.models else run.settings.model)
    stack = built.pairs.channels == 3  # a stack network's fields, through the plane too (fields.stack_record)
    indicators = indicator_tensor(ref_label, values, LABEL_SIGMA)  # smoothed once for every frame
    labels = np.stack([ref_label if t == ref else carry_label(indicators, f) for t, f in enumerate(built.per_frame)])
    ddf = torch.stack([frame_ddf(f) for f in built.per_frame]).float()  # (T, 3, Z, H, W)
    through_plane = None
    if any(descent) and values and not stack:
        labels, through_plane = _basal_rules_in_field(labels, ddf, ref_label, ref, data.spacing, descent, indicators, numbered)
    drift = label_dice(carry_label(indicators, built.cycle), ref_label, numbered) if built.cycle is not None else None
    volumes = volume_curves(labels, data.spacing, numbered)
    function = without_absent(cardiac_function(volumes, ed_frame, es_frame), numbering.get("absent", ()))
    # registration seconds of every pair the scheme uses (also those cached by another scheme) + composition
    seconds = built.pairs.seconds + (time.perf_counter() - t0) - built.pairs.new_seconds
    return Tracking(labels=labels, ddf=ddf.float(), volumes=volumes, function=function, reference_frame=ref, scheme=method.name,
                    drift=drift, seconds=seconds, cine=data, registrations=sum(k[0] != k[1] for k in built.pairs.used),
                    settings=dict(built.settings, **({} if through_plane is None else {"basal rules in the transform": through_plane}),
                                  **({"stack_network": stack_record(method.name)} if stack else {}), structures=numbering),
                    structures=numbered)


def _basal_rules_in_field(labels: np.ndarray, ddf: torch.Tensor, ref_label: np.ndarray, ref: int, spacing: Sequence[float],
                          descent: Tuple[Mapping[str, float], Mapping[str, float]], indicators: Tuple[np.ndarray, torch.Tensor],
                          structures: Mapping[str, int]) -> Tuple[np.ndarray, Dict[str, Any]]:
    """The basal rules of every frame made part of its field (``ddf`` ``(T, 3, Z, H, W)``, changed in place):
    ``(labels, what the settings record)``. The phase of each frame comes from the in-plane LV curve: towards ES from
    an ED reference (the base descends: basal slices cleared), towards ED from an ES reference (it rises: filled);
    where a rule changes a frame's label, :func:`~monai_npc.cardiac.through_plane.through_plane_field` gives the field
    that does the same and the frame's label is the reference label carried by that field (trilinear, as every
    other frame's): nothing edits a label afterwards. ``structures``: the value of each structure in the labels."""
    from monai_npc.cardiac.through_plane import through_plane_field
    from monai_npc.functional.label_warp import warp_indicators_volume

    lv = volume_curves(labels, spacing, structures)["lv"]
    down, up = systolic_phase(lv, ref), diastolic_phase(lv, ref)
    out, agreement, changed = labels.copy(), [], []
    for t, (lab, d, u) in enumerate(zip(labels, down, up)):
        edited = apply_basal_ascent(apply_basal_descent(lab, ref_label, spacing[0], d, descent[0], structures), ref_label, spacing[0], u,
                                    descent[1], structures)
        if t == ref or not (edited != lab).any():
            continue
        ddf[t] = torch.from_numpy(through_plane_field(edited, lab, ref_label, ddf[t].double().numpy())).float()
        out[t] = warp_indicators_volume(*indicators, ddf[t]).astype(labels.dtype)
        labelled = (out[t] > 0) | (edited > 0)
        agreement.append(float((out[t] == edited)[labelled].mean()) if labelled.any() else 1.0)
        changed.append(t)
    return out, {"frames": changed, "rule_agreement_min": min(agreement) if agreement else None,
                 "module": "monai_npc.cardiac.through_plane"}


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
    structures: Optional[Mapping[str, int]] = None,
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
        label: the label map (ACDC's 0 bg, 1 RV, 2 Myo, 3 LV, or another numbering: ``structures``) of frame
            ``reference_frame``: a file,
            ``sitk.Image`` or ``(Z, H, W)`` array on the frame grid (a 4-D label: that frame of it).
        reference_frame: 0-based frame the label belongs to; ``None``: the frame an ACDC label file
            names (``patient090_frame04_gt.nii.gz``: 3), else ED of an ACDC ``Info.cfg`` beside the
            cine (``ED: n`` is frame ``n - 1``), else 0 (:func:`~monai_npc.apps.tracking.cine.label_frame`).
        scheme: one of :data:`SCHEMES` (:mod:`~monai_npc.apps.tracking.schemes`).
        model: the registration model as for :func:`monai_npc.register`; NPC weights by name or
            file are loaded once with the tracking settings (:func:`tracking_model`), a network is
            used as it is. A stack network (or its weights, architecture ``"slice_context"``) gives 3-D fields: every
            scheme composes them through the plane, and what does not apply to it is recorded (module docstring).
        refine_iterations, num_steps: test-time refinement steps and learned ODE steps of each registration
            (:class:`~monai_npc.apps.tracking.registrations.TrackSettings`); ``None``: between consecutive frames
            :data:`TRACK_REFINE_ITERATIONS` (10) and :data:`TRACK_NUM_STEPS` (4), in less time than the pair defaults
            (docs/design_notes.md, "apps/tracking"); across more frames (``direct``, ``average``) ``register``'s (40
            and 6 for ``acdc``); ``anchored``: its correction's steps (:class:`~monai_npc.apps.tracking.schemes.Anchored`).
            Ignored for a network given as a module (used as it is between frames), except ``anchored``'s correction steps.
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
            ``None`` (default): every registration whose moving frame is the reference frame (all of ``direct``'s,
            a two-frame pair) gets the reference label with ``register``'s own label settings (its label prior too),
            the others none; ``W > 0``: every registration gets its moving frame's label (carried there by the chain)
            at weight ``W``; ``0``: none (:meth:`~monai_npc.apps.tracking.schemes.TrackingScheme.labels`; ``anchored``'s
            correction has its own term, :class:`~monai_npc.apps.tracking.schemes.Anchored`).
        progress: a tqdm bar over the registrations.
        structures: which value of ``label`` is which structure, ``{"lv": 1, "myo": 2, "rv": 3}`` (M&Ms) say, for the
            volumes, function, basal rules and strain (the carried labels keep the label's values; ``--structures``);
            ``None``: as the label prior finds it when the registrations carry the label (``register``'s
            ``summary["label_prior"]["structures"]``; a label of another convention is recognised, docs/interop.md),
            else the model's training labels (``acdc``: 1 RV, 2 myocardium, 3 LV; ``camus``: 1 LV, 2 myocardium), else
            ACDC's, with a warning for values that numbering does not name. ``Tracking.structures`` and
            ``settings["structures"]`` say which was used and where it came from.

    Returns:
        :class:`Tracking` (labels and displacements on every frame, volumes, function, drift).

    Raises:
        FileNotFoundError: a missing cine or label file.
        ValueError: a 3-D input, a label frame out of range, a label off the frame grid, an unknown scheme, ``structures``
            naming other structures or values that are not integers > 0.
    """
    return track_schemes(cine, label, reference_frame, (scheme,), model, spacing=spacing, refine_iterations=refine_iterations,
                         num_steps=num_steps, ed_frame=ed_frame, es_frame=es_frame, basal_descent=basal_descent, label_guidance=label_guidance,
                         progress=progress, structures=structures, **register_kwargs)[scheme]


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
    structures: Optional[Mapping[str, int]] = None,
    **register_kwargs: Any,
) -> Dict[str, Tracking]:
    """:func:`track` with several schemes sharing their registrations (``{scheme: Tracking}``);
    each result's ``seconds`` counts every registration its scheme uses, as if run alone."""
    if not schemes:
        raise ValueError(f"no scheme given; use one or more of {SCHEMES}.")
    methods = [find_scheme(s) for s in schemes]
    given = check_structures(structures)
    settings = TrackSettings(model, refine_iterations, num_steps, label_guidance, register_kwargs)
    data, ref, ref_label = _prepare(cine, label, reference_frame, spacing)
    descent = _descent(basal_descent, ref_label.shape[0])
    if len(data) == 2 and not isinstance(model, torch.nn.Module) and not isinstance(basal_descent, Mapping):
        # two frames (an ED/ES pair) are one registration: register's own, so that track([ED, ES]) is register(ED, ES)
        pair = track_pair(data, ref, ref_label, settings, any(descent), ed_frame, es_frame, progress, given)
        return {s: dataclasses.replace(pair, scheme=s, _lazy={}) for s in schemes}
    # the networks the schemes share, loaded once: consecutive frames with tracking's steps, the rest with register's
    kinds = [near for near in (True, False) if any(near in m.networks for m in methods)]
    models = {near: tracking_model(model, settings.device, refine_iterations, num_steps, consecutive=near) for near in kinds}
    bar = progress_bar(progress, registration_count(methods, len(data)), f"track ({', '.join(schemes)})")
    run = TrackingRun(data, ref, ref_label, settings, models, bar.update if bar else None)
    try:
        return {m.name: _result(run, m, ed_frame, es_frame, descent, given) for m in methods}
    finally:
        if bar is not None:
            bar.close()
