"""Task pipelines above the blocks, the way MONAI keeps them in ``monai.apps``.

- :mod:`monai_npc.apps.registration`: one registration (read, canonical geometry, align, localise,
  model grid, register, paste back): :func:`monai_npc.register`.
- :mod:`monai_npc.apps.tracking`: a label carried through a cine with that registration: :func:`monai_npc.track`.
- :mod:`monai_npc.apps.stacks`: whole short-axis stacks in folders (official ACDC layout, plain
  pairs, cines): inference and evaluation against SimpleITK demons.

Within ``apps`` imports point down the same way: stacks -> tracking -> registration.
"""
