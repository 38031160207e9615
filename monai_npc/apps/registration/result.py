"""What ``register`` returns (:class:`Registration`) and the files it writes (:data:`OUTPUTS`)."""

from __future__ import annotations

import json
import os
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Dict, Optional, Tuple, Union

import numpy as np
import SimpleITK as sitk
import torch

from monai_npc.functional.label_fusion import FUSION_MIN_AGREEMENT, FUSION_MIN_PRIOR_AGREEMENT, fuse_by_slice
from monai_npc.interop.inputs import image_like
from monai_npc.interop.label_resample import resample_label
from monai_npc.functional.fold_repair import field_determinant as field_jacobian  # the written field's det J (re-exported)
from monai_npc.interop.transforms import ddf_to_physical, displacement_field_transform, write_ants_warp, write_slicer_transform
from monai_npc.io_safety import HDF5_LOCK, RunFolder

__all__ = ["OUTPUTS", "OutputFolder", "Registration", "compact_label", "field_jacobian"]

PathLike = Union[str, os.PathLike]


#: the files :meth:`Registration.save` writes (some only when a label is given, or for 2-D inputs)
OUTPUTS: Dict[str, str] = {
    "warped": "warped.nii.gz",
    "warped_label": "warped_label.nii.gz",
    "fused_label": "fused_label.nii.gz",
    "transform": "transform.h5",
    "displacement": "displacement.nii.gz",
    "transform_slicer": "transform_slicer.h5",
    "jacobian": "jacobian.nii.gz",
    "reliability": "reliability.nii.gz",
    "overview": "overview.png",
    "summary": "summary.json",
}


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
            (:func:`~monai_npc.interop.label_resample.resample_label`), or ``None``. Label-linear rather
            than nearest neighbour, and the smoothing, for outlines closer to expert contours
            (docs/design_notes.md, "apps/registration/result.py").
        transform: ``sitk.DisplacementFieldTransform``: fixed point (LPS mm) -> moving point;
            ``sitk.Resample(moving, fixed, transform, sitk.sitkLinear, 0.0)`` reproduces ``warped``.
        ddf: ``(D, *S)`` float32 tensor, fixed voxels, array order, MONAI ``Warp`` convention
            (``warped(i) = moving_on_fixed_grid(i + ddf(i))``); 3-D inputs have a zero channel 0.
        jacobian: ``det(I + grad u)`` of the field it writes (float32 ``sitk.Image``; <= 0 means folding): in-plane for a
            field without a through-plane component, the full 3-D determinant with one (:func:`field_jacobian`).
        reliability: residual reliability map of NPC models (float32 ``sitk.Image``; 0 on slices
            registered as identity because an image is constant), ``None`` for other models.
        summary: model, times, overlap, folding, Jacobian, displacement in mm, Dice (with both
            labels), grids, warnings: what ``summary.json`` holds.
        prior_label: the label prior's own segmentation of the fixed image (uint8 ``sitk.Image``, the
            most likely value per voxel, 0 outside the heart window) when the prior acted
            (``summary["label_prior"]``), else ``None``. Not the registration's result: what the
            refinement was steered by (:mod:`monai_npc.functional.label_prior`), and what
            :func:`monai_npc.cardiac.through_plane.basal_left_by_prior` reads.
        fused_label: when the prior acted and agrees with the moving label on the moving image at least
            :data:`~monai_npc.functional.label_fusion.FUSION_MIN_PRIOR_AGREEMENT` (else ``summary["fused_label"]``
            says why there is none), an estimate of the fixed image's label of its own
            (:func:`~monai_npc.functional.label_fusion.fuse_by_slice`): the prior's segmentation on the slices
            where it agrees with ``warped_label`` (mean Dice >= 0.5), ``warped_label`` on the others (uint8
            ``sitk.Image``); ``None`` otherwise. Not what the transform does (``warped_label`` is): the best label
            ``register`` returns when there is one; ``summary["fused_label"]`` records the slices it took from the prior.

    ``transform``, ``warped``, ``warped_label``, ``jacobian`` and ``fused_label`` are built on first use (then kept): a caller
    that needs only ``ddf``, such as :func:`monai_npc.track` over a cine, does not pay for them.
    """

    ddf: torch.Tensor
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
    def jacobian(self) -> sitk.Image:
        if "jacobian" not in self._lazy:
            ddf = self.ddf_array if self.ddf_array is not None else self.ddf.double().numpy()
            self._lazy["jacobian"] = image_like(field_jacobian(ddf), self.fixed)
        return self._lazy["jacobian"]

    def field_summary(self) -> Dict[str, float]:
        """Folding (% of voxels with ``det J <= 0``), the Jacobian's range and the displacement's mean and largest length
        (mm) of the field this registration writes (``summary.json``'s keys)."""
        jac = sitk.GetArrayViewFromImage(self.jacobian)
        ddf = self.ddf_array if self.ddf_array is not None else self.ddf.double().numpy()
        norm_mm = np.linalg.norm(ddf_to_physical(ddf, self.fixed.GetSpacing(), self.fixed.GetDirection()), axis=-1)
        return {"folding_percent": float(100.0 * (jac <= 0).mean()), "jacobian_min": float(jac.min()), "jacobian_max": float(jac.max()),
                "displacement_mm_mean": float(norm_mm.mean()), "displacement_mm_max": float(norm_mm.max())}

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

    @property
    def fused_label(self) -> Optional[sitk.Image]:
        if "fused_label" not in self._lazy:
            self._lazy["fused_label"] = None
            agreement = (self.summary.get("label_prior") or {}).get("agreement")
            if self.prior_label is not None and agreement is not None and agreement < FUSION_MIN_PRIOR_AGREEMENT:
                self.summary["fused_label"] = {"made": False, "why": (
                    f"the label prior agrees {agreement:.2f} with the moving label on the moving image, at least "
                    f"{FUSION_MIN_PRIOR_AGREEMENT} needed for its outlines to replace the transform's")}
            elif self.prior_label is not None and self.warped_label is not None:
                fused, taken = fuse_by_slice(sitk.GetArrayViewFromImage(self.warped_label), sitk.GetArrayViewFromImage(self.prior_label))
                image = sitk.GetImageFromArray(fused)
                image.CopyInformation(self.fixed)
                self._lazy["fused_label"] = image
                self.summary["fused_label"] = {
                    "what": "the label prior's segmentation on the slices where it agrees with warped_label, warped_label elsewhere; "
                            "not the transform's label", "module": "monai_npc.functional.label_fusion",
                    "min_agreement": FUSION_MIN_AGREEMENT, "min_prior_agreement": FUSION_MIN_PRIOR_AGREEMENT, "slices_from_prior": [int(z) for z in np.flatnonzero(taken)],
                    "slices": int(taken.size)}
        return self._lazy["fused_label"]

    def set_field(self, ddf: np.ndarray) -> None:
        """Replace the displacement (``(D, *S)`` fixed voxels, e.g. with a through-plane component added,
        :func:`monai_npc.cardiac.through_plane.through_plane_field`); the transform, the warped image, the warped
        label and the Jacobian are then built from the new field, and the summary's folding, Jacobian range and
        displacement are its: every output stays what the written transform does."""
        ddf = np.asarray(ddf, dtype=np.float64)
        if ddf.shape != tuple(self.ddf.shape):
            raise ValueError(f"the new field {ddf.shape} must have the shape of the old one {tuple(self.ddf.shape)}.")
        self.ddf_array = ddf
        self.ddf = torch.from_numpy(ddf).float()
        self._lazy.clear()
        if self.summary:  # the summary says what the new field does
            self.summary.update(self.field_summary())

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
        if self.fused_label is not None:
            put("fused_label", image(compact_label(self.fused_label)))
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


def compact_label(label: sitk.Image) -> sitk.Image:
    """``label`` in the smallest integer type that holds its values (uint8 for most label maps), geometry kept:
    what ``warped_label.nii.gz`` holds."""
    array = sitk.GetArrayViewFromImage(label)
    lo, hi = int(array.min(initial=0)), int(array.max(initial=0))
    kind = np.uint8 if lo >= 0 and hi < 256 else np.int16 if -32768 <= lo and hi < 32768 else np.int32
    out = sitk.GetImageFromArray(np.asarray(array).astype(kind))
    out.CopyInformation(label)
    return out


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
