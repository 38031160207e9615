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
through-plane displacement is zero), as the models are 2-D. Slices where either image is
constant (or nearly: intensity range below :data:`monai_npc.apps.registration.grids.CONSTANT_RTOL` of its magnitude) get the
identity, a reliability of 0 and a warning, for every model.
"""

from __future__ import annotations

import time
import warnings
from pathlib import Path
from typing import Any, Dict, List, Mapping, Optional, Sequence, Union

import numpy as np
import SimpleITK as sitk
import torch
from torch import nn

from monai_npc.functional import dice_by_value, jacobian_determinant, warp_image
from monai_npc.interop.checks import check_inputs, input_warnings, label_sigma_warning
from monai_npc.interop.images import check_label, check_same_dims, resample
from monai_npc.interop.inputs import ImageLike, PathLike, as_image, describe_input, image_like, in_pixel_space
from monai_npc.interop.transforms import ddf_to_physical
from monai_npc.runtime import use_threads

from .align import check_align, wants_rigid
from .grids import slices_of
from .label_prior import label_prior_setting
from .models import model_input_size, model_profile, register_settings, resolve_model
from .pipeline import LABEL_GUIDANCE, run_pipeline
from .result import Registration

__all__ = ["register"]


def _dice(a: np.ndarray, b: np.ndarray, labels: Sequence[int]) -> Dict[str, Optional[float]]:
    """Dice of each label value, keyed by its string (``None`` when absent from both maps)."""
    return {str(v): d for v, d in dice_by_value(a, b, labels).items()}


def _mean(values: Mapping[str, Optional[float]]) -> Optional[float]:
    finite = [v for v in values.values() if v is not None]
    return float(np.mean(finite)) if finite else None


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
            ``save_pretrained`` file, ``"phase-correlation"`` or a network (``(B, 2, h, w) -> (B, 2, h, w)``).
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
            (:func:`monai_npc.apps.registration.models.register_settings`: 40 for ``acdc``), else their own.
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
            label is used). ``None``: :data:`monai_npc.apps.registration.pipeline.LABEL_GUIDANCE`; 0 = off
            (the field then depends on the images only). Set above 0 without a ``moving_label``: a warning.
        label_sigma: ``warped_label``'s in-plane smoothing of each label before it is resampled, in
            moving voxels (``--label-sigma``; :func:`monai_npc.interop.label_resample.resample_label`);
            0: ITK's ``sitkLabelLinear`` exactly, as ANTs and Slicer resample a label with
            ``transform.h5``. ``None``: the weights' register setting (1 for ``acdc`` and ``camus``: the
            carried outline is smooth as expert contours are, docs/design_notes.md, "Register settings of
            the shipped models"), else 0.
        num_steps: learned ODE steps of an NPC network (``--steps``; split evenly over its
            stages); ``None``: the weights' register setting (6 for ``acdc``, whose weights say
            10: with 40 refinement steps as accurate as 10 + 50, in less time; docs/design_notes.md,
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
            0 = off. It acts only where its segmentation of the moving image agrees with the moving label
            and its segmentation of the fixed image overlaps it (else a warning, and the summary's
            ``label_prior.dropped`` says why), and where the label the network's own field carries is further
            from its segmentation of the fixed image than the moving label is from its segmentation of the moving
            image (else it stands aside without a warning: ``label_prior.aside``, with ``carried_agreement``).
            Set above 0 without a ``moving_label``: a warning.

    Raises:
        FileNotFoundError: a missing image, label or weights file.
        ValueError: unreadable or truncated files, different dimensionality, NaN/Inf values,
            label maps off their image's grid, images that do not overlap in physical space,
            unusable models, arrays that are not real-valued.
    """
    with use_threads(threads):
        return _register(
            moving, fixed, model, moving_label, fixed_label, spacing, moving_select, fixed_select, pixel_space,
            size, keep_aspect, device, model_name, refine_iterations, field_of_view, label_guidance, num_steps, heart_centre,
            label_sigma, align, label_prior,
        )


def _register(moving, fixed, model, moving_label, fixed_label, spacing, moving_select, fixed_select, pixel_space,
              size, keep_aspect, device, model_name, refine_iterations=None, field_of_view=None, label_guidance=None,
              num_steps=None, heart_centre=None, label_sigma=None, align="auto", label_prior=None) -> Registration:
    t0 = time.perf_counter()
    check_align(align, "align (--align)")  # before any reading
    net, name = resolve_model(model, device, refine_iterations, num_steps)
    name = model_name or name
    fixed_img = as_image(fixed, "fixed image", spacing, fixed_select)
    moving_img = as_image(moving, "moving image", spacing, moving_select)
    fixed_lab = moving_lab = None
    if fixed_label is not None:
        fixed_lab = check_label(as_image(fixed_label, "fixed label", spacing), fixed_img,
                                f"fixed label {describe_input(fixed_label)}", f"its image {describe_input(fixed)}")
    if moving_label is not None:
        moving_lab = check_label(as_image(moving_label, "moving label", spacing), moving_img,
                                 f"moving label {describe_input(moving_label)}", f"its image {describe_input(moving)}")
    if pixel_space:
        moving_img = in_pixel_space(moving_img, fixed_img, f"moving image {describe_input(moving)}")
        if moving_lab is not None:
            moving_lab = in_pixel_space(moving_lab, fixed_img, f"moving label {describe_input(moving_label)}")
    check_same_dims(moving_img, fixed_img, describe_input(moving), describe_input(fixed))
    dims = fixed_img.GetDimension()
    if dims == 3 and fixed_img.GetSize()[2] > 1 and moving_img.GetSize()[2] == 1:
        from monai_npc.data.io import parse_select

        why = ""
        if "frame" in parse_select(moving_select):  # frame=K of a 3-D file takes its slice K (a 2-D + time sequence)
            why = (f" (moving_select / --moving-select {moving_select!r} took one slice of it: frame=K picks a frame of a 4-D file or "
                   "a slice of a 3-D one; leave it out to register the whole stack)")
        raise ValueError(
            f"fixed image {describe_input(fixed)} has {fixed_img.GetSize()[2]} slices but moving image {describe_input(moving)} has one{why}."
        )
    check_inputs(moving_img, fixed_img, describe_input(moving), describe_input(fixed), size or model_input_size(net), keep_aspect)
    notes: List[str] = input_warnings(moving_img, fixed_img, describe_input(moving), describe_input(fixed), moving_lab, fixed_lab,
                                      f"moving label {describe_input(moving_label)}", f"fixed label {describe_input(fixed_label)}")
    for note in notes:
        warnings.warn(note, RuntimeWarning, stacklevel=3)

    # 1-5. canonical geometry, localisation, model grid, every slice, field pasted back on the fixed grid
    profile = model_profile(net, size, field_of_view)
    settings = register_settings(net)
    sigma = float(settings.get("label_sigma", 0.0)) if label_sigma is None else float(label_sigma)
    if not np.isfinite(sigma) or sigma < 0:
        raise ValueError(f"label_sigma (--label-sigma) must be a finite number >= 0 (voxels), got {label_sigma}.")
    guidance = LABEL_GUIDANCE if label_guidance is None else float(label_guidance)
    if guidance < 0:
        raise ValueError(f"label_guidance (--label-guidance) must be >= 0, got {label_guidance}.")
    # the term acts only in an NPC network's test-time refinement, with a moving label: else it is 0 (and recorded so)
    refines = getattr(getattr(net, "refiner", None), "iterations", 0) > 0
    asked = [n for n, v in (("label_guidance (--label-guidance)", label_guidance), ("label_prior (--label-prior)", label_prior)) if v]
    if asked and moving_lab is None:  # set by the caller, with nothing to steer: say so rather than drop it silently
        notes.append(f"{' and '.join(asked)} ignored: the label-guided term steers a moving label (moving_label, --moving-label), and none was given.")
        warnings.warn(notes[-1], RuntimeWarning, stacklevel=3)
    guidance = guidance if moving_lab is not None and refines else 0.0
    prior_name, prior_weight = label_prior_setting(settings, label_prior, name)
    prior_weight = prior_weight if guidance > 0 else 0.0  # it is part of the label-guided term
    prior_net = None
    if prior_weight > 0:
        from monai_npc.networks.nets.label_prior import load_label_prior

        prior_net = load_label_prior(prior_name, device)
    result = run_pipeline(net, moving_img, fixed_img, profile, keep_aspect, device, moving_label=moving_lab,
                          label_guidance=guidance, heart_centre=heart_centre, align=wants_rigid(align, moving_img, fixed_img),
                          label_prior=prior_net, prior_weight=prior_weight)
    overlap, still, grid = result.overlap_percent, result.still, result.grid
    prior_summary = None
    if prior_weight > 0 and (result.prior_label is not None or result.prior_note):  # asked for, with a label to steer
        prior_summary = {"name": prior_name, "weight": prior_weight, "agreement": result.prior_agreement,
                         "fixed_agreement": result.prior_fixed_agreement, "carried_agreement": result.prior_carried_agreement}
        if result.prior_label is None and result.prior_carried_agreement is not None:  # judged, and not needed: a note only
            why = f"label prior {prior_name} stood aside: {result.prior_note}. Registered without it."
            prior_summary.update(weight=0.0, aside=why)  # not a warning: nothing is wrong with the input
        elif result.prior_label is None:  # it could not act (result.prior_note says why)
            why = f"label prior {prior_name} not used for moving label {describe_input(moving_label)}: {result.prior_note}. Registered without it."
            prior_summary.update(weight=0.0, dropped=why)
            notes.append(why)
            warnings.warn(why, RuntimeWarning, stacklevel=3)
    if overlap == 0.0:
        raise ValueError(
            f"moving image {describe_input(moving)} does not overlap fixed image {describe_input(fixed)} in physical space (moving origin "
            f"{tuple(round(v, 2) for v in moving_img.GetOrigin())} mm, fixed origin "
            f"{tuple(round(v, 2) for v in fixed_img.GetOrigin())} mm, LPS); check their origins and directions, "
            "or register in pixel space (pixel_space=True, --pixel-space)."
        )
    wide = label_sigma_warning(sigma, moving_lab, f"moving label {describe_input(moving_label)}") if moving_lab is not None else None
    if wide:
        notes.append(wide)
        warnings.warn(wide, RuntimeWarning, stacklevel=3)
    uncovered = result.uncovered & still
    flat = still & ~uncovered
    if uncovered.any():
        notes.append(f"fixed slice(s) {np.flatnonzero(uncovered).tolist()} lie outside the moving image (no moving data there): "
                     "identity transform, reliability 0 there.")
        warnings.warn(f"{describe_input(moving)} -> {describe_input(fixed)}: {notes[-1]}", RuntimeWarning, stacklevel=3)
    if flat.any():
        which = "the images are" if flat.all() else f"slice(s) {np.flatnonzero(flat).tolist()} are"
        notes.append(f"{which} constant (or nearly) in the moving or fixed image: identity transform, reliability 0 there.")
        warnings.warn(f"{describe_input(moving)} -> {describe_input(fixed)}: {notes[-1]}", RuntimeWarning, stacklevel=3)
    ddf_m, warped_m, moving_m, fixed_m = result.ddf_model, result.warped_model, result.moving_model, result.fixed_model
    seconds_network = result.seconds_network

    # 6. the result on the fixed grid; its ITK transform, warped image and label (what ITK, ANTs and
    # Slicer compute) are built on first use
    ddf_out = result.ddf
    ddf_f = torch.from_numpy(ddf_out[1:] if dims == 3 else ddf_out[:, None]).permute(1, 0, 2, 3)  # (Z, 2, H, W)
    jac = jacobian_determinant(ddf_f).float().numpy()  # (Z, H, W); in-plane = full det (no through-plane motion)
    rel_img = None if result.reliability is None else image_like(result.reliability, fixed_img)
    summary: Dict[str, Any] = {}
    reg = Registration(
        ddf=torch.from_numpy(ddf_out).float(), jacobian=image_like(jac, fixed_img), reliability=rel_img, summary=summary, fixed=fixed_img,
        moving=moving_img, moving_label=moving_lab, ddf_array=ddf_out, label_sigma=sigma,
        prior_label=None if result.prior_label is None else image_like(result.prior_label, fixed_img, np.uint8),
    )

    # 4. summary
    norm_mm = np.linalg.norm(ddf_to_physical(ddf_out, fixed_img.GetSpacing(), fixed_img.GetDirection()), axis=-1)
    summary.update({
        "model": name,
        "moving": describe_input(moving),
        "fixed": describe_input(fixed),
        "moving_label": describe_input(moving_label),
        "fixed_label": describe_input(fixed_label),
    })
    steps = {"num_steps": getattr(getattr(net, "ode", None), "num_steps", None),
             "refine_iterations": getattr(getattr(net, "refiner", None), "iterations", None)}
    if any(v is not None for v in steps.values()):  # an NPC network: its ODE and refinement steps
        summary["steps"] = steps
    if moving_select or fixed_select:
        summary["select"] = {"moving": moving_select, "fixed": fixed_select}
    if pixel_space:
        summary["pixel_space"] = True
    summary["alignment"] = result.alignment.as_dict() if result.alignment is not None else {"method": "none", "align": align}
    labels_m = None
    if moving_lab is not None:
        shown = moving_lab if result.aligned_label is None else result.aligned_label  # as the network saw it
        lab_m = torch.from_numpy(slices_of(resample(shown, grid, "nearest", 0), dims).astype(np.float32))
        fixed_lab_m = slices_of(resample(fixed_lab, grid, "nearest", 0), dims) if fixed_lab is not None else np.zeros_like(moving_m)
        labels_m = (lab_m.numpy(), fixed_lab_m, warp_image(lab_m[:, None], ddf_m.float(), "nearest", "zeros")[:, 0].numpy())
        if fixed_lab is not None:
            fixed_arr = sitk.GetArrayFromImage(fixed_lab)
            initial = sitk.GetArrayFromImage(
                sitk.Resample(moving_lab, fixed_img, sitk.Transform(), sitk.sitkNearestNeighbor, 0, sitk.sitkInt32)
            )
            after = sitk.GetArrayFromImage(reg.warped_label)
            values = sorted(int(v) for v in set(np.unique(fixed_arr)) | set(np.unique(initial)) if v > 0)
            summary["dice"] = _dice(after, fixed_arr, values)
            summary["dice_mean"] = _mean(summary["dice"])
            summary["dice_initial"] = _dice(initial, fixed_arr, values)
            summary["dice_mean_initial"] = _mean(summary["dice_initial"])
    if rel_img is not None:  # over the voxels the network looked at (a heart window: not the whole field of view)
        region = result.reliability_region.reshape(result.reliability.shape)
        summary["reliability_mean"] = float(result.reliability[region].mean()) if region.any() else 0.0
        summary["reliability_coverage_percent"] = float(100.0 * region.mean())
    elif still.all():
        summary["reliability_mean"] = 0.0
    summary.update(
        overlap_percent=overlap,
        folding_percent=float(100.0 * (jac <= 0).mean()),
        jacobian_min=float(jac.min()),
        displacement_mm_mean=float(norm_mm.mean()),
        displacement_mm_max=float(norm_mm.max()),
        identity_slices=np.flatnonzero(still).tolist(),
        warnings=notes,
        seconds_network=seconds_network,
        label_guidance=guidance,
        label_prior=prior_summary,
        label_sigma=sigma if moving_lab is not None else 0.0,
        model_grid={
            "size": list(grid.GetSize()), "spacing_mm": list(grid.GetSpacing()), "origin_mm": list(grid.GetOrigin()),
            "field_of_view": profile.field_of_view,
            "centre_voxel": None if result.centre is None else [round(c, 2) for c in result.centre],
        },
        fixed_grid={
            "size": list(fixed_img.GetSize()),
            "spacing_mm": list(fixed_img.GetSpacing()),
            "origin_mm": list(fixed_img.GetOrigin()),
            "direction": list(fixed_img.GetDirection()),
        },
        convention=(
            "transform.h5 and displacement.nii.gz: displacement u(p) in LPS mm on the fixed grid, "
            "p + u(p) = corresponding moving point (resample the moving image with it)."
        ),
    )
    mid = fixed_m.shape[0] // 2
    figure = {
        "moving": moving_m[mid], "fixed": fixed_m[mid], "warped": warped_m[mid, 0], "ddf": ddf_m[mid].float(),
        "labels": None if labels_m is None else tuple(lab[mid] for lab in labels_m),
        "title": f"{Path(describe_input(moving) or '').name} -> {Path(describe_input(fixed) or '').name} ({name}, model grid"
                 + (f"; moving first turned {result.alignment.angle_deg:.1f} deg and shifted "
                    f"{np.hypot(*result.alignment.translation_mm):.1f} mm" if result.alignment is not None and result.alignment.applied else "")
                 + ")",
        "window": None if result.centre is None else (grid, mid),  # drawn on the whole fixed slice by the overview
    }
    summary["seconds"] = time.perf_counter() - t0
    reg._figure = figure
    return reg
