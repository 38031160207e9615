"""StackNPC: what the networks that register whole stacks around a shared 2-D NPC have in common."""

from __future__ import annotations

import copy
from typing import Any, Dict, Mapping, Optional

import torch
from torch import nn

from monai_npc.networks.blocks.refinement import InstanceRefinement

from .npc import NPCNet

__all__ = ["StackNPC"]

#: NPCNet options that have no whole-stack counterpart, and the only value they may take here
_FIXED = {"spatial_dims": 2, "phase_init": None, "flip_ensemble": 1}
#: NPCNet options of the test-time refinement: here they configure :attr:`StackNPC.refiner`, which ``register`` runs on
#: the stack's 3-D field (the shared 2-D part never refines)
_REFINE = ("refine_iterations", "refine_options")


class StackNPC(nn.Module):
    """Base of the stack networks: a shared 2-D :class:`NPCNet` (``npc``) run on every slice, a test-time refinement
    (``refiner``, run by ``register`` on the stack's 3-D field, not by ``forward``) and a ``config`` that
    :func:`~monai_npc.networks.nets.load_pretrained` rebuilds the subclass from (its ``architecture`` entry,
    :attr:`ARCHITECTURE`).

    A subclass sets :attr:`ARCHITECTURE`, builds its own parts after ``super().__init__(architecture, extra,
    npc_options)`` (``extra``: its own constructor arguments, recorded in ``config``) and implements
    ``forward_stacks(pair (N, 2, H, W), group (N,), n_groups) -> ddf (N, 3, H, W)`` (voxels, MONAI ``Warp``
    convention on each stack's ``(Z, H, W)`` grid: channel 0 through the plane in slices, channels 1-2 along ``H`` and
    ``W``).
    """

    #: the field's dimension
    spatial_dims = 3
    #: ``register`` feeds this network the whole (window) stack in one call, ``forward(stack)``
    #: (:func:`monai_npc.apps.registration.models.is_stack_network`)
    stack_network = True
    #: the ``architecture`` entry of the subclass's configuration
    ARCHITECTURE = ""
    #: whether ``forward`` reads the moving label (``register`` then passes it as ``moving_label``)
    uses_label = False

    def __init__(self, architecture: str, extra: Mapping[str, Any], npc_options: Mapping[str, Any]) -> None:
        super().__init__()
        name = type(self).__name__
        if architecture != self.ARCHITECTURE:
            raise ValueError(f"{name}'s architecture is {self.ARCHITECTURE!r}, got {architecture!r}.")
        for key, allowed in _FIXED.items():
            if npc_options.get(key, allowed) != allowed:
                raise ValueError(f"{name} needs {key}={allowed!r} (a 2-D test-time option with no through-plane "
                                 f"counterpart), got {npc_options[key]!r}; register runs this network with none of them "
                                 "(docs/training_gpu.md).")
        self.npc = NPCNet(**{k: v for k, v in npc_options.items() if k not in _FIXED and k not in _REFINE})
        refine: Mapping[str, Any] = npc_options.get("refine_options") or {}
        #: the test-time refinement of the stack's 3-D field (run by ``register``, not by ``forward``)
        self.refiner = InstanceRefinement(int(npc_options.get("refine_iterations", 0)), **refine)
        #: constructor arguments, enough to rebuild the network (saved with pretrained weights)
        self.config: Dict[str, Any] = {**self.npc.config, **dict(extra), "architecture": self.ARCHITECTURE,
                                       "refine_iterations": self.refiner.iterations, "refine_options": dict(refine) or None}

    @classmethod
    def from_npc(cls, npc: NPCNet, **options: Any) -> "StackNPC":
        """A network whose shared 2-D part holds ``npc``'s parameters (e.g. ``load_pretrained("acdc")``) and whose own
        parts are new (``options``: the subclass's arguments). ``npc``'s ODE steps and test-time refinement settings
        (``npc.refiner``: iterations, residual grid, label-model mix, ...) are kept, the refinement to be run on the
        3-D field; its flip ensemble is dropped."""
        npc_options = {k: v for k, v in npc.config.items() if k not in _FIXED and k not in _REFINE}
        net = cls(**options, **{**npc_options, "init": "random"})
        net.npc.load_state_dict(npc.state_dict())
        net.npc.ode.set_steps(list(npc.ode.steps_per_stage))
        net.refiner = copy.deepcopy(npc.refiner)
        net.config.update(refine_iterations=net.refiner.iterations, refine_options=npc.config.get("refine_options"))
        net.config["init"] = npc.config.get("init", "fourier")
        net.meta = dict(getattr(npc, "meta", {}) or {})
        return net.to(next(npc.parameters()).device)

    @property
    def ode(self) -> nn.Module:
        """The shared 2-D part's :class:`~monai_npc.networks.blocks.WarpODE` (its steps are this network's:
        ``net.ode.set_steps(n)``, as ``register(num_steps=n)`` sets them)."""
        return self.npc.ode

    def forward(self, stack: torch.Tensor, moving_label: Optional[torch.Tensor] = None) -> torch.Tensor:
        """One stack ``(Z, 2, H, W)`` (moving, fixed) -> ``ddf`` ``(Z, 3, H, W)`` (voxels; channel 0 in slices);
        ``moving_label`` ``(Z, 1, H, W)``, read only by a network that :attr:`uses_label`."""
        group = torch.zeros(stack.shape[0], dtype=torch.int64, device=stack.device)
        if self.uses_label:
            return self.forward_stacks(stack, group, 1, moving_label=moving_label)
        return self.forward_stacks(stack, group, 1)

    def forward_stacks(self, pair: torch.Tensor, group: torch.Tensor, n_groups: int) -> torch.Tensor:
        raise NotImplementedError

    def _checked(self, pair: torch.Tensor, group: torch.Tensor) -> torch.Tensor:
        """``pair`` in the network's dtype, after the 2-D network's checks and that of ``group``."""
        pair = self.npc._as_input(pair)
        self.npc._check(pair)
        if group.shape != (pair.shape[0],):
            raise ValueError(f"group must be (N,) = ({pair.shape[0]},), one stack index per slice; got {tuple(group.shape)}.")
        return pair

    def in_plane_network(self) -> NPCNet:
        """The shared 2-D part as an :class:`NPCNet` (the same parameters; its in-plane field alone)."""
        return self.npc
