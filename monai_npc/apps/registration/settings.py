"""``register``'s settings, resolved once from their four sources into one frozen record.

Every setting of a registration has one value and one source, in this order of precedence:

1. ``"argument"``: what the caller passed (``register(..., num_steps=4)``, ``--steps 4``);
2. ``"weights"``: the ``register_settings`` (and ``input_size`` / ``field_of_view``) in the weights' own ``meta``,
   or the network's own configuration (its ODE and refinement steps as saved);
3. ``"dataset"``: the ``bundle_defaults`` of the dataset whose bundle the weights came from
   (:func:`monai_npc.data.datasets.bundle_defaults`; ``acdc``'s register settings live there);
4. ``"default"``: :data:`DEFAULTS`, this module's constants.

:func:`resolve_settings` builds the :class:`RegisterSettings` of a network and the caller's arguments;
:meth:`RegisterSettings.record` is what
``summary.json`` (``settings``) and ``Tracking.settings`` hold. A network configured by
:func:`~monai_npc.apps.registration.models.resolve_model` and passed on to ``register`` as a module keeps the sources
of its steps (:func:`network_settings`, :func:`remember`).
"""

from __future__ import annotations

import math
import os
import weakref
from dataclasses import dataclass, field, fields
from typing import Any, Dict, List, Mapping, Optional, Tuple

from torch import nn

from monai_npc.data.datasets import bundle_defaults

__all__ = ["DEFAULTS", "LABEL_GUIDANCE", "NETWORK_SETTINGS", "SOURCES", "RegisterSettings", "check_arguments", "mark_defaults", "model_meta", "network_settings", "register_layer", "remember",
           "resolve_settings"]

#: the sources of a setting, highest precedence first
SOURCES = ("argument", "weights", "dataset", "default")

#: default weight of the refinement's label-guided term when ``register`` gets a moving label
#: (:mod:`monai_npc.functional.label_intensity`); chosen on the training patients (docs/tracking.md)
LABEL_GUIDANCE = 0.05

#: what a setting is where no argument, weights or dataset sets it
DEFAULTS: Dict[str, Any] = {
    "size": 128,  # model grid size (voxels)
    "field_of_view": "image",
    "keep_aspect": True,
    "align": "auto",
    "label_guidance": LABEL_GUIDANCE,
    "label_sigma": 0.0,  # voxels; 0: ITK's sitkLabelLinear exactly
    "label_prior": None,
    "label_prior_weight": 1.0,  # when the weights name a prior but no weight
}

#: settings of the network itself (:meth:`RegisterSettings.apply`); ``None`` for networks without them
NETWORK_SETTINGS = ("num_steps", "refine_iterations", "refine_learning_rate", "refine_learning_rate_end", "refine_grid_stride",
                    "flip_ensemble", "label_model_mix")

#: register settings (in a meta's ``register_settings``) that are fractions, and those that are names; others are integers
_FLOATS = ("label_sigma", "label_model_mix", "label_prior_weight", "label_guidance", "refine_learning_rate", "refine_learning_rate_end")
_NAMES = ("field_of_view", "label_prior")
_TYPED = _FLOATS + _NAMES + NETWORK_SETTINGS + ("size",)

#: sources of the network settings of networks configured by resolve_model (weak: forgotten with the network)
_REMEMBERED: "weakref.WeakKeyDictionary[nn.Module, Dict[str, Tuple[Any, str]]]" = weakref.WeakKeyDictionary()


@dataclass(frozen=True)
class RegisterSettings:
    """The resolved settings of one registration (values; :attr:`sources` says where each came from).

    Attributes:
        size: in-plane model grid size (voxels).
        field_of_view: where the model grid goes (:data:`~monai_npc.apps.registration.models.FIELDS_OF_VIEW`).
        keep_aspect: isotropic model grid (pad the short side).
        align: rigid pre-alignment policy (``"auto"``, ``"rigid"``, ``"none"``).
        label_guidance: weight of the label-guided refinement term asked for (0 = off); it acts only with a moving
            label and a refining NPC network (``summary["label_guidance"]`` is what acted).
        label_sigma: in-plane smoothing of ``warped_label``'s indicators (moving voxels).
        label_prior: name of the segmentation prior in the label term (``None``: none).
        label_prior_weight: its weight within the label term (0 = off).
        num_steps, refine_iterations, refine_learning_rate, refine_learning_rate_end, refine_grid_stride, flip_ensemble,
            label_model_mix: the NPC network's learned ODE steps, test-time refinement steps and their step size (Adam's
            learning rate, voxels of the residual per step: the first step's and the last's, linear in between; the last
            ``None``: constant), refinement residual grid (voxels), flip ensemble and label-model mix; ``None`` for
            networks without them.
        sources: ``{setting: source}``, one of :data:`SOURCES` for each field above.
    """

    size: int
    field_of_view: str
    keep_aspect: bool
    align: str
    label_guidance: float
    label_sigma: float
    label_prior: Optional[str]
    label_prior_weight: float
    num_steps: Optional[int] = None
    refine_iterations: Optional[int] = None
    refine_learning_rate: Optional[float] = None
    refine_learning_rate_end: Optional[float] = None
    refine_grid_stride: Optional[int] = None
    flip_ensemble: Optional[int] = None
    label_model_mix: Optional[float] = None
    sources: Mapping[str, str] = field(default_factory=dict, compare=False)

    def label_terms_asked(self) -> List[str]:
        """The label terms the caller set above 0, named with their flags (for the warnings when they cannot act)."""
        terms = (("label_guidance (--label-guidance)", "label_guidance"), ("label_prior (--label-prior)", "label_prior_weight"))
        return [name for name, attr in terms if self.sources.get(attr) == "argument" and getattr(self, attr)]

    def record(self) -> Dict[str, Dict[str, Any]]:
        """``{setting: {"value": v, "source": s}}`` for every setting: what ``summary.json`` records."""
        return {f.name: {"value": getattr(self, f.name), "source": self.sources.get(f.name, "default")}
                for f in fields(self) if f.name != "sources"}


def check_arguments(arguments: Mapping[str, Any]) -> None:
    """Raise a ``ValueError`` naming the argument (and its command-line flag) for a value no source could fix."""
    def bad(name: str, flag: str, need: str) -> ValueError:
        return ValueError(f"{name} ({flag}) must be {need}, got {arguments[name]}.")

    given = {k: v for k, v in arguments.items() if v is not None}
    if "refine_iterations" in given and int(given["refine_iterations"]) < 0:
        raise bad("refine_iterations", "--refine", ">= 0")
    if "num_steps" in given and int(given["num_steps"]) < 1:
        raise bad("num_steps", "--steps", ">= 1")
    if "label_sigma" in given and not (math.isfinite(float(given["label_sigma"])) and float(given["label_sigma"]) >= 0):
        raise bad("label_sigma", "--label-sigma", "a finite number >= 0 (voxels)")
    if "label_guidance" in given and not float(given["label_guidance"]) >= 0:
        raise bad("label_guidance", "--label-guidance", ">= 0")
    if "label_prior" in given and not (math.isfinite(float(given["label_prior"])) and float(given["label_prior"]) >= 0):
        raise bad("label_prior", "--label-prior", "a finite number >= 0")


def model_meta(net: nn.Module) -> Tuple[Dict[str, Any], Dict[str, Any]]:
    """``(the weights' own meta, the meta their dataset supplies)`` of ``net``: ``bundle_defaults`` of the dataset registered
    with the bundle the weights name (a bundle name, or the folder of weights loaded from a bundle)."""
    own = dict(getattr(net, "meta", None) or {})
    bundle = str(own.get("bundle"))
    dataset = bundle_defaults(bundle) or bundle_defaults(os.path.basename(bundle.rstrip("/\\")))
    return own, dict(dataset)


def _typed(name: str, value: Any) -> Any:
    return str(value) if name in _NAMES else float(value) if name in _FLOATS else int(value)


def register_layer(net: nn.Module) -> Tuple[Dict[str, Any], str]:
    """``(register settings, source)`` of the weights: their own meta's, else their dataset's (a whole block: the
    weights' own block replaces the dataset's)."""
    own, dataset = model_meta(net)
    if own.get("register_settings"):
        return {k: _typed(k, v) for k, v in own["register_settings"].items()}, "weights"
    return {k: _typed(k, v) for k, v in (dataset.get("register_settings") or {}).items()}, "dataset"


def _network_own(net: nn.Module) -> Dict[str, Any]:
    """The network settings ``net`` has now; absent: not a setting of ``net`` (a refiner's ``refine_learning_rate_end``
    may be ``None``, a constant step size)."""
    refiner, ode = getattr(net, "refiner", None), getattr(net, "ode", None)
    config = getattr(net, "config", None) or {}
    own = {
        "num_steps": getattr(ode, "num_steps", None), "refine_iterations": getattr(refiner, "iterations", None),
        "refine_learning_rate": getattr(refiner, "learning_rate", None), "refine_grid_stride": getattr(refiner, "grid_stride", None),
        "flip_ensemble": config.get("flip_ensemble") if hasattr(net, "set_flip_ensemble") else None,
        "label_model_mix": getattr(refiner, "label_model_mix", None),
    }
    own = {k: v for k, v in own.items() if v is not None}
    if hasattr(refiner, "learning_rate_end"):
        own["refine_learning_rate_end"] = refiner.learning_rate_end
    return own


def network_settings(net: nn.Module, arguments: Mapping[str, Any], use_register_settings: bool) -> Dict[str, Tuple[Any, str]]:
    """``{setting: (value, source)}`` that configure ``net`` (:data:`NETWORK_SETTINGS` and ``field_of_view``):
    ``arguments`` (``num_steps``, ``refine_iterations``), then with ``use_register_settings`` the weights' register
    settings, then the network's own configuration; ``None`` for settings the network does not have.
    :func:`~monai_npc.apps.registration.models.resolve_model` applies them and :func:`remember` keeps them."""
    own = _network_own(net)
    layer, source = register_layer(net) if use_register_settings else ({}, "weights")
    out: Dict[str, Tuple[Any, str]] = {}
    for name in NETWORK_SETTINGS:
        if name not in own:  # not a setting of this network
            out[name] = (None, "default")
        elif arguments.get(name) is not None:
            out[name] = (_typed(name, arguments[name]), "argument")
        elif name in layer:
            out[name] = (layer[name], source)
        else:
            out[name] = (own[name], "weights")
    if "field_of_view" in layer:
        out["field_of_view"] = (layer["field_of_view"], source)
    return out


def _network_layer(net: nn.Module) -> Dict[str, Tuple[Any, str]]:
    """``{setting: (value, source)}`` of the network settings ``net`` has now: with the sources :func:`remember` kept
    where the value is still the one configured, else ``"weights"`` (a network used as it is)."""
    kept = _REMEMBERED.get(net, {})
    out: Dict[str, Tuple[Any, str]] = {}
    for name, value in _network_own(net).items():
        configured = kept.get(name)
        if configured is not None and configured[0] == value:
            out[name] = configured
        else:
            out[name] = (value, "default" if value is None else "weights")
    if "field_of_view" in kept:
        out["field_of_view"] = kept["field_of_view"]
    return out


def _first(name: str, *layers: Tuple[Mapping[str, Any], str]) -> Tuple[Any, str]:
    """The value of ``name`` in the first layer that has it (``None`` values skipped), with that layer's source."""
    for layer, source in layers:
        if layer.get(name) is not None:
            return layer[name], source
    return DEFAULTS.get(name), "default"


def resolve_settings(net: nn.Module, arguments: Mapping[str, Any], model_name: str = "") -> RegisterSettings:
    """The :class:`RegisterSettings` of a registration with ``net`` under ``arguments`` (``register``'s keywords;
    ``None`` = not given). ``net``'s network settings are taken as it has them (configured by
    :func:`~monai_npc.apps.registration.models.resolve_model`, whose sources :func:`remember` kept); ``keep_aspect``
    and ``align`` count as arguments when they differ from :data:`DEFAULTS` (their keywords have those defaults).

    Raises:
        ValueError: an argument out of range (:func:`check_arguments`), or a label prior weight for weights that name no prior.
    """
    check_arguments(arguments)
    own, dataset = model_meta(net)
    reg = register_layer(net)
    network = _network_layer(net)
    args = ({k: v for k, v in arguments.items() if v is not None}, "argument")
    window = ({"field_of_view": network["field_of_view"][0]}, network["field_of_view"][1]) if "field_of_view" in network else ({}, "weights")
    values: Dict[str, Tuple[Any, str]] = {
        "size": _first("size", args, ({"size": own.get("input_size")}, "weights"), ({"size": dataset.get("input_size")}, "dataset")),
        "field_of_view": _first("field_of_view", args, window, (own, "weights"), (dataset, "dataset")),
        "label_guidance": _first("label_guidance", args),
        "label_sigma": _first("label_sigma", args, reg),
        "label_prior": _first("label_prior", reg),
    }
    for name in ("keep_aspect", "align"):
        given = arguments.get(name, DEFAULTS[name])
        values[name] = (given, "default" if given == DEFAULTS[name] else "argument")
    weight = arguments.get("label_prior")
    if weight is not None and float(weight) > 0 and not values["label_prior"][0]:
        raise ValueError(f"label_prior (--label-prior) {weight}: model {model_name} names no label prior in its register settings "
                         "(the acdc weights do: acdc_heart); leave it unset or 0 for this model.")
    if weight is not None:
        values["label_prior_weight"] = (float(weight), "argument")
    else:
        values["label_prior_weight"] = _first("label_prior_weight", reg) if values["label_prior"][0] else (0.0, "default")
    values.update({k: v for k, v in network.items() if k in NETWORK_SETTINGS})
    typed = {k: None if v is None else _typed(k, v) if k in _TYPED else v for k, (v, _) in values.items()}
    return RegisterSettings(**typed, sources={k: s for k, (_, s) in values.items()})


def remember(net: nn.Module, configured: Mapping[str, Tuple[Any, str]]) -> None:
    """Keep what :func:`network_settings` configured ``net`` with, so that ``register(model=net)`` records where each
    setting came from (and the window policy it was configured with)."""
    _REMEMBERED[net] = dict(configured)


def mark_defaults(net: nn.Module, values: Mapping[str, Any]) -> None:
    """Record ``values`` (network settings a caller above ``register`` set from its own defaults, such as tracking's steps
    between consecutive frames) as ``net``'s settings with the source ``"default"``."""
    _REMEMBERED.setdefault(net, {}).update({k: (v, "default") for k, v in values.items()})
