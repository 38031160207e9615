"""Which parameters a whole-stack training updates, and at what rate (:func:`parameter_groups`)."""

from __future__ import annotations

from typing import Any, Dict, List

from torch import nn

from monai_npc.networks.nets import StackNPC

__all__ = ["parameter_groups", "group_rates"]


def parameter_groups(model: nn.Module, trainable: str = "all", context_lr_scale: float = 1.0) -> List[Dict[str, Any]]:
    """The optimiser's parameter groups: the parameters that train, each group with its ``lr_scale`` (the epoch's
    learning rate times it, :func:`group_rates`).

    ``trainable="context"`` freezes a stack network's shared 2-D part (``model.npc``, ``requires_grad`` off): only
    its heads (every parameter beside ``model.npc``: a slice-context network's ``context``, a through-plane network's
    ``head``) train.
    ``context_lr_scale``: the heads' rate over the rest's (new heads next to pretrained 2-D weights may learn faster
    than those should move); a network without heads has one group.
    """
    if context_lr_scale <= 0:
        raise ValueError(f"context_lr_scale must be > 0, got {context_lr_scale}.")
    if trainable == "context":
        model.npc.requires_grad_(False)
    # a stack network's heads: every parameter beside its shared 2-D network
    shared = {id(p) for p in model.npc.parameters()} if isinstance(model, StackNPC) else None
    in_heads = {id(p) for p in model.parameters() if id(p) not in shared} if shared is not None else set()
    params = [p for p in model.parameters() if p.requires_grad]
    rest = [p for p in params if id(p) not in in_heads]
    context = [p for p in params if id(p) in in_heads]
    groups = [{"params": rest, "lr_scale": 1.0}] if rest else []
    return groups + ([{"params": context, "lr_scale": float(context_lr_scale)}] if context else [])


def group_rates(optimizer: Any, learning_rate: float) -> None:
    """Set each parameter group's ``lr`` to ``learning_rate`` times its ``lr_scale`` (1 when it has none)."""
    for group in optimizer.param_groups:
        group["lr"] = learning_rate * group.get("lr_scale", 1.0)
