"""Per-epoch training checkpoints with resume, on top of MONAI's ``CheckpointSaver`` / ``CheckpointLoader``."""

from __future__ import annotations

import logging
import re
from pathlib import Path
from typing import Any, Dict, Mapping, Optional, Union

import torch
from ignite.engine import Engine, Events
from monai.handlers import CheckpointLoader, CheckpointSaver

__all__ = ["BestMetricState", "TrainCheckpoint", "latest_checkpoint"]

logger = logging.getLogger(__name__)

_EPOCH = re.compile(r"_epoch=(\d+)\.pt$")


def latest_checkpoint(folder: Union[str, Path], prefix: str = "checkpoint") -> Optional[Path]:
    """The ``{prefix}_epoch=N.pt`` file with the largest ``N`` in ``folder`` (``None`` if there is none)."""
    folder = Path(str(folder))
    if not folder.is_dir():
        return None
    found = []
    for path in folder.glob(f"*{prefix}_epoch=*.pt"):
        match = _EPOCH.search(path.name)
        if match:
            found.append((int(match.group(1)), path))
    return max(found)[1] if found else None


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


class TrainCheckpoint:
    """Save the whole training state every ``save_interval`` epochs and optionally resume from it.

    Attached to the trainer, it saves ``save_dict`` plus the trainer itself (``"trainer"``: epoch
    and iteration) and, with ``evaluator``, the best validation metric (:class:`BestMetricState`)
    to ``save_dir/checkpoint_epoch=N.pt`` with MONAI's ``CheckpointSaver``, keeping the last
    ``n_saved`` files. Attach it after the validation and learning-rate handlers so that a saved
    epoch includes both.

    With ``resume``, the latest such file in ``save_dir`` (:func:`latest_checkpoint`) is loaded
    when the trainer starts (MONAI ``CheckpointLoader``): network, optimizer, scheduler, epoch
    and best metric continue from it, and training runs up to the trainer's ``max_epochs``. If
    there is no checkpoint yet, training starts from scratch (with a warning).

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
    ) -> None:
        from monai_npc.engines.workflows import as_bool

        self.save_dir = Path(str(save_dir))
        self.save_dict = dict(save_dict)
        self.resume = as_bool(resume, "resume")
        self.save_interval = int(save_interval)
        self.n_saved = n_saved
        self.evaluator = evaluator
        self.best_saver = best_saver
        self.save = save
        self.map_location = map_location
        self.loaded_from: Optional[Path] = None

    def _prune(self, engine: Engine) -> None:
        found = sorted(
            (int(m.group(1)), p) for p in self.save_dir.glob("*checkpoint_epoch=*.pt") if (m := _EPOCH.search(p.name))
        )
        for _, path in found[: max(len(found) - int(self.n_saved), 0)]:
            path.unlink(missing_ok=True)

    def attach(self, engine: Engine) -> None:
        objects = dict(self.save_dict)
        objects["trainer"] = engine
        if self.evaluator is not None:
            objects["best"] = BestMetricState(self.evaluator, self.best_saver)
        rank = torch.distributed.get_rank() if torch.distributed.is_available() and torch.distributed.is_initialized() else 0
        save = (rank == 0) if self.save is None else bool(self.save)
        if save and self.save_interval > 0:
            self.save_dir.mkdir(parents=True, exist_ok=True)
            CheckpointSaver(
                save_dir=str(self.save_dir), save_dict=objects, save_interval=self.save_interval, n_saved=self.n_saved,
                epoch_level=True,
            ).attach(engine)
            if self.n_saved is not None:
                # the saver only tracks its own files: also drop older ones left by a run this one resumes
                engine.add_event_handler(Events.EPOCH_COMPLETED, self._prune)
        if self.resume:
            path = latest_checkpoint(self.save_dir)
            if path is None:
                logger.warning("resume requested but %s holds no checkpoint_epoch=N.pt; training from scratch.", self.save_dir)
            else:
                logger.info("resuming training from %s", path)
                self.loaded_from = path
                CheckpointLoader(load_path=str(path), load_dict=objects, map_location=self.map_location).attach(engine)
