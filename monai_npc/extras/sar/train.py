"""Training of the SAR cascade on synthetic 256 x 256 pairs (:func:`train_sar`) or on real scenes
with known warps (:func:`train_sar_real`, :mod:`.real`), one loop (:func:`fit`).

The loss is the paper's unsupervised one (LNCC + diffusion + Jacobian fold penalty, from
:class:`monai_npc.losses.RegistrationLoss`) plus, with ``supervision > 0``, the endpoint error
against the generator's known displacement (synthetic data only; the paper trains on real pairs
without it). Training runs on ``crop x crop`` tiles of the 256 x 256 pairs (cheap), optionally followed by a
short fine-tuning on whole pairs: NPC's positional encoding spans the coarse grid, so the grid
size used at inference should also be seen in training.
Augmentation: the 8 flips / transposes of the square, applied to both images and to the field.
"""

from __future__ import annotations

import json
import logging
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Callable, Dict, List, Mapping, Optional, Sequence, Tuple

import numpy as np
import torch

from monai_npc.functional.dihedral import dihedral as dihedral_image, dihedral_field
from monai_npc.functional.warp import warp_image
from monai_npc.losses.registration import RegistrationLoss
from monai_npc.networks.nets import NPCNet, load_pretrained, save_pretrained
from monai_npc.serialization import remove_leftovers, safe_load
from monai_npc.utils import as_json, atomic_torch_save, changed_settings

from .evaluate import preprocess_pairs
from .model import SAR_CONFIG
from .preprocess import DEFAULT_SIGMA, PREPROCESSING
from .synthetic import SARPairConfig, config_dict, make_sar_pairs

__all__ = [
    "SARTrainConfig", "RealTrainConfig", "TRAIN_SEED", "VAL_SEED", "TEST_SEED", "crop_pairs", "dihedral", "fit", "stack_pairs",
    "train_sar", "train_sar_real",
]

logger = logging.getLogger(__name__)

#: seed ranges of the synthetic splits (pair ``i`` of a split has seed ``SPLIT_SEED + i``)
TRAIN_SEED, VAL_SEED, TEST_SEED = 0, 50_000, 100_000


@dataclass
class SARTrainConfig:
    """Schedule of :func:`train_sar`.

    Attributes:
        n_pairs: synthetic training pairs (seeds ``TRAIN_SEED + i``), reused with the 8 symmetries.
        crop: train on the non-overlapping ``crop x crop`` tiles of the pairs (preprocessed whole);
            0 trains on whole pairs. A run may resume a checkpoint with another ``crop`` (fine-tuning).
        iterations, batch_size, lr, lr_decay: Adam schedule (``lr_decay`` multiplies the rate each iteration).
        window, lambda_reg, lambda_jac: unsupervised loss (LNCC window in pixels, diffusion and fold weights).
        supervision: weight of the endpoint error (pixels) against the true field; 0 = unsupervised.
        sigma: speckle smoothing of the preprocessing (pixels).
        seed: mini-batch sampling seed.
        model: ``NPCNet`` arguments (default :data:`~.model.SAR_CONFIG`).
        init: weights to start from (a shipped name such as ``"sar"`` or a ``save_pretrained`` file)
            when ``out`` holds no checkpoint: fine-tuning; ``model`` is then taken from that file.
    """

    n_pairs: int = 200
    crop: int = 128
    iterations: int = 2000
    batch_size: int = 4
    lr: float = 2e-3
    lr_decay: float = 0.9995
    window: int = 21
    lambda_reg: float = 0.5
    lambda_jac: float = 10.0
    supervision: float = 0.1
    sigma: float = DEFAULT_SIGMA
    seed: int = 0
    model: Dict[str, Any] = field(default_factory=lambda: dict(SAR_CONFIG))
    init: Optional[str] = None

    def __post_init__(self) -> None:
        checks = [("iterations", self.iterations >= 1, ">= 1"), ("n_pairs (--pairs)", self.n_pairs >= 1, ">= 1"),
                  ("batch_size (--batch-size)", self.batch_size >= 1, ">= 1"), ("crop", self.crop >= 0, ">= 0 (0 = whole pairs)"),
                  ("lr", np.isfinite(self.lr) and self.lr > 0, "a number > 0"),
                  ("lr_decay (--lr-decay)", 0 < self.lr_decay <= 1, "in (0, 1]"), ("window", self.window >= 3, ">= 3 pixels"),
                  ("supervision", self.supervision >= 0, ">= 0")]
        bad = [f"{name} must be {rule}, got {getattr(self, name.split()[0])!r}" for name, ok, rule in checks if not ok]
        if bad:
            raise ValueError("SAR training: " + "; ".join(bad) + ".")


#: :class:`SARTrainConfig` fields a resumed run may change: the total ``iterations`` and ``crop``
#: (fine-tuning on other tiles); ``init`` only applies without a checkpoint
_RESUMABLE_CHANGES = ("iterations", "crop", "init")


def _resume_check(ckpt: Path, state: Mapping[str, Any], config: SARTrainConfig) -> None:
    """A checkpoint is resumed only by the settings it was trained with (``ValueError`` naming what differs)
    and towards more iterations than it holds."""
    done = int(state["iteration"])
    if config.iterations < done:
        raise ValueError(f"{ckpt} holds {done} iterations; --iterations {config.iterations} would train none: ask for more "
                         f"than {done}, or give a new --out.")
    saved = state.get("config")
    if saved is None:  # a checkpoint of an older version: nothing recorded to compare
        return
    changed = changed_settings(saved, as_json(asdict(config)), ignore=_RESUMABLE_CHANGES)
    if changed:
        raise ValueError(f"{ckpt} was trained with other settings ({'; '.join(changed)}): resume it with the same ones, "
                         "or give a new --out (--init fine-tunes from weights).")


def crop_pairs(pairs: Sequence[Mapping], crop: int) -> List[Dict[str, np.ndarray]]:
    """Non-overlapping ``crop x crop`` tiles of every pair's ``moving``, ``fixed`` and ``ddf``."""
    out: List[Dict[str, np.ndarray]] = []
    for p in pairs:
        h, w = np.asarray(p["moving"]).shape
        if not 0 < crop <= min(h, w):
            raise ValueError(f"crop must be in 1..{min(h, w)} for {h} x {w} pairs, got {crop}.")
        for i in range(0, h - crop + 1, crop):
            for j in range(0, w - crop + 1, crop):
                out.append({k: np.ascontiguousarray(np.asarray(p[k])[..., i : i + crop, j : j + crop]) for k in ("moving", "fixed", "ddf")})
    return out


def dihedral(moving: torch.Tensor, fixed: torch.Tensor, ddf: torch.Tensor, k: int) -> Tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Symmetry ``k`` (0..7) of the square applied to ``(B, 1, H, W)`` images and their ``(B, 2, H, W)`` field.

    Bit 0 flips rows, bit 1 flips columns, bit 2 transposes; the field's components are negated
    and swapped accordingly, so ``moving(x + ddf(x)) = fixed(x)`` still holds.
    """
    if not 0 <= k < 8:
        raise ValueError(f"k must be in 0..7, got {k}.")
    return dihedral_image(moving, k).contiguous(), dihedral_image(fixed, k).contiguous(), dihedral_field(ddf, k).contiguous()


def _build_net(config: SARTrainConfig) -> Tuple[NPCNet, Dict[str, Any], Dict[str, Any]]:
    """``(network in training mode, its config, the meta of config.init)``; ``config.model``'s
    ``phase_init`` options are applied to a network loaded from ``config.init`` (they have no parameters)."""
    model_config = dict(config.model)
    start_weights, start_meta = None, {}
    if config.init is not None:
        init_net = load_pretrained(config.init)
        start_weights, start_meta = init_net.state_dict(), dict(init_net.meta)
        model_config = {**init_net.config, **{k: v for k, v in config.model.items() if k.startswith("phase_init")}}
    net = NPCNet(**{**model_config, "detach_steps": True})
    if start_weights is not None:
        net.load_state_dict(start_weights)
    return net, model_config, start_meta


def fit(
    net: NPCNet,
    draw: Callable[[np.random.Generator], Tuple[torch.Tensor, torch.Tensor, torch.Tensor]],
    config: SARTrainConfig,
    out: Path,
    progress: bool = True,
    callback: Optional[Callable[[int, Dict[str, float]], None]] = None,
    checkpoint_every: int = 25,
) -> Tuple[List[Dict[str, float]], float, RegistrationLoss]:
    """The training loop: ``draw(rng)`` gives a batch ``(moving, fixed, true ddf)``; Adam on
    LNCC + diffusion + folds + ``supervision`` x endpoint error. ``out/checkpoint.pt`` (every
    ``checkpoint_every`` iterations, atomic) is resumed when present, random state included (read as
    data only; temporaries of a killed save are deleted first), with a warning, and only with the
    settings it was trained with (other ``iterations`` and ``crop`` allowed; else ``ValueError``).
    Returns ``(history, seconds, loss)``.
    """
    from tqdm.auto import tqdm

    t0 = time.perf_counter()
    torch.manual_seed(config.seed)
    loss = RegistrationLoss(preset=None, window=config.window, lambda_reg=config.lambda_reg, lambda_jac=config.lambda_jac)
    opt = torch.optim.Adam(net.parameters(), lr=config.lr)
    sched = torch.optim.lr_scheduler.ExponentialLR(opt, gamma=config.lr_decay)
    rng = np.random.default_rng(config.seed)
    history: List[Dict[str, float]] = []
    start, seconds_before = 1, 0.0
    ckpt = out / "checkpoint.pt"
    remove_leftovers(out, [ckpt.name])  # temporaries of a killed save: never resumed from
    if ckpt.is_file():
        state = safe_load(ckpt, what="SAR training checkpoint")  # data only: a checkpoint never runs code
        _resume_check(ckpt, state, config)
        logger.warning("resuming %s at iteration %d of %d", ckpt, int(state["iteration"]), config.iterations)
        net.load_state_dict(state["network"])
        opt.load_state_dict(state["optimizer"])
        sched.load_state_dict(state["scheduler"])
        history, start = list(state["history"]), int(state["iteration"]) + 1
        rng.bit_generator.state = state["rng"]
        seconds_before = float(state.get("seconds", 0.0))

    def save(it: int) -> None:
        state = dict(network=net.state_dict(), optimizer=opt.state_dict(), scheduler=sched.state_dict(), history=history,
                     rng=rng.bit_generator.state, iteration=it, seconds=seconds_before + time.perf_counter() - t0,
                     config=as_json(asdict(config)))
        atomic_torch_save(state, ckpt)

    net.train()
    bar = tqdm(range(start, config.iterations + 1), desc="train sar", disable=not progress, initial=start - 1, total=config.iterations)
    for it in bar:
        m, f, t = draw(rng)
        ddf = net(torch.cat([m, f], 1))
        terms = loss.components(warp_image(m, ddf, "bilinear", "border"), f, ddf)
        terms["epe"] = (ddf - t).norm(dim=1).mean()
        total = terms["loss"] + config.supervision * terms["epe"] if config.supervision else terms["loss"]
        opt.zero_grad(set_to_none=True)
        total.backward()
        opt.step()
        sched.step()
        record = {k: float(v.detach()) for k, v in terms.items()}
        record["total"] = float(total.detach())
        history.append(record)
        bar.set_postfix(loss=f"{record['loss']:.3f}", epe=f"{record['epe']:.2f}")
        if callback is not None:
            callback(it, record)
        if it % checkpoint_every == 0:
            save(it)
    if start <= config.iterations:
        save(config.iterations)
    seconds = seconds_before + time.perf_counter() - t0
    (out / "train_history.json").write_text(json.dumps(history))
    return history, seconds, loss


def _finish(net: NPCNet, model_config: Dict[str, Any], meta: Dict[str, Any], path: Path) -> NPCNet:
    """Inference copy (``detach_steps`` off) with ``meta``, saved with ``save_pretrained``."""
    final = NPCNet(**{**model_config, "detach_steps": False})
    final.load_state_dict(net.state_dict())
    final.meta = meta
    save_pretrained(final, path, meta)
    return final.eval()


def _schedule_meta(config: SARTrainConfig, loss: RegistrationLoss, history: List[Dict[str, float]], seconds: float,
                   start_meta: Dict[str, Any]) -> Dict[str, Any]:
    tail = history[-50:]
    out = {**{k: v for k, v in asdict(config).items() if k != "model"}, "loss": dict(loss.config), "optimizer": "Adam",
           "threads": torch.get_num_threads(), "seconds": seconds,
           "final_loss": float(np.mean([h["loss"] for h in tail])), "final_train_epe": float(np.mean([h["epe"] for h in tail]))}
    if config.init is not None:  # keep the schedule that produced the starting weights
        out["init_schedule"] = start_meta.get("schedule")
    return out


def train_sar(
    out: str | Path,
    config: SARTrainConfig = SARTrainConfig(),
    data: SARPairConfig = SARPairConfig(),
    progress: bool = True,
    weights: Optional[str | Path] = None,
    callback: Optional[Callable[[int, Dict[str, float]], None]] = None,
) -> NPCNet:
    """Train the SAR cascade on synthetic pairs; write ``out/checkpoint.pt`` (every 25 iterations,
    resumable), ``out/train_history.json`` and the weights (``save_pretrained``, default ``out/sar.pt``).

    A run finding ``out/checkpoint.pt`` resumes from it (``config.iterations`` is the total). The
    weights' ``meta`` holds ``preprocessing: "sar"``, ``sigma``, ``input_size``, the data and the
    schedule. Returns the trained network (eval mode, ``detach_steps`` off).
    """
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    pairs = preprocess_pairs(make_sar_pairs(config.n_pairs, TRAIN_SEED, data, progress=progress), config.sigma)
    if config.crop:
        pairs = crop_pairs(pairs, config.crop)
    moving, fixed, true = stack_pairs(pairs)
    seconds_data = time.perf_counter() - t0
    net, model_config, start_meta = _build_net(config)

    def draw(rng: np.random.Generator):
        idx = torch.as_tensor(rng.choice(len(pairs), size=min(config.batch_size, len(pairs)), replace=False))
        return dihedral(moving[idx], fixed[idx], true[idx], int(rng.integers(8)))

    history, seconds, loss = fit(net, draw, config, out, progress, callback)
    meta = {
        "preprocessing": PREPROCESSING,
        "sigma": config.sigma,
        "input_size": data.size,
        "data": {"generator": "monai_npc.extras.sar.synthetic.make_sar_pair", **config_dict(data),
                 "train_seeds": [TRAIN_SEED, TRAIN_SEED + config.n_pairs], "augmentation": "8 flips/transposes"},
        "schedule": _schedule_meta(config, loss, history, seconds + seconds_data, start_meta),
    }
    return _finish(net, model_config, meta, Path(weights or out / "sar.pt"))


def stack_pairs(pairs: Sequence[Mapping]) -> Tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """``(moving (N, 1, H, W), fixed (N, 1, H, W), ddf (N, 2, H, W))`` float32 tensors of preprocessed pairs."""
    moving = torch.stack([torch.as_tensor(np.asarray(p["moving"], np.float32))[None] for p in pairs])
    fixed = torch.stack([torch.as_tensor(np.asarray(p["fixed"], np.float32))[None] for p in pairs])
    true = torch.stack([torch.as_tensor(np.asarray(p["ddf"], np.float32)) for p in pairs])
    return moving, fixed, true


@dataclass
class RealTrainConfig:
    """Data of :func:`train_sar_real` (pixels).

    Attributes:
        max_shift, nonrigid: field of the real training pairs (:class:`~.real.RealPairSampler`).
        synthetic_fraction: share of batch items drawn from ``n_synthetic`` synthetic pairs (seeds
            ``TRAIN_SEED + i``, :class:`~.synthetic.SARPairConfig` defaults), which keeps the synthetic benchmark.
        look_probability: share of real pairs with one date's number of looks changed.
    """

    max_shift: float = 8.0
    nonrigid: float = 3.0
    synthetic_fraction: float = 0.25
    n_synthetic: int = 100
    look_probability: float = 0.3


def train_sar_real(
    out: str | Path,
    scenes: Mapping[str, Mapping],
    config: SARTrainConfig = SARTrainConfig(crop=0, batch_size=2, lr=1e-3, supervision=1.0, init="sar"),
    real: RealTrainConfig = RealTrainConfig(),
    progress: bool = True,
    weights: Optional[str | Path] = None,
    callback: Optional[Callable[[int, Dict[str, float]], None]] = None,
) -> NPCNet:
    """Train (or fine-tune, ``config.init``) the SAR cascade on the training pixels of the real scenes.

    Every batch item is, with probability ``real.synthetic_fraction``, a synthetic pair, else a fresh
    real pair of :class:`~.real.RealPairSampler` (a training date pair, any crop origin, a random
    known field up to ``real.max_shift``); then one of the 8 flips / transposes. Same loop, checkpoints
    and resume as :func:`train_sar` (:func:`fit`); the weights go to ``weights`` (default ``out/sar.pt``).
    """
    from .real import JEDDAH_COLUMNS, RealPairSampler

    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    sampler = RealPairSampler(dict(scenes), real.max_shift, real.nonrigid, look_probability=real.look_probability)
    synth_cfg = SARPairConfig()
    synthetic = stack_pairs(preprocess_pairs(make_sar_pairs(real.n_synthetic, TRAIN_SEED, synth_cfg, progress=progress), config.sigma)) \
        if real.synthetic_fraction > 0 else None
    net, model_config, start_meta = _build_net(config)

    def draw(rng: np.random.Generator):
        items = []
        for _ in range(config.batch_size):
            if synthetic is not None and rng.random() < real.synthetic_fraction:
                i = int(rng.integers(len(synthetic[0])))
                items.append(tuple(x[i] for x in synthetic))
            else:
                p = preprocess_pairs([sampler(rng)], config.sigma)[0]
                items.append(tuple(x[0] for x in stack_pairs([p])))
        m, f, t = (torch.stack(x) for x in zip(*items))
        return dihedral(m, f, t, int(rng.integers(8)))

    history, seconds, loss = fit(net, draw, config, out, progress, callback)
    meta = {
        "preprocessing": PREPROCESSING,
        "sigma": config.sigma,
        "input_size": sampler.size,
        "data": {
            "generator": "monai_npc.extras.sar.real.RealPairSampler (+ synthetic pairs)",
            "real": {**asdict(real), "scenes": sorted(sampler.weights), "scene_weights": sampler.weights,
                     "jeddah_s1_columns": list(JEDDAH_COLUMNS["train"]), "jeddah_s1_dates": [1, 2, 3, 4],
                     "held_out": "ottawa, yellow_river, jeddah_s1 columns 656-1029 and date 5 (split_sources('test'))"},
            "synthetic": {**config_dict(synth_cfg), "train_seeds": [TRAIN_SEED, TRAIN_SEED + real.n_synthetic]},
            "augmentation": "8 flips/transposes; look change of one date (x sqrt Gamma(L, 1/L), L 1-3, or 2 x 2 box)",
        },
        "schedule": _schedule_meta(config, loss, history, seconds, start_meta),
    }
    return _finish(net, model_config, meta, Path(weights or out / "sar.pt"))
