"""ThroughPlaneNPC: the 2-D NPC's in-plane field on every slice, then a through-plane displacement read from what
each slice matches in its neighbours."""

from __future__ import annotations

from typing import Any, List

import torch

from monai_npc.functional.through_plane_evidence import EVIDENCE_CHANNELS, REVERSED_CHANNELS, through_plane_evidence
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
        architecture: must be ``"through_plane"``.
        npc_options: :class:`~monai_npc.networks.nets.NPCNet` arguments of the 2-D part (``spatial_dims`` 2, no
            ``phase_init``, ``flip_ensemble`` 1); ``refine_iterations`` / ``refine_options`` configure :attr:`refiner`.

    ``forward(stack)``: one stack ``(Z, 2, H, W)`` (moving, fixed; slices in order) -> ``ddf`` ``(Z, 3, H, W)``;
    ``forward_stacks(pair, group, n_groups)``: several stacks batched slice by slice -> ``(N, 3, H, W)``.
    """

    ARCHITECTURE = THROUGH_PLANE

    def __init__(self, head_width: int = 16, head_pool: int = 4, evidence_window: int = 9,
                 architecture: str = THROUGH_PLANE, **npc_options: Any) -> None:
        super().__init__(architecture, {"head_width": int(head_width), "head_pool": int(head_pool),
                                        "evidence_window": int(evidence_window)}, npc_options)
        self.evidence_window = int(evidence_window)
        self.head = ThroughPlaneHead(len(EVIDENCE_CHANNELS), REVERSED_CHANNELS, int(head_width), int(head_pool))

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
                      n_groups: int) -> torch.Tensor:
        """``(N, 1, H, W)`` the through-plane component (slices) for the in-plane field ``in_plane`` ``(N, 2, H, W)``
        of the slices ``moving``, ``fixed`` ``(N, 1, H, W)``."""
        evidence = through_plane_evidence(moving, fixed, in_plane, group, n_groups, self.evidence_window)
        return self.head(evidence, group, n_groups)

    def forward_stacks(self, pair: torch.Tensor, group: torch.Tensor, n_groups: int) -> torch.Tensor:
        """Stacks batched slice by slice: ``pair`` ``(N, 2, H, W)``, ``group`` ``(N,)`` int64 (each stack's slices
        contiguous and in order) -> ``ddf`` ``(N, 3, H, W)``."""
        pair = self._checked(pair, group)
        in_plane = self.npc(pair)
        return torch.cat([self.through_plane(pair[:, 0:1], pair[:, 1:2], in_plane, group, n_groups), in_plane], 1)
