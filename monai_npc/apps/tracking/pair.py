"""A two-frame cine (an ED/ES pair) tracked as one registration: ``track([ED, ES])`` is ``register(ED, ES)``."""

from __future__ import annotations

import time
from typing import Dict, Optional

import numpy as np
import SimpleITK as sitk
import torch

from monai_npc.apps.registration.api import register
from monai_npc.apps.registration.through_plane import basal_through_plane
from monai_npc.cardiac.function import cardiac_function, volume_curves

from .cine import Cine
from .progress import progress_bar
from .registrations import TrackSettings
from .result import Tracking
from .structures import found_structures, resolve_structures, without_absent

__all__ = ["track_pair"]


def track_pair(data: Cine, ref: int, ref_label: np.ndarray, settings: TrackSettings, descent: bool, ed_frame: Optional[int],
               es_frame: Optional[int], progress: bool, structures: Optional[Dict[str, int]] = None) -> Tracking:
    """A two-frame cine as one :func:`monai_npc.register` of the reference frame onto the other with the reference label
    ``(Z, H, W)`` and the run's ``settings`` (register's settings for the model where they leave them, its label-guided
    refinement and label prior), the basal rules (``descent``)
    as a through-plane part of the field (:func:`~monai_npc.apps.registration.through_plane.basal_through_plane`:
    ED->ES when the carried LV is smaller than the reference's, else ES->ED); the carried label is the registration's
    ``warped_label``. ``structures``: the label's numbering as given, else as register's label prior found it
    (:func:`~monai_npc.apps.tracking.structures.resolve_structures`)."""
    t0 = time.perf_counter()
    other = 1 - ref
    label_image = sitk.GetImageFromArray(np.asarray(ref_label, dtype=np.int16))
    label_image.CopyInformation(data.frames[ref])
    bar = progress_bar(progress, 1, "track (one pair)")
    reg = register(data.frames[ref], data.frames[other], model=settings.model, moving_label=label_image,
                   refine_iterations=settings.refine_iterations, num_steps=settings.num_steps, **settings.registration_kwargs())
    if bar is not None:
        bar.update()
        bar.close()
    carried = sitk.GetArrayFromImage(reg.warped_label).astype(ref_label.dtype)
    values, numbering = resolve_structures(structures, found_structures([reg.summary.get("label_prior")]), ref_label, settings.model)
    if descent:
        lv = values["lv"]
        basal_through_plane(reg, "ED->ES" if (carried == lv).sum() < (ref_label == lv).sum() else "ES->ED", values)
        carried = sitk.GetArrayFromImage(reg.warped_label).astype(ref_label.dtype)
    labels = np.stack([ref_label, carried] if ref == 0 else [carried, ref_label])
    field = reg.ddf.float() if reg.ddf.shape[0] == 3 else torch.cat([torch.zeros_like(reg.ddf[:1]), reg.ddf], 0).float()
    ddf = torch.stack([torch.zeros_like(field), field] if ref == 0 else [field, torch.zeros_like(field)])
    volumes = volume_curves(labels, data.spacing, values)
    steps = reg.summary.get("steps") or {}
    settings = {"pair": {"model": reg.summary["model"], "num_steps": steps.get("num_steps"), "refine_iterations": steps.get("refine_iterations"),
                         "label_guidance": reg.summary.get("label_guidance"), "label_prior": reg.summary.get("label_prior"),
                         "basal_descent": reg.summary.get("basal_descent"), "settings": reg.summary.get("settings"),
                         "fold_repair": reg.summary.get("fold_repair"), "folding_percent": reg.summary.get("folding_percent")},
                "structures": numbering}
    if reg.summary.get("stack_network") is not None:  # a stack network's field, and what register left out
        settings["stack_network"] = reg.summary["stack_network"]
    function = without_absent(cardiac_function(volumes, ed_frame, es_frame), numbering.get("absent", ()))
    return Tracking(labels=labels, ddf=ddf, volumes=volumes, function=function, reference_frame=ref,
                    scheme="pair", drift=None, seconds=time.perf_counter() - t0, cine=data, registrations=1, settings=settings,
                    structures=values)
