"""Complete registration networks: NPCNet and the baselines in the same API."""

from .baselines import PhaseCorrelationNet, VoxelMorphNet
from .npc import ACDC_CONFIG, CAMUS_CONFIG, NPCNet

__all__ = ["ACDC_CONFIG", "CAMUS_CONFIG", "NPCNet", "PhaseCorrelationNet", "VoxelMorphNet"]
