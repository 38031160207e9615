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
2. :func:`monai_npc.apps.registration.run_pipeline`: for two acquisitions (images that do not
   share a grid, ``align="auto"``) first one rigid in-plane turn and shift of the whole moving image
   (:mod:`monai_npc.apps.align`), then the model grid placed on the fixed image
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
constant (or nearly: intensity range below :data:`monai_npc.apps.registration.CONSTANT_RTOL` of its magnitude) get the
identity, a reliability of 0 and a warning, for every model.
"""

from __future__ import annotations

import json
import os
import time
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple, Union

import numpy as np
import SimpleITK as sitk
import torch
from torch import nn

from monai_npc.functional import dice_by_value, jacobian_determinant, warp_image
from monai_npc.io_safety import HDF5_LOCK, RunFolder
from monai_npc.runtime import use_threads

from .checks import check_inputs, check_tensor, input_warnings, label_sigma_warning
from .images import check_image, check_label, check_same_dims, read_image, resample
from .label_resample import resample_label
from .transforms import ddf_to_physical, displacement_field_transform, write_ants_warp, write_slicer_transform

__all__ = [
    "PHASE_CORRELATION",
    "OUTPUTS",
    "Registration",
    "OutputFolder",
    "register",
    "resolve_model",
    "as_image",
    "compact_label",
    "describe_input",
    "is_phase_correlation",
]

PathLike = Union[str, os.PathLike]
#: what :func:`register` accepts as an image
ImageLike = Union[sitk.Image, str, os.PathLike, np.ndarray, torch.Tensor]

#: ``model`` value of the classical global phase-correlation baseline (no weights)
PHASE_CORRELATION = "phase-correlation"

#: the files :meth:`Registration.save` writes (some only when a label is given, or for 2-D inputs)
OUTPUTS: Dict[str, str] = {
    "warped": "warped.nii.gz",
    "warped_label": "warped_label.nii.gz",
    "transform": "transform.h5",
    "displacement": "displacement.nii.gz",
    "transform_slicer": "transform_slicer.h5",
    "jacobian": "jacobian.nii.gz",
    "reliability": "reliability.nii.gz",
    "overview": "overview.png",
    "summary": "summary.json",
}


def resolve_model(
    model: Union[str, PathLike, nn.Module], device: Union[str, torch.device] = "cpu", refine_iterations: Optional[int] = None,
    num_steps: Optional[int] = None, register_defaults: bool = True,
) -> Tuple[nn.Module, str]:
    """``(network, name)`` for a shipped model name (``"acdc"``...), a ``save_pretrained`` file,
    ``"phase-correlation"`` or an ``nn.Module`` (used as is). The network is in eval mode.

    For NPC weights, ``refine_iterations`` sets the test-time refinement steps after the network
    (:class:`~monai_npc.networks.blocks.InstanceRefinement`) and ``num_steps`` the learned ODE steps
    (:class:`~monai_npc.networks.blocks.WarpODE`, split evenly over its stages); ``None``: the
    weights' register settings (:func:`monai_npc.apps.registration.register_settings`; ``acdc``: 6 ODE
    and 40 refinement steps, the refinement's residual 8 voxels apart, instead of the 10, 50 and 4 it
    was benchmarked on crops with, the ODE's field averaged with the pair turned by 180 degrees
    (``flip_ensemble`` 2), and one heart window per stack, ``net.meta["field_of_view"] =
    "heart-stack"``), else their own; ``register_defaults=False``: the weights' own
    for everything the caller leaves unset (tracking between consecutive frames, which sets its own
    steps, keeps the weights' residual grid and per-slice heart windows). A module is not changed: either given with it warns that it is ignored.
    """
    if refine_iterations is not None and int(refine_iterations) < 0:
        raise ValueError(f"refine_iterations (--refine) must be >= 0, got {refine_iterations}.")
    if num_steps is not None and int(num_steps) < 1:
        raise ValueError(f"num_steps (--steps) must be >= 1, got {num_steps}.")
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
    if getattr(net, "spatial_dims", 2) != 2:
        raise ValueError(f"model {spec} is {net.spatial_dims}-D; register needs a 2-D model.")
    from monai_npc.apps.registration import register_settings

    defaults = register_settings(net) if register_defaults else {}  # acdc: 6 ODE + 40 refinement steps, grid stride 8, heart-stack
    if "field_of_view" in defaults:  # read by model_profile; register(field_of_view=...) still overrides it
        net.meta = {**(getattr(net, "meta", None) or {}), "field_of_view": defaults["field_of_view"]}
    if refine_iterations is None and "refine_iterations" in defaults:
        net.refiner.iterations = defaults["refine_iterations"]
    if "refine_grid_stride" in defaults:
        net.refiner.grid_stride = defaults["refine_grid_stride"]
    if "label_model_mix" in defaults:
        net.refiner.label_model_mix = defaults["label_model_mix"]
    if "flip_ensemble" in defaults and hasattr(net, "set_flip_ensemble"):
        net.set_flip_ensemble(defaults["flip_ensemble"])
    num_steps = defaults.get("num_steps") if num_steps is None else num_steps
    if num_steps is not None:
        net.ode.set_steps(int(num_steps))
    return net.to(device), spec


def is_phase_correlation(model: Any) -> bool:
    """Whether a model argument names the classical baseline (:data:`PHASE_CORRELATION`, or with an underscore)."""
    return isinstance(model, (str, os.PathLike)) and str(model).lower() in (PHASE_CORRELATION, "phase_correlation")


def model_input_size(net: nn.Module, default: int = 128) -> int:
    """In-plane grid size a network was trained at: ``net.meta["input_size"]`` when present, else ``default``."""
    return int((getattr(net, "meta", None) or {}).get("input_size", default))


# ------------------------------------------------------------------------------------------ inputs


def as_image(image: ImageLike, what: str = "image", spacing: Optional[Sequence[float]] = None, select=None) -> sitk.Image:
    """A float32 ``sitk.Image`` from a SimpleITK image, a file/DICOM folder path or an array.

    Args:
        image: ``sitk.Image`` (geometry kept), path (:func:`~monai_npc.interop.images.read_image`),
            numpy array or torch tensor in array order ``([Z,] H, W)`` (origin 0, identity direction),
            a ``MetaTensor`` from MONAI ``LoadImage`` (channel-first or not) or
            :func:`monai_npc.data.io.load_image`, or a nibabel image (their geometry, as ITK reads
            the same file).
        what: how errors name it.
        spacing: mm per array axis (array order, like the array) for arrays; default 1 mm.
        select: for paths, a phase/slice/instance/frame (:func:`~monai_npc.data.io.parse_select`).
    """
    if isinstance(image, sitk.Image):
        from monai_npc.data.io import to_grayscale

        return check_image(to_grayscale(image) if image.GetNumberOfComponentsPerPixel() in (3, 4) else image, what)
    if isinstance(image, (str, os.PathLike)):
        return read_image(image, what, select)
    check_tensor(image, what)
    if isinstance(image, torch.Tensor) and "direction" in (getattr(image, "meta", None) or {}):
        from .images import to_sitk

        return check_image(to_sitk(image), what)
    if isinstance(image, torch.Tensor) and getattr(image, "affine", None) is not None:  # MONAI LoadImage MetaTensor
        from .images import meta_tensor_to_sitk

        return check_image(meta_tensor_to_sitk(image), what)
    if hasattr(image, "affine") and hasattr(image, "header") and hasattr(image, "dataobj"):  # nibabel image
        from .images import nibabel_to_sitk

        return check_image(nibabel_to_sitk(image), what)
    if isinstance(image, torch.Tensor):
        image = image.detach().cpu().numpy()
    if isinstance(image, np.ndarray):
        array = np.asarray(image)
        if array.dtype.kind not in "biuf":
            raise ValueError(f"{what}: arrays of dtype {array.dtype} are not images; pass real numbers (float, int or bool).")
        if array.ndim not in (2, 3):
            raise ValueError(f"{what}: expected a 2-D (H, W) or 3-D (Z, H, W) array, got shape {array.shape}.")
        out = sitk.GetImageFromArray(np.ascontiguousarray(array, dtype=np.float32))
        if spacing is not None:
            sp = [float(s) for s in np.atleast_1d(spacing)]
            if len(sp) != array.ndim or min(sp) <= 0:
                raise ValueError(f"{what}: spacing {tuple(sp)} must give {array.ndim} positive values (mm, array order).")
            out.SetSpacing(sp[::-1])
        return check_image(out, what)
    raise TypeError(f"{what}: expected a SimpleITK image, a path or an array, got {type(image).__name__}.")


def _in_pixel_space(image: sitk.Image, reference: sitk.Image, what: str) -> sitk.Image:
    """``image``'s pixels placed on ``reference``'s geometry (pixel ``i`` of one = pixel ``i`` of the other)."""
    arr = sitk.GetArrayFromImage(image)
    if image.GetDimension() == 3 and arr.shape[0] == 1 and reference.GetDimension() == 2:
        arr = arr[0]
    elif image.GetDimension() == 2 and reference.GetDimension() == 3 and reference.GetSize()[2] == 1:
        arr = arr[None]
    if arr.ndim != reference.GetDimension() or (arr.ndim == 3 and arr.shape[0] != reference.GetSize()[2]):
        raise ValueError(
            f"pixel space needs images with the same number of slices: {what} has size {image.GetSize()}, "
            f"the fixed image {reference.GetSize()}."
        )
    out = sitk.GetImageFromArray(arr)
    out.SetSpacing(reference.GetSpacing())
    out.SetOrigin(reference.GetOrigin())
    out.SetDirection(reference.GetDirection())
    return out


def compact_label(label: sitk.Image) -> sitk.Image:
    """``label`` in the smallest integer type that holds its values (uint8 for most label maps), geometry kept:
    what ``warped_label.nii.gz`` holds."""
    array = sitk.GetArrayViewFromImage(label)
    lo, hi = int(array.min(initial=0)), int(array.max(initial=0))
    kind = np.uint8 if lo >= 0 and hi < 256 else np.int16 if -32768 <= lo and hi < 32768 else np.int32
    out = sitk.GetImageFromArray(np.asarray(array).astype(kind))
    out.CopyInformation(label)
    return out


def _dice(a: np.ndarray, b: np.ndarray, labels: Sequence[int]) -> Dict[str, Optional[float]]:
    """Dice of each label value, keyed by its string (``None`` when absent from both maps)."""
    return {str(v): d for v, d in dice_by_value(a, b, labels).items()}


def _mean(values: Mapping[str, Optional[float]]) -> Optional[float]:
    finite = [v for v in values.values() if v is not None]
    return float(np.mean(finite)) if finite else None


def describe_input(x: Any) -> Optional[str]:
    """How messages and summaries name an input: its path; for an in-memory image its type, and the
    file it was read from when it says so (a MONAI ``MetaTensor``'s ``filename_or_obj``, a nibabel
    image's file name)."""
    if x is None:
        return None
    if isinstance(x, (str, os.PathLike)):
        return str(x)
    source = getattr(x, "meta", {}).get("filename_or_obj") if isinstance(getattr(x, "meta", None), Mapping) else None
    if source is None and callable(getattr(x, "get_filename", None)):
        source = x.get_filename()
    if isinstance(source, (list, tuple)):  # a batch's list of names
        source = source[0] if len(source) == 1 else None
    return f"<in-memory {type(x).__name__}" + (f" of {source}>" if isinstance(source, (str, os.PathLike)) and str(source) else ">")


# ----------------------------------------------------------------------------------------- outputs


class OutputFolder(RunFolder):
    """The output folder of :meth:`Registration.save` (:class:`~monai_npc.io_safety.RunFolder`): it may
    only hold files of a previous run (:data:`OUTPUTS`) and is replaced as a whole by :meth:`commit`.
    Created *before* any work, so that a bad ``out`` fails at once with a ``ValueError`` naming it;
    :meth:`discard` removes the temporary folder after a failure.
    """

    def __init__(self, out: PathLike) -> None:
        super().__init__(out, OUTPUTS.values())


@dataclass
class Registration:
    """The result of :func:`register`, all on the fixed image's grid (full resolution, LPS mm).

    Attributes:
        warped: the moving image resampled through ``transform`` (float32 ``sitk.Image``).
        warped_label: the moving label map resampled through ``transform`` with ``sitk.sitkLabelLinear``
            (each value interpolated linearly, the largest wins; ANTs ``-n GenericLabel``; int32), each
            value's indicator first smoothed in-plane by ``label_sigma`` voxels when that is above 0
            (:func:`~monai_npc.interop.label_resample.resample_label`), or ``None``. Label-linear against
            nearest neighbour: +0.0011 whole-stack Dice on the 88 training and +0.0012 on the 52
            validation pairs of ``acdc70_split`` (better on 83 and 48 of them); smoothing by 1 voxel
            another +0.0012 on both.
        transform: ``sitk.DisplacementFieldTransform``: fixed point (LPS mm) -> moving point;
            ``sitk.Resample(moving, fixed, transform, sitk.sitkLinear, 0.0)`` reproduces ``warped``.
        ddf: ``(D, *S)`` float32 tensor, fixed voxels, array order, MONAI ``Warp`` convention
            (``warped(i) = moving_on_fixed_grid(i + ddf(i))``); 3-D inputs have a zero channel 0.
        jacobian: ``det(I + grad u)`` (float32 ``sitk.Image``; <= 0 means folding).
        reliability: residual reliability map of NPC models (float32 ``sitk.Image``; 0 on slices
            registered as identity because an image is constant), ``None`` for other models.
        summary: model, times, overlap, folding, Jacobian, displacement in mm, Dice (with both
            labels), grids, warnings: what ``summary.json`` holds.
        prior_label: the label prior's own segmentation of the fixed image (uint8 ``sitk.Image``, the
            most likely value per voxel, 0 outside the heart window) when the prior acted
            (``summary["label_prior"]``), else ``None``. Not the registration's result: what the
            refinement was steered by (:mod:`monai_npc.functional.label_prior`), and what
            :func:`monai_npc.tracking.through_plane.basal_left_by_prior` reads.

    ``transform``, ``warped`` and ``warped_label`` are built on first use (then kept): a caller
    that needs only ``ddf``, such as :func:`monai_npc.track` over a cine, does not pay for them.
    """

    ddf: torch.Tensor
    jacobian: sitk.Image
    reliability: Optional[sitk.Image]
    summary: Dict[str, Any]
    fixed: sitk.Image = field(repr=False)
    #: the (canonical) moving image and label map the lazy outputs resample
    moving: Optional[sitk.Image] = field(default=None, repr=False)
    moving_label: Optional[sitk.Image] = field(default=None, repr=False)
    #: in-plane Gaussian width (moving voxels) of each label's indicator before ``warped_label``'s resampling
    label_sigma: float = 0.0
    #: ``ddf`` in float64, what ``transform`` is built from
    ddf_array: Optional[np.ndarray] = field(default=None, repr=False)
    prior_label: Optional[sitk.Image] = field(default=None, repr=False)
    _figure: Dict[str, Any] = field(default_factory=dict, repr=False)
    _lazy: Dict[str, Any] = field(default_factory=dict, repr=False)

    @property
    def transform(self) -> sitk.DisplacementFieldTransform:
        if "transform" not in self._lazy:
            ddf = self.ddf_array if self.ddf_array is not None else self.ddf.double().numpy()
            self._lazy["transform"] = displacement_field_transform(ddf, self.fixed)
        return self._lazy["transform"]

    @property
    def warped(self) -> sitk.Image:
        if "warped" not in self._lazy:
            self._lazy["warped"] = sitk.Resample(self.moving, self.fixed, self.transform, sitk.sitkLinear, 0.0, sitk.sitkFloat32)
        return self._lazy["warped"]

    @property
    def warped_label(self) -> Optional[sitk.Image]:
        if "warped_label" not in self._lazy:
            self._lazy["warped_label"] = None if self.moving_label is None else resample_label(
                self.moving_label, self.fixed, self.transform, self.label_sigma)
        return self._lazy["warped_label"]

    @warped_label.setter
    def warped_label(self, image: Optional[sitk.Image]) -> None:
        """Replace the warped label (e.g. after a through-plane correction on the fixed grid)."""
        self._lazy["warped_label"] = image

    def save(self, out: Union[PathLike, OutputFolder], overview: bool = True) -> Dict[str, Any]:
        """Write :data:`OUTPUTS` into ``out`` all or nothing and return the summary written to ``summary.json``.

        Every file is flushed and read back before ``out`` is replaced as a whole (see
        :class:`OutputFolder`); a failure (disk full, permission...) removes the partial files,
        keeps the previous ``out`` and raises :class:`~monai_npc.io_safety.OutputError`, one line
        naming the file and the cause.
        """
        t0 = time.perf_counter()
        folder = out if isinstance(out, OutputFolder) else OutputFolder(out)
        try:
            files = self._write_files(folder, overview)
            summary = dict(self.summary)
            summary["seconds"] = summary.get("seconds", 0.0) + time.perf_counter() - t0
            summary["outputs"] = files
            folder.put(OUTPUTS["summary"], lambda p: p.write_text(json.dumps(summary, indent=2)))
            folder.commit()
        except BaseException:
            folder.discard()
            raise
        return summary

    def _write_files(self, folder: OutputFolder, overview: bool) -> Dict[str, str]:
        files: Dict[str, str] = {}

        def put(key: str, writer) -> None:
            files[key] = OUTPUTS[key]
            folder.put(OUTPUTS[key], writer)

        def image(img: sitk.Image):
            return lambda p: sitk.WriteImage(img, str(p), True)

        ddf = self.ddf.double().numpy()
        put("warped", image(self.warped))
        if self.warped_label is not None:
            put("warped_label", image(compact_label(self.warped_label)))
        with HDF5_LOCK:
            put("transform", lambda p: sitk.WriteTransform(self.transform, str(p)))
            if self.fixed.GetDimension() == 2:
                put("transform_slicer", lambda p: write_slicer_transform(ddf, self.fixed, p))
        put("displacement", lambda p: write_ants_warp(ddf, self.fixed, p))
        put("jacobian", image(self.jacobian))
        if self.reliability is not None:
            put("reliability", image(self.reliability))
        if overview and self._figure:
            put("overview", self._overview)
        files["summary"] = OUTPUTS["summary"]
        return files

    def _overview(self, path: Path) -> None:
        from monai_npc.viz.quicklook import registration_overview

        f = self._figure
        s = self.summary
        dice = f"Dice {s['dice_mean']:.3f}" if s.get("dice_mean") is not None else ""
        registration_overview(
            f["moving"], f["fixed"], f["warped"], f["ddf"], path, title=f["title"], labels=f.get("labels"),
            captions=["", "", dice, "", f"folding {s['folding_percent']:.2f} %"],
            context=None if f.get("window") is None else _window_outline(self.fixed, *f["window"]),
        )


# -------------------------------------------------------------------------------------------- core


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
            (:func:`monai_npc.apps.registration.register_settings`: 40 for ``acdc``), else their own.
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
            label is used). ``None``: :data:`monai_npc.apps.registration.LABEL_GUIDANCE`; 0 = off
            (the field then depends on the images only). Set above 0 without a ``moving_label``: a warning.
        label_sigma: ``warped_label``'s in-plane smoothing of each label before it is resampled, in
            moving voxels (``--label-sigma``; :func:`monai_npc.interop.label_resample.resample_label`);
            0: ITK's ``sitkLabelLinear`` exactly, as ANTs and Slicer resample a label with
            ``transform.h5``. ``None``: the weights' register setting (1 for ``acdc``: +0.0012 whole-stack
            Dice on the validation and training pairs; 1 for ``camus``: +0.0035 on 100 validation pairs), else 0.
        num_steps: learned ODE steps of an NPC network (``--steps``; split evenly over its
            stages); ``None``: the weights' register setting (6 for ``acdc``, whose weights say
            10: on the validation and training patients 6 ODE + 40 refinement steps give the
            Dice and LV EF error of 10 + 50 in about 80 % of the time, README), else their own.
        heart_centre: for ``"heart"`` models, the window's in-plane centre ``(row, col)`` in fixed
            voxels (array order), one for every slice or one per slice; ``None`` (default): found
            from the two images (:func:`monai_npc.apps.localize.motion_centre`, per slice or per stack).
        align: ``"auto"`` (default): images that do not share a grid (two acquisitions: another
            study, another scanner session) are first aligned by one rigid in-plane turn and shift
            (:func:`monai_npc.apps.align.rigid_in_plane`, mutual information; ``summary.json``
            ``alignment``), frames of one series (the same grid) are not; ``"rigid"``: always;
            ``"none"``: never (``--align``). The network learned the motion within one
            acquisition, not a patient turned between two (docs/interop.md, "Rigid pre-alignment").
        label_prior: with a ``moving_label`` (and the label-guided term on), the weight within that
            term of a segmentation network's view of the fixed image (``--label-prior``;
            :class:`~monai_npc.networks.nets.LabelPrior`, :mod:`monai_npc.functional.label_prior`):
            each carried label pays ``-log p_label`` on the fixed voxels it covers. The network is the
            one the weights' register settings name (``acdc``: ``acdc_heart``, weight 8: +0.035 whole-stack
            Dice on the 52 validation pairs, README). ``None``: that setting (0 for models that name none);
            0 = off. It acts only where its segmentation of the moving image agrees with the moving label
            (else a warning, and the summary's ``label_prior.dropped`` says why). Set above 0 without a
            ``moving_label``: a warning.

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


def _label_prior_setting(settings: Mapping[str, Any], label_prior: Optional[float], model_name: str) -> Tuple[Optional[str], float]:
    """``(prior name, weight)`` for ``register``: the weights' register settings, ``label_prior`` overriding the weight."""
    name = settings.get("label_prior")
    if label_prior is None:
        return name, float(settings.get("label_prior_weight", 1.0)) if name else 0.0
    weight = float(label_prior)
    if not (np.isfinite(weight) and weight >= 0):
        raise ValueError(f"label_prior (--label-prior) must be a finite number >= 0, got {label_prior}.")
    if weight > 0 and not name:
        raise ValueError(f"label_prior (--label-prior) {label_prior}: model {model_name} names no label prior in its register settings "
                         "(the acdc weights do: acdc_heart); leave it unset or 0 for this model.")
    return name, weight


def _register(moving, fixed, model, moving_label, fixed_label, spacing, moving_select, fixed_select, pixel_space,
              size, keep_aspect, device, model_name, refine_iterations=None, field_of_view=None, label_guidance=None,
              num_steps=None, heart_centre=None, label_sigma=None, align="auto", label_prior=None) -> Registration:
    t0 = time.perf_counter()
    from monai_npc.apps.align import check_align, wants_rigid

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
        moving_img = _in_pixel_space(moving_img, fixed_img, f"moving image {describe_input(moving)}")
        if moving_lab is not None:
            moving_lab = _in_pixel_space(moving_lab, fixed_img, f"moving label {describe_input(moving_label)}")
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
    from monai_npc.apps.registration import LABEL_GUIDANCE, model_profile, register_settings, run_pipeline, slices_of

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
    prior_name, prior_weight = _label_prior_setting(settings, label_prior, name)
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
        prior_summary = {"name": prior_name, "weight": prior_weight, "agreement": result.prior_agreement}
        if result.prior_label is None:  # it did not act (result.prior_note says why)
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
    rel_img = None if result.reliability is None else _image_like(result.reliability, fixed_img)
    summary: Dict[str, Any] = {}
    reg = Registration(
        ddf=torch.from_numpy(ddf_out).float(), jacobian=_image_like(jac, fixed_img), reliability=rel_img, summary=summary, fixed=fixed_img,
        moving=moving_img, moving_label=moving_lab, ddf_array=ddf_out, label_sigma=sigma,
        prior_label=None if result.prior_label is None else _image_like(result.prior_label, fixed_img, np.uint8),
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


def _window_outline(fixed: sitk.Image, grid: sitk.Image, z: int) -> Tuple[np.ndarray, np.ndarray]:
    """``(slice z of the fixed image (H, W), the model grid's outline on it (4, 2) (row, col) voxels)``:
    where the heart window lies in the whole field of view (the overview's last panel)."""
    n = grid.GetSize()[0] - 1, grid.GetSize()[1] - 1
    corners = []
    for i, j in ((0, 0), (n[0], 0), (n[0], n[1]), (0, n[1])):
        index = (i, j, z) if grid.GetDimension() == 3 else (i, j)
        c = fixed.TransformPhysicalPointToContinuousIndex(grid.TransformContinuousIndexToPhysicalPoint([float(v) for v in index]))
        corners.append((c[1], c[0]))
    arr = sitk.GetArrayFromImage(fixed)
    return (arr[z] if fixed.GetDimension() == 3 else arr), np.asarray(corners)


def _image_like(array: np.ndarray, reference: sitk.Image, dtype: type = np.float32) -> sitk.Image:
    """A ``(Z, H, W)`` array as a ``dtype`` ``sitk.Image`` on ``reference``'s grid (2-D drops ``Z``)."""
    arr = array[0] if reference.GetDimension() == 2 else array
    image = sitk.GetImageFromArray(np.ascontiguousarray(arr, dtype=dtype))
    image.CopyInformation(reference)
    return image
