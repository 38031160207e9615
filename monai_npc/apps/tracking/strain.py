"""``monai_npc.strain``: myocardial strain of a tracked cine, from the tracking's own motion.

The tracking's displacements (:attr:`Tracking.ddf`, frame voxels, ``label_t(x) = label_ref(x + ddf_t(x))``)
and its reference label go to :func:`monai_npc.cardiac.strain.strain_from_displacements`: Lagrangian
circumferential and radial strain of every frame relative to the reference frame, global and per AHA
segment. The basal rules of ``track`` are a through-plane part of the field (channel 0, which strain ignores);
from an ED reference they only clear basal slices, which leaves the in-plane displacements and so the strain as
they were (from an ES reference the slices they fill take the in-plane motion of the slice below).

A tracking with a stack network (``tracking.settings["stack_network"]``) moves through the plane itself: the strain
stays in-plane per slice, the in-plane displacements read on each slice as they are, its through-plane channel not
read; :attr:`~monai_npc.cardiac.strain.Strain.notes` (``strain.json`` ``notes``) says so, with the largest
through-plane displacement.
"""

from __future__ import annotations

from typing import Any, Optional

import numpy as np

from monai_npc.cardiac.strain import Strain, strain_from_displacements

__all__ = ["strain"]


def strain(tracking: Any, label: Optional[Any] = None, frame_ms: Optional[float] = None, **kwargs: Any) -> Strain:
    """Myocardial strain of ``tracking`` (:func:`monai_npc.track`'s result) relative to its reference frame.

    Args:
        tracking: the tracked cine (:class:`~monai_npc.apps.tracking.track.Tracking`).
        label: ``(Z, H, W)`` label of the reference frame that defines the myocardium, its radial / circumferential
            directions and the AHA segments, numbered as the tracking's (``tracking.structures``: ACDC's 1 RV, 2
            myocardium, 3 LV unless the tracking found or was given another numbering); ``None``: the tracking's own
            reference label (``tracking.labels[tracking.reference_frame]``).
        frame_ms: time between two frames in ms (time to peak in ms, strain rate in 1/s); ``None``:
            frames (the cine headers of ACDC carry no time unit).
        kwargs: of :func:`~monai_npc.cardiac.strain.strain_from_displacements` (``kind``, ``mirrored``...; ``rv``,
            ``myocardium``, ``lv`` default to ``tracking.structures``).

    Raises:
        ValueError: a ``label`` that is not on the cine's grid, a ``frame_ms`` that is not > 0.
    """
    ref = tracking.reference_frame
    reference = tracking.labels[ref] if label is None else np.asarray(label)
    if reference.shape != tracking.labels.shape[1:]:
        raise ValueError(f"label of shape {reference.shape} is not on the cine's grid {tracking.labels.shape[1:]} (Z, H, W).")
    times = None
    if frame_ms is not None:
        if not (np.isfinite(frame_ms) and frame_ms > 0):
            raise ValueError(f"frame_ms (--frame-ms) must be a number > 0 (ms between frames), got {frame_ms}.")
        times = float(frame_ms) * np.arange(len(tracking.labels))
    values = {"rv": tracking.structures["rv"], "myocardium": tracking.structures["myo"], "lv": tracking.structures["lv"]}
    out = strain_from_displacements(tracking.ddf, reference, tracking.cine.spacing, ref, times, **dict(values, **kwargs))
    if "stack_network" in (tracking.settings or {}):
        moved = float(tracking.ddf[:, 0].abs().max())
        out.notes.append(f"the tracking's stack network moves up to {moved:.2f} slices through the plane; this strain is in-plane "
                         "per slice and does not read that motion (the in-plane displacements of each slice as they are)")
    return out
