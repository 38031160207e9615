"""The dataset registry: every cardiac dataset the bundles and tools know, by name.

A dataset is one module (its layouts, loader and pair builder, e.g. :mod:`monai_npc.data.acdc`)
and one :func:`register_dataset` call here (or in user code) with its :class:`DatasetSpec`::

    register_dataset("acdc", DatasetSpec(
        pairs="monai_npc.data.acdc:build_acdc_pairs",
        labels={1: "RV", 2: "Myo", 3: "LV"},
        phantom="monai_npc.data.phantom_layouts:write_acdc_phantom",
        phantom_max_slices=True,
        bundle="npc_acdc",
    ))

Functions may be given as ``"module:function"`` strings, imported on first use: listing the
datasets or reading their labels imports no loader (nor MONAI). :func:`~monai_npc.data.bundle_data.load_pairs`
and :func:`~monai_npc.data.bundle_data.prepare_dataset_dir` (the bundles' ``dataset``
argument) read the registry.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, List, Mapping, Optional, Union

__all__ = ["DatasetSpec", "DATASETS", "register_dataset", "dataset_spec", "bundle_defaults"]

#: a function, or ``"module:function"`` naming one (imported on first use)
FunctionRef = Union[Callable[..., Any], str]


def _resolve(ref: FunctionRef, what: str) -> Callable[..., Any]:
    """The function ``ref`` names (a callable is returned as is)."""
    if callable(ref):
        return ref
    module, sep, attr = str(ref).partition(":")
    if not sep or not module or not attr:
        raise ValueError(f"{what} {ref!r} must be a function or a 'module:function' string.")
    return getattr(importlib.import_module(module), attr)


@dataclass(frozen=True)
class DatasetSpec:
    """What the bundles and tools need of one dataset.

    Attributes:
        pairs: the pair builder, ``(root, split="train", **kwargs) -> List[dict]`` of pair items
            (:mod:`monai_npc.data.pairs`; ``split`` one of ``"train"``, ``"val"``, ``"test"``,
            ``"all"``); it raises ``FileNotFoundError`` / ``ValueError`` for unusable folders.
        labels: label value -> structure name of the dataset's label maps.
        phantom: the phantom writer, ``(out, patients=, seed=, first_id=, progress=) -> List[Path]``
            (patient folders in the dataset's own layout, read back by ``pairs``), or ``None``
            when the dataset has no phantom (then a bundle needs ``dataset_dir``).
        phantom_max_slices: the phantom writer also takes ``max_slices`` (slices per patient).
        bundle: name of the MONAI bundle trained on the dataset (``"npc_acdc"``), or ``None``.
        bundle_defaults: profile settings of that bundle's weights that predate the profile keys
            of their ``meta`` (``field_of_view``, ``spacing_mm``, ``register_settings``, ...).
    """

    pairs: FunctionRef
    labels: Mapping[int, str]
    phantom: Optional[FunctionRef] = None
    phantom_max_slices: bool = False
    bundle: Optional[str] = None
    bundle_defaults: Mapping[str, Any] = field(default_factory=dict)

    def pair_builder(self) -> Callable[..., List[Dict]]:
        """The pair builder (imported on first use)."""
        return _resolve(self.pairs, "pairs")

    def phantom_writer(self) -> Optional[Callable[..., Any]]:
        """The phantom writer (imported on first use), or ``None``."""
        return None if self.phantom is None else _resolve(self.phantom, "phantom")


#: dataset name -> its spec, in registration order
DATASETS: Dict[str, DatasetSpec] = {}


def register_dataset(name: str, spec: DatasetSpec, replace: bool = False) -> DatasetSpec:
    """Add ``spec`` to :data:`DATASETS` as ``name`` (the bundles' ``dataset`` argument); returns ``spec``.

    Raises:
        TypeError: ``spec`` is not a :class:`DatasetSpec`.
        ValueError: ``name`` is empty, or already registered (with another spec) and not ``replace``.
    """
    if not isinstance(spec, DatasetSpec):
        raise TypeError(f"register_dataset({name!r}, ...) needs a DatasetSpec, got {type(spec).__name__}.")
    if not isinstance(name, str) or not name.strip():
        raise ValueError(f"a dataset name must be a non-empty string, got {name!r}.")
    if name in DATASETS and DATASETS[name] != spec and not replace:
        raise ValueError(f"dataset {name!r} is already registered; pass replace=True to replace it.")
    DATASETS[name] = spec
    return spec


def dataset_spec(name: str) -> DatasetSpec:
    """The spec of dataset ``name``; ``ValueError`` listing the registered names for an unknown one."""
    if name not in DATASETS:
        raise ValueError(f"dataset must be one of {tuple(DATASETS)}, got {name!r}.")
    return DATASETS[name]


def bundle_defaults(bundle: str) -> Dict[str, Any]:
    """The ``bundle_defaults`` of the dataset whose bundle is named ``bundle`` (``{}`` when none is): what
    ``register`` reads under the ``meta`` of weights from that bundle."""
    for spec in DATASETS.values():
        if spec.bundle is not None and spec.bundle == bundle:
            return dict(spec.bundle_defaults)
    return {}


# register_settings are what ``register`` gives a pair of the bundle's weights where the caller sets nothing; each was
# chosen on the validation patients (the measurements: docs/design_notes.md, "Register settings of the shipped models")
register_dataset("acdc", DatasetSpec(
    pairs="monai_npc.data.acdc:build_acdc_pairs",
    labels={1: "RV", 2: "Myo", 3: "LV"},
    phantom="monai_npc.data.phantom_layouts:write_acdc_phantom",
    phantom_max_slices=True,
    bundle="npc_acdc",
    bundle_defaults={
        # the ACDC crops are 128 x 128 at the scanner's pixel size (ACDC spacing is 1.37-1.68 mm)
        "field_of_view": "heart", "spacing_mm": [1.3, 1.9],
        # the field falls to zero over the window's outer 12 voxels: more of a large heart inside the registered part
        "taper": 12,
        # 6 ODE steps, 30 refinement steps of 0.5 falling to 0.15 voxels (Adam's learning rate; residual grid 8 voxels
        # apart), one heart window per stack, the ODE's field averaged with that of the pair turned by 180 degrees, the
        # carried label smoothed in-plane by 1 voxel, the label term's intensity models half from the fixed frame, the
        # acdc_heart segmentation prior at weight 8 in that term
        "register_settings": {"num_steps": 6, "refine_iterations": 30, "refine_learning_rate": 0.5, "refine_learning_rate_end": 0.15,
                              "refine_grid_stride": 8, "field_of_view": "heart-stack", "flip_ensemble": 2, "label_sigma": 1.0,
                              "label_model_mix": 0.5, "label_prior": "acdc_heart", "label_prior_weight": 8.0},
        # which label value is which structure tracking reports (monai_npc.apps.tracking.structures)
        "label_structures": {"rv": 1, "myo": 2, "lv": 3},
    },
))
register_dataset("camus", DatasetSpec(
    pairs="monai_npc.data.camus:build_camus_pairs",
    labels={1: "LV endocardium", 2: "LV myocardium", 3: "left atrium"},
    phantom="monai_npc.data.phantom_layouts:write_camus_phantom",
    bundle="npc_camus",
    # the carried label smoothed in-plane by 1 voxel before its label-linear resampling; tracking reads the LV cavity
    # and myocardium (the left atrium is no structure it reports)
    bundle_defaults={"register_settings": {"label_sigma": 1.0}, "label_structures": {"lv": 1, "myo": 2}},
))
