"""Pull warp in MONAI's ``Warp`` convention, scriptable with TorchScript."""

from __future__ import annotations

import torch
from torch import nn

from monai_npc.functional.warp import warp_image

__all__ = ["Warp"]


class Warp(nn.Module):
    """``out(x) = img(x + ddf(x))`` for ``img`` ``(B, C, *S)`` and ``ddf`` ``(B, D, *S)`` in voxels.

    Args:
        mode: ``"bilinear"`` for images (linear along every axis), ``"nearest"`` for label maps.
        padding_mode: ``"border"``, ``"zeros"`` or ``"reflection"``.
    Same result as ``monai.networks.blocks.Warp`` with the same modes; unlike it, scripts with
    TorchScript and handles 1-D fields.
    """

    def __init__(self, mode: str = "bilinear", padding_mode: str = "border") -> None:
        super().__init__()
        if mode not in ("bilinear", "nearest"):
            raise ValueError(f"mode must be 'bilinear' or 'nearest', got {mode!r}.")
        if padding_mode not in ("border", "zeros", "reflection"):
            raise ValueError(f"padding_mode must be border, zeros or reflection, got {padding_mode!r}.")
        self.mode = mode
        self.padding_mode = padding_mode

    def forward(self, image: torch.Tensor, ddf: torch.Tensor) -> torch.Tensor:
        return warp_image(image, ddf, self.mode, self.padding_mode)
