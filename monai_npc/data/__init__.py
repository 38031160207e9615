"""Datasets, preprocessing protocols, phantoms and image I/O.

- :mod:`~monai_npc.data.acdc`: ACDC (official NIfTI, SSL4MIS HDF5 volumes and slices) and the
  paper's 2-D ED/ES protocol (:func:`build_acdc_pairs`, :func:`acdc_patient_split`).
- :mod:`~monai_npc.data.camus`: CAMUS (MHD and NIfTI releases), :func:`build_camus_pairs`.
- :mod:`~monai_npc.data.phantoms`: :func:`cardiac_pair`, :func:`echo_pair` with true ``ddf``;
  :mod:`~monai_npc.data.phantom_layouts` writes them in the ACDC / CAMUS layouts.
- :mod:`~monai_npc.data.io`: NIfTI, MHD/MHA, NRRD, PNG/JPEG, DICOM into ``MetaTensor``.
- :mod:`~monai_npc.data.pairs`: the pair item format and its transforms.
- :mod:`~monai_npc.data.datasets`: the dataset registry (:data:`DATASETS`, :func:`register_dataset`):
  a dataset's pair builder, labels, phantom writer and bundle by name.
- :mod:`~monai_npc.data.bundle_data`: the bundles' ``dataset_dir`` / phantom fallback and pair lists
  (:func:`prepare_dataset_dir`, :func:`load_pairs`).

Names are imported lazily so that ``import monai_npc.data.phantoms`` stays light (numpy, scipy).
"""

from __future__ import annotations

from monai_npc.runtime import lazy_exports

_EXPORTS = {
    "acdc": ("ACDC_LABELS", "find_acdc_patients", "load_acdc_patient", "acdc_patient_split", "build_acdc_pairs",
             "acdc_split_summary", "build_acdc_dataset"),
    "camus": ("CAMUS_LABELS", "CAMUS_VIEWS", "find_camus_patients", "load_camus_view", "camus_patient_split",
              "build_camus_pairs", "build_camus_dataset"),
    "phantoms": ("cardiac_pair", "echo_pair", "invert_ddf"),
    "phantom_layouts": ("write_acdc_phantom", "write_camus_phantom"),
    "io": ("load_image", "select_slice", "select_frame", "to_array_order", "read_array", "write_image"),
    "pairs": ("DIRECTIONS", "frames_to_pairs", "pair_transforms", "make_dataset"),
    "splits": ("patient_split", "resolve_split_counts", "read_split_file", "split_patients"),
    "datasets": ("DatasetSpec", "DATASETS", "register_dataset", "dataset_spec"),
    "bundle_data": ("prepare_dataset_dir", "load_pairs"),
}
__getattr__, __all__ = lazy_exports(__name__, _EXPORTS)


def __dir__():
    return sorted(list(globals()) + __all__)
