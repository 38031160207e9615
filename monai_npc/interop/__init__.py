"""Interoperability with ITK, SimpleITK, ANTs and 3D Slicer: physical-space files and transforms.

Physical units (mm, LPS) appear only here and in :mod:`monai_npc.data`; inside the package a
displacement is a voxel ddf (MONAI ``Warp`` convention). See ``docs/interop.md``.

- :mod:`.transforms`: ddf <-> ITK ``DisplacementFieldTransform`` (``.h5``), ANTs warp
  (``*Warp.nii.gz``), one-slice 3-D transforms for 3D Slicer;
- :mod:`.images`: reading images as SimpleITK images, model grids, resampling;
- :mod:`.inputs`: whatever a user hands in (file, DICOM folder, array, ``MetaTensor``) as a SimpleITK image;
- :mod:`.checks`: input checks and warnings (overlap, spacing, orientation, labels);
- :mod:`.label_resample`: a label map resampled through a transform (ITK's label-linear interpolation).

The registration that uses them is :mod:`monai_npc.apps.registration`; nothing here imports it.
"""

from .images import check_image, check_label, check_same_dims, grid_mismatch, model_grid, read_image, read_label, resample, resample_model_field, to_sitk
from .inputs import as_image, describe_input
from .transforms import (
    ddf_to_physical,
    displacement_field_image,
    displacement_field_transform,
    embed_in_3d,
    physical_to_ddf,
    read_displacement_field,
    write_ants_warp,
    write_itk_transform,
    write_slicer_transform,
)

__all__ = [
    "as_image",
    "describe_input",
    "check_image",
    "check_label",
    "check_same_dims",
    "ddf_to_physical",
    "displacement_field_image",
    "displacement_field_transform",
    "embed_in_3d",
    "grid_mismatch",
    "model_grid",
    "physical_to_ddf",
    "read_displacement_field",
    "read_image",
    "read_label",
    "resample",
    "resample_model_field",
    "to_sitk",
    "write_ants_warp",
    "write_itk_transform",
    "write_slicer_transform",
]
