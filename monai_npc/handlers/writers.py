"""Handlers that write what a :class:`~monai_npc.engines.RegistrationEvaluator` computed."""

from __future__ import annotations

import csv
import io
import json
import logging
import math
from pathlib import Path
from typing import Any, Dict, List, Mapping, Optional, Sequence, Union

import numpy as np
import torch
from ignite.engine import Engine, Events

from monai_npc.io_safety import atomic_write, atomic_write_text, remove_stale
from monai_npc.runtime import rank_and_world, unshard

from .metrics import ID_COLUMNS, _item, nonfinite_pairs, pair_records, summarize_pair_metrics

__all__ = ["RegistrationMetricsWriter", "RegistrationWriter", "pair_name"]

logger = logging.getLogger(__name__)


def _json_safe(value: Any) -> Any:
    """NaN / inf -> ``None`` (strict JSON), recursively."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, Mapping):
        return {str(k): _json_safe(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_json_safe(v) for v in value]
    if isinstance(value, Path):
        return str(value)
    return value


class RegistrationMetricsWriter:
    """Write the per-pair metrics of an evaluation run to a CSV and their summary to ``metrics.json``.

    Collects :func:`~monai_npc.handlers.metrics.pair_records` of every iteration (gathered over
    processes under ``torch.distributed``: with a ``DistributedSampler`` without shuffling and
    ``even_divisible=False``, as the bundles' ``configs/multi_gpu_evaluate.json``, in the dataset's
    order, as one process writes them) and, at the end of each evaluator epoch, writes on rank 0:

    - ``output_dir/csv_filename``: one row per pair (``patient``, ``view``, ``slice``, ``direction``,
      every metric, ``seconds``);
    - ``output_dir/filename``: :func:`~monai_npc.handlers.summarize_pair_metrics` (``n_pairs``,
      ``dice_mean``, ``dice_ed_es``, ``dice_es_ed``, ``dice_<name>``, ``hd95`` in voxels,
      ``sdlogj`` x1e-2, ``ndv`` per 10k foreground voxels, ``folding_percent``, ...) plus
      ``extra`` (e.g. the checkpoint and data folder) and a ``units`` note. NaN is written as ``null``.

    Both files are written all or nothing (:func:`~monai_npc.io_safety.atomic_write`); the ones of
    a previous run are removed when the engine starts, so a failed run never leaves an old
    ``metrics.json`` as if current. Pairs whose input images hold NaN/Inf values are left out of
    the metrics and listed under ``skipped`` (``{"item", "reason"}``, with ``n_skipped``), as are
    items a data stage reports in ``engine.state.output["skipped"]`` or ``engine.state.skipped``
    (lists of such dicts); ``strict=True`` makes the first bad pair an error instead.

    The summary is also kept as ``self.summary`` and logged.
    """

    def __init__(
        self,
        output_dir: Union[str, Path],
        filename: str = "metrics.json",
        csv_filename: Optional[str] = "metrics_per_pair.csv",
        label_names: Sequence[str] = (),
        extra: Optional[Mapping[str, Any]] = None,
        strict: bool = False,
    ) -> None:
        self.output_dir = Path(str(output_dir))
        self.strict = bool(strict)
        self.skipped: List[Dict[str, str]] = []
        self.filename = filename
        self.csv_filename = csv_filename
        self.label_names = [str(n) for n in label_names]
        self.extra = dict(extra or {})
        self.rows: List[Dict[str, Any]] = []
        self._kept: List[bool] = []  # per pair seen by this rank: in rows (True) or skipped as non-finite
        self.summary: Optional[Dict[str, Any]] = None

    def attach(self, engine: Engine) -> None:
        engine.add_event_handler(Events.STARTED, self._remove_stale)
        engine.add_event_handler(Events.EPOCH_STARTED, self._reset)
        engine.add_event_handler(Events.ITERATION_COMPLETED, self._collect)
        engine.add_event_handler(Events.EPOCH_COMPLETED, self._write)

    def _remove_stale(self, engine: Engine) -> None:
        if rank_and_world()[0] == 0:
            remove_stale(self.output_dir / name for name in (self.filename, self.csv_filename) if name)

    def _reset(self, engine: Engine) -> None:
        self.rows = []
        self._kept = []
        self.skipped = []

    def _collect(self, engine: Engine) -> None:
        output = engine.state.output
        records = pair_records(output)
        bad = nonfinite_pairs(output)
        meta = output.get("meta", {}) or {}
        for i, reason in sorted(bad.items()):
            item = pair_name(meta, i, len(self.rows) + len(self.skipped))
            if self.strict:
                raise ValueError(f"pair {item}: {reason} (strict=True: the first bad pair stops the run).")
            self.skipped.append({"item": item, "reason": reason})
        self.rows.extend(r for i, r in enumerate(records) if i not in bad)
        self._kept.extend(i not in bad for i in range(len(records)))
        self.skipped.extend(_skip_records(output.get("skipped")))

    def _skipped(self, engine: Engine) -> List[Dict[str, str]]:
        return self.skipped + _skip_records(getattr(engine.state, "skipped", None))

    def _write(self, engine: Engine) -> None:
        rank, world = rank_and_world()
        rows, skipped = self.rows, self._skipped(engine)
        if world > 1:
            gathered: List[Any] = [None] * world
            torch.distributed.all_gather_object(gathered, (rows, self._kept, skipped))
            slots = []  # each rank's pairs in its sampler's order (None: skipped), then back in the dataset's order
            for part_rows, kept, _ in gathered:
                it = iter(part_rows)
                slots.append([next(it) if k else None for k in kept])
            rows = [r for r in unshard(slots) if r is not None]
            skipped = [r for part in gathered for r in part[2]]
        if rank != 0:
            return
        summary = summarize_pair_metrics(rows, self.label_names) if rows else {"n_pairs": 0}
        summary["n_skipped"] = len(skipped)
        summary["skipped"] = skipped
        summary["units"] = {
            "dice": "fraction in [0, 1]; dice_mean = mean over structures, averaged over pairs",
            "hd95": "voxels (of the 2-D arrays the network sees), mean over structures",
            "sdlogj": "std of log(det J + 3), x1e-2",
            "ndv": "voxels with det J <= 0 per 10,000 foreground voxels (union of both label maps)",
            "folding_percent": "percent of all voxels with det J <= 0",
            "epe": "mean endpoint error in voxels over the label union (phantoms only)",
            "seconds_per_pair": "network time per pair on the run's device",
        }
        summary.update(self.extra)
        if self.csv_filename and rows:
            atomic_write_text(self.output_dir / self.csv_filename, _rows_csv(rows))
        atomic_write_text(self.output_dir / self.filename, json.dumps(_json_safe(summary), indent=2))
        self.summary = summary
        keys = ["n_pairs", "dice_mean", "dice_ed_es", "dice_es_ed", "hd95", "sdlogj", "ndv", "folding_percent"]
        logger.info(
            "registration metrics (%s): %s",
            self.output_dir / self.filename,
            ", ".join(f"{k} {summary[k]:.4g}" for k in keys if isinstance(summary.get(k), (int, float))),
        )


def _skip_records(items: Any) -> List[Dict[str, str]]:
    """``[{"item", "reason"}]`` from what a data stage reports (dicts, or ``(item, reason)`` pairs)."""
    out = []
    for entry in items or []:
        if isinstance(entry, Mapping):
            out.append({"item": str(entry.get("item", entry.get("file", "?"))), "reason": str(entry.get("reason", entry.get("error", "")))})
        else:
            item, reason = entry
            out.append({"item": str(item), "reason": str(reason)})
    return out


def _rows_csv(rows: Sequence[Mapping[str, Any]]) -> str:
    """The per-pair CSV text: id columns first, floats with 6 significant digits."""
    columns = [c for c in ID_COLUMNS if any(c in r for r in rows)]
    columns += [c for c in rows[0] if c not in columns]
    buf = io.StringIO()
    writer = csv.DictWriter(buf, fieldnames=columns, extrasaction="ignore")
    writer.writeheader()
    for r in rows:
        writer.writerow({k: (f"{v:.6g}" if isinstance(v, float) else v) for k, v in r.items()})
    return buf.getvalue()


def pair_name(meta: Mapping[str, Any], i: int, fallback: int) -> str:
    """File stem of pair ``i`` of a batch: ``patient001_slice03_ED-to-ES`` (CAMUS:
    ``patient0001_2CH_ED-to-ES``); ``pair{fallback:05d}`` when the batch has no ids."""
    parts = []
    if "patient" in meta:
        parts.append(str(_item(meta["patient"], i)))
    if "view" in meta:
        parts.append(str(_item(meta["view"], i)))
    elif "slice" in meta:
        parts.append(f"slice{int(_item(meta['slice'], i)):02d}")
    if "direction" in meta:
        parts.append(str(_item(meta["direction"], i)).replace("->", "-to-"))
    return "_".join(parts) if parts else f"pair{fallback:05d}"


def _spacing(meta: Mapping[str, Any], i: int, dims: int) -> List[float]:
    sp = meta.get("spacing")
    if sp is None:
        return [1.0] * dims
    try:
        if torch.is_tensor(sp):
            values = sp[i].tolist()
        else:  # collated tuple -> list of (B,) tensors
            values = [float(_item(s, i)) for s in sp]
        return [float(v) for v in values][:dims]
    except (IndexError, TypeError, ValueError):
        return [1.0] * dims


class RegistrationWriter:
    """Write each registered pair of an inference run, in the fixed image's space.

    Per pair (file stem from :func:`pair_name`) under ``output_dir``:

    - ``STEM_moving.nii.gz``, ``STEM_fixed.nii.gz``: the network inputs (``(H, W)`` float32 after
      the bundle's preprocessing), so the outputs below can be overlaid on them;
    - ``STEM_warped.nii.gz``: the moving image warped onto the fixed one (bilinear);
    - ``STEM_ddf.nii.gz``: the displacement, ``(H, W, 1, 1, 2)`` NIfTI vector (intent ``vector``),
      **in voxels** of the arrays, component 0 along array axis 0 (rows) and 1 along axis 1
      (columns), MONAI ``Warp`` convention ``warped(x) = moving(x + ddf(x))`` (physical / ITK
      transforms: ``monai-npc register``);
    - ``STEM_warped_label.nii.gz``: the moving label warped with nearest interpolation (uint8),
      when labels are given;
    - ``STEM_reliability.nii.gz``: the residual reliability map of the last ODE step, upsampled
      to ``(H, W)`` (in ``[0, 1]``, 1 = the kept filter pairs agree; :func:`~monai_npc.functional.reliability_map`), when computed;
    - ``STEM_panel.png``: moving, fixed, warped, difference and deformed grid
      (:func:`~monai_npc.viz.registration_panel`), label contours and Dice in the captions.

    Every file is written all or nothing (:func:`~monai_npc.io_safety.atomic_write`: a temporary
    name, flushed and read back, then renamed): a failure (disk full...) leaves no partial file
    and raises :class:`~monai_npc.io_safety.OutputError` naming the file and the cause.

    NIfTI arrays are stored in array order (axis 0 = rows) with the pair's in-plane ``spacing``
    (mm) on the affine diagonal when known, else 1.

    Args:
        output_dir: folder for the files (created).
        nifti: write the NIfTI files.
        panels: write the PNG panels; ``max_panels`` caps how many (``None``: all).
    """

    def __init__(
        self, output_dir: Union[str, Path], nifti: bool = True, panels: bool = True, max_panels: Optional[int] = None
    ) -> None:
        self.output_dir = Path(str(output_dir))
        self.nifti = bool(nifti)
        self.panels = bool(panels)
        self.max_panels = None if max_panels is None else int(max_panels)
        self.count = 0
        self.written: List[Path] = []

    def attach(self, engine: Engine) -> None:
        engine.add_event_handler(Events.ITERATION_COMPLETED, self)

    def _save(self, array: np.ndarray, spacing: Sequence[float], path: Path, vector: bool = False) -> None:
        import nibabel as nib

        affine = np.eye(4)
        for k, s in enumerate(spacing[:3]):
            affine[k, k] = float(s)
        img = nib.Nifti1Image(array, affine)
        if vector:
            img.header.set_intent("vector", (), name="ddf_voxels")
        img.header["descrip"] = b"monai_npc registration output"
        atomic_write(path, lambda tmp: nib.save(img, str(tmp)))
        self.written.append(path)

    def __call__(self, engine: Engine) -> None:
        out = engine.state.output
        meta = out.get("meta", {}) or {}
        ddf = out["ddf"].detach().float().cpu()
        n = ddf.shape[0]
        self.output_dir.mkdir(parents=True, exist_ok=True)
        metrics = out.get("metrics") or {}
        for i in range(n):
            stem = pair_name(meta, i, self.count)
            spacing = _spacing(meta, i, ddf.dim() - 2)
            d = ddf[i].numpy()  # (D, H, W)
            if self.nifti:
                for key in ("moving", "fixed", "warped"):
                    self._save(out[key][i, 0].detach().cpu().numpy().astype(np.float32), spacing, self.output_dir / f"{stem}_{key}.nii.gz")
                vec = np.moveaxis(d, 0, -1)  # (H, W, D)
                vec = vec.reshape(vec.shape[:-1] + (1,) * (5 - vec.ndim) + (vec.shape[-1],)).astype(np.float32)
                self._save(vec, spacing, self.output_dir / f"{stem}_ddf.nii.gz", vector=True)
                if "warped_label" in out:
                    self._save(out["warped_label"][i, 0].cpu().numpy().round().astype(np.uint8), spacing, self.output_dir / f"{stem}_warped_label.nii.gz")
                if "reliability" in out:
                    self._save(out["reliability"][i, 0].detach().cpu().numpy().astype(np.float32), spacing, self.output_dir / f"{stem}_reliability.nii.gz")
            if self.panels and (self.max_panels is None or self.count < self.max_panels):
                from monai_npc.viz import registration_panel

                labels = None
                if "warped_label" in out:
                    labels = (out["moving_label"][i, 0].cpu(), out["label"][i, 0].cpu(), out["warped_label"][i, 0].cpu())
                captions = None
                if "dice_mean" in metrics:
                    captions = [
                        f"Dice before {float(metrics['dice_mean_initial'][i]):.3f}" if "dice_mean_initial" in metrics else "",
                        "",
                        f"Dice {float(metrics['dice_mean'][i]):.3f}",
                        "",
                        f"folding {float(metrics['folding_percent'][i]):.2f} %" if "folding_percent" in metrics else "",
                    ]
                path = self.output_dir / f"{stem}_panel.png"
                atomic_write(path, lambda tmp: registration_panel(
                    out["moving"][i, 0].cpu(), out["fixed"][i, 0].cpu(), out["warped"][i, 0].cpu(), d, tmp,
                    title=stem, labels=labels, captions=captions,
                ))
                self.written.append(path)
            self.count += 1
