"""monai_npc: Neural Phase Correlation (NPC) for learned deformable registration, as MONAI building blocks.

Layout (imports point downwards only)::

    cli/, extras/              command line entry points; QHO, SAR, brain extras
    apps/                      pipelines: registration, tracking, whole stacks
    handlers/, engines/        ignite handlers, training and evaluation workflows
    interop/, data/            files: images, transforms, checks; datasets, readers, phantoms
    cardiac/, transforms/, viz/  cardiac function rules; dict transforms; figures
    networks/nets              NPCNet, baselines, label prior
    networks/blocks, losses/, metrics/
    functional/                pure tensor functions

The order is written in docs/architecture.md and enforced by tests/test_architecture.py.

Displacement fields ("ddf") follow MONAI's ``Warp`` convention everywhere inside the package:
voxel units, channel ``k`` is the displacement along spatial axis ``k`` and
``out(x) = img(x + ddf(x))``.

Quick start (in memory, like ``ants.registration``)::

    import monai_npc
    reg = monai_npc.register("ED.nii.gz", "ES.nii.gz", model="acdc")  # or SimpleITK images / arrays
    reg.warped, reg.transform, reg.ddf, reg.summary; reg.save("result")

Cines: ``monai_npc.track("patient_4d.nii.gz", "ED_gt.nii.gz", reference_frame=0)`` carries a label
to every frame (:mod:`monai_npc.apps.tracking`: volumes, EF, LV mass); ``monai_npc.strain(tracking)`` gives
the myocardial strain of that motion (global and AHA segments, :mod:`monai_npc.cardiac.strain`).

``import monai_npc`` stays light: :func:`register` and :class:`Registration` are imported on first use.
"""

from typing import Any

__version__ = "0.1.0"

__all__ = ["register", "Registration", "track", "strain", "__version__"]


def __getattr__(name: str) -> Any:
    """Lazy top-level API: ``monai_npc.register`` / ``monai_npc.Registration`` / ``monai_npc.track`` (torch and SimpleITK load on first use)."""
    if name in ("register", "Registration"):
        from monai_npc.apps import registration

        return getattr(registration, name)
    if name == "track":
        from monai_npc.apps.tracking.track import track

        return track
    if name == "strain":
        from monai_npc.apps.tracking.strain import strain

        return strain
    raise AttributeError(f"module 'monai_npc' has no attribute {name!r}")
