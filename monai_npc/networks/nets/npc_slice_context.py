"""SliceContextNPC: the 2-D NPC run on whole stacks, reading its neighbouring slices, with a through-plane output."""

from __future__ import annotations

from typing import Any, List, Optional, Tuple

import torch
import torch.nn.functional as F
from torch import nn

from monai_npc.functional.polarity import contrast_polarity, signed
from monai_npc.functional.stack_field import stack_neighbours, warp_stack_slices
from monai_npc.networks.blocks.npc_stage import NPCStage
from monai_npc.networks.blocks.slice_context import SliceContextHead

from .stack_npc import StackNPC

__all__ = ["SliceContextNPC", "SLICE_CONTEXT"]

#: the ``architecture`` entry of a :class:`SliceContextNPC` configuration (what :func:`load_pretrained` rebuilds)
SLICE_CONTEXT = "slice_context"


class SliceContextNPC(StackNPC):
    """Register whole short-axis stacks with a smooth 3-D field: the 2-D NPC's filter pairs, interaction, top-K mask,
    decoder and warp ODE on every slice, plus per stage a :class:`~monai_npc.networks.blocks.SliceContextHead` that
    reads the slice's neighbours and adds a through-plane velocity (and an in-plane correction).

    At every ODE step the moving stack is warped in 3-D by the current field
    (:func:`~monai_npc.functional.warp_stack_slices`: trilinear, replicated at the stack's ends) and each slice goes
    through the 2-D stage (:meth:`NPCStage.respond` / :meth:`NPCStage.decode`) as in :class:`NPCNet`. The same moving
    responses, taken from the neighbouring rows of the warped stack, are paired with the slice's fixed responses:
    pairings (``z - 1``, ``z``), (``z``, ``z``), (``z + 1``, ``z``), masked by the slice's own top-K mask, each
    embedded by the decoder's ``MLP_z`` (shared), with their masked mean residuals. Which of the three matches best
    is the through-plane evidence of a phase-correlation-like comparison, at the cost of two interactions and two
    ``MLP_z`` passes (no extra filter convolution). The head mixes it over neighbouring slices (kernel 3 through the
    plane; equivariant to reversing the slice order, so the through-plane part cannot be a learned constant) and returns
    ``(N, 3, *grid)``, upsampled and added to the velocity ``(through-plane, in-plane + correction)``.

    The heads' output layers start at zero: a network built from 2-D weights (:meth:`from_npc`) gives, before any
    training, the 2-D network's in-plane field (up to float rounding of the 3-D warp) and a zero through-plane
    component.

    :attr:`refiner` holds the test-time refinement's settings (:class:`~monai_npc.networks.blocks.InstanceRefinement`,
    as ``NPCNet.refiner``); ``forward`` does not run it: ``register`` refines the stack's 3-D field with it
    (:meth:`~monai_npc.networks.blocks.InstanceRefinement.refine_stack`, with the moving label and the label prior when
    given), as it runs an NPC network's refinement.

    Args:
        context_channels: hidden width of each head.
        architecture: must be ``"slice_context"`` (the key that lets :func:`load_pretrained` rebuild this class).
        npc_options: :class:`NPCNet` arguments of the shared 2-D part (``spatial_dims`` 2, no ``phase_init``,
            ``flip_ensemble`` 1: those are 2-D test-time options with no 3-D counterpart); ``refine_iterations`` and
            ``refine_options`` configure :attr:`refiner`.

    ``forward(stack)``: one stack ``(Z, 2, H, W)`` (moving, fixed; slices in order) -> ``ddf`` ``(Z, 3, H, W)``.
    ``forward_stacks(pair, group, n_groups)``: several stacks batched slice by slice (``group`` ``(N,)``, contiguous,
    in order) -> ``(N, 3, H, W)``. Fields in voxels, MONAI ``Warp`` convention on each stack's ``(Z, H, W)`` grid:
    channel 0 through the plane in slices, channels 1-2 along ``H`` and ``W``.
    """

    ARCHITECTURE = SLICE_CONTEXT

    def __init__(self, context_channels: int = 32, architecture: str = SLICE_CONTEXT, **npc_options: Any) -> None:
        super().__init__(architecture, {"context_channels": int(context_channels)}, npc_options)
        stages: List[NPCStage] = list(self.npc.ode.stages)
        self.context = nn.ModuleList(
            [SliceContextHead(s.decoder.w_gamma.out_channels + 1, int(context_channels)) for s in stages])

    def forward_stacks(self, pair: torch.Tensor, group: torch.Tensor, n_groups: int) -> torch.Tensor:
        """Stacks batched slice by slice: ``pair`` ``(N, 2, H, W)``, ``group`` ``(N,)`` int64 (each stack's slices
        contiguous and in order) -> ``ddf`` ``(N, 3, H, W)``."""
        pair = self._checked(pair, group)
        moving, fixed = pair[:, 0:1], pair[:, 1:2]
        previous, following = stack_neighbours(group, n_groups)
        size = list(moving.shape[2:])
        # WarpODE.integrate's Euler loop with a 3-D warp and the heads' velocity: it stays its own loop because
        # NPCNet (hence WarpODE) must remain TorchScript-scriptable, which rules out passing the step in as a callable
        ode = self.npc.ode
        ddf = moving.new_zeros((moving.shape[0], 3) + tuple(moving.shape[2:]))
        dt = 1.0 / ode.num_steps
        polarity = contrast_polarity(moving, fixed) if ode.match_polarity else None
        step = 0
        for index, stage in enumerate(ode.stages):
            fixed_responses, fixed_norm, gamma, gate = stage.prepare(fixed)
            if polarity is not None:
                fixed_responses = signed(fixed_responses, polarity)
            threshold: Optional[torch.Tensor] = None
            for _ in range(ode.steps_per_stage[index]):
                warped = moving if step == 0 else warp_stack_slices(moving, ddf.detach() if ode.detach_steps else ddf, group, n_groups)
                a, features, residual, mask, threshold = stage.respond(warped, fixed_responses, fixed_norm, threshold)
                threshold = threshold.movedim(-1, 1)
                evidence = self._evidence(stage, a, features, residual, mask, (fixed_responses, fixed_norm), (previous, following))
                in_plane = stage.decode(features, gamma, gate, size, evidence[..., 1, :-1])  # this slice's own MLP_z
                correction = F.interpolate(self.context[index](evidence, previous, following), size=size, mode="bilinear",
                                           align_corners=False)
                ddf = ddf + dt * torch.cat([correction[:, :1], in_plane + correction[:, 1:]], 1)
                step += 1
        return ddf

    @staticmethod
    def _evidence(stage: NPCStage, a: torch.Tensor, features: torch.Tensor, residual: torch.Tensor, mask: torch.Tensor,
                  fixed: Tuple[torch.Tensor, torch.Tensor], rows: Tuple[torch.Tensor, torch.Tensor]) -> torch.Tensor:
        """``(N, *grid, 3, G + 1)``: for the pairings (moving ``z - 1``, fixed ``z``), (``z``, ``z``), (``z + 1``, ``z``),
        ``MLP_z`` of their masked features and their masked mean residual; ``a`` the moving responses
        ``(N, *grid, 2, C)``, ``features`` ``(N, *grid, 3, C)`` (masked), ``residual`` and ``mask`` ``(N, *grid, C)``."""
        weight = mask.sum(-1).clamp(min=1e-6)
        embedded, energies = [], []
        for pairing in (rows[0], None, rows[1]):
            if pairing is None:
                f, r = features, residual
            else:
                f, r = stage.interaction(a[pairing], fixed[0], fixed[1])
                f = f * mask.unsqueeze(-2)
            embedded.append(stage.decoder.embed(f.flatten(-2)))
            energies.append(((r * mask).sum(-1) / weight).unsqueeze(-1))
        return torch.cat([torch.stack(embedded, -2), torch.stack(energies, -2)], -1)
