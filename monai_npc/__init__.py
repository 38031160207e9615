"""monai_npc: Neural Phase Correlation (NPC) for learned deformable registration, as MONAI building blocks.

Layout (imports point downwards only)::

    cli/                       command line entry points
    networks/nets, viz/        NPCNet and baselines, figures
    networks/blocks            filter bank, interaction, top-K mask, decoder, warp, warp-ODE
    losses/, metrics/          registration losses and metrics
    functional/                pure tensor functions

Displacement fields ("ddf") follow MONAI's ``Warp`` convention everywhere inside the package:
voxel units, channel ``k`` is the displacement along spatial axis ``k`` and
``out(x) = img(x + ddf(x))``.
"""

__version__ = "0.1.0"
