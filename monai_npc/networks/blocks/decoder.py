"""Positional-encoding decoder (paper Eq. decoder) and its readout heads."""

from __future__ import annotations

from typing import List, Optional, Tuple

import torch
import torch.nn.functional as F
from torch import nn

from monai_npc.functional.encoding import positional_encoding

#: convolution class per spatial dimension (what MONAI's ``Conv[Conv.CONV, d]`` returns, without importing MONAI)
_CONV = {1: nn.Conv1d, 2: nn.Conv2d, 3: nn.Conv3d}

__all__ = ["MiniUNetHead", "PositionalEncodingDecoder"]


def _interp_mode(spatial_dims: int) -> str:
    return ("linear", "bilinear", "trilinear")[spatial_dims - 1]


def _pointwise_mlp(
    x: torch.Tensor, w1: torch.Tensor, b1: Optional[torch.Tensor], w2: torch.Tensor, b2: Optional[torch.Tensor], slope: float
) -> torch.Tensor:
    """Two 1^D convolutions (weights ``(out, in, 1, ...)``) with a LeakyReLU between, as matrix
    products over a channel-last ``x`` ``(B, *grid, in)``; returns ``(B, *grid, out)``."""
    return F.linear(F.leaky_relu(F.linear(x, w1.flatten(1), b1), slope), w2.flatten(1), b2)


class MiniUNetHead(nn.Module):
    """Depth-1 UNet readout with 3^D kernels: ``(B, in_channels, *g) -> (B, out_channels, *g)``.

    ``enc = act(conv3(x))``; ``bottom = act(conv3_stride2(enc))``;
    ``dec = act(conv3(cat(enc, up(bottom))))``; ``out = conv1(dec)``. The output layer starts near
    zero, so an untrained network predicts (almost) no displacement.
    """

    def __init__(self, spatial_dims: int, in_channels: int, out_channels: int, hidden: int = 16, negative_slope: float = 0.2) -> None:
        super().__init__()
        conv = _CONV[spatial_dims]
        self.enc = conv(in_channels, hidden, 3, padding=1)
        self.down = conv(hidden, hidden, 3, stride=2, padding=1)
        self.dec = conv(2 * hidden, hidden, 3, padding=1)
        self.out = conv(hidden, out_channels, 1)
        nn.init.normal_(self.out.weight, std=1e-5)
        nn.init.zeros_(self.out.bias)
        self.act = nn.LeakyReLU(negative_slope)
        self.mode = _interp_mode(spatial_dims)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.forward_from_enc(self.enc(x))

    def forward_from_enc(self, enc: torch.Tensor) -> torch.Tensor:
        """The rest of :meth:`forward` after the first convolution: ``enc = self.enc(x)`` (before its activation)."""
        enc = self.act(enc)
        bottom = self.act(self.down(enc))
        up = F.interpolate(bottom, size=enc.shape[2:], mode=self.mode, align_corners=False)
        return self.out(self.act(self.dec(torch.cat([enc, up], 1))))


class PositionalEncodingDecoder(nn.Module):
    """Decode masked polar features into a displacement on the coarse grid (paper Eq. decoder).

    ``m = MLP_z(z)`` (``3C -> B -> G``, LeakyReLU), ``gamma_g = W_gamma gamma`` (``n_pe -> G``, no bias),
    ``delta_gamma = MLP_pe(m * gamma_g) - gamma`` (``G -> G -> n_pe``), ``ddf = head(delta_gamma)``.
    All maps are 1x1 convolutions over the coarse grid except the ``"unet"`` head.

    Args:
        spatial_dims: 1, 2 or 3.
        num_pairs: ``C``; the input has ``3C`` channels.
        hidden_dim: ``B``, hidden width of ``MLP_z``.
        gate_dim: ``G``, the gate-space width.
        num_pe: ``n_pe``, positional-encoding channels (a multiple of ``2 * spatial_dims``).
        head: ``"unet"`` (depth-1 mini-UNet, 3^D kernels) or ``"linear"`` (1x1 convolution).
        head_channels: hidden width of the mini-UNet.
        negative_slope: LeakyReLU slope.

    Use :meth:`encoding` once per pair (it does not change across ODE steps), then call
    ``forward(features, gamma, gate)`` at every step.
    """

    __constants__ = ["unet"]

    def __init__(
        self,
        spatial_dims: int = 2,
        num_pairs: int = 128,
        hidden_dim: int = 128,
        gate_dim: int = 128,
        num_pe: int = 256,
        head: str = "unet",
        head_channels: int = 16,
        negative_slope: float = 0.2,
    ) -> None:
        super().__init__()
        if num_pe % (2 * spatial_dims) != 0:
            raise ValueError(f"num_pe ({num_pe}) must be a multiple of 2 * spatial_dims ({2 * spatial_dims}).")
        conv = _CONV[spatial_dims]
        self.mlp_z = nn.Sequential(
            conv(3 * num_pairs, hidden_dim, 1), nn.LeakyReLU(negative_slope), conv(hidden_dim, gate_dim, 1)
        )
        self.w_gamma = conv(num_pe, gate_dim, 1, bias=False)
        self.mlp_pe = nn.Sequential(conv(gate_dim, gate_dim, 1), nn.LeakyReLU(negative_slope), conv(gate_dim, num_pe, 1))
        if head == "unet":
            self.head: nn.Module = MiniUNetHead(spatial_dims, num_pe, spatial_dims, head_channels, negative_slope)
        elif head == "linear":
            lin = conv(num_pe, spatial_dims, 1)
            nn.init.normal_(lin.weight, std=1e-5)
            nn.init.zeros_(lin.bias)
            self.head = lin
        else:
            raise ValueError(f"head must be 'unet' or 'linear', got {head!r}.")
        self.num_pe = num_pe
        self.negative_slope = negative_slope
        self.unet = head == "unet"
        first = self.head.enc if isinstance(self.head, MiniUNetHead) else self.head
        self.head_padding: List[int] = [int(p) for p in first.padding]

    def encoding(self, grid_shape: List[int], reference: torch.Tensor) -> Tuple[torch.Tensor, torch.Tensor]:
        """``(gamma, gamma_g)`` for a coarse grid: ``(1, n_pe, *grid)`` and ``(1, G, *grid)``.

        ``reference`` supplies device and dtype.
        """
        gamma = positional_encoding(grid_shape, self.num_pe, None, reference.device, reference.dtype).unsqueeze(0)
        return gamma, self.w_gamma(gamma)

    def forward(self, features: torch.Tensor, gamma: torch.Tensor, gate: torch.Tensor, embedded: Optional[torch.Tensor] = None) -> torch.Tensor:
        """``features`` ``(B, 3C, *grid)`` (channel ``j * C + k``: feature ``j`` of pair ``k``) -> displacement ``(B, D, *grid)`` (voxels).

        ``embedded``: :meth:`embed` of these features, channel-last ``(B, *grid, G)``, when the caller already has it.

        The 1x1 maps run as matrix products over the channel-last view of the inputs; pass
        channel-last memory (``x.movedim(1, -1)`` contiguous, e.g. ``torch.channels_last`` in 2-D)
        to avoid copies. Any layout gives the same numbers.

        :meth:`reference_forward` with the head's first layer folded into ``MLP_pe``'s last one (same
        numbers to float rounding): that layer is linear, so ``first(W h + b - gamma) = first_W(h) +
        first(b - gamma)``, where ``first_W`` convolves with the product of the two weights (zero
        padding commutes with a channel map). ``delta_gamma`` is never formed: the ``G -> n_pe``
        product is skipped and the UNet head's first convolution reads ``G`` channels instead of
        ``n_pe`` (a shorter ODE step).
        """
        pe_in, pe_out = self.mlp_pe[0], self.mlp_pe[2]
        gated = self._gated(features, gate) if embedded is None else embedded * gate.movedim(1, -1)
        hidden = F.leaky_relu(F.linear(gated, pe_in.weight.flatten(1), pe_in.bias), self.negative_slope)
        bias = pe_out.bias
        constant = -gamma if bias is None else bias.view([1, -1] + [1] * (gamma.dim() - 2)) - gamma  # (1, n_pe, *grid)
        if self.unet:
            first = self.head.enc
            out = _conv_nd(hidden.movedim(-1, 1), _fold(first.weight, pe_out.weight), self.head_padding) + first(constant)
            return self.head.forward_from_enc(out)
        return _conv_nd(hidden.movedim(-1, 1), _fold(self.head.weight, pe_out.weight), self.head_padding) + self.head(constant)

    def embed(self, features: torch.Tensor) -> torch.Tensor:
        """``m = MLP_z(z)``: channel-last features ``(B, *grid, 3C)`` -> ``(B, *grid, G)``."""
        z_in, z_out = self.mlp_z[0], self.mlp_z[2]
        return _pointwise_mlp(features, z_in.weight, z_in.bias, z_out.weight, z_out.bias, self.negative_slope)

    def _gated(self, features: torch.Tensor, gate: torch.Tensor) -> torch.Tensor:
        """``m * gamma_g``, channel-last ``(B, *grid, G)``."""
        return self.embed(features.movedim(1, -1)) * gate.movedim(1, -1)

    def reference_forward(self, features: torch.Tensor, gamma: torch.Tensor, gate: torch.Tensor) -> torch.Tensor:
        """:meth:`forward` computed as the paper writes it: ``head(MLP_pe(m * gamma_g) - gamma)``."""
        pe_in, pe_out = self.mlp_pe[0], self.mlp_pe[2]
        pe = _pointwise_mlp(self._gated(features, gate), pe_in.weight, pe_in.bias, pe_out.weight, pe_out.bias, self.negative_slope)
        return self.head((pe - gamma.movedim(1, -1)).movedim(-1, 1))


def _fold(first: torch.Tensor, linear: torch.Tensor) -> torch.Tensor:
    """Weight ``(O, G, *k)`` of a convolution ``first`` ``(O, N, *k)`` applied after the 1x1 map ``linear`` ``(N, G, 1, ...)``."""
    return (first.movedim(1, -1) @ linear.flatten(1)).movedim(-1, 1)


def _conv_nd(x: torch.Tensor, weight: torch.Tensor, padding: List[int]) -> torch.Tensor:
    """Convolution without bias, stride 1, zero ``padding`` per axis, in 1, 2 or 3 spatial dims."""
    if x.dim() == 3:
        return F.conv1d(x, weight, None, 1, padding)
    if x.dim() == 4:
        return F.conv2d(x, weight, None, 1, padding)
    return F.conv3d(x, weight, None, 1, padding)
