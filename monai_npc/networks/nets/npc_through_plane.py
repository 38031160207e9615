"""ThroughPlaneNPC: the 2-D NPC's in-plane field on every slice, then a through-plane displacement read from what
each slice matches in its neighbours."""

from __future__ import annotations

import copy
from typing import Any, List, Optional

import torch

from monai_npc.functional.through_plane_evidence import (EVIDENCE_CHANNELS, LABEL_EVIDENCE_CHANNELS, LABEL_REVERSED_CHANNELS,
                                                         REVERSED_CHANNELS, label_evidence, through_plane_evidence)
from monai_npc.networks.blocks.through_plane_head import ThroughPlaneHead

from .stack_npc import StackNPC

__all__ = ["ThroughPlaneNPC", "THROUGH_PLANE"]

#: the ``architecture`` entry of a :class:`ThroughPlaneNPC` configuration (what :func:`load_pretrained` rebuilds)
THROUGH_PLANE = "through_plane"


class ThroughPlaneNPC(StackNPC):
    """Register whole short-axis stacks with a 3-D field in two stages: the 2-D NPC (``npc``) gives each slice's
    in-plane field, then a :class:`~monai_npc.networks.blocks.ThroughPlaneHead` reads
    :func:`~monai_npc.functional.through_plane_evidence` (the fixed slice against the in-plane-warped moving slice
    and its two neighbours in the stack, their local correlations, the in-plane field's divergence) and gives the
    through-plane component (slices).

    The field is ``(through, in-plane)``: out(z, y, x) = moving(z + through, y + u_y, x + u_x), trilinear on the
    stack's ``(Z, H, W)`` grid (MONAI ``Warp`` convention). The head's output layer starts at zero, so a network built
    from 2-D weights (:meth:`from_npc`) gives their in-plane field and no through-plane motion until trained; it can be
    trained alone on the 2-D network's fields (``monai_npc.engines.through_plane_training``). The 2-D part's test-time
    flip ensemble (:meth:`set_flip_ensemble`, which ``register`` sets from the weights' register settings) averages
    the in-plane field before the head reads it.

    Args:
        head_width: channels of the head's first level.
        head_pool: the head's in-plane pooling (voxels).
        evidence_window: side of the evidence's local correlation window (voxels).
        label_evidence: a second head (:attr:`label_head`) also reads the moving frame's label where one is given
            (:func:`~monai_npc.functional.label_evidence`: RV / Myo / LV on each in-plane-warped slice and its
            neighbours), and its output is added to the first head's: with the user's label it can learn which basal
            slices the structures leave or re-enter; without one the field is the first head's alone. ``register``
            passes the moving label to such a network.
        architecture: must be ``"through_plane"``.
        npc_options: :class:`~monai_npc.networks.nets.NPCNet` arguments of the 2-D part (``spatial_dims`` 2, no
            ``phase_init``, ``flip_ensemble`` 1); ``refine_iterations`` / ``refine_options`` configure :attr:`refiner`.

    ``forward(stack, moving_label=None)``: one stack ``(Z, 2, H, W)`` (moving, fixed; slices in order) -> ``ddf``
    ``(Z, 3, H, W)``; ``forward_stacks(pair, group, n_groups, moving_label=None)``: several stacks batched slice by
    slice -> ``(N, 3, H, W)``; ``moving_label`` ``(N, 1, H, W)`` label values, read only with ``label_evidence``.
    """

    ARCHITECTURE = THROUGH_PLANE

    def __init__(self, head_width: int = 16, head_pool: int = 4, evidence_window: int = 9, label_evidence: bool = False,
                 architecture: str = THROUGH_PLANE, **npc_options: Any) -> None:
        extra = {"head_width": int(head_width), "head_pool": int(head_pool), "evidence_window": int(evidence_window)}
        super().__init__(architecture, {**extra, "label_evidence": True} if label_evidence else extra, npc_options)
        self.evidence_window = int(evidence_window)
        #: whether the network reads the moving label (``register`` then passes it)
        self.uses_label = bool(label_evidence)
        self.head = ThroughPlaneHead(len(EVIDENCE_CHANNELS), REVERSED_CHANNELS, int(head_width), int(head_pool))
        #: with ``label_evidence``: a second head, reading the images' evidence and the label's, whose output is added to
        #: :attr:`head`'s when a label is given (so the images-only field is :attr:`head`'s alone)
        self.label_head = ThroughPlaneHead(
            len(EVIDENCE_CHANNELS) + len(LABEL_EVIDENCE_CHANNELS),
            list(REVERSED_CHANNELS) + [len(EVIDENCE_CHANNELS) + c for c in LABEL_REVERSED_CHANNELS],
            int(head_width), int(head_pool)) if label_evidence else None

    def with_label_evidence(self) -> "ThroughPlaneNPC":
        """A copy that also reads the moving label (``label_evidence``): this network's weights, and a
        :attr:`label_head` that starts as a copy of :attr:`head` (the label channels' first-layer weights and the output
        layer at zero), so the same field as this network, with or without a label, until the label head is trained."""
        if self.uses_label:
            raise ValueError("this ThroughPlaneNPC already reads the moving label (label_evidence).")
        config = {k: v for k, v in self.config.items() if k != "architecture"}
        twin = type(self)(**{**config, "label_evidence": True, "init": "random"})
        state = dict(self.state_dict())
        for name, value in self.head.state_dict().items():
            state[f"label_head.{name}"] = value.clone()
        first = state["label_head.encoder.0.weight"]
        state["label_head.encoder.0.weight"] = torch.cat(
            [first, first.new_zeros((first.shape[0], len(LABEL_EVIDENCE_CHANNELS)) + tuple(first.shape[2:]))], 1)
        for name in ("label_head.decoder.2.weight", "label_head.decoder.2.bias"):
            state[name] = torch.zeros_like(state[name])
        twin.load_state_dict(state)
        twin.config["init"] = self.config.get("init", "fourier")
        twin.npc.ode.set_steps(list(self.npc.ode.steps_per_stage))
        twin.npc.set_flip_ensemble(len(self.flip_codes))
        twin.refiner = copy.deepcopy(self.refiner)
        twin.meta = dict(getattr(self, "meta", {}) or {})
        return twin.to(next(self.parameters()).device)

    def set_flip_ensemble(self, flip_ensemble: int) -> None:
        """Average each slice's in-plane field over ``flip_ensemble`` (1, 2, 4 or 8) in-plane symmetries of the pair
        in eval mode (:meth:`NPCNet.set_flip_ensemble` on the 2-D part); the head then reads the averaged field. Each
        slice's in-plane field is the 2-D network's alone, so the ensemble means here what it means for a 2-D model
        (``register``'s ``acdc`` settings: 2, the pair and the pair turned by 180 degrees)."""
        self.npc.set_flip_ensemble(flip_ensemble)

    @property
    def flip_codes(self) -> List[int]:
        """The in-plane symmetries the in-plane field averages (:attr:`NPCNet.flip_codes` of the 2-D part)."""
        return self.npc.flip_codes

    def through_plane(self, moving: torch.Tensor, fixed: torch.Tensor, in_plane: torch.Tensor, group: torch.Tensor,
                      n_groups: int, moving_label: Optional[torch.Tensor] = None) -> torch.Tensor:
        """``(N, 1, H, W)`` the through-plane component (slices) for the in-plane field ``in_plane`` ``(N, 2, H, W)``
        of the slices ``moving``, ``fixed`` ``(N, 1, H, W)``; with ``label_evidence`` and the moving label
        ``(N, 1, H, W)``, :attr:`label_head`'s output on the images' and the label's evidence is added."""
        evidence = through_plane_evidence(moving, fixed, in_plane, group, n_groups, self.evidence_window)
        through = self.head(evidence, group, n_groups)
        if moving_label is None or self.label_head is None:
            return through
        labels = label_evidence(moving_label, in_plane, group, n_groups).to(evidence.dtype)
        return through + self.label_head(torch.cat([evidence, labels], 1), group, n_groups)

    def forward_stacks(self, pair: torch.Tensor, group: torch.Tensor, n_groups: int,
                       moving_label: Optional[torch.Tensor] = None) -> torch.Tensor:
        """Stacks batched slice by slice: ``pair`` ``(N, 2, H, W)``, ``group`` ``(N,)`` int64 (each stack's slices
        contiguous and in order) -> ``ddf`` ``(N, 3, H, W)``."""
        pair = self._checked(pair, group)
        in_plane = self.npc(pair)
        through = self.through_plane(pair[:, 0:1], pair[:, 1:2], in_plane, group, n_groups, moving_label)
        return torch.cat([through, in_plane], 1)
