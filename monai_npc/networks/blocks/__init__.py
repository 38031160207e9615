"""NPC building blocks; each is usable on its own."""

from .decoder import MiniUNetHead, PositionalEncodingDecoder
from .filter_bank import PairedFilterBank
from .interaction import PairInteraction
from .npc_stage import NPCStage
from .refinement import InstanceRefinement
from .slice_context import SliceContextHead
from .through_plane_head import ThroughPlaneHead
from .topk import ResidualTopKMask
from .warp import Warp
from .warp_ode import WarpODE, split_steps

__all__ = [
    "MiniUNetHead",
    "PositionalEncodingDecoder",
    "PairedFilterBank",
    "PairInteraction",
    "NPCStage",
    "InstanceRefinement",
    "SliceContextHead",
    "ThroughPlaneHead",
    "ResidualTopKMask",
    "Warp",
    "WarpODE",
    "split_steps",
]
