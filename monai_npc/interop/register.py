"""Register image files with an NPC model and write results ITK, ANTs and 3D Slicer read.

:func:`register_files` is the Python face of ``monai-npc register``; :func:`register_batch`
runs a CSV of pairs. The steps, with the unit of each quantity:

1. read both images (and label maps) with :func:`monai_npc.data.io.load_image` (mm, LPS);
2. resample the fixed image's field of view onto the model grid (``size x size`` in-plane,
   isotropic by default, slices kept) and the moving image onto the same physical grid
   (SimpleITK, linear), min-max normalise each slice to ``[0, 1]``;
3. register every slice: ddf in model voxels (MONAI ``Warp`` convention);
4. resample the ddf onto the fixed image's full-resolution grid (fixed voxels), warp the moving
   image (linear) and label (nearest) there with :func:`~monai_npc.functional.warp_image`;
5. only when writing: convert the ddf to an LPS-mm displacement field transform (fixed point ->
   moving point, :mod:`monai_npc.interop.transforms`).

3-D inputs are registered slice by slice in the planes of their first two index axes (the
through-plane displacement is zero), as the models are 2-D.
"""

from __future__ import annotations

import csv
import json
import os
import time
from pathlib import Path
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple, Union

import numpy as np
import SimpleITK as sitk
import torch
from torch import nn

from monai_npc.functional import jacobian_determinant, reliability_map, warp_image

from .images import check_same_dims, model_grid, read_image, read_label, resample, resample_model_field
from .transforms import displacement_field_image, write_ants_warp, write_itk_transform, write_slicer_transform

__all__ = ["PHASE_CORRELATION", "OUTPUTS", "resolve_model", "register_files", "register_batch", "read_pairs_csv"]

PathLike = Union[str, os.PathLike]

#: ``--model`` value of the classical global phase-correlation baseline (no weights)
PHASE_CORRELATION = "phase-correlation"

#: the files :func:`register_files` writes (some only when a label is given, or for 2-D inputs)
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


def resolve_model(model: Union[str, PathLike, nn.Module], device: Union[str, torch.device] = "cpu") -> Tuple[nn.Module, str]:
    """``(network, name)`` for ``"acdc"``/``"camus"``/``"sar"`` (shipped weights), a ``save_pretrained``
    file, ``"phase-correlation"`` or an ``nn.Module`` (used as is). The network is in eval mode.
    """
    from monai_npc.networks.nets import PhaseCorrelationNet, load_pretrained

    if isinstance(model, nn.Module):
        return model.eval().to(device), type(model).__name__
    spec = str(model)
    if spec.lower() in (PHASE_CORRELATION, "phase_correlation"):
        return PhaseCorrelationNet().eval(), PHASE_CORRELATION
    try:
        net = load_pretrained(spec, map_location=device)
    except FileNotFoundError as err:
        raise FileNotFoundError(
            f"{err} Pass --model PATH to a file written by monai_npc.networks.nets.save_pretrained, "
            f"or --model {PHASE_CORRELATION} for the classical baseline."
        ) from err
    if getattr(net, "spatial_dims", 2) != 2:
        raise ValueError(f"model {spec} is {net.spatial_dims}-D; register needs a 2-D model.")
    return net.to(device), spec


def model_input_size(net: nn.Module, default: int = 128) -> int:
    """In-plane grid size a network was trained at: ``net.meta["input_size"]`` when present, else ``default``."""
    return int(getattr(net, "meta", {}).get("input_size", default))


def _normalise(array: np.ndarray) -> np.ndarray:
    """Min-max each slice of ``(Z, H, W)`` to ``[0, 1]``; NaN (outside the image) becomes 0."""
    out = np.zeros(array.shape, np.float32)
    for z, sl in enumerate(array):
        finite = np.isfinite(sl)
        if not finite.any():
            continue
        lo, hi = float(sl[finite].min()), float(sl[finite].max())
        out[z] = np.where(finite, (sl - lo) / (hi - lo) if hi > lo else 0.0, 0.0)
    return out


def _model_inputs(net: nn.Module, array: np.ndarray) -> np.ndarray:
    """``(Z, H, W)`` -> model inputs: the SAR preprocessing (log-amplitude, speckle smoothing, robust
    scaling) for models whose ``meta`` says ``preprocessing: "sar"``, else :func:`_normalise`."""
    meta = getattr(net, "meta", None) or {}
    if meta.get("preprocessing") == "sar":
        from monai_npc.extras.sar.preprocess import preprocess_slices

        return preprocess_slices(array, meta.get("sigma"))
    return _normalise(array)


def _slices(array: np.ndarray, dims: int) -> np.ndarray:
    """Array-order image -> ``(Z, H, W)``."""
    return array[None] if dims == 2 else array


@torch.no_grad()
def _predict(net: nn.Module, moving: torch.Tensor, fixed: torch.Tensor, chunk: int = 16):
    """``(Z, 1, h, w)`` pairs -> ``ddf (Z, 2, h, w)`` (model voxels), ``warped``, ``reliability (Z, 1, h, w)`` or ``None``."""
    ddfs, warps, rels = [], [], []
    for start in range(0, moving.shape[0], chunk):
        m, f = moving[start : start + chunk], fixed[start : start + chunk]
        if hasattr(net, "register"):
            warped, ddf, diagnostics = net.register(m, f, return_diagnostics=True)
            if diagnostics:
                last = diagnostics[-1]
                rels.append(reliability_map(last["residual"], last["mask"], size=list(m.shape[2:])))
        else:
            ddf = net(torch.cat([m, f], 1))
            warped = warp_image(m, ddf, "bilinear", "border")
        ddfs.append(ddf.float())
        warps.append(warped.float())
    rel = torch.cat(rels) if len(rels) == len(ddfs) else None
    return torch.cat(ddfs), torch.cat(warps), rel


def _write(array: np.ndarray, reference: sitk.Image, path: Path, dtype=None) -> Path:
    """Write a ``(Z, H, W)`` array on ``reference``'s grid (a 2-D reference drops ``Z``)."""
    if reference.GetDimension() == 2:
        array = array[0]
    image = sitk.GetImageFromArray(np.ascontiguousarray(array if dtype is None else array.astype(dtype)))
    image.CopyInformation(reference)
    sitk.WriteImage(image, str(path), True)
    return path


def _label_dtype(array: np.ndarray):
    lo, hi = int(array.min(initial=0)), int(array.max(initial=0))
    if lo >= 0 and hi < 256:
        return np.uint8
    return np.int16 if -32768 <= lo and hi < 32768 else np.int32


def _dice(a: np.ndarray, b: np.ndarray, labels: Sequence[int]) -> Dict[str, Optional[float]]:
    """Dice of each label value (``None`` when absent from both maps)."""
    out: Dict[str, Optional[float]] = {}
    for v in labels:
        pa, pb = a == v, b == v
        total = int(pa.sum() + pb.sum())
        out[str(int(v))] = float(2.0 * np.logical_and(pa, pb).sum() / total) if total else None
    return out


def _mean(values: Mapping[str, Optional[float]]) -> Optional[float]:
    finite = [v for v in values.values() if v is not None]
    return float(np.mean(finite)) if finite else None


def register_files(
    moving: PathLike,
    fixed: PathLike,
    out: PathLike,
    moving_label: Optional[PathLike] = None,
    fixed_label: Optional[PathLike] = None,
    model: Union[str, PathLike, nn.Module] = "acdc",
    size: Optional[int] = None,
    keep_aspect: bool = True,
    device: Union[str, torch.device] = "cpu",
    overview: bool = True,
    model_name: Optional[str] = None,
) -> Dict[str, Any]:
    """Register ``moving`` onto ``fixed`` and write the results into ``out`` (see :data:`OUTPUTS`).

    Args:
        moving, fixed: image files (NIfTI, MHD/MHA, NRRD, DICOM file or series folder, PNG/TIFF),
            both 2-D or both 3-D (3-D: registered slice by slice).
        out: output folder (created).
        moving_label, fixed_label: optional label maps on their image's grid.
        model: ``"acdc"``, ``"camus"``, ``"sar"``, a ``save_pretrained`` file, ``"phase-correlation"``
            or a network (``(B, 2, h, w) -> (B, 2, h, w)`` ddf in voxels).
        size: the model grid's in-plane size; default: the size the weights were trained at
            (``input_size`` in their ``meta``: 256 for ``sar``), else 128 (``acdc``, ``camus``).
            The positional encoding spans the model grid, so another size changes the scale the
            network decodes displacements at.
        keep_aspect: isotropic model grid (pad the short side) instead of stretching the field of view.
        device: torch device of the network.
        overview: write ``overview.png``.
        model_name: name recorded in ``summary.json`` (default: from ``model``).

    Returns:
        the summary dict written to ``summary.json`` (seconds, folding %, Dice, files...).

    Raises:
        FileNotFoundError: a missing image, label or weights file.
        ValueError: unreadable files, different dimensionality, NaN/Inf values, label maps off
            their image's grid, images that do not overlap in physical space, unusable models.
    """
    t0 = time.perf_counter()
    net, name = resolve_model(model, device)
    name = model_name or name
    out = Path(out)
    fixed_img = read_image(fixed, "fixed image")
    moving_img = read_image(moving, "moving image")
    check_same_dims(moving_img, fixed_img, moving, fixed)
    fixed_lab = read_label(fixed_label, fixed_img, fixed, "fixed label") if fixed_label else None
    moving_lab = read_label(moving_label, moving_img, moving, "moving label") if moving_label else None
    dims = fixed_img.GetDimension()
    if dims == 3 and fixed_img.GetSize()[2] > 1 and moving_img.GetSize()[2] == 1:
        raise ValueError(f"fixed image {fixed} has {fixed_img.GetSize()[2]} slices but moving image {moving} has one.")

    # 1. model grid: physical resampling, then unit-free [0, 1] arrays
    grid = model_grid(fixed_img, size or model_input_size(net), keep_aspect)
    nan = float("nan")
    fixed_raw = _slices(resample(fixed_img, grid, "linear", nan), dims)
    moving_raw = _slices(resample(moving_img, grid, "linear", nan), dims)
    in_fixed = np.isfinite(fixed_raw)
    overlap = float(100.0 * (np.isfinite(moving_raw) & in_fixed).sum() / max(int(in_fixed.sum()), 1))
    if overlap == 0.0:
        raise ValueError(
            f"moving image {moving} does not overlap fixed image {fixed} in physical space (moving origin "
            f"{tuple(round(v, 2) for v in moving_img.GetOrigin())} mm, fixed origin "
            f"{tuple(round(v, 2) for v in fixed_img.GetOrigin())} mm, LPS); check their origins and directions."
        )
    fixed_m, moving_m = _model_inputs(net, fixed_raw), _model_inputs(net, moving_raw)

    # 2. network, model voxels
    t_net = time.perf_counter()
    m_t, f_t = torch.from_numpy(moving_m)[:, None].to(device), torch.from_numpy(fixed_m)[:, None].to(device)
    ddf_m, warped_m, rel_m = _predict(net, m_t, f_t)
    seconds_network = time.perf_counter() - t_net
    ddf_m, warped_m = ddf_m.cpu().double(), warped_m.cpu()

    # 3. fixed full-resolution grid, fixed voxels
    ddf_f = resample_model_field(ddf_m, grid, fixed_img, displacement=True)  # (Z, 2, H, W)
    moving_f = torch.from_numpy(_slices(resample(moving_img, fixed_img, "linear", 0.0), dims).astype(np.float64))
    warped = warp_image(moving_f[:, None], ddf_f, "bilinear", "zeros")[:, 0].float().numpy()
    jac = jacobian_determinant(ddf_f).float().numpy()  # (Z, H, W); in-plane = full det (no through-plane motion)
    ddf_out = ddf_f.permute(1, 0, 2, 3).numpy()  # (2, Z, H, W)
    ddf_out = np.concatenate([np.zeros_like(ddf_out[:1]), ddf_out], 0) if dims == 3 else ddf_out[:, 0]

    # 4. files
    out.mkdir(parents=True, exist_ok=True)
    files: Dict[str, str] = {}

    def put(key: str) -> Path:
        files[key] = OUTPUTS[key]
        return out / OUTPUTS[key]

    _write(warped, fixed_img, put("warped"), np.float32)
    summary: Dict[str, Any] = {
        "model": name,
        "moving": str(moving),
        "fixed": str(fixed),
        "moving_label": str(moving_label) if moving_label else None,
        "fixed_label": str(fixed_label) if fixed_label else None,
    }
    labels_m = None
    if moving_lab is not None:
        lab_f = torch.from_numpy(_slices(resample(moving_lab, fixed_img, "nearest", 0), dims).astype(np.float64))
        warped_lab = warp_image(lab_f[:, None], ddf_f, "nearest", "zeros")[:, 0].numpy().round().astype(np.int64)
        _write(warped_lab, fixed_img, put("warped_label"), _label_dtype(warped_lab))
        lab_m = torch.from_numpy(_slices(resample(moving_lab, grid, "nearest", 0), dims).astype(np.float32))
        fixed_lab_m = (
            _slices(resample(fixed_lab, grid, "nearest", 0), dims) if fixed_lab is not None else np.zeros_like(moving_m)
        )
        labels_m = (lab_m.numpy(), fixed_lab_m, warp_image(lab_m[:, None], ddf_m.float(), "nearest", "zeros")[:, 0].numpy())
        if fixed_lab is not None:
            fixed_arr = _slices(sitk.GetArrayFromImage(fixed_lab), dims)
            values = sorted(int(v) for v in set(np.unique(fixed_arr)) | set(np.unique(lab_f.numpy().astype(int))) if v > 0)
            summary["dice"] = _dice(warped_lab, fixed_arr, values)
            summary["dice_mean"] = _mean(summary["dice"])
            summary["dice_initial"] = _dice(lab_f.numpy().astype(int), fixed_arr, values)
            summary["dice_mean_initial"] = _mean(summary["dice_initial"])
    write_itk_transform(ddf_out, fixed_img, put("transform"))
    write_ants_warp(ddf_out, fixed_img, put("displacement"))
    if dims == 2:
        write_slicer_transform(ddf_out, fixed_img, put("transform_slicer"))
    _write(jac, fixed_img, put("jacobian"), np.float32)
    if rel_m is not None:
        rel = resample_model_field(rel_m.cpu().double(), grid, fixed_img)[:, 0].float().numpy()
        _write(rel, fixed_img, put("reliability"), np.float32)
        summary["reliability_mean"] = float(rel.mean())
    field_mm = sitk.GetArrayViewFromImage(displacement_field_image(ddf_out, fixed_img))
    norm_mm = np.linalg.norm(field_mm, axis=-1)
    summary.update(
        overlap_percent=overlap,
        folding_percent=float(100.0 * (jac <= 0).mean()),
        jacobian_min=float(jac.min()),
        displacement_mm_mean=float(norm_mm.mean()),
        displacement_mm_max=float(norm_mm.max()),
        seconds_network=seconds_network,
        model_grid={"size": list(grid.GetSize()), "spacing_mm": list(grid.GetSpacing())},
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
    if overview:
        z = fixed_m.shape[0] // 2
        from monai_npc.viz.figures import registration_panel

        dice_caption = f"Dice {summary['dice_mean']:.3f}" if summary.get("dice_mean") is not None else ""
        registration_panel(
            moving_m[z], fixed_m[z], warped_m[z, 0], ddf_m[z].float(), put("overview"),
            title=f"{Path(str(moving)).name} -> {Path(str(fixed)).name} ({name}, model grid)",
            labels=None if labels_m is None else tuple(lab[z] for lab in labels_m),
            captions=["", "", dice_caption, "", f"folding {summary['folding_percent']:.2f} %"],
        )
    summary["seconds"] = time.perf_counter() - t0
    files["summary"] = OUTPUTS["summary"]
    summary["outputs"] = files
    (out / OUTPUTS["summary"]).write_text(json.dumps(summary, indent=2))
    return summary


def read_pairs_csv(path: PathLike) -> List[Dict[str, Optional[str]]]:
    """Rows of a pairs CSV (columns ``moving,fixed[,moving_label,fixed_label],out``).

    Relative paths are relative to the CSV's folder; empty label cells mean no label.
    """
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"pairs CSV not found: {path}")
    with path.open(newline="") as f:
        reader = csv.DictReader(f)
        columns = [c.strip() for c in reader.fieldnames or []]
        missing = [c for c in ("moving", "fixed", "out") if c not in columns]
        if missing:
            raise ValueError(f"pairs CSV {path} lacks column(s) {missing}; it has {columns} (need moving,fixed[,moving_label,fixed_label],out).")
        rows = []
        for k, raw in enumerate(reader):
            row = {str(key).strip(): (v or "").strip() for key, v in raw.items() if key is not None}
            item: Dict[str, Optional[str]] = {}
            for key in ("moving", "fixed", "moving_label", "fixed_label", "out"):
                value = row.get(key) or None
                if value is None and key in ("moving", "fixed", "out"):
                    raise ValueError(f"pairs CSV {path}, row {k + 2}: empty '{key}'.")
                item[key] = str(path.parent / value) if value and not Path(value).is_absolute() else value
            rows.append(item)
    if not rows:
        raise ValueError(f"pairs CSV {path} has no rows.")
    return rows


def register_batch(
    pairs_csv: PathLike,
    model: Union[str, PathLike, nn.Module] = "acdc",
    out: Optional[PathLike] = None,
    progress: bool = True,
    on_error: str = "skip",
    **kwargs: Any,
) -> List[Dict[str, Any]]:
    """Register every row of ``pairs_csv`` (:func:`read_pairs_csv`) with a tqdm progress bar.

    The model is loaded once. ``on_error="skip"`` records a failing pair's error (``"error"`` in
    its summary) and goes on; ``"raise"`` stops. With ``out``, ``out/batch_summary.csv`` lists
    every pair (seconds, folding %, mean Dice, error). ``kwargs`` go to :func:`register_files`.
    """
    from tqdm.auto import tqdm

    if on_error not in ("skip", "raise"):
        raise ValueError(f"on_error must be 'skip' or 'raise', got {on_error!r}.")
    rows = read_pairs_csv(pairs_csv)
    net, name = resolve_model(model, kwargs.get("device", "cpu"))
    results: List[Dict[str, Any]] = []
    for row in tqdm(rows, desc="register", unit="pair", disable=not progress):
        try:
            summary = register_files(
                row["moving"], row["fixed"], row["out"], row["moving_label"], row["fixed_label"],
                model=net, model_name=name, **kwargs,
            )
        except (ValueError, FileNotFoundError) as err:
            if on_error == "raise":
                raise
            summary = {"moving": row["moving"], "fixed": row["fixed"], "error": str(err)}
        summary["out"] = row["out"]
        results.append(summary)
    if out is not None:
        out = Path(out)
        out.mkdir(parents=True, exist_ok=True)
        with (out / "batch_summary.csv").open("w", newline="") as f:
            writer = csv.writer(f)
            writer.writerow(["moving", "fixed", "out", "seconds", "folding_percent", "dice_mean", "error"])
            for s in results:
                writer.writerow([s.get("moving"), s.get("fixed"), s.get("out"), s.get("seconds"), s.get("folding_percent"), s.get("dice_mean"), s.get("error", "")])
    return results
