"""Complete registration networks: NPCNet and the baselines in the same API."""

from .baselines import DemonsNet, PhaseCorrelationNet, VoxelMorphNet
from .npc import ACDC_CONFIG, CAMUS_CONFIG, NPCNet
from .pretrained import (
    WEIGHTS_DIR,
    available_models,
    bundle_network_config,
    export_bundle_weights,
    load_pretrained,
    model_argument_help,
    save_pretrained,
)

__all__ = [
    "ACDC_CONFIG",
    "DemonsNet",
    "CAMUS_CONFIG",
    "NPCNet",
    "PhaseCorrelationNet",
    "VoxelMorphNet",
    "WEIGHTS_DIR",
    "available_models",
    "bundle_network_config",
    "export_bundle_weights",
    "load_pretrained",
    "model_argument_help",
    "save_pretrained",
]
