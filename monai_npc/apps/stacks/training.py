"""Whole-stack training as the ACDC bundle runs it (``configs/train.json``; ``configs/multi_gpu_train.json`` under
``torchrun``): the data folder packed on first use (:func:`pack_for_training`), :func:`~monai_npc.engines.
stack_training.train_stacks` and the trained state as ``models/model.pt`` in the shipped weights format
(:class:`StackTraining`).
"""

from __future__ import annotations

import hashlib
import json
import logging
from pathlib import Path
from typing import Any, Callable, Dict, Mapping, Optional, Tuple, Union

import numpy as np

from monai_npc.data.splits import Count, patient_split, read_split_file
from monai_npc.data.stack_pack import PACK_FORMAT, label_union_centre, pack_acdc_stacks
from monai_npc.engines.stack_checkpoint import export_weights
from monai_npc.engines.stack_training import StackTrainingConfig, train_stacks
from monai_npc.runtime import barrier, on_rank_zero, rank_and_world

__all__ = ["FIELD_OF_VIEW_MM", "WINDOW_CENTRES", "motion_window_centre", "pack_for_training", "check_stack_training",
           "StackTraining"]

logger = logging.getLogger(__name__)
PathLike = Union[str, Path]
#: the SSL4MIS copy stores no spacing: its field of view is taken as 360 mm over the larger in-plane side
FIELD_OF_VIEW_MM = 360.0
#: where a stack's window is centred: ``register``'s label-free localiser, or the labels' union box
WINDOW_CENTRES = ("motion", "labels")


def motion_window_centre(ed: np.ndarray, es: np.ndarray, ed_label: np.ndarray, es_label: np.ndarray) -> Tuple[float, float]:
    """``register``'s label-free stack window centre ``(row, col)`` of ``(Z, H, W)`` stacks
    (:func:`~monai_npc.apps.registration.localize.motion_centre`, the pixel size taken as :data:`FIELD_OF_VIEW_MM`
    over the larger side); the labels are not used."""
    from ..registration.localize import motion_centre  # the readers only when packing

    spacing = FIELD_OF_VIEW_MM / max(ed.shape[1:])
    return motion_centre(ed, es, (spacing, spacing))


def pack_for_training(data_root: PathLike, cache_dir: PathLike, size: int = 128, centre: str = "motion",
                      split_file: Optional[PathLike] = None, n_train: Count = 80, n_val: Count = 20, n_test: Count = 50,
                      seed: int = 2023) -> Path:
    """The stack pack of the ACDC patients under ``data_root`` (any layout of
    :func:`~monai_npc.data.acdc.find_acdc_patients`: SSL4MIS, the official release, the bundle's phantoms), written
    into ``cache_dir`` on first use and reused afterwards (its name holds a hash of the folder, the patients, the
    split, ``size`` and ``centre``). Under ``torchrun`` rank 0 writes it and the others wait.

    The split: ``split_file`` (``{"train": [ids], "val": [ids], "test": [ids]}``; unnamed patients unused), else
    :func:`~monai_npc.data.splits.patient_split` with ``n_train``, ``n_val``, ``n_test`` and ``seed`` (the crop
    configs' protocol). Training reads ``train``, validation ``val``.

    Raises ``ValueError`` naming ``centre`` or the split without training patients, and the packer's errors.
    """
    from monai_npc.data.acdc import find_acdc_patients  # MONAI and the readers only when packing

    if centre not in WINDOW_CENTRES:
        raise ValueError(f"window_centre must be one of {', '.join(WINDOW_CENTRES)}, got {centre!r}.")
    patients = [p.name for p in find_acdc_patients(data_root)]
    table = read_split_file(split_file) if split_file not in (None, "") else patient_split(patients, n_train, n_val, n_test, seed)
    if not set(table["train"]) & set(patients):
        raise ValueError(f"no training patient: the split ({split_file or f'n_train={n_train}'}) names none of the "
                         f"{len(patients)} patients under {data_root}.")
    key = json.dumps({"root": str(Path(data_root).resolve()), "patients": patients, "split": table, "size": int(size),
                      "centre": centre, "format": PACK_FORMAT}, sort_keys=True)
    out = Path(cache_dir) / f"acdc_stacks_{int(size)}_{centre}_{hashlib.sha256(key.encode()).hexdigest()[:12]}.npz"

    def write() -> None:
        if out.is_file():
            logger.info("reusing the stack pack %s", out)
            return
        logger.info("packing %d patients of %s into %s", len(patients), data_root, out)
        fn = motion_window_centre if centre == "motion" else label_union_centre
        pack_acdc_stacks(data_root, out, table, size=int(size), centre=fn, centre_name=centre)

    on_rank_zero(write, f"packing {data_root} into {out}")
    return out


def check_stack_training(settings: Mapping[str, Any]) -> StackTrainingConfig:
    """The bundle's training settings (:class:`~monai_npc.engines.stack_training.StackTrainingConfig` fields but
    ``pack``, ``out_dir`` and ``resume``) checked before any work; raises ``ValueError`` naming the setting."""
    given = set(settings)
    unknown = sorted((given - set(StackTrainingConfig.__dataclass_fields__)) | (given & {"pack", "out_dir", "resume"}))
    if unknown:
        raise ValueError(f"training_settings: unknown or misplaced entries {unknown}.")
    return StackTrainingConfig(pack="", out_dir="", **dict(settings))


class StackTraining:
    """``configs/train.json``'s trainer: pack (or reuse) the data, train the whole-stack network, ship ``model.pt``.

    Args:
        settings: :class:`~monai_npc.engines.stack_training.StackTrainingConfig` fields (``architecture``,
            ``minutes``, ``stacks_per_batch``, ...; :func:`check_stack_training`).
        output_dir: the run's folder: ``checkpoint.pt``, ``best.pt``, ``train_log.jsonl``, ``train.log``, ``curve.png``.
        ckpt_dir: where ``model.pt`` goes: ``best.pt`` (the best validation state) or, without validation, the last
            state, in the shipped weights format (:func:`~monai_npc.engines.stack_checkpoint.export_weights`).
        pack: a stack pack to train on; ``None`` or ``""``: :func:`pack_for_training` of ``data_root`` into ``cache_dir``.
        data_root: the data folder, or a callable returning it (called only when there is no ``pack``: the bundle's
            ``prepare_dataset_dir``, which writes phantom data without a ``dataset_dir``).
        cache_dir, pack_options: where :func:`pack_for_training` writes and what else it gets (``size``, ``centre``,
            ``split_file``, ``n_train``, ``n_val``, ``n_test``, ``seed``).
        resume: ``False``; ``True`` (``output_dir/checkpoint.pt``) or a checkpoint's path to continue.
        model_meta, export_overrides: ``model.pt``'s extra meta (e.g. ``{"bundle": "npc_acdc"}``: ``register``'s
            settings of the shipped weights) and network arguments (e.g. ``{"refine_iterations": 40}``).
    """

    def __init__(self, settings: Mapping[str, Any], output_dir: PathLike, ckpt_dir: PathLike, pack: Optional[PathLike] = None,
                 data_root: Optional[Union[PathLike, Callable[[], PathLike]]] = None, cache_dir: Optional[PathLike] = None,
                 pack_options: Optional[Mapping[str, Any]] = None, resume: Union[bool, PathLike] = False,
                 model_meta: Optional[Mapping[str, Any]] = None, export_overrides: Optional[Mapping[str, Any]] = None) -> None:
        check_stack_training(settings)
        if pack in (None, "") and (data_root is None or cache_dir is None):
            raise ValueError("StackTraining needs a pack, or data_root and cache_dir to pack one.")
        self.settings, self.output_dir, self.ckpt_dir = dict(settings), Path(output_dir), Path(ckpt_dir)
        self.pack, self.data_root, self.cache_dir, self.pack_options = pack, data_root, cache_dir, dict(pack_options or {})
        self.resume, self.model_meta, self.export_overrides = resume, dict(model_meta or {}), dict(export_overrides or {})
        self.summary: Optional[Dict[str, Any]] = None

    def _resume_path(self) -> Optional[str]:
        last = self.output_dir / "checkpoint.pt"
        if self.resume in (False, None, "", "false", "False"):
            if last.is_file():
                raise FileExistsError(f"output_dir {self.output_dir} already holds the checkpoint.pt of an earlier run: add "
                                      "--resume true to continue it, or give another --output_dir.")
            return None
        path = last if self.resume in (True, "true", "True") else Path(str(self.resume))
        if not path.is_file():
            raise FileNotFoundError(f"resume={self.resume!r}: no checkpoint {path} to continue.")
        return str(path)

    def run(self) -> Dict[str, Any]:
        """Train; returns :func:`~monai_npc.engines.stack_training.train_stacks`' summary plus ``model`` (the written
        ``model.pt``; rank 0)."""
        resume = self._resume_path()
        pack = self.pack
        if pack in (None, ""):
            root = self.data_root() if callable(self.data_root) else self.data_root
            pack = pack_for_training(root, self.cache_dir, **self.pack_options)
        config = StackTrainingConfig(pack=str(pack), out_dir=str(self.output_dir), resume=resume, **self.settings)
        summary = train_stacks(config)
        if rank_and_world()[0] == 0:
            best = self.output_dir / "best.pt"
            source = best if best.is_file() else self.output_dir / "checkpoint.pt"
            summary["model"] = str(export_weights(source, self.ckpt_dir / "model.pt", self.model_meta, **self.export_overrides))
            logger.info("wrote %s (from %s)", summary["model"], source.name)
        barrier()
        self.summary = summary
        return summary
