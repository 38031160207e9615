"""The in-memory registration API: ``monai_npc.register(moving, fixed)`` -> :class:`Registration`.

Like ``ants.registration(fixed=f, moving=m)``: images in (SimpleITK images, file paths or numpy
arrays), images and a transform out, nothing written until :meth:`Registration.save`::

    import monai_npc
    reg = monai_npc.register("ED.nii.gz", "ES.nii.gz", model="acdc", moving_label="ED_gt.nii.gz")
    reg.warped, reg.warped_label        # SimpleITK images on the fixed grid
    reg.transform                       # sitk.DisplacementFieldTransform, fixed -> moving, LPS mm
    reg.ddf                             # torch (D, *S), fixed voxels, MONAI Warp convention
    reg.save("result")                  # the files of ``monai-npc register``

The steps, with the unit of each quantity:

1. both images (and label maps) as float32 SimpleITK images (mm, LPS);
2. :func:`monai_npc.apps.registration.pipeline.run_pipeline`: for two acquisitions (images that do not
   share a grid, ``align="auto"``) first one rigid in-plane turn and shift of the whole moving image
   (:mod:`monai_npc.apps.registration.align`), then the model grid placed on the fixed image
   (the whole field of view, or for cardiac models a ``size x size`` window at the native pixel
   size on the heart, found without labels), both images resampled onto it (SimpleITK, linear)
   and preprocessed as the weights' meta says; every slice registered independently (ddf in model
   voxels, MONAI ``Warp`` convention); the ddf pasted back onto the fixed image's full grid
   (fixed voxels; identity outside a window, tapered to it);
3. an ITK displacement field transform (LPS mm, fixed point -> moving point);
4. ``warped`` / ``warped_label`` = ``sitk.Resample(moving, fixed, transform)`` (linear / ITK's label
   interpolator ``sitk.sitkLabelLinear``: each label value interpolated linearly, the largest
   wins, as ANTs' ``-n GenericLabel``; 0 outside the moving image): exactly what ITK and ANTs
   compute from ``transform.h5``, border voxels included. With ``label_sigma > 0`` (the ``acdc``
   and ``camus`` default: 1 voxel) each label's indicator is smoothed in-plane first
   (:func:`monai_npc.interop.label_resample.resample_label`).

3-D inputs are registered slice by slice in the planes of their first two index axes (the
through-plane displacement is zero), as the models are 2-D; a stack network
(:func:`monai_npc.apps.registration.models.is_stack_network`) registers the whole stack in one call, its 3-D field
refined by its ``refiner`` when it has one (with the label-guided term and the label prior), and its through-plane
displacement is written too (``summary.json`` ``stack_network``). Slices where either image is
constant (or nearly: intensity range below :data:`monai_npc.apps.registration.grids.CONSTANT_RTOL` of its magnitude) get the
identity, a reliability of 0 and a warning, for every model.
"""

from __future__ import annotations

import time
import warnings
from pathlib import Path
from dataclasses import dataclass
from typing import Any, Dict, List, Optional, Sequence, Union

import numpy as np
import torch
from torch import nn

from monai_npc.functional import warp_image
from monai_npc.functional.fold_repair import repair_folds
from monai_npc.interop.checks import has_foreground, label_sigma_warning
from monai_npc.interop.images import resample
from monai_npc.interop.inputs import ImageLike, PathLike, image_like
from monai_npc.runtime import use_threads

from .align import check_align, wants_rigid
from .grids import slices_of
from .inputs import Inputs, read_inputs
from .label_prior import PRIOR_MIN_AGREEMENT, label_structures
from .models import is_stack_network, model_profile, resolve_model
from .pipeline import PipelineResult, run_pipeline
from .result import Registration
from .settings import RegisterSettings, check_arguments, resolve_settings
from .summary import registration_summary

__all__ = ["register"]


def register(
    moving: ImageLike,
    fixed: ImageLike,
    model: Union[str, PathLike, nn.Module] = "acdc",
    moving_label: Optional[ImageLike] = None,
    fixed_label: Optional[ImageLike] = None,
    *,
    spacing: Optional[Sequence[float]] = None,
    moving_select=None,
    fixed_select=None,
    pixel_space: bool = False,
    size: Optional[int] = None,
    keep_aspect: bool = True,
    device: Union[str, torch.device] = "cpu",
    threads: Optional[int] = None,
    model_name: Optional[str] = None,
    refine_iterations: Optional[int] = None,
    field_of_view: Optional[str] = None,
    label_guidance: Optional[float] = None,
    num_steps: Optional[int] = None,
    heart_centre: Optional[Sequence[Sequence[float]]] = None,
    label_sigma: Optional[float] = None,
    align: str = "auto",
    label_prior: Optional[float] = None,
) -> Registration:
    """Register ``moving`` onto ``fixed`` in memory; nothing is written (see :meth:`Registration.save`).

    Args:
        moving, fixed: SimpleITK images, paths (NIfTI, MHD/MHA, NRRD, DICOM file or folder,
            PNG/JPEG/TIFF) or arrays in array order ``([Z,] H, W)``; both 2-D or both 3-D
            (3-D: registered slice by slice).
        model: ``"acdc"``, ``"camus"``, ``"sar"``, ``"brain2d"`` (shipped weights), a
            ``save_pretrained`` file, ``"phase-correlation"`` or a network (``(B, 2, h, w) -> (B, 2, h, w)``), or a stack
            network (``stack_network = True``: one stack ``(Z, 2, h, w) -> (Z, 3, h, w)``, channel 0 through the plane in
            slices; :func:`~monai_npc.apps.registration.models.is_stack_network`), whose 3-D field is written.
        moving_label, fixed_label: optional label maps on their image's grid (same kinds of input).
        spacing: mm per array axis for array inputs (array order); default 1 mm.
        moving_select, fixed_select: for DICOM folders and multi-frame files: ``"phase=3"``,
            ``"trigger_time=350"``, ``"slice=5"``, ``"instance=12"``, ``"frame=0"``
            (:func:`monai_npc.data.io.parse_select`). Labels are read as given (no selection).
        pixel_space: ignore the moving image's geometry: its pixel ``(i, j)`` is placed on the fixed
            image's pixel ``(i, j)`` (e.g. a JPEG against a DICOM frame). Images must have the
            same number of slices.
        size: the model grid's in-plane size; default: the size the weights were trained at
            (``input_size`` in their ``meta``), else 128.
        keep_aspect: isotropic model grid (pad the short side) instead of stretching the field of view.
        device: torch device of the network.
        threads: torch and SimpleITK threads for this call (restored after); default
            :func:`monai_npc.runtime.default_threads` (at most the free cores).
        model_name: name recorded in the summary (default: from ``model``).
        refine_iterations: test-time refinement steps after an NPC network (``--refine``; about 10 ms
            each for a 128 x 128 pair on one CPU thread); ``None``: the weights' register setting
            (:func:`monai_npc.apps.registration.models.register_settings`: 30 for ``acdc``, their step size
            falling from 0.5 to 0.15 voxels, ``refine_learning_rate`` / ``refine_learning_rate_end``), else
            their own. The step sizes stay the settings': they fall over the steps given.
        field_of_view: where the model grid goes (:mod:`monai_npc.apps.registration`): ``"heart"``
            (a ``size x size`` window at the native pixel size on the region where each slice's two
            images differ, found without labels; identity outside it), ``"heart-stack"`` (one such
            window for the whole stack) or ``"image"`` (the whole field of view fitted into the
            grid); two mixes, measured and not kept as defaults: ``"image+heart"`` (both grids; inside
            the window the field is the mean of the two, tapered to the whole-image one at its edge)
            and ``"image>heart"`` (coarse to fine: the windows register the moving image warped by the
            whole-image field, and the two fields are composed). Default: the weights' register setting
            (``"heart-stack"`` for ``acdc``), else their own.
        label_guidance: with a ``moving_label`` and an NPC network's refinement, the weight of a
            label-guided term: each carried label should cover fixed voxels that look like the
            moving image under that label (:mod:`monai_npc.functional.label_intensity`; no fixed
            label is used). Without a ``moving_label`` (or with an empty one) the term steers the label
            prior's segmentation of the moving image instead, when the weights name a prior (``label_prior``
            below). ``None``:
            :data:`monai_npc.apps.registration.settings.LABEL_GUIDANCE`; 0 = off (the field then depends on the images
            only). Set above 0 with neither a ``moving_label`` nor a prior: a warning.
        label_sigma: ``warped_label``'s in-plane smoothing of each label before it is resampled, in
            moving voxels (``--label-sigma``; :func:`monai_npc.interop.label_resample.resample_label`);
            0: ITK's ``sitkLabelLinear`` exactly, as ANTs and Slicer resample a label with
            ``transform.h5``. ``None``: the weights' register setting (1 for ``acdc`` and ``camus``: the
            carried outline is smooth as expert contours are, docs/design_notes.md, "Register settings of
            the shipped models"), else 0.
        num_steps: learned ODE steps of an NPC network (``--steps``; split evenly over its
            stages); ``None``: the weights' register setting (6 for ``acdc``, whose weights say
            10: with the refinement's steps as accurate as 10 + 50, in less time; docs/design_notes.md,
            "Register settings of the shipped models"), else their own.
        heart_centre: for ``"heart"`` models, the window's in-plane centre ``(row, col)`` in fixed
            voxels (array order), one for every slice or one per slice; ``None`` (default): found
            from the two images (:func:`monai_npc.apps.registration.localize.motion_centre`, per slice or per stack).
        align: ``"auto"`` (default): images that do not share a grid (two acquisitions: another
            study, another scanner session) are first aligned by one rigid in-plane turn and shift
            (:func:`monai_npc.apps.registration.align.rigid_in_plane`, mutual information; ``summary.json``
            ``alignment``), frames of one series (the same grid) are not; ``"rigid"``: always;
            ``"none"``: never (``--align``). The network learned the motion within one
            acquisition, not a patient turned between two (docs/interop.md, "Rigid pre-alignment").
        label_prior: with a ``moving_label`` (and the label-guided term on), the weight within that
            term of a segmentation network's view of the fixed image (``--label-prior``;
            :class:`~monai_npc.networks.nets.LabelPrior`, :mod:`monai_npc.functional.label_prior`):
            each carried label pays ``-log p_label`` on the fixed voxels it covers. The network is the
            one the weights' register settings name (``acdc``: ``acdc_heart``, weight 8; docs/design_notes.md,
            "Register settings of the shipped models"). ``None``: that setting (0 for models that name none);
            0 = off. It acts only where its segmentation of the moving image agrees with the moving label (a
            label numbered otherwise, LV 1 say, is first renamed to its values where each value overlaps one of
            its structures best: ``label_prior.values``, and ``label_prior.structures`` names each value, as ``track``
            reads them; a label of some structures calls the others background)
            and its segmentation of the fixed image overlaps it (else a warning, and the summary's
            ``label_prior.dropped`` says why; moving slices the label leaves empty are steered by its segmentation
            of them, as images only), and where the label the network's own field carries is further
            from its segmentation of the fixed image than the moving label is from its segmentation of the moving
            image (else it stands aside without a warning: ``label_prior.aside``, with ``carried_agreement``).
            **Without a** ``moving_label`` (images only) the prior segments the moving image and the label-guided
            term steers that segmentation against its view of the fixed image (nothing of it is written; no
            ``warped_label``; ``summary["label_prior"]["steered"]`` says which label it steered); it acts under the
            fixed image's checks (contrast, overlap of its two segmentations before registration) and the last one
            above, its agreement with an expert taken to be ``PRIOR_IMAGES_AGREEMENT`` (0.92), else it stands aside
            with a note (``label_prior.aside``) and the images alone register. 0: the images alone, always
            (docs/design_notes.md, "Images only: the prior's segmentation of the moving image").

    Raises:
        FileNotFoundError: a missing image, label or weights file.
        ValueError: unreadable or truncated files, different dimensionality, NaN/Inf values,
            label maps off their image's grid, images that do not overlap in physical space,
            unusable models, arrays that are not real-valued.
    """
    arguments = dict(size=size, keep_aspect=keep_aspect, align=align, refine_iterations=refine_iterations, num_steps=num_steps,
                     field_of_view=field_of_view, label_guidance=label_guidance, label_sigma=label_sigma, label_prior=label_prior)
    with use_threads(threads):
        t0 = time.perf_counter()
        check_align(align, "align (--align)")  # before any reading
        check_arguments(arguments)
        net, name = resolve_model(model, device, refine_iterations, num_steps)
        name = model_name or name
        settings = resolve_settings(net, arguments, name)
        inputs = read_inputs(moving, fixed, moving_label, fixed_label, spacing, moving_select, fixed_select, pixel_space,
                             settings.size, settings.keep_aspect)
        run = _run(net, name, settings, inputs, device, heart_centre, size)
        reg = _registration(run, inputs, settings)
        reg.summary.update(registration_summary(run, inputs, settings, name, reg))
        reg._figure = _figure(run, inputs, name)
        reg.summary["seconds"] = time.perf_counter() - t0
        return reg


@dataclass
class _Run:
    """What one registration computed: the pipeline's result and the label terms that acted."""

    result: PipelineResult
    guidance: float  # the label-guided term's weight that acted (0: off)
    prior: Optional[Dict[str, Any]]  # summary["label_prior"]
    notes: List[str]  # warnings, in the order they were given
    stack: Optional[Dict[str, Any]] = None  # summary["stack_network"]: a stack network's field, and what did not apply to it
    fold_repair: Optional[Dict[str, Any]] = None  # summary["fold_repair"]: the folds smoothed away before writing


def _warn(notes: List[str], note: str, shown: Optional[str] = None) -> None:
    notes.append(note)
    warnings.warn(shown or note, RuntimeWarning, stacklevel=4)


def _run(net: nn.Module, name: str, settings: RegisterSettings, inputs: Inputs, device, heart_centre, size: Optional[int]) -> _Run:
    """Run the pipeline with ``settings`` (the label terms only where they can act) and check what it found."""
    notes = list(inputs.notes)
    profile = model_profile(net, size, settings.field_of_view)
    # the term acts only in an NPC network's test-time refinement, with a moving label: else it is 0 (and recorded so)
    refines = getattr(getattr(net, "refiner", None), "iterations", 0) > 0
    # the label the term steers: an empty moving label tells it nothing (registered as images only, and still carried)
    steer = inputs.moving_label if inputs.moving_label is not None and has_foreground(inputs.moving_label) else None
    # without a moving label, a prior the weights name segments the moving image and its segmentation is the label the
    # term steers (images only: nothing of it is written; label_prior=0 registers on the images alone)
    segments = steer is None and bool(settings.label_prior) and settings.label_prior_weight > 0
    asked = settings.label_terms_asked()
    if asked and steer is None and not segments:  # set by the caller, with nothing to steer: say so rather than drop it silently
        _warn(notes, f"{' and '.join(asked)} ignored: the label-guided term steers a moving label (moving_label, --moving-label), "
                     "or without one the label prior's segmentation of the moving image, and there is neither.")
    guidance = settings.label_guidance if refines and (steer is not None or segments) else 0.0
    prior_weight = settings.label_prior_weight if guidance > 0 else 0.0  # it is part of the label-guided term
    prior_net = None
    if prior_weight > 0:
        from monai_npc.networks.nets.label_prior import load_label_prior

        prior_net = load_label_prior(settings.label_prior, device)
    # a stack network that reads the moving label gets it whenever the label may guide (label_guidance > 0), refined or not
    reads = steer is not None and settings.label_guidance > 0 and getattr(net, "uses_label", False)
    result = run_pipeline(net, inputs.moving, inputs.fixed, profile, settings.keep_aspect, device, moving_label=steer,
                          label_guidance=guidance or (settings.label_guidance if reads else 0.0), heart_centre=heart_centre,
                          align=wants_rigid(settings.align, inputs.moving, inputs.fixed), label_prior=prior_net, prior_weight=prior_weight)
    if segments and result.prior_label is None:  # the prior did not act, nor its segmentation: the images alone
        guidance = 0.0
    prior = _prior_summary(result, prior_net, settings.label_prior, prior_weight, inputs, notes, steer is not None)
    _check_result(result, inputs, settings, notes)
    stack = _stack_record(settings, inputs, notes, refines, len(getattr(net, "flip_codes", [0])),
                          result.network_read_label) if is_stack_network(net) else None
    return _Run(result, guidance, prior, notes, stack)


#: a field that folded on more than this share of its voxels (%) before :func:`repair_folds` is warned about: trained
#: models leave under 0.2 % (docs/design_notes.md, "functional/fold_repair.py")
FOLD_WARN_PERCENT = 1.0


#: why a 2-D test-time step does not apply to a stack network's field (``summary["stack_network"]["not_applied"]``); the
#: first three (:data:`STACK_REFINED`) do apply when the network has a refinement (``net.refiner.iterations`` > 0)
STACK_NOT_APPLIED = {
    "refinement": "this stack network has no test-time refinement (no refiner, or refiner.iterations 0); its field is used as it is",
    "label_guidance": "the label-guided term acts in the test-time refinement only; label_guidance is 0",
    "label_prior": "the label prior is part of the label-guided term; not used",
    "flip_ensemble": "the network's field is one pass over the stack as given; no flip ensemble (a through-plane network's "
                     "in-plane part takes it)",
    "basal_rules": "the network moves through the plane itself; the stack pipeline's basal rules are not applied on top",
}
#: the steps of :data:`STACK_NOT_APPLIED` that a stack network's 3-D refinement brings
#: (:meth:`~monai_npc.networks.blocks.InstanceRefinement.refine_stack`)
STACK_REFINED = ("refinement", "label_guidance", "label_prior")


def _stack_record(settings: RegisterSettings, inputs: Inputs, notes: List[str], refines: bool, flips: int,
                  read_label: bool = False) -> Dict[str, Any]:
    """``summary["stack_network"]``: the field's through-plane channel comes from the network, ``refined_3d`` whether the
    whole 3-D field was refined (``refines``), ``in_plane_flip_ensemble`` how many in-plane symmetries its in-plane
    field averaged (``flips``), ``network_read_label`` whether the network itself read the moving label (a
    ``label_evidence`` network, ``read_label``), and which 2-D steps did not apply (:data:`STACK_NOT_APPLIED`); without
    a refinement, a label term the caller asked for is warned about."""
    asked = settings.label_terms_asked()
    if asked and inputs.moving_label is not None and not refines:
        _warn(notes, f"{' and '.join(asked)} ignored: this stack network's field has no test-time refinement to steer "
                     "(refiner.iterations 0).")
    return {"through_plane": "network", "refined_3d": bool(refines),
            "refined_channels": "in-plane (the network's through-plane channel kept)" if refines else None,
            "in_plane_flip_ensemble": int(flips), "network_read_label": bool(read_label),
            "not_applied": {k: v for k, v in STACK_NOT_APPLIED.items()
                            if not (refines and k in STACK_REFINED) and not (flips > 1 and k == "flip_ensemble")}}


def _prior_summary(result: PipelineResult, prior_net: Optional[nn.Module], prior_name: Optional[str], weight: float, inputs: Inputs,
                   notes: List[str], label_steers: bool) -> Optional[Dict[str, Any]]:
    """``summary["label_prior"]``: what the prior did (acted, stood aside, or dropped with a warning); ``None`` unasked.
    ``label_steers``: the moving label steered the term (else the prior's segmentation of the moving image did)."""
    if not (weight > 0 and (result.prior_label is not None or result.prior_note)):  # asked for, with a label to steer
        return None
    summary = {"name": prior_name, "weight": weight, "agreement": result.prior_agreement,
               "fixed_agreement": result.prior_fixed_agreement, "carried_agreement": result.prior_carried_agreement,
               "steered": "moving_label" if label_steers else "its segmentation of the moving image"}
    if result.prior_values:  # a label of another convention: its values renamed to the prior's (for the label term if it acts)
        summary["values"] = {str(v): k for v, k in result.prior_values.items()}
    if label_steers and result.prior_agreement is not None and result.prior_agreement >= PRIOR_MIN_AGREEMENT:
        summary["structures"] = label_structures(prior_net, result.prior_values)  # what each of the label's values is
    if not label_steers and result.prior_label is None:  # images only: the helper stands aside, a note only
        summary.update(weight=0.0, aside=f"label prior {prior_name} stood aside: {result.prior_note}. Registered on the images alone.")
    elif result.prior_label is None and result.prior_carried_agreement is not None:  # judged, and not needed: a note only
        why = f"label prior {prior_name} stood aside: {result.prior_note}. Registered without it."
        summary.update(weight=0.0, aside=why)  # not a warning: nothing is wrong with the input
    elif result.prior_label is None:  # it could not act (result.prior_note says why)
        why = f"label prior {prior_name} not used for moving label {inputs.name('moving_label')}: {result.prior_note}. Registered without it."
        summary.update(weight=0.0, dropped=why)
        _warn(notes, why)
    return summary


def _check_result(result: PipelineResult, inputs: Inputs, settings: RegisterSettings, notes: List[str]) -> None:
    """Raise for images that do not overlap; warn for slices left at the identity and a wide label smoothing."""
    moving, fixed = inputs.name("moving"), inputs.name("fixed")
    if result.overlap_percent == 0.0:
        raise ValueError(
            f"moving image {moving} does not overlap fixed image {fixed} in physical space (moving origin "
            f"{tuple(round(v, 2) for v in inputs.moving.GetOrigin())} mm, fixed origin "
            f"{tuple(round(v, 2) for v in inputs.fixed.GetOrigin())} mm, LPS); check their origins and directions, "
            "or register in pixel space (pixel_space=True, --pixel-space)."
        )
    if inputs.moving_label is not None:
        wide = label_sigma_warning(settings.label_sigma, inputs.moving_label, f"moving label {inputs.name('moving_label')}")
        if wide:
            _warn(notes, wide)
    still = result.still
    uncovered = result.uncovered & still
    flat = still & ~uncovered
    if uncovered.any():
        note = (f"fixed slice(s) {np.flatnonzero(uncovered).tolist()} lie outside the moving image (no moving data there): "
                "identity transform, reliability 0 there.")
        _warn(notes, note, f"{moving} -> {fixed}: {note}")
    if flat.any():
        which = "the images are" if flat.all() else f"slice(s) {np.flatnonzero(flat).tolist()} are"
        note = f"{which} constant (or nearly) in the moving or fixed image: identity transform, reliability 0 there."
        _warn(notes, note, f"{moving} -> {fixed}: {note}")


def _registration(run: _Run, inputs: Inputs, settings: RegisterSettings) -> Registration:
    """The :class:`Registration` on the fixed grid, its field's few folds smoothed away
    (:func:`~monai_npc.functional.fold_repair.repair_folds`, recorded in ``run.fold_repair``); its ITK transform, warped
    image and label (what ITK, ANTs and Slicer compute) are built on first use."""
    result, fixed = run.result, inputs.fixed
    rel_img = None if result.reliability is None else image_like(result.reliability, fixed)
    # the written transform is invertible (det J > 0); the repair's determinant is the written field's (summary, jacobian.nii.gz)
    ddf, run.fold_repair, det = repair_folds(result.ddf, return_determinant=True)
    if run.fold_repair["folding_percent_before"] > FOLD_WARN_PERCENT:
        _warn(run.notes, f"the registration's field folded on {run.fold_repair['folding_percent_before']:.2f} % of the "
              f"voxels (det J <= 0), smoothed away before writing ({run.fold_repair['voxels_changed']} voxels changed, "
              "summary fold_repair): far more than a trained model gives; check the model and the inputs.")
    return Registration(
        ddf=torch.from_numpy(ddf).float(), reliability=rel_img, summary={}, fixed=fixed,
        moving=inputs.moving, moving_label=inputs.moving_label, ddf_array=ddf,
        label_sigma=settings.label_sigma,
        prior_label=None if result.prior_label is None else _in_label_values(result.prior_label, result.prior_values, fixed),
        _lazy={} if det is None else {"jacobian": image_like(det, fixed)},
    )


def _in_label_values(prior_label: np.ndarray, values: Optional[Dict[int, int]], fixed) -> "sitk.Image":
    """The prior's segmentation ``(Z, H, W)`` on the fixed grid in the moving label's values: renamed back when the label
    follows another convention (``values``: label value -> prior value; structures it does not name are background), so
    that ``fused_label`` mixes one numbering."""
    if not values:
        return image_like(prior_label, fixed, np.uint8)
    back = np.zeros(int(prior_label.max()) + 1, np.int64)
    for v, k in values.items():
        if k < back.size:
            back[k] = v
    return image_like(back[prior_label], fixed, np.uint8 if max(values) <= 255 else np.int32)


def _figure(run: _Run, inputs: Inputs, name: str) -> Dict[str, Any]:
    """What the overview figure draws: the middle slice on the model grid (labels when a moving label was given)."""
    result, dims = run.result, inputs.fixed.GetDimension()
    moving_m, fixed_m, mid = result.moving_model, result.fixed_model, result.fixed_model.shape[0] // 2
    labels = None
    if inputs.moving_label is not None:
        shown = inputs.moving_label if result.aligned_label is None else result.aligned_label  # as the network saw it
        lab_m = torch.from_numpy(slices_of(resample(shown, result.grid, "nearest", 0), dims).astype(np.float32))
        fixed_lab_m = (slices_of(resample(inputs.fixed_label, result.grid, "nearest", 0), dims) if inputs.fixed_label is not None
                       else np.zeros_like(moving_m))
        carried = warp_image(lab_m[:, None], result.ddf_model[:, -2:].float(), "nearest", "zeros")[:, 0].numpy()  # in-plane
        labels = (lab_m.numpy()[mid], fixed_lab_m[mid], carried[mid])
    turned = result.alignment is not None and result.alignment.applied
    return {
        "moving": moving_m[mid], "fixed": fixed_m[mid], "warped": result.warped_model[mid, 0], "ddf": result.ddf_model[mid, -2:].float(),
        "labels": labels,
        "title": f"{Path(inputs.name('moving') or '').name} -> {Path(inputs.name('fixed') or '').name} ({name}, model grid"
                 + (f"; moving first turned {result.alignment.angle_deg:.1f} deg and shifted "
                    f"{np.hypot(*result.alignment.translation_mm):.1f} mm" if turned else "")
                 + ")",
        "window": None if result.centre is None else (result.grid, mid),  # drawn on the whole fixed slice by the overview
    }
