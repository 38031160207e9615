"""The fields tracking composes, in-plane ``(Z, 2, H, W)`` or of a stack network ``(Z, 3, H, W)``, and what a stack
network's tracking records.

A 2-D network's pairwise fields are in-plane: ``(Z, 2, H, W)`` frame voxels (channels along ``H`` and ``W``), composed
and applied slice by slice. A stack network (:func:`~monai_npc.apps.registration.models.is_stack_network`) moves
through the plane too: its fields are ``(Z, 3, H, W)`` (channel 0 through the plane in slices), composed on the
stack's ``(Z, H, W)`` grid (:func:`~monai_npc.functional.stack_field.compose_stack_fields`) and carrying labels
trilinearly through the slices (:func:`~monai_npc.functional.label_warp.warp_indicators_volume`). Both follow the
MONAI ``Warp`` convention, ``label_t(x) = label_ref(x + ddf_t(x))``; the functions here take either and keep it.
"""

from __future__ import annotations

from typing import Any, Dict, Sequence, Tuple

import numpy as np
import torch

from monai_npc.functional.label_warp import warp_indicators, warp_indicators_volume
from monai_npc.functional.stack_field import compose_stack_fields
from monai_npc.functional.warp import compose

__all__ = ["STACK_NOT_APPLIED", "ANCHOR_STACK_CORRECTION", "zero_field", "compose_fields", "carry_label", "frame_ddf", "stack_record"]

#: what tracking leaves out with a stack network, and why (``Tracking.settings["stack_network"]["not_applied"]``, as
#: ``register``'s ``summary["stack_network"]``)
STACK_NOT_APPLIED = {
    "tracking_steps": "tracking's own refinement and ODE steps and its flip ensemble between consecutive frames are the 2-D "
                      "network's; the stack network runs with register's settings (its 3-D refinement) or --refine / --steps",
    "basal_rules": "the network moves through the plane itself; track's basal rules (basal_descent) are not applied on top",
}
#: what ``anchored``'s correction does to a stack network's chained fields
ANCHOR_STACK_CORRECTION = ("each chained field's in-plane channels refined against the reference frame (the 3-D refinement "
                           "register runs for the network, refine_stack); the chain's through-plane channel kept")


def zero_field(shape: Sequence[int], channels: int) -> torch.Tensor:
    """The identity ``(Z, channels, H, W)`` float32 of a ``(Z, H, W)`` grid (``channels`` 2: in-plane, 3: a stack network's)."""
    z, h, w = (int(n) for n in shape)
    return torch.zeros(z, int(channels), h, w)


def compose_fields(first: torch.Tensor, then: torch.Tensor) -> torch.Tensor:
    """``then(x) + first(x + then(x))`` of two ``(Z, C, H, W)`` fields: slice by slice in-plane for ``C = 2``
    (:func:`~monai_npc.functional.warp.compose`), on the stack's ``(Z, H, W)`` grid for ``C = 3``
    (:func:`~monai_npc.functional.stack_field.compose_stack_fields`)."""
    if then.shape[1] == 3:
        return compose_stack_fields(first.float(), then.float())
    return compose(first, then)


def carry_label(indicators: Tuple[np.ndarray, torch.Tensor], ddf: torch.Tensor) -> np.ndarray:
    """The label of :func:`~monai_npc.functional.label_warp.indicator_tensor` carried by ``ddf`` ``(Z, C, H, W)``:
    linear in-plane for ``C = 2`` (:func:`~monai_npc.functional.label_warp.warp_indicators`), trilinear through the
    slices for ``C = 3`` (:func:`~monai_npc.functional.label_warp.warp_indicators_volume`; 0 beyond the stack's ends)."""
    if ddf.shape[1] == 3:
        return warp_indicators_volume(*indicators, ddf.transpose(0, 1))
    return warp_indicators(*indicators, ddf)


def frame_ddf(ddf: torch.Tensor) -> torch.Tensor:
    """A ``(Z, C, H, W)`` field as a frame's ``(3, Z, H, W)`` (an in-plane field gets a zero through-plane channel 0)."""
    if ddf.shape[1] == 2:
        ddf = torch.cat([torch.zeros_like(ddf[:, :1]), ddf], 1)
    return ddf.permute(1, 0, 2, 3)


def stack_record(scheme: str) -> Dict[str, Any]:
    """``Tracking.settings["stack_network"]`` of ``scheme``: the through-plane channel comes from the network, what
    tracking left out (:data:`STACK_NOT_APPLIED`) and why, as ``register``'s ``summary["stack_network"]``, and for
    ``anchored`` what its correction does (:data:`ANCHOR_STACK_CORRECTION`)."""
    record: Dict[str, Any] = {"through_plane": "network", "not_applied": dict(STACK_NOT_APPLIED),
                              "strain": "in-plane per slice: strain does not read the through-plane channel (monai_npc.strain)"}
    if scheme == "anchored":
        record["anchored_correction"] = ANCHOR_STACK_CORRECTION
    return record
