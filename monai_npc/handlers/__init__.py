"""Ignite/MONAI handlers for the registration bundles.

- :class:`PairMeanMetric`: mean of one per-pair metric of :class:`~monai_npc.engines.RegistrationEvaluator`
  (optionally of one direction), reduced over processes; usable as ``key_val_metric``.
- :class:`RegistrationMetricsWriter`: per-pair CSV and ``metrics.json`` summary of an evaluation.
- :class:`RegistrationWriter`: per-pair NIfTI files (warped image, ddf, warped labels, reliability)
  and PNG panels of an inference run.
- :class:`TrainCheckpoint`, :class:`BestMetricState`, :func:`latest_checkpoint`: per-epoch training
  state with resume (network, optimizer, scheduler, epoch and the best validation metric).
"""

from .checkpoint import BestMetricState, TrainCheckpoint, latest_checkpoint
from .metrics import PairMeanMetric, summarize_pair_metrics
from .writers import RegistrationMetricsWriter, RegistrationWriter, pair_name

__all__ = [
    "BestMetricState",
    "PairMeanMetric",
    "RegistrationMetricsWriter",
    "RegistrationWriter",
    "TrainCheckpoint",
    "latest_checkpoint",
    "pair_name",
    "summarize_pair_metrics",
]
