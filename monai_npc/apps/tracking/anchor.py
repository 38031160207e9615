"""Re-anchoring a chained field to the reference frame: the ``anchored`` tracking scheme.

Composing consecutive registrations along a cine (``sequential``) lets their errors add up
(drift); registering the reference frame onto a frame directly (``direct``) under-estimates the
large motions of the cycle (ED -> ES). ``anchored`` does both: frame ``t``'s field starts as the
chain ``U_t = s_t + U_{t-1}(x + s_t)`` of the network's consecutive-frame fields, and is then
corrected by a few test-time refinement steps of the *reference* frame onto frame ``t``
(:class:`~monai_npc.networks.blocks.InstanceRefinement` on a residual grid
:data:`ANCHOR_GRID_STRIDE` voxels apart, its label-guided term fed with the reference label, as
:func:`monai_npc.register` does for pairs). The corrected field is what the next frame's chain
builds on, so errors no longer accumulate along the cycle.

The label-guided term is there for the frames far from the reference (end-systole from an ED
label), where image similarity alone leaves the carried LV under-contracted; near the reference it
only biases the labels (it thins the myocardium). Its weight for frame ``t`` is therefore
``label_guidance * d_t / max_s d_s`` (:func:`frame_distances`: the mean squared intensity
difference of frame ``t`` to the reference inside the box), 0 on the reference frame itself.

The refinement works on the frames' own voxels, on a box around the reference label (every slice
shares it: ``margin`` voxels around the label's in-plane bounding box, at least ``size`` voxels a
side), each slice independently;
its correction is tapered to zero at the box's edge (the chain is kept outside), so the field has
no seam. Images are scaled per slice by their 1st/99th percentiles
(:func:`~monai_npc.functional.intensity.robust_unit`).

Chosen by measurement (docs/tracking.md, "Anchored tracking").
"""

from __future__ import annotations

import copy
from typing import Any, Dict, Optional, Tuple

import numpy as np
import torch

from monai_npc.functional.intensity import robust_unit
from monai_npc.functional.taper import taper_window
from monai_npc.networks.blocks.refinement import InstanceRefinement
from monai_npc.transforms.crop import label_union_bbox

__all__ = [
    "ANCHOR_ITERATIONS", "ANCHOR_LABEL_GUIDANCE", "ANCHOR_LEARNING_RATE", "ANCHOR_GRID_STRIDE", "ANCHOR_MARGIN", "ANCHOR_SIZE",
    "ANCHOR_TAPER",
    "ReferenceAnchor", "label_box", "frame_distances",
]

#: refinement steps that correct each frame's chained field against the reference frame
ANCHOR_ITERATIONS = 6
#: weight of the refinement's label-guided term (the reference label) on the frame farthest from the reference,
#: :func:`monai_npc.register`'s default for pairs; scaled down for nearer frames (:func:`frame_distances`)
ANCHOR_LABEL_GUIDANCE = 0.05
#: the correction's step size, the same at every step (voxels; the weights' own, whatever step sizes register gives its
#: longer refinement): a few short steps of a field already close
ANCHOR_LEARNING_RATE = 0.25
#: voxels between the control points of the correction's residual (the network's own refinement: 4); the
#: corrections are small and local (a myocardium a few voxels thick), which a coarser grid cannot express
ANCHOR_GRID_STRIDE = 2
#: voxels kept around the reference label's in-plane bounding box (the heart moves within it)
ANCHOR_MARGIN = 24
#: voxels over which the correction falls to zero at the box's edge
ANCHOR_TAPER = 8
#: the box is at least this many voxels a side: the window :func:`monai_npc.register` refines a pair
#: of ACDC slices in, so that the refinement's terms (means over the box) and its label-guided term
#: (a sum over the heart) weigh as they do there
ANCHOR_SIZE = 128


def label_box(label: np.ndarray, margin: int, size: int = 0) -> Tuple[slice, slice]:
    """In-plane ``(rows, cols)`` slices of the bounding box of ``label > 0`` over all slices
    (``(Z, H, W)``), grown by ``margin`` voxels and to at least ``size`` voxels a side (around its
    centre), clipped to the grid; the whole grid for an empty label."""
    label = np.asarray(label)
    h, w = label.shape[-2:]
    bbox = label_union_bbox([label.reshape(-1, h, w)])  # the slices as channels: the in-plane box of their union
    if bbox is None:
        return slice(0, h), slice(0, w)
    out = []
    for (lo, hi), n in zip(bbox, (h, w)):
        lo, hi = lo - margin, hi + margin
        grow = max(int(size) - (hi - lo), 0)
        lo, hi = lo - grow // 2, hi + grow - grow // 2
        shift = max(-lo, 0) - max(hi - n, 0)  # slide a box that leaves the grid back into it
        out.append(slice(max(lo + shift, 0), min(hi + shift, n)))
    return out[0], out[1]


def frame_distances(images: torch.Tensor, reference: int) -> torch.Tensor:
    """``(T,)`` mean squared intensity difference of each frame of ``images`` ``(T, ...)`` to frame
    ``reference``, divided by the largest (0 on the reference; all 0 for a still cine)."""
    d = (images - images[reference]).flatten(1).pow(2).mean(1)
    top = float(d.max())
    return d / top if top > 0 else torch.zeros_like(d)


class ReferenceAnchor:
    """``anchor(frame, ddf)``: the chained field ``ddf`` ``(Z, 2, H, W)`` (frame voxels, MONAI ``Warp``
    convention, ``label_t(x) = label_ref(x + ddf(x))``; a stack network's ``(Z, 3, H, W)``) of ``frame`` refined against
    the reference frame.

    Args:
        frames: ``(T, Z, H, W)`` intensities of the cine.
        reference: the reference frame (its label is ``label``).
        label: ``(Z, H, W)`` integer label of the reference frame.
        refiner: the refinement to run (its window and regularisers; a copy, with ``iterations``, ``grid_stride`` and
            the step size :data:`ANCHOR_LEARNING_RATE`); ``None``: :class:`InstanceRefinement` with its defaults.
        iterations: refinement steps per frame (``None``: :data:`ANCHOR_ITERATIONS`).
        label_guidance: weight of the label-guided term on the frame farthest from the reference
            (0 = off); frame ``t`` gets ``label_guidance`` x its :func:`frame_distances` value.
        grid_stride: voxels between the residual's control points (``None``: :data:`ANCHOR_GRID_STRIDE`).
        margin, taper, size: the box around the label (grown by ``margin``, at least ``size`` a side)
            and the taper of the correction at its edge (voxels).
    """

    def __init__(
        self, frames: np.ndarray, reference: int, label: np.ndarray, refiner: Optional[InstanceRefinement] = None,
        iterations: Optional[int] = None, label_guidance: float = ANCHOR_LABEL_GUIDANCE, margin: int = ANCHOR_MARGIN,
        taper: int = ANCHOR_TAPER, size: int = ANCHOR_SIZE, grid_stride: Optional[int] = None,
    ) -> None:
        frames = np.asarray(frames)
        if frames.ndim != 4:
            raise ValueError(f"frames must be (T, Z, H, W), got shape {frames.shape}.")
        if float(label_guidance) < 0:
            raise ValueError(f"label_guidance must be >= 0, got {label_guidance}.")
        self.box = label_box(label, int(margin), int(size))
        box = (slice(None), slice(None)) + self.box
        self.images = torch.from_numpy(np.stack([robust_unit(f) for f in frames[box]]))[:, :, None]  # (T, Z, 1, h, w)
        self.reference = int(reference)
        self.label = torch.from_numpy(np.asarray(label, dtype=np.int64)[(slice(None),) + self.box])[:, None]  # (Z, 1, h, w)
        self.refiner = copy.copy(refiner) if refiner is not None else InstanceRefinement()  # the caller's stays as it is
        self.refiner.iterations = ANCHOR_ITERATIONS if iterations is None else int(iterations)
        self.refiner.learning_rate, self.refiner.learning_rate_end = ANCHOR_LEARNING_RATE, None
        self.refiner.grid_stride = ANCHOR_GRID_STRIDE if grid_stride is None else int(grid_stride)
        if self.refiner.grid_stride < 1:
            raise ValueError(f"grid_stride must be >= 1, got {grid_stride}.")
        self.label_guidance = float(label_guidance)
        self.distances = frame_distances(self.images, self.reference)  # (T,), the label term's weight per frame
        self.taper = taper_window(self.images.shape[-2:], int(taper)).float()

    @property
    def iterations(self) -> int:
        return self.refiner.iterations

    @property
    def settings(self) -> Dict[str, Any]:
        """What a :class:`~monai_npc.apps.tracking.track.Tracking` records of the correction."""
        return {"refine_iterations": self.iterations, "grid_stride": self.refiner.grid_stride,
                "label_guidance": self.label_guidance, "label_guidance_by": "frame distance"}

    def guidance(self, frame: int) -> float:
        """The label-guided term's weight for ``frame``."""
        return self.label_guidance * float(self.distances[frame])

    def __call__(self, frame: int, ddf: torch.Tensor) -> torch.Tensor:
        """``ddf`` ``(Z, 2, H, W)``, or a stack network's ``(Z, 3, H, W)`` (channel 0 through the plane in slices), refined
        against the reference: slice by slice in 2-D, or for a stack network by
        :meth:`~monai_npc.networks.blocks.InstanceRefinement.refine_stack` (its in-plane channels, the chain's
        through-plane channel kept, as ``register`` refines such a network's field)."""
        if self.refiner.iterations == 0:
            return ddf
        box = (slice(None), slice(None)) + self.box
        start = ddf[box].float()
        weight = self.guidance(frame)
        refine = self.refiner.refine_stack if ddf.shape[1] == 3 else self.refiner
        refined = refine(self.images[self.reference], self.images[frame], start, self.label if weight > 0 else None,
                         weight if weight > 0 else None)
        out = ddf.clone()
        out[box] = (start + self.taper * (refined - start)).to(ddf.dtype)
        return out
