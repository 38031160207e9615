"""The tracking schemes: how :func:`monai_npc.track` builds every frame's field from pairwise registrations.

Every frame shares the cine's grid, so displacements are composed in frame voxels (MONAI ``Warp`` convention:
``label_t(x) = label_ref(x + ddf_t(x))``; in-plane ``(Z, 2, H, W)``, or a stack network's ``(Z, 3, H, W)`` composed on
the ``(Z, H, W)`` grid, :mod:`~monai_npc.apps.tracking.fields`). With ``r`` the reference frame, ``T`` frames and ``k = (t - r) mod T``
the offset of frame ``t`` along the cycle:

- :class:`Direct` (``direct``, the default): ``ddf_t`` = registration of frame ``r`` onto frame ``t``
  (``T - 1`` registrations), each ``register(frame_r, frame_t, moving_label=label)`` with register's settings
  (its label-guided refinement and label prior): no chain, so nothing adds up along the cycle;
- :class:`Sequential` (``sequential``): registrations of consecutive frames composed along the cycle,
  ``U_k(x) = s_k(x) + U_{k-1}(x + s_k(x))`` (``T`` registrations, the last one closes the cycle and measures
  the drift);
- :class:`Average` (``average``): the mean of the ``direct`` and ``sequential`` fields;
- :class:`Bidirectional` (``bidirectional``): the forward chain (``r -> r+1 -> ... -> t``) and the backward
  chain (``r -> r-1 -> ... -> t``, round the cycle) weighted by the other chain's length (``2 T`` registrations);
- :class:`Anchored` (``anchored``): the ``sequential`` chain of the network's consecutive-frame fields (no
  refinement), each composed field refined against the reference frame before the next frame builds on it
  (:mod:`~monai_npc.apps.tracking.anchor`; ``T`` registrations and ``T`` refinements).

Each scheme owns what the run's settings (:class:`~monai_npc.apps.tracking.registrations.TrackSettings`) mean for
it: the networks it registers with (consecutive frames: tracking's steps,
:func:`~monai_npc.apps.tracking.registrations.tracking_model`; frames further apart: register's), which
registrations get a label (``label_guidance``), how many registrations it makes, and what
:attr:`~monai_npc.apps.tracking.result.Tracking.settings` records.

Light to import (the command line's ``--help`` reads :data:`SCHEMES`): torch loads inside the methods.
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Any, ClassVar, Dict, List, Optional, Sequence, Tuple, Type

if TYPE_CHECKING:
    import torch

    from .registrations import FrameRegistrations, TrackingRun

__all__ = [
    "SchemeFields", "TrackingScheme", "Direct", "Sequential", "Average", "Bidirectional", "Anchored",
    "SCHEMES", "DEFAULT_SCHEME", "scheme", "registration_count",
]


@dataclasses.dataclass
class SchemeFields:
    """What a scheme built: ``per_frame`` ``T`` fields ``(Z, C, H, W)`` (frame voxels, frame order; ``C`` 2 in-plane, 3
    from a stack network, channel 0 through the plane) to the reference,
    ``cycle`` the chain's field once round the cycle (``None`` without a chain), the registrations it used
    (``pairs``) and the ``settings`` it records."""

    per_frame: List["torch.Tensor"]
    cycle: Optional["torch.Tensor"]
    pairs: "FrameRegistrations"
    settings: Dict[str, Any]


class TrackingScheme:
    """A way of building every frame's field to the reference frame from pairwise registrations."""

    #: the scheme's name (:data:`SCHEMES`)
    name: ClassVar[str] = ""
    #: the run's shared networks it registers with: ``True`` consecutive frames (tracking's steps), ``False``
    #: register's settings (frames further apart)
    networks: ClassVar[Tuple[bool, ...]] = ()

    def __repr__(self) -> str:
        return f"{type(self).__name__}()"

    def registration_groups(self, frames: int) -> Dict[str, int]:
        """``{group: registrations}`` it makes for ``frames`` frames; schemes naming one group share it
        (:func:`registration_count`)."""
        raise NotImplementedError

    def labels(self, label_guidance: Optional[float]) -> Tuple[bool, bool]:
        """``(registrations from the reference frame get its label, every other one gets its moving frame's label)``.

        ``None``: every registration whose moving frame is the reference frame gets the reference label with
        ``register``'s own label settings (its label-guided refinement, its label prior where the weights have one);
        the others none (each ``direct`` frame is then what ``register(reference, frame, moving_label=label)`` gives).
        ``W > 0``: every registration gets its moving frame's label (the reference label, or it carried there by the
        chain so far: chaining carried labels into the term made ``sequential`` worse, docs/design_notes.md,
        "apps/tracking") at weight ``W``. ``0``: none.
        """
        carried = label_guidance is not None and label_guidance > 0
        return label_guidance is None or carried, carried

    def fields(self, run: "TrackingRun") -> SchemeFields:
        """Register what the run's cache lacks and build every frame's field (:class:`SchemeFields`)."""
        pairs = run.pairs(self.labels(run.settings.label_guidance))
        by_offset, cycle = self.offsets(pairs, run.reference, len(run.cine))
        return SchemeFields(frame_order(by_offset, run.reference), cycle, pairs, pairs.settings())

    def offsets(self, pairs: FrameRegistrations, ref: int, frames: int) -> Tuple[List[torch.Tensor], Optional[torch.Tensor]]:
        """``(fields of the frames ref, ref + 1, ... (mod T) to the reference, cycle field or None)``."""
        raise NotImplementedError


class Direct(TrackingScheme):
    """The reference frame registered onto every frame with register's settings: no chain."""

    name = "direct"
    networks = (False,)

    def registration_groups(self, frames: int) -> Dict[str, int]:
        return {"reference onto every frame": frames - 1}

    def offsets(self, pairs: FrameRegistrations, ref: int, frames: int) -> Tuple[List[torch.Tensor], Optional[torch.Tensor]]:
        return [pairs(ref, (ref + k) % frames, direct=True) for k in range(frames)], None


class Sequential(TrackingScheme):
    """Consecutive frames registered with tracking's steps and composed along the cycle."""

    name = "sequential"
    networks = (True,)

    def registration_groups(self, frames: int) -> Dict[str, int]:
        return {"forward chain": frames}

    def offsets(self, pairs: FrameRegistrations, ref: int, frames: int) -> Tuple[List[torch.Tensor], Optional[torch.Tensor]]:
        out = chain(pairs, ref, frames, +1)
        return out[:-1], out[-1]


class Average(Sequential):
    """The mean of the ``direct`` and ``sequential`` fields."""

    name = "average"
    networks = (True, False)

    def registration_groups(self, frames: int) -> Dict[str, int]:
        return dict(super().registration_groups(frames), **Direct().registration_groups(frames))

    def offsets(self, pairs: FrameRegistrations, ref: int, frames: int) -> Tuple[List[torch.Tensor], Optional[torch.Tensor]]:
        by_offset, cycle = super().offsets(pairs, ref, frames)
        return [0.5 * (c + pairs(ref, (ref + k) % frames, direct=True)) for k, c in enumerate(by_offset)], cycle


class Bidirectional(Sequential):
    """The forward and the backward chain, each frame's fields weighted by the other chain's length."""

    name = "bidirectional"

    def registration_groups(self, frames: int) -> Dict[str, int]:
        return dict(super().registration_groups(frames), **{"backward chain": frames})

    def offsets(self, pairs: FrameRegistrations, ref: int, frames: int) -> Tuple[List[torch.Tensor], Optional[torch.Tensor]]:
        fwd, bwd = chain(pairs, ref, frames, +1), chain(pairs, ref, frames, -1)
        return [fwd[k] * ((frames - k) / frames) + bwd[frames - k] * (k / frames) for k in range(frames)], fwd[-1]


class Anchored(TrackingScheme):
    """The network's consecutive-frame fields (no refinement, its own network and registrations) chained, each
    composed field refined against the reference frame
    (:class:`~monai_npc.apps.tracking.anchor.ReferenceAnchor`) before the next frame builds on it.

    ``refine_iterations`` are the correction's steps (default
    :data:`~monai_npc.apps.tracking.anchor.ANCHOR_ITERATIONS`; used for a network given as a module too),
    ``num_steps`` the network's between consecutive frames. The consecutive registrations get a label only for
    ``label_guidance > 0``; the correction has its own label-guided term
    (:data:`~monai_npc.apps.tracking.anchor.ANCHOR_LABEL_GUIDANCE`). A stack network's chained 3-D fields are corrected
    in their in-plane channels (the 3-D refinement ``register`` runs for it), the chain's through-plane channel kept.
    """

    name = "anchored"
    networks = ()

    def registration_groups(self, frames: int) -> Dict[str, int]:
        return {"anchored chain": frames}

    def labels(self, label_guidance: Optional[float]) -> Tuple[bool, bool]:
        carried = label_guidance is not None and label_guidance > 0
        return carried, carried

    def fields(self, run: "TrackingRun") -> SchemeFields:
        import torch

        from monai_npc.apps.registration.settings import mark_defaults

        from .anchor import ReferenceAnchor
        from .registrations import tracking_model

        s = run.settings  # between consecutive frames the network alone (0 refinement steps); a module as it is
        net, name = tracking_model(s.model, s.device, None if isinstance(s.model, torch.nn.Module) else 0, s.num_steps, consecutive=True)
        pairs = run.pairs(self.labels(s.label_guidance), {True: (net, name)})
        if not isinstance(s.model, torch.nn.Module):  # the 0 refinement steps are this scheme's own, not the caller's
            mark_defaults(net, {"refine_iterations": 0})
        anchor = ReferenceAnchor(run.cine.arrays(), run.reference, run.label, getattr(net, "refiner", None), s.refine_iterations)
        by_offset = chain(pairs, run.reference, len(run.cine), +1, anchor)
        settings = dict(pairs.settings(), **{"anchored to the reference": anchor.settings})
        return SchemeFields(frame_order(by_offset[:-1], run.reference), by_offset[-1], pairs, settings)


def chain(pairs: "FrameRegistrations", ref: int, n: int, step: int, anchor: Any = None) -> List["torch.Tensor"]:
    """Fields ``(Z, C, H, W)`` of the frames ``ref, ref + step, ..., ref + n step`` (mod T) to ``ref`` by composing
    consecutive registrations (in-plane, ``C = 2``, or a stack network's on the ``(Z, H, W)`` grid, ``C = 3``:
    :func:`~monai_npc.apps.tracking.fields.compose_fields`); ``anchor(frame, field)``: each composed field corrected
    before the next frame builds on it."""
    from .fields import compose_fields as compose

    out = [pairs(ref, ref)]
    frames = len(pairs.cine)
    for k in range(1, n + 1):
        prev, cur = ref + (k - 1) * step, ref + k * step
        composed = compose(out[-1], pairs(prev, cur, out[-1]))
        out.append(composed if anchor is None else anchor(cur % frames, composed))
    return out


def frame_order(by_offset: List[Any], ref: int) -> List[Any]:
    """Per-offset items (offset ``k`` = frame ``(ref + k) mod T``) in frame order."""
    frames = len(by_offset)
    return [by_offset[(t - ref) % frames] for t in range(frames)]


class _Schemes(tuple):
    """The scheme names, a tuple (the command line's ``--scheme`` choices), that also give a scheme's class by name:
    ``SCHEMES["direct"]`` is :class:`Direct`."""

    def __new__(cls, classes: Tuple[Type[TrackingScheme], ...]) -> "_Schemes":
        out = super().__new__(cls, tuple(c.name for c in classes))
        out.classes = {c.name: c for c in classes}
        return out

    def __getitem__(self, key: Any) -> Any:
        return self.classes[key] if isinstance(key, str) else super().__getitem__(key)

    def __reduce__(self) -> Any:
        return _Schemes, (tuple(self.classes.values()),)


#: the registry: the scheme names (a tuple) and ``SCHEMES[name]``, the scheme's class
SCHEMES = _Schemes((Direct, Sequential, Average, Bidirectional, Anchored))

#: the reference frame registered onto every frame with ``register``'s own pipeline (the reference label in the
#: label-guided refinement, the label prior where the weights have one): no chain, so nothing adds up along the
#: cycle, and every frame is what ``register(reference, frame, moving_label=label)`` gives (docs/design_notes.md,
#: "apps/tracking")
DEFAULT_SCHEME = "direct"


def scheme(name: str) -> TrackingScheme:
    """The scheme called ``name`` (one of :data:`SCHEMES`).

    Raises:
        ValueError: ``name`` is not a scheme.
    """
    if not isinstance(name, str) or name not in SCHEMES:
        raise ValueError(f"scheme {name!r} (scheme / --scheme) is not one of {SCHEMES}.")
    return SCHEMES[name]()


def registration_count(schemes: Sequence[TrackingScheme], frames: int) -> int:
    """Registrations the ``schemes`` make together for ``frames`` frames (those they share counted once)."""
    groups: Dict[str, int] = {}
    for s in schemes:
        groups.update(s.registration_groups(frames))
    return sum(groups.values())
