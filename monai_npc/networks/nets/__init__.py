"""Complete registration networks: NPCNet and the baselines in the same API."""

from .baselines import DemonsNet, PhaseCorrelationNet, VoxelMorphNet
from .label_prior import PRIORS_DIR, LabelPrior, load_label_prior, save_label_prior
from .npc import ACDC_CONFIG, CAMUS_CONFIG, NPCNet
from .npc_slice_context import SLICE_CONTEXT, SliceContextNPC
from .npc_through_plane import THROUGH_PLANE, ThroughPlaneNPC
from .stack_npc import StackNPC
from .pretrained import (
    WEIGHTS_DIR,
    WeightsCheck,
    available_models,
    bundle_network_config,
    check_weights,
    export_bundle_weights,
    link_bundle_weights,
    load_pretrained,
    mirror_bundle_weights,
    model_argument_help,
    record_checksum,
    save_pretrained,
    weights_network_class,
)

__all__ = [
    "ACDC_CONFIG",
    "DemonsNet",
    "LabelPrior",
    "PRIORS_DIR",
    "CAMUS_CONFIG",
    "NPCNet",
    "PhaseCorrelationNet",
    "SLICE_CONTEXT",
    "SliceContextNPC",
    "StackNPC",
    "THROUGH_PLANE",
    "ThroughPlaneNPC",
    "VoxelMorphNet",
    "WEIGHTS_DIR",
    "WeightsCheck",
    "available_models",
    "bundle_network_config",
    "check_weights",
    "export_bundle_weights",
    "link_bundle_weights",
    "load_label_prior",
    "load_pretrained",
    "mirror_bundle_weights",
    "model_argument_help",
    "record_checksum",
    "save_label_prior",
    "save_pretrained",
    "weights_network_class",
]
