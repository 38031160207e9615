"""Crash-safe training checkpoints with exact resume, on top of MONAI's ``CheckpointSaver``.

Every file is written to a temporary file and renamed into place (:func:`~monai_npc.utils.atomic_torch_save`),
and a file the saver replaces is deleted only after its successor is on disk, so a kill at any
moment leaves the previous checkpoint (and the previous best ``model.pt``) readable.
"""

from __future__ import annotations

import logging
import re
from pathlib import Path
from typing import Any, Dict, List, Mapping, Optional, Union

import torch
from ignite.engine import Engine, Events
from ignite.handlers import Checkpoint, DiskSaver
from monai.handlers import CheckpointLoader, CheckpointSaver

from monai_npc.runtime import rank_and_world
from monai_npc.serialization import remove_leftovers
from monai_npc.utils import atomic_torch_save

from .random_state import TrainerRandomState

__all__ = [
    "AtomicCheckpointSaver",
    "BestMetricState",
    "TrainCheckpoint",
    "VerifiedCheckpointLoader",
    "latest_checkpoint",
    "list_checkpoints",
]

logger = logging.getLogger(__name__)

_EPOCH = re.compile(r"_epoch=(\d+)\.pt$")


def list_checkpoints(folder: Union[str, Path], prefix: str = "checkpoint") -> List[Path]:
    """The ``{prefix}_epoch=N.pt`` files of ``folder``, newest (largest ``N``) first."""
    folder = Path(str(folder))
    if not folder.is_dir():
        return []
    found = []
    for path in folder.glob(f"*{prefix}_epoch=*.pt"):
        match = _EPOCH.search(path.name)
        if match and not path.name.startswith("."):  # never a hidden temporary
            found.append((int(match.group(1)), path))
    return [p for _, p in sorted(found, reverse=True)]


def latest_checkpoint(folder: Union[str, Path], prefix: str = "checkpoint") -> Optional[Path]:
    """The ``{prefix}_epoch=N.pt`` file with the largest ``N`` in ``folder`` (``None`` if there is none)."""
    found = list_checkpoints(folder, prefix)
    return found[0] if found else None


class _AtomicDiskSaver(DiskSaver):
    """An ignite ``DiskSaver`` that writes atomically and deletes replaced files only after the new save.

    ignite's ``Checkpoint`` removes the oldest file *before* writing the next one; here ``remove``
    only marks the file, and it is deleted once the following write has succeeded. With a fixed
    ``filename`` (e.g. ``model.pt``) the old file is simply replaced by the rename.
    """

    def __init__(self, dirname: Union[str, Path], filename: Optional[str] = None) -> None:
        super().__init__(dirname=dirname, atomic=True, require_empty=False)
        self.filename = filename
        self._pending: List[str] = []

    def __call__(self, checkpoint: Mapping, filename: str, metadata: Optional[Mapping] = None) -> None:
        name = self.filename or filename
        if self.save_on_rank == rank_and_world()[0]:
            atomic_torch_save(checkpoint, self.dirname / name)
            for old in self._pending:
                if old != name:
                    (self.dirname / old).unlink(missing_ok=True)
        self._pending = []

    def remove(self, filename: str) -> None:
        name = self.filename or filename
        if name not in self._pending:
            self._pending.append(name)


class AtomicCheckpointSaver(CheckpointSaver):
    """MONAI ``CheckpointSaver`` whose files are never half-written and never lost before their successor.

    Same arguments and files as :class:`monai.handlers.CheckpointSaver` (e.g. the best model as
    ``key_metric_filename="model.pt"``); every write goes to a temporary file renamed into place,
    and files dropped by ``n_saved`` are deleted after the new one is written.
    """

    def __init__(self, save_dir: str, save_dict: dict, *args: Any, **kwargs: Any) -> None:
        super().__init__(str(save_dir), save_dict, *args, **kwargs)
        for attr in ("_final_checkpoint", "_key_metric_checkpoint", "_interval_checkpoint"):
            checkpoint: Optional[Checkpoint] = getattr(self, attr)
            if checkpoint is not None:  # keep MONAI's fixed file name (model.pt, final_filename) if any
                fixed = getattr(checkpoint.save_handler, "filename", None)
                checkpoint.save_handler = _AtomicDiskSaver(self.save_dir, fixed)


class BestMetricState:
    """``state_dict`` / ``load_state_dict`` of the best validation metric, so it survives a resume.

    Saves the evaluator's ``best_metric`` and ``best_metric_epoch`` and, when given, the key-metric
    tracking list of the ``CheckpointSaver`` that keeps the best model: after a resume the best
    model file is only replaced by a better one.
    """

    def __init__(self, evaluator: Engine, saver: Optional[CheckpointSaver] = None) -> None:
        self.evaluator = evaluator
        self.saver = saver

    def state_dict(self) -> Dict[str, Any]:
        state = self.evaluator.state
        out: Dict[str, Any] = {
            "best_metric": float(getattr(state, "best_metric", -1)),
            "best_metric_epoch": int(getattr(state, "best_metric_epoch", -1)),
        }
        tracker = getattr(self.saver, "_key_metric_checkpoint", None)
        if tracker is not None:
            out["key_metric_saved"] = [[float(p), str(f)] for p, f in tracker.state_dict()["_saved"]]
        return out

    def load_state_dict(self, state_dict: Mapping[str, Any]) -> None:
        self.evaluator.state.best_metric = float(state_dict.get("best_metric", -1))
        self.evaluator.state.best_metric_epoch = int(state_dict.get("best_metric_epoch", -1))
        saved = state_dict.get("key_metric_saved")
        tracker = getattr(self.saver, "_key_metric_checkpoint", None)
        if saved is not None and tracker is not None:
            tracker.load_state_dict({"_saved": [(float(p), str(f)) for p, f in saved]})


def _initial_lrs(optimizer: Any) -> List[float]:
    """The initial learning rate of each parameter group (``initial_lr``, set by a scheduler, else ``lr``)."""
    groups = getattr(optimizer, "param_groups", None) or []
    return [float(g.get("initial_lr", g.get("lr", 0.0))) for g in groups]


class TrainCheckpoint:
    """Save the whole training state every ``save_interval`` epochs, crash-safe, and optionally resume from it.

    Attached to the trainer, it saves ``save_dict`` plus the trainer itself (``"trainer"``: epoch
    and iteration), its random state (``"random"``, :class:`~monai_npc.handlers.TrainerRandomState`:
    shuffling, random transforms such as the flips, global generators) and, with ``evaluator``,
    the best validation metric (:class:`BestMetricState`) to ``save_dir/checkpoint_epoch=N.pt``
    with :class:`AtomicCheckpointSaver`, keeping the last ``n_saved`` files. Each file is written
    to a temporary file and renamed into place, and older files are deleted only afterwards, so a
    kill during a save leaves the previous checkpoint intact. Attach it after the validation and
    learning-rate handlers so that a saved epoch includes both.

    With ``resume``, the newest readable such file in ``save_dir`` is loaded when the trainer starts:
    network, optimizer, scheduler, epoch, best metric and random state continue from it, so that the
    resumed run gives the same weights, bit for bit, as one never interrupted (same device and
    threads), and training runs up to the trainer's ``max_epochs``. A newest file that cannot be
    read (e.g. truncated by a kill outside this handler) is skipped with a warning naming it, and
    the previous one is used. Without any checkpoint, training starts from scratch (with a warning).
    Checkpoints are read as data only (``weights_only=True``), and the temporary files of saves that a
    killed run left in ``save_dir`` (and the best saver's folder) are deleted when the handler attaches.

    Args:
        save_dir: folder of the per-epoch checkpoints.
        save_dict: objects with ``state_dict`` (e.g. ``{"model": net, "optimizer": opt,
            "lr_scheduler": sched}``); DDP-wrapped networks are saved unwrapped.
        resume: load the latest checkpoint at start (``True``/``False`` or their strings).
        save_interval: epochs between saves; ``n_saved``: files kept (``None``: all).
        evaluator: the validation evaluator whose best metric is saved and restored.
        best_saver: the evaluator's best-model ``CheckpointSaver`` (its tracking list is restored).
        save: write checkpoints (default: on rank 0 only when ``torch.distributed`` runs).
        map_location: ``torch.load`` map location for resuming (default: the CPU).
        random_state: also save and restore the random state (exact resume).
    """

    def __init__(
        self,
        save_dir: Union[str, Path],
        save_dict: Mapping[str, Any],
        resume: Any = False,
        save_interval: int = 1,
        n_saved: Optional[int] = 1,
        evaluator: Optional[Engine] = None,
        best_saver: Optional[CheckpointSaver] = None,
        save: Optional[bool] = None,
        map_location: Any = "cpu",
        random_state: bool = True,
    ) -> None:
        from monai_npc.engines.bundle_args import as_bool

        self.save_dir = Path(str(save_dir))
        self.save_dict = dict(save_dict)
        self.resume = as_bool(resume, "resume")
        self.save_interval = int(save_interval)
        self.n_saved = n_saved
        self.evaluator = evaluator
        self.best_saver = best_saver
        self.save = save
        self.map_location = map_location
        self.random_state = as_bool(random_state, "random_state")
        self.loaded_from: Optional[Path] = None
        self.skipped: List[Path] = []

    def _prune(self, engine: Engine) -> None:
        # the saver only tracks its own files: also drop older ones left by a run this one resumes
        for path in list_checkpoints(self.save_dir)[int(self.n_saved):]:
            path.unlink(missing_ok=True)

    def _read_latest(self, keys: List[str]) -> Optional[Dict[str, Any]]:
        """The newest checkpoint of ``save_dir`` that loads and holds ``keys``; unreadable ones are skipped."""
        for path in list_checkpoints(self.save_dir):
            try:
                checkpoint = torch.load(path, map_location=self.map_location, weights_only=True)
                if not isinstance(checkpoint, dict):
                    raise ValueError(f"expected a dict of state dicts, got {type(checkpoint).__name__}")
                missing = [k for k in keys if k not in checkpoint]
                if missing:
                    raise ValueError(f"it has no {missing} (keys: {sorted(checkpoint)})")
            except Exception as err:  # truncated, empty, foreign: fall back to the previous one
                size = path.stat().st_size if path.exists() else 0
                reason = f"{type(err).__name__}: {str(err).splitlines()[0]}" if str(err) else type(err).__name__
                logger.warning("resume: skipping unreadable checkpoint %s (%d bytes, %s); trying the previous one.",
                               path, size, reason)
                self.skipped.append(path)
                continue
            self.loaded_from = path
            return checkpoint
        return None

    def attach(self, engine: Engine) -> None:
        objects: Dict[str, Any] = dict(self.save_dict)
        objects["trainer"] = engine
        if self.evaluator is not None:
            objects["best"] = BestMetricState(self.evaluator, self.best_saver)
        if self.random_state:
            objects["random"] = TrainerRandomState(engine)
        save = (rank_and_world()[0] == 0) if self.save is None else bool(self.save)
        if save:  # temporaries of saves a killed run left: deleted, never resumed from
            remove_leftovers(self.save_dir)
            if self.best_saver is not None:
                remove_leftovers(self.best_saver.save_dir)
        if save and self.save_interval > 0:
            self.save_dir.mkdir(parents=True, exist_ok=True)
            AtomicCheckpointSaver(
                save_dir=str(self.save_dir), save_dict=objects, save_interval=self.save_interval, n_saved=self.n_saved,
                epoch_level=True,
            ).attach(engine)
            if self.n_saved is not None:
                engine.add_event_handler(Events.EPOCH_COMPLETED, self._prune)
        if not self.resume:
            return
        required = [k for k in objects if k != "random"]
        checkpoint = self._read_latest(required)
        if checkpoint is None:
            if self.skipped:
                raise RuntimeError(
                    f"resume: no readable checkpoint in {self.save_dir}; skipped {[str(p) for p in self.skipped]}. "
                    "Delete them to train from scratch, or set resume=False."
                )
            logger.warning("resume requested but %s holds no checkpoint_epoch=N.pt (is output_dir the run's?); training from scratch.",
                           self.save_dir)
            return
        if "random" in objects and "random" not in checkpoint:
            logger.warning("%s has no random state (older format): the resumed run will not repeat the same batches.", self.loaded_from)
            objects.pop("random")
        logger.info("resuming training from %s", self.loaded_from)

        def _load(engine: Engine) -> None:
            prior_max_epochs, prior_epoch_length = engine.state.max_epochs, engine.state.epoch_length
            asked_lr = _initial_lrs(self.save_dict.get("optimizer"))
            Checkpoint.load_objects(to_load=objects, checkpoint=checkpoint)
            saved_lr = _initial_lrs(self.save_dict.get("optimizer"))
            if asked_lr and saved_lr and asked_lr != saved_lr:
                logger.warning("resume: %s continues its own learning-rate schedule (initial %s); this run's %s is not used "
                               "(train into a new output_dir to change it).", self.loaded_from, saved_lr, asked_lr)
            if prior_epoch_length is not None and engine.state.epoch_length != prior_epoch_length:
                logger.warning("resume: %s runs %d iterations per epoch; this run's %d is not used (train into a new output_dir "
                               "to change it).", self.loaded_from, engine.state.epoch_length, prior_epoch_length)
            if prior_max_epochs is not None and engine.state.epoch > prior_max_epochs:
                raise ValueError(
                    f"{self.loaded_from} is at epoch {engine.state.epoch}, beyond this run's max_epochs {prior_max_epochs}; "
                    "pass a larger --epochs to continue training."
                )
            engine.state.max_epochs = prior_max_epochs
            logger.info("resumed from %s at epoch %d (iteration %d) of %d", self.loaded_from, engine.state.epoch,
                        engine.state.iteration, prior_max_epochs)
            checkpoint.clear()  # free the loaded tensors

        engine.add_event_handler(Events.STARTED, _load)


class VerifiedCheckpointLoader(CheckpointLoader):
    """MONAI ``CheckpointLoader`` that first checks the weights against their recorded SHA-256.

    Same arguments as :class:`monai.handlers.CheckpointLoader` (which reads with
    ``weights_only=True``); before loading, ``load_path`` is checked with
    :func:`~monai_npc.networks.nets.check_weights` (``weights_sha256`` of the file's ``meta`` and, for
    a bundle's ``models/model.pt``, of its ``configs/metadata.json``). Weights without a recorded
    checksum load as with MONAI's loader.

    Raises:
        ChecksumError: the weights do not match their recorded checksum (nothing is loaded).
    """

    def __call__(self, engine: Engine) -> None:
        from monai_npc.networks.nets import check_weights
        from monai_npc.serialization import ChecksumError

        check = check_weights(self.load_path)
        if check.status == "mismatch":
            raise ChecksumError(check.message)
        super().__call__(engine)
