"""Task pipelines above the blocks, the way MONAI keeps them in ``monai.apps``.

- :mod:`monai_npc.apps.registration`: the input path of one registration (read, canonical
  geometry, localise, model grid, register, paste back) used by :func:`monai_npc.register`.
- :mod:`monai_npc.apps.stacks`: whole short-axis stacks in folders (official ACDC layout,
  plain pairs, cines): inference and evaluation against SimpleITK demons.
"""
