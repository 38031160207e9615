"""What :func:`monai_npc.track` returns: :class:`Tracking` (labels, displacements, volumes, function, strain)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Dict, Optional

import numpy as np
import SimpleITK as sitk
import torch

from monai_npc.cardiac.function import ACDC_STRUCTURES
from monai_npc.functional import dice_by_value

from .cine import Cine

if TYPE_CHECKING:  # the strain code (and scipy) load only when strain is asked for
    from monai_npc.cardiac.strain import Strain

__all__ = ["Tracking", "label_dice"]


def label_dice(a: np.ndarray, b: np.ndarray, structures: Dict[str, int] = ACDC_STRUCTURES) -> Dict[str, float]:
    """3-D Dice per structure (NaN when absent from both)."""
    dice = dice_by_value(a, b, list(structures.values()))
    return {name: float("nan") if dice[v] is None else dice[v] for name, v in structures.items()}


def _json_numbers(values: Dict[str, float]) -> Dict[str, Optional[float]]:
    """``values`` with NaN (a figure a structure the label does not hold cannot have) as ``None``: JSON's ``null``."""
    return {k: None if isinstance(v, float) and not np.isfinite(v) else v for k, v in values.items()}


@dataclass
class Tracking:
    """The result of :func:`track`.

    Attributes:
        labels: ``(T, Z, H, W)`` int32, the reference label carried to every frame (cine grid).
        ddf: ``(T, 3, Z, H, W)`` float32 frame voxels, ``label_t(x) = label_ref(x + ddf[t](x))``
            (MONAI Warp convention; channel 0, through-plane in slices, is zero except where the basal rules are part
            of the field, or the stack network's own: ``labels[t]`` is the reference label carried by ``ddf[t]``,
            nothing edits it afterwards).
        volumes: ``{"lv", "rv", "myo"}`` -> ``(T,)`` mL per frame.
        function: :func:`~monai_npc.cardiac.function.cardiac_function` of ``volumes``
            (ED/ES from the LV curve; EDV/ESV/SV mL, EF %, LV mass g).
        reference_frame: the frame whose label was given (0-based).
        scheme: the tracking scheme.
        drift: Dice per structure of the reference label carried once round the cycle by the
            consecutive-frame chain, against itself (``sequential`` / ``bidirectional`` / ``average``;
            ``anchored``: its anchored chain; 1 = no drift), else ``None``.
        seconds: wall time; ``seconds_per_frame`` = seconds / (T - 1).
        cine: the input.
        structures: the value of each structure (``"rv"``, ``"myo"``, ``"lv"``) in ``labels``, which keep the given
            label's values: the numbering ``volumes``, ``function``, the basal rules and strain read
            (:mod:`~monai_npc.apps.tracking.structures`; ``-1``: a structure the label does not hold).
    """

    labels: np.ndarray
    ddf: torch.Tensor
    volumes: Dict[str, np.ndarray]
    function: Dict[str, float]
    reference_frame: int
    scheme: str
    drift: Optional[Dict[str, float]]
    seconds: float
    cine: Cine = field(repr=False)
    registrations: int = 0
    #: the networks the registrations used (``{"consecutive frames" | "register's settings": {model, num_steps,
    #: refine_iterations}}``) and, where they got the label, ``"label"``: guidance weight, label prior, the frames it acted
    #: on and stood aside on; with a stack network ``"stack_network"``: its through-plane channel, what was not applied
    #: to it and why (:func:`~monai_npc.apps.tracking.fields.stack_record`)
    settings: Dict[str, Dict[str, Any]] = field(default_factory=dict)
    structures: Dict[str, int] = field(default_factory=lambda: dict(ACDC_STRUCTURES))
    _lazy: Dict[str, Any] = field(default_factory=dict, repr=False)

    @property
    def strain(self) -> "Strain":
        """Myocardial strain of this motion relative to the reference frame, with the tracking's own reference
        label (:func:`monai_npc.strain`, whose options this leaves at their defaults); computed once."""
        if "strain" not in self._lazy:
            from .strain import strain

            self._lazy["strain"] = strain(self)
        return self._lazy["strain"]

    @property
    def seconds_per_frame(self) -> float:
        return self.seconds / max(len(self.cine) - 1, 1)

    @property
    def label_image(self) -> sitk.Image:
        """The tracked labels as a 4-D ``sitk.Image`` (uint8, int32 beyond 255) with the cine's geometry."""
        small = self.labels.min(initial=0) >= 0 and self.labels.max(initial=0) < 256
        return self.cine.to_4d(self.labels.astype(np.uint8 if small else np.int32))

    @property
    def summary(self) -> Dict[str, Any]:
        """JSON-ready figures: function, ED/ES, drift, volumes per frame, timings."""
        return {
            "cine": self.cine.source, "frames": len(self.cine), "reference_frame": self.reference_frame,
            "scheme": self.scheme, "function": _json_numbers(self.function), "drift_dice": None if self.drift is None else _json_numbers(self.drift),
            "volumes_ml": {k: v.tolist() for k, v in self.volumes.items()}, "structures": self.structures,
            "registrations": self.registrations, "registration_settings": self.settings,
            "seconds": self.seconds, "seconds_per_frame": self.seconds_per_frame,
            "convention": "ddf in frame voxels, label_t(x) = label_ref(x + ddf_t(x)); frames 0-based",
        }
