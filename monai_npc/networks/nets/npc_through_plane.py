"""ThroughPlaneNPC: the 2-D NPC's in-plane field on every slice, then a through-plane displacement read from what
each slice matches in its neighbours."""

from __future__ import annotations

import copy
from typing import TYPE_CHECKING, Any, Dict, List, Mapping, Optional

import torch

from monai_npc.functional.through_plane_evidence import (EVIDENCE_CHANNELS, LABEL_EVIDENCE_CHANNELS, LABEL_REVERSED_CHANNELS,
                                                         REVERSED_CHANNELS, label_evidence, prior_evidence,
                                                         prior_reversed_channels, through_plane_evidence)
from monai_npc.networks.blocks.through_plane_head import ThroughPlaneHead

from .stack_npc import StackNPC

if TYPE_CHECKING:
    from .label_prior import LabelPrior

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
        in_plane_residual: the head also gives an in-plane residual, added to the 2-D network's in-plane field (learned
            from whole stacks: what the slice-by-slice field misses, e.g. how far the RV free wall contracts).
        stack_context: the head also reads the stack's mean features (how much the whole heart contracts).
        prior_evidence: the name or file of a label prior (``"acdc_heart"``,
            :func:`~monai_npc.networks.nets.load_label_prior`; its weights are its own file, not this network's): a
            third head (:attr:`prior_head`) reads its class probabilities of both frames
            (:func:`~monai_npc.functional.prior_evidence`) besides the images' evidence, and its output is added to the
            through-plane component, images only or not: where the fixed slice holds no ventricle the moving base's
            structures have left through the plane.
        architecture: must be ``"through_plane"``.
        npc_options: :class:`~monai_npc.networks.nets.NPCNet` arguments of the 2-D part (``spatial_dims`` 2, no
            ``phase_init``, ``flip_ensemble`` 1); ``refine_iterations`` / ``refine_options`` configure :attr:`refiner`.

    ``forward(stack, moving_label=None)``: one stack ``(Z, 2, H, W)`` (moving, fixed; slices in order) -> ``ddf``
    ``(Z, 3, H, W)``; ``forward_stacks(pair, group, n_groups, moving_label=None)``: several stacks batched slice by
    slice -> ``(N, 3, H, W)``; ``moving_label`` ``(N, 1, H, W)`` label values, read only with ``label_evidence``.
    With ``prior_evidence`` the network runs the prior on every slice of both frames itself.
    """

    ARCHITECTURE = THROUGH_PLANE

    def __init__(self, head_width: int = 16, head_pool: int = 4, evidence_window: int = 9, label_evidence: bool = False,
                 in_plane_residual: bool = False, stack_context: bool = False, prior_evidence: Optional[str] = None,
                 architecture: str = THROUGH_PLANE, **npc_options: Any) -> None:
        extra: Dict[str, Any] = {"head_width": int(head_width), "head_pool": int(head_pool), "evidence_window": int(evidence_window)}
        # options off are left out of the configuration, so weights written before they existed read the same
        for name, on in (("label_evidence", label_evidence), ("in_plane_residual", in_plane_residual),
                         ("stack_context", stack_context)):
            if on:
                extra[name] = True
        if prior_evidence:
            extra["prior_evidence"] = str(prior_evidence)
        super().__init__(architecture, extra, npc_options)
        self.evidence_window = int(evidence_window)
        #: whether the network reads the moving label (``register`` then passes it)
        self.uses_label = bool(label_evidence)
        self.head = ThroughPlaneHead(len(EVIDENCE_CHANNELS), REVERSED_CHANNELS, int(head_width), int(head_pool),
                                     in_plane=bool(in_plane_residual), stack_context=bool(stack_context))
        #: with ``label_evidence``: a second head, reading the images' evidence and the label's, whose output is added to
        #: :attr:`head`'s through-plane output when a label is given (so the images-only field is :attr:`head`'s alone)
        self.label_head = ThroughPlaneHead(
            len(EVIDENCE_CHANNELS) + len(LABEL_EVIDENCE_CHANNELS),
            list(REVERSED_CHANNELS) + [len(EVIDENCE_CHANNELS) + c for c in LABEL_REVERSED_CHANNELS],
            int(head_width), int(head_pool)) if label_evidence else None
        # the prior is held outside the module tree: its weights stay in their own file, not in this network's state
        self._prior: List["LabelPrior"] = []
        if prior_evidence:
            from .label_prior import load_label_prior  # label_prior reads weights through pretrained, which imports this

            self._prior.append(load_label_prior(prior_evidence).requires_grad_(False))
        structures = self._prior[0].num_classes - 1 if prior_evidence else 0
        #: with ``prior_evidence``: a third head, reading the images' evidence and the prior's, whose output is added to
        #: the through-plane component
        self.prior_head = ThroughPlaneHead(
            len(EVIDENCE_CHANNELS) + 4 * structures,
            list(REVERSED_CHANNELS) + [len(EVIDENCE_CHANNELS) + c for c in prior_reversed_channels(structures)],
            int(head_width), int(head_pool)) if prior_evidence else None

    @property
    def label_prior(self) -> Optional["LabelPrior"]:
        """The label prior whose view of both frames :attr:`prior_head` reads (``None`` without ``prior_evidence``)."""
        return self._prior[0] if self._prior else None

    def prior_maps(self, moving: torch.Tensor, fixed: torch.Tensor) -> Optional[torch.Tensor]:
        """``(N, 2 K, H, W)``: :attr:`label_prior`'s probabilities of its ``K`` structures (its classes but the
        background) on the slices ``moving``, then on ``fixed`` ``(N, 1, H, W)``; ``None`` without a prior."""
        prior = self.label_prior
        if prior is None:
            return None
        if next(prior.parameters()).device != moving.device:  # a copy of its own: the loaded prior is shared (cached)
            prior = self._prior[0] = copy.deepcopy(prior).to(moving.device)
        n = moving.shape[0]
        probs = prior.predict(torch.cat([moving, fixed]))[:, 1:]
        return torch.cat([probs[:n], probs[n:]], 1).to(moving.dtype)

    def _twin(self, options: Mapping[str, Any], state: Optional[Mapping[str, torch.Tensor]]) -> "ThroughPlaneNPC":
        """A network of this one's configuration with ``options`` changed, holding ``state`` (``None``: the caller
        loads it), with this network's ODE steps, flip ensemble, refinement and meta."""
        config = {k: v for k, v in self.config.items() if k != "architecture"}
        twin = type(self)(**{**config, **options, "init": "random"})
        if state is not None:
            twin.load_state_dict(state)
        twin.config["init"] = self.config.get("init", "fourier")
        twin.npc.ode.set_steps(list(self.npc.ode.steps_per_stage))
        twin.npc.set_flip_ensemble(len(self.flip_codes))
        twin.refiner = copy.deepcopy(self.refiner)
        twin.meta = dict(getattr(self, "meta", {}) or {})
        return twin.to(next(self.parameters()).device)

    def _head_copy(self, target: ThroughPlaneHead, prefix: str, state: Dict[str, torch.Tensor]) -> None:
        """Into ``state`` under ``prefix``: ``target``'s parameters from :attr:`head`'s where they match (the extra input
        channels of the first layer, the output layer and a stack summary at zero), so ``target`` adds nothing yet."""
        own = self.head.state_dict()
        for name, value in target.state_dict().items():
            old = own.get(name)
            if name == "encoder.0.weight":
                value = value.zero_()
                value[:, : old.shape[1]] = old
            elif old is not None and old.shape == value.shape and not name.startswith("decoder.2."):
                value = old.clone()
            state[f"{prefix}.{name}"] = value

    def with_label_evidence(self) -> "ThroughPlaneNPC":
        """A copy that also reads the moving label (``label_evidence``): this network's weights, and a
        :attr:`label_head` that starts as a copy of :attr:`head` (the label channels' first-layer weights and the output
        layer at zero), so the same field as this network, with or without a label, until the label head is trained."""
        if self.uses_label:
            raise ValueError("this ThroughPlaneNPC already reads the moving label (label_evidence).")
        twin = self._twin({"label_evidence": True}, None)
        state = dict(self.state_dict())
        self._head_copy(twin.label_head, "label_head", state)
        twin.load_state_dict(state)
        return twin

    def with_prior_evidence(self, prior: str = "acdc_heart") -> "ThroughPlaneNPC":
        """A copy whose :attr:`prior_head` also reads ``prior``'s view of both frames (``prior_evidence``), starting as
        a copy of :attr:`head` with the prior's channels and its output at zero: the same field as this network until
        it is trained."""
        if self.prior_head is not None:
            raise ValueError(f"this ThroughPlaneNPC already reads a prior ({self.config['prior_evidence']!r}).")
        twin = self._twin({"prior_evidence": str(prior)}, None)
        state = dict(self.state_dict())
        self._head_copy(twin.prior_head, "prior_head", state)
        twin.load_state_dict(state)
        return twin

    def with_head_options(self, in_plane_residual: bool = False, stack_context: bool = False) -> "ThroughPlaneNPC":
        """A copy whose head also gives an in-plane residual (``in_plane_residual``) and / or reads the stack's mean
        features (``stack_context``), from this network's weights, the new parts at zero: the same field as this
        network until they are trained. Options this network has already stay on."""
        in_plane = bool(in_plane_residual) or self.head.out_channels == 3
        context = bool(stack_context) or self.head.context is not None
        state = dict(self.state_dict())
        fresh = ThroughPlaneHead(len(EVIDENCE_CHANNELS), REVERSED_CHANNELS, self.config["head_width"], self.config["head_pool"],
                                 in_plane=in_plane, stack_context=context).state_dict()
        for name, value in fresh.items():  # the new parts start at zero (the head's own initialisation)
            old = state.get(f"head.{name}")
            if old is not None:  # the output layer keeps its through-plane channel; the in-plane ones stay at zero
                value[: old.shape[0]] = old
            state[f"head.{name}"] = value
        return self._twin({"in_plane_residual": in_plane, "stack_context": context}, state)

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

    def head_output(self, moving: torch.Tensor, fixed: torch.Tensor, in_plane: torch.Tensor, group: torch.Tensor,
                    n_groups: int, moving_label: Optional[torch.Tensor] = None) -> torch.Tensor:
        """The heads' output (:meth:`heads`) for the in-plane field ``in_plane`` ``(N, 2, H, W)`` of the slices
        ``moving``, ``fixed`` ``(N, 1, H, W)``: their evidence computed, and the prior run with ``prior_evidence``."""
        evidence = through_plane_evidence(moving, fixed, in_plane, group, n_groups, self.evidence_window)
        return self.heads(evidence, in_plane, group, n_groups, moving_label, self.prior_maps(moving, fixed))

    def heads(self, evidence: torch.Tensor, in_plane: torch.Tensor, group: torch.Tensor, n_groups: int,
              moving_label: Optional[torch.Tensor] = None, prior_maps: Optional[torch.Tensor] = None) -> torch.Tensor:
        """:attr:`head`'s output on ``evidence`` (:func:`~monai_npc.functional.through_plane_evidence`): ``(N, 1, H,
        W)``, the through-plane component (slices), or ``(N, 3, H, W)`` with ``in_plane_residual`` (then also an
        in-plane residual, voxels). Added to the through-plane component: :attr:`label_head`'s output on the images'
        and the label's evidence, with ``label_evidence`` and ``moving_label`` ``(N, 1, H, W)``; :attr:`prior_head`'s on
        the images' and the prior's (``prior_maps``, :meth:`prior_maps`), with ``prior_evidence``. :meth:`compose`
        makes the field of it."""
        out = self.head(evidence, group, n_groups)
        through = out[:, :1]
        if moving_label is not None and self.label_head is not None:
            labels = label_evidence(moving_label, in_plane, group, n_groups).to(evidence.dtype)
            through = through + self.label_head(torch.cat([evidence, labels], 1), group, n_groups)
        if self.prior_head is not None:
            if prior_maps is None:
                raise ValueError("this ThroughPlaneNPC reads a label prior (prior_evidence): give heads() its prior_maps.")
            k = prior_maps.shape[1] // 2
            seen = prior_evidence(prior_maps[:, :k], prior_maps[:, k:], in_plane, group, n_groups).to(evidence.dtype)
            through = through + self.prior_head(torch.cat([evidence, seen], 1), group, n_groups)
        return torch.cat([through, out[:, 1:]], 1)

    @staticmethod
    def compose(head_output: torch.Tensor, in_plane: torch.Tensor) -> torch.Tensor:
        """The stack field ``(N, 3, H, W)`` (through the plane in slices, then in-plane voxels) from
        :meth:`heads`' output and the 2-D network's in-plane field ``(N, 2, H, W)`` (plus the head's in-plane residual
        where it gives one)."""
        if head_output.shape[1] == 3:
            in_plane = in_plane + head_output[:, 1:]
        return torch.cat([head_output[:, :1], in_plane], 1)

    def forward_stacks(self, pair: torch.Tensor, group: torch.Tensor, n_groups: int,
                       moving_label: Optional[torch.Tensor] = None) -> torch.Tensor:
        """Stacks batched slice by slice: ``pair`` ``(N, 2, H, W)``, ``group`` ``(N,)`` int64 (each stack's slices
        contiguous and in order) -> ``ddf`` ``(N, 3, H, W)``."""
        pair = self._checked(pair, group)
        in_plane = self.npc(pair)
        return self.compose(self.head_output(pair[:, 0:1], pair[:, 1:2], in_plane, group, n_groups, moving_label), in_plane)
