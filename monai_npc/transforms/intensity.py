"""Per-slice min-max intensity normalisation."""

from __future__ import annotations

from monai.config import KeysCollection
from monai.transforms import ScaleIntensityd

__all__ = ["MinMaxNormalized"]


class MinMaxNormalized(ScaleIntensityd):
    """Rescale each channel of each key linearly to ``[0, 1]`` (its own min and max).

    For the 2-D pair items ``(1, H, W)`` this is the paper's per-slice min-max normalisation.
    A constant channel becomes all zeros. Thin wrapper around MONAI's ``ScaleIntensityd``
    (``minv=0, maxv=1, channel_wise=True``).
    """

    def __init__(self, keys: KeysCollection, allow_missing_keys: bool = False) -> None:
        super().__init__(keys, minv=0.0, maxv=1.0, channel_wise=True, allow_missing_keys=allow_missing_keys)
