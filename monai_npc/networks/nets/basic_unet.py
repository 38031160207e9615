"""MONAI's ``BasicUNet`` with its default layers, built from ``torch.nn`` only.

:class:`BasicUNet` has the modules, parameter names, construction order and forward pass of
:class:`monai.networks.nets.BasicUNet` built with its defaults (LeakyReLU of slope 0.1, instance norm
with affine parameters, biased convolutions, transposed-convolution upsampling), so a state dict of
either loads into the other unchanged, the same seed initialises both alike, and both give the same
outputs. It exists because ``import monai`` imports every MONAI subpackage (ignite, scipy, matplotlib
and itk among them), while a command-line ``register`` with a label prior needs only this network.
For other activations, normalisations or upsamplings use :class:`monai.networks.nets.BasicUNet`.
"""

from __future__ import annotations

from typing import List, Sequence, Tuple

import torch
from torch import nn

__all__ = ["BasicUNet", "Down", "TwoConv", "UpCat"]

_CONV = {1: nn.Conv1d, 2: nn.Conv2d, 3: nn.Conv3d}
_CONV_T = {1: nn.ConvTranspose1d, 2: nn.ConvTranspose2d, 3: nn.ConvTranspose3d}
_NORM = {1: nn.InstanceNorm1d, 2: nn.InstanceNorm2d, 3: nn.InstanceNorm3d}
_POOL = {1: nn.MaxPool1d, 2: nn.MaxPool2d, 3: nn.MaxPool3d}

#: MONAI BasicUNet's default activation: ``("LeakyReLU", {"negative_slope": 0.1, "inplace": True})``
LEAKY_SLOPE = 0.1


def _check_dims(spatial_dims: int) -> int:
    if int(spatial_dims) not in _CONV:
        raise ValueError(f"spatial_dims must be 1, 2 or 3, got {spatial_dims}.")
    return int(spatial_dims)


def pad_to_skip(x: torch.Tensor, skip: torch.Tensor) -> torch.Tensor:
    """Pad ``x`` ``(B, C, *S)`` by one voxel (replicated) at the far end of each spatial axis where its size
    differs from ``skip``'s (a 2x max pooling of an odd side), as MONAI's ``UpCat`` does."""
    pad: List[int] = [0] * (2 * (x.dim() - 2))
    for i in range(x.dim() - 2):
        if skip.shape[-i - 1] != x.shape[-i - 1]:
            pad[2 * i + 1] = 1
    return nn.functional.pad(x, pad, "replicate") if any(pad) else x


class _ADN(nn.Sequential):
    """MONAI's ``ADN`` in its ``"NDA"`` order: instance norm ``N`` (affine), dropout ``D``, LeakyReLU ``A``."""

    def __init__(self, spatial_dims: int, channels: int, dropout: float) -> None:
        super().__init__()
        self.add_module("N", _NORM[spatial_dims](channels, affine=True))
        self.add_module("D", nn.Dropout(p=float(dropout)))
        self.add_module("A", nn.LeakyReLU(negative_slope=LEAKY_SLOPE, inplace=True))


class _Convolution(nn.Sequential):
    """MONAI's ``Convolution`` with kernel 3, padding 1: ``conv`` then ``adn``."""

    def __init__(self, spatial_dims: int, in_chns: int, out_chns: int, bias: bool, dropout: float) -> None:
        super().__init__()
        self.add_module("conv", _CONV[spatial_dims](in_chns, out_chns, kernel_size=3, stride=1, padding=1, bias=bias))
        self.add_module("adn", _ADN(spatial_dims, out_chns, dropout))


class TwoConv(nn.Sequential):
    """Two 3-wide convolutions, each with instance norm, dropout and LeakyReLU: ``(B, in_chns, *S)`` -> ``(B, out_chns, *S)``."""

    def __init__(self, spatial_dims: int, in_chns: int, out_chns: int, bias: bool = True, dropout: float = 0.0) -> None:
        super().__init__()
        self.add_module("conv_0", _Convolution(spatial_dims, in_chns, out_chns, bias, dropout))
        self.add_module("conv_1", _Convolution(spatial_dims, out_chns, out_chns, bias, dropout))


class Down(nn.Sequential):
    """2x max pooling then :class:`TwoConv`: ``(B, in_chns, *S)`` -> ``(B, out_chns, *S // 2)``."""

    def __init__(self, spatial_dims: int, in_chns: int, out_chns: int, bias: bool = True, dropout: float = 0.0) -> None:
        super().__init__()
        self.add_module("max_pooling", _POOL[spatial_dims](kernel_size=2))
        self.add_module("convs", TwoConv(spatial_dims, in_chns, out_chns, bias, dropout))


class _UpSample(nn.Sequential):
    """MONAI's ``UpSample`` in ``"deconv"`` mode: a transposed convolution of kernel and stride 2, named ``deconv``."""

    def __init__(self, spatial_dims: int, in_chns: int, out_chns: int, bias: bool = True) -> None:
        super().__init__()
        k = (2,) * spatial_dims
        self.add_module("deconv", _CONV_T[spatial_dims](in_chns, out_chns, kernel_size=k, stride=k, padding=0, output_padding=0, bias=bias))


class UpCat(nn.Module):
    """2x upsampling of ``x`` ``(B, in_chns, *S)``, concatenated after the encoder's ``x_e`` ``(B, cat_chns, *S_e)``
    (``S_e`` = ``2 S`` or one more), then :class:`TwoConv`: -> ``(B, out_chns, *S_e)``.

    Args:
        halves: upsample to ``in_chns // 2`` channels (else ``in_chns``).
    """

    def __init__(self, spatial_dims: int, in_chns: int, cat_chns: int, out_chns: int, bias: bool = True, dropout: float = 0.0,
                 halves: bool = True) -> None:
        super().__init__()
        up_chns = in_chns // 2 if halves else in_chns
        self.upsample = _UpSample(spatial_dims, in_chns, up_chns, bias)
        self.convs = TwoConv(spatial_dims, cat_chns + up_chns, out_chns, bias, dropout)

    def forward(self, x: torch.Tensor, x_e: torch.Tensor) -> torch.Tensor:
        return self.convs(torch.cat([x_e, pad_to_skip(self.upsample(x), x_e)], dim=1))


class BasicUNet(nn.Module):
    """A five-level U-Net: ``(B, in_channels, *S)`` -> ``(B, out_channels, *S)`` logits; sides of ``S`` should be
    multiples of 16 (four 2x poolings), as for MONAI's.

    Args:
        spatial_dims: 1, 2 or 3.
        in_channels: input channels.
        out_channels: output channels.
        features: six numbers: the five encoder levels' features, then the features after the last upsampling.
        bias: biased 3-wide convolutions.
        dropout: dropout probability after each normalisation (training only).
    """

    def __init__(self, spatial_dims: int = 3, in_channels: int = 1, out_channels: int = 2,
                 features: Sequence[int] = (32, 32, 64, 128, 256, 32), bias: bool = True, dropout: float = 0.0) -> None:
        super().__init__()
        d = _check_dims(spatial_dims)
        fea: Tuple[int, ...] = tuple(int(f) for f in features)
        if len(fea) != 6:
            raise ValueError(f"features must be six numbers, got {tuple(features)}.")
        self.conv_0 = TwoConv(d, in_channels, fea[0], bias, dropout)
        self.down_1 = Down(d, fea[0], fea[1], bias, dropout)
        self.down_2 = Down(d, fea[1], fea[2], bias, dropout)
        self.down_3 = Down(d, fea[2], fea[3], bias, dropout)
        self.down_4 = Down(d, fea[3], fea[4], bias, dropout)
        self.upcat_4 = UpCat(d, fea[4], fea[3], fea[3], bias, dropout)
        self.upcat_3 = UpCat(d, fea[3], fea[2], fea[2], bias, dropout)
        self.upcat_2 = UpCat(d, fea[2], fea[1], fea[1], bias, dropout)
        self.upcat_1 = UpCat(d, fea[1], fea[0], fea[5], bias, dropout, halves=False)
        self.final_conv = _CONV[d](fea[5], out_channels, kernel_size=1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x0 = self.conv_0(x)
        x1 = self.down_1(x0)
        x2 = self.down_2(x1)
        x3 = self.down_3(x2)
        x4 = self.down_4(x3)
        u4 = self.upcat_4(x4, x3)
        u3 = self.upcat_3(u4, x2)
        u2 = self.upcat_2(u3, x1)
        u1 = self.upcat_1(u2, x0)
        return self.final_conv(u1)
