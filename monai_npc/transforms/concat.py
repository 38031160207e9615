"""Stack a pair into the two-channel ``image`` input of MONAI registration bundles."""

from __future__ import annotations

from monai.transforms import ConcatItemsd

__all__ = ["ConcatPaird"]


class ConcatPaird(ConcatItemsd):
    """Concatenate ``moving`` ``(1, *S)`` and ``fixed`` ``(1, *S)`` into ``image`` ``(2, *S)``.

    Channel 0 is the moving image, channel 1 the fixed image. The inputs are kept.
    """

    def __init__(
        self, moving_key: str = "moving", fixed_key: str = "fixed", name: str = "image", allow_missing_keys: bool = False
    ) -> None:
        super().__init__(keys=[moving_key, fixed_key], name=name, dim=0, allow_missing_keys=allow_missing_keys)
