"""Ignite/MONAI handlers for the registration bundles.

- :class:`PairMeanMetric`: mean of one per-pair metric of :class:`~monai_npc.engines.RegistrationEvaluator`
  (optionally of one direction), reduced over processes; usable as ``key_val_metric``.
- :class:`RegistrationMetricsWriter`: per-pair CSV and ``metrics.json`` summary of an evaluation.
- :class:`RegistrationWriter`: per-pair NIfTI files (warped image, ddf, warped labels, reliability)
  and PNG panels of an inference run.
- :class:`TrainCheckpoint`, :class:`BestMetricState`, :func:`latest_checkpoint`: per-epoch training
  state with exact resume (network, optimizer, scheduler, epoch, best validation metric and the
  random state, :class:`TrainerRandomState`), written crash-safe like the best model
  (:class:`AtomicCheckpointSaver`).
- :class:`VerifiedCheckpointLoader`: MONAI's ``CheckpointLoader`` that checks the weights' recorded SHA-256 first.
"""

from .checkpoint import (
    AtomicCheckpointSaver,
    BestMetricState,
    TrainCheckpoint,
    VerifiedCheckpointLoader,
    latest_checkpoint,
    list_checkpoints,
)
from .random_state import TrainerRandomState
from .metrics import PairMeanMetric, summarize_pair_metrics
from .writers import RegistrationMetricsWriter, RegistrationWriter, pair_name

__all__ = [
    "AtomicCheckpointSaver",
    "BestMetricState",
    "PairMeanMetric",
    "RegistrationMetricsWriter",
    "RegistrationWriter",
    "TrainCheckpoint",
    "TrainerRandomState",
    "VerifiedCheckpointLoader",
    "latest_checkpoint",
    "list_checkpoints",
    "pair_name",
    "summarize_pair_metrics",
]
