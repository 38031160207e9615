"""Dictionary transforms for registration pairs (MONAI ``MapTransform`` style).

- :class:`CropOnLabelUniond`: fixed-size crop centred on the union of label boxes (ACDC).
- :class:`MinMaxNormalized`: per-slice min-max to ``[0, 1]``.
- :class:`RandPairFlipd`: random flips shared by all arrays of a pair (ddf-aware).
- :class:`ResampleToSpacingd`: resample images, labels and ddfs to a voxel size (CAMUS).
- :class:`ConcatPaird`: ``moving`` + ``fixed`` -> ``image`` ``(2, *S)``.
- :class:`RandStackAugment`: batched geometry, shift-suite intensity / artefacts and one-frame contrast inversion of
  whole-stack pairs on the device (GPU training, :mod:`monai_npc.engines.stack_training`).
"""

from .concat import ConcatPaird
from .crop import CropOnLabelUniond, crop_or_pad, crop_window, label_union_bbox
from .flip import RandPairFlipd, flip_ddf
from .intensity import MinMaxNormalized
from .resample import ResampleToSpacingd
from .stack_augment import RandStackAugment, StackAugmentConfig, minmax_per_slice

__all__ = [
    "ConcatPaird",
    "CropOnLabelUniond",
    "MinMaxNormalized",
    "RandPairFlipd",
    "RandStackAugment",
    "ResampleToSpacingd",
    "StackAugmentConfig",
    "crop_or_pad",
    "crop_window",
    "flip_ddf",
    "label_union_bbox",
    "minmax_per_slice",
]
