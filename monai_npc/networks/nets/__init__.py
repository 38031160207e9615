"""Complete registration networks: NPCNet and the baselines in the same API."""

from .baselines import DemonsNet, PhaseCorrelationNet, VoxelMorphNet
from .npc import ACDC_CONFIG, CAMUS_CONFIG, NPCNet
from .pretrained import WEIGHTS_DIR, available_models, load_pretrained, save_pretrained

__all__ = [
    "ACDC_CONFIG",
    "DemonsNet",
    "CAMUS_CONFIG",
    "NPCNet",
    "PhaseCorrelationNet",
    "VoxelMorphNet",
    "WEIGHTS_DIR",
    "available_models",
    "load_pretrained",
    "save_pretrained",
]
