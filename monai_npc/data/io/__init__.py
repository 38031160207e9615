"""Medical image I/O: NIfTI, MHD/MHA, NRRD, PNG/JPEG, DICOM (file, multi-frame, series), HDF5.

Reading goes through MONAI's ``LoadImage`` readers (ITK, NiBabel, PIL) and returns
``MetaTensor`` objects in MONAI's axis order (``x, y[, z[, t]]``, no channel axis) with the
RAS ``affine`` MONAI computes. :func:`load_image` adds three entries to ``meta`` in the file's
own (ITK, LPS) world convention:

- ``spacing``: voxel size per spatial array axis, mm;
- ``origin``: world position of voxel 0, mm (LPS, as ITK/DICOM report it);
- ``direction``: ``(d, d)`` direction cosines, column ``k`` = axis ``k`` (LPS).

:func:`read_sitk_image` reads the same files straight into a ``SimpleITK.Image`` (LPS geometry)
without importing MONAI or ITK Python (the fast path of ``monai-npc register``); it also picks
one phase, slice or frame out of a cine DICOM folder (:func:`read_dicom_folder`).

The dataset loaders of this package work on plain numpy arrays in *array order*: the order
SimpleITK's ``GetArrayFromImage`` and the SSL4MIS HDF5 files use, ``(Z, H, W)`` / ``(H, W)``
(rows = image ``y``, columns = image ``x``). :func:`to_array_order` converts, and
:func:`write_image` writes array-order data with spacing, origin and direction.

Modules, one job each:

- :mod:`~monai_npc.data.io.formats`: file endings, :func:`find_image`, MetaImage data files;
- :mod:`~monai_npc.data.io.monai_reader`: :func:`load_image` (MONAI readers), :func:`to_array_order`;
- :mod:`~monai_npc.data.io.selection`: the ``select`` specification (:func:`parse_select`) and
  one slice or frame of a ``MetaTensor`` (:func:`select_slice`, :func:`select_frame`);
- :mod:`~monai_npc.data.io.geometry`: LPS spacing, origin and direction from MONAI's affine;
- :mod:`~monai_npc.data.io.sitk_file`: one file into a ``SimpleITK.Image`` with clear errors;
- :mod:`~monai_npc.data.io.sitk_reader`: :func:`read_sitk_image`, :func:`read_vector_image`;
- :mod:`~monai_npc.data.io.dicom`: DICOM files and folders (:func:`read_dicom_folder`);
- :mod:`~monai_npc.data.io.nifti`: NIfTI checks ITK does not make (:func:`check_nifti`, sform/pixdim);
- :mod:`~monai_npc.data.io.hdf5`: :func:`read_h5`; :mod:`~monai_npc.data.io.writer`: :func:`write_image`.
"""

from __future__ import annotations

from .dicom import dicom_headers, is_dicom_file, position_along_normal, read_dicom_folder
from .formats import IMAGE_SUFFIXES, PathLike, find_image, image_suffix
from .hdf5 import read_h5
from .monai_reader import load_image, read_array, to_array_order
from .nifti import check_nifti, sform_disagrees, sform_mismatch
from .selection import SELECT_KEYS, parse_select, select_frame, select_slice
from .sitk_file import read_sitk_file, to_grayscale
from .sitk_reader import read_sitk_image, read_vector_image
from .writer import write_image

__all__ = [
    "IMAGE_SUFFIXES",
    "image_suffix",
    "find_image",
    "load_image",
    "read_sitk_image",
    "read_dicom_folder",
    "parse_select",
    "to_grayscale",
    "read_sitk_file",
    "check_nifti",
    "select_slice",
    "select_frame",
    "to_array_order",
    "read_array",
    "read_h5",
    "read_vector_image",
    "write_image",
    "is_dicom_file",
    "dicom_headers",
    "position_along_normal",
    "SELECT_KEYS",
    "sform_disagrees",
    "sform_mismatch",
    "PathLike",
]
