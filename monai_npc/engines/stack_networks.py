"""Which network a whole-stack training trains: the default 2-D configuration, the stack architectures and
:func:`build_network` (from scratch, from 2-D weights, or continuing a stack network's weights)."""

from __future__ import annotations

from typing import Any, Dict, Mapping, Optional, Tuple

from torch import nn

from monai_npc.networks.nets import NPCNet, SliceContextNPC, StackNPC, ThroughPlaneNPC, load_pretrained

from .stack_checkpoint import network_from_config

__all__ = ["DEFAULT_NETWORK", "SLICE_CONTEXT_TRAINING", "NETWORKS", "STACK_ARCHITECTURES", "TRAINABLE", "build_network"]

#: the ``train_crops.json`` network (and the ``acdc`` weights' architecture), without test-time refinement
DEFAULT_NETWORK: Dict[str, Any] = dict(kernel_size=16, stride=4, num_pairs=128, top_k=64, gate_dim=128, hidden_dim=128,
                                       num_pe=256, num_steps=10, head="unet", head_channels=16,
                                       stages=[{"kernel_size": 32, "stride": 8}, {"kernel_size": 16, "stride": 4}],
                                       refine_iterations=0)
#: a slice-context network's training defaults under ``network``: every ODE step's gradient alone (its warped input
#: detached), since through the 3-D warp the recurrence's gradient explodes once the through-plane part moves
#: (docs/training_gpu.md, "Slice context")
SLICE_CONTEXT_TRAINING: Dict[str, Any] = dict(detach_steps=True)
#: ``StackTrainingConfig.architecture`` values: the 2-D NPC slice by slice, or a stack network (a 3-D field per stack)
NETWORKS = ("npc2d", "slice_context", "through_plane")
#: the stack architectures: their class and the ``network`` options of their own parts (the rest are NPCNet's)
STACK_ARCHITECTURES: Dict[str, Tuple[type, Tuple[str, ...]]] = {
    "slice_context": (SliceContextNPC, ("context_channels",)),
    "through_plane": (ThroughPlaneNPC, ("head_width", "head_pool", "evidence_window"))}
#: ``StackTrainingConfig.trainable`` values: every parameter, or a stack network's heads only (its 2-D part frozen)
TRAINABLE = ("all", "context")


def build_network(config: Any, network_config: Optional[Mapping[str, Any]] = None) -> nn.Module:
    """The network to train for ``config`` (a :class:`~monai_npc.engines.stack_training.StackTrainingConfig`: its
    ``architecture``, ``network`` and ``init``): ``network_config`` (a checkpoint's) as it is, else ``init``'s weights or
    :data:`DEFAULT_NETWORK`, with ``config.network`` over it and no test-time refinement; with a stack architecture
    (:data:`STACK_ARCHITECTURES`; ``"slice_context"``: ``config.network`` over :data:`SLICE_CONTEXT_TRAINING`) that 2-D
    network becomes the shared part of a :class:`~monai_npc.networks.nets.SliceContextNPC` or
    :class:`~monai_npc.networks.nets.ThroughPlaneNPC` (``init`` may also be weights of that class, which continue)."""
    if network_config is not None:
        return network_from_config(network_config)
    defaults = SLICE_CONTEXT_TRAINING if config.architecture == "slice_context" else {}
    overrides = {**defaults, **dict(config.network), "refine_iterations": 0}
    own_keys = STACK_ARCHITECTURES[config.architecture][1] if config.architecture in STACK_ARCHITECTURES else ()
    stray = sorted(k for _, keys in STACK_ARCHITECTURES.values() for k in keys if k in overrides and k not in own_keys)
    if stray:
        raise ValueError(f"network options {stray} are not for architecture={config.architecture!r}.")
    own = {k: overrides.pop(k) for k in own_keys if k in overrides}
    net = load_pretrained(config.init, **overrides) if config.init else NPCNet(**{**DEFAULT_NETWORK, **overrides})
    if config.architecture == "npc2d":
        if not isinstance(net, NPCNet):
            raise ValueError(f"init={config.init!r} holds a {type(net).__name__}; train it with its architecture "
                             f"({net.config.get('architecture')!r}).")
        return net
    cls = STACK_ARCHITECTURES[config.architecture][0]
    if isinstance(net, cls):
        changed = {k: net.config[k] for k, v in own.items() if net.config[k] != v}
        if changed:
            raise ValueError(f"init={config.init!r} has {changed}; it cannot change.")
        return net
    if isinstance(net, StackNPC):
        raise ValueError(f"init={config.init!r} holds a {type(net).__name__}; it cannot become a {cls.__name__}.")
    return cls.from_npc(net, **own)
