"""The SAR model: the paper's coarse + fine NPC cascade, sized for CPU training and a < 5 MB weight file."""

from __future__ import annotations

from typing import Any, Dict

from monai_npc.networks.nets import NPCNet

__all__ = ["SAR_CONFIG", "sar_net"]

#: coarse stage (``k_f = 32, s = 8``) then fine stage (``k_f = 16, s = 4``), 3 ODE steps each, ``C = 32``
#: pairs per bank (``K = 16``) and a narrower decoder than ACDC's. Half the paper's CAMUS/SAR filter
#: widths (64 / 32), for CPU training; ``stages=`` overrides it. ``phase_init``: the integration starts from
#: the global shift of (Tukey-windowed) phase correlation, so global shifts of +-8 px and more are in range;
#: ``phase_init_gains``: two candidates, on the log-amplitude input and on ``exp(3 x)`` (about the linear
#: amplitude), the one with the higher NCC of ``exp(3 x)`` after the shift wins (chosen on training pixels, docs/sar.md);
#: ``phase_init_max_shift``: the start's peak search is bounded to +-16 px per axis (twice the +-8 px training
#: range), so a spurious peak far out cannot be the start; ``flip_ensemble``: at inference the field is the
#: mean over the 8 flips / transposes (the training augmentations) of the pair, 8 x the cost.
SAR_CONFIG: Dict[str, Any] = dict(
    num_pairs=32,
    top_k=16,
    gate_dim=64,
    hidden_dim=64,
    num_pe=128,
    head="unet",
    stages=[{"kernel_size": 32, "stride": 8, "num_steps": 3}, {"kernel_size": 16, "stride": 4, "num_steps": 3}],
    phase_init=0.25,
    phase_init_gains=[0.0, 3.0],
    phase_init_score_gain=3.0,
    phase_init_max_shift=16.0,
    flip_ensemble=8,
)


def sar_net(**overrides: Any) -> NPCNet:
    """``NPCNet(**SAR_CONFIG)`` with ``overrides`` (e.g. ``detach_steps=True`` for training)."""
    cfg = dict(SAR_CONFIG)
    cfg.update(overrides)
    return NPCNet(**cfg)
