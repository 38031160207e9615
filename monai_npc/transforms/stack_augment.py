"""Batched augmentation of whole-stack pairs on the device (GPU or CPU), for :mod:`monai_npc.engines.stack_training`.

A batch is the slices of several stacks one after the other: images ``(N, 1, H, W)`` float in ``[0, 1]``, label
maps ``(N, 1, H, W)`` (integer values as float), and ``group`` ``(N,)`` int64, the stack each slice belongs to
(``0 .. n_groups - 1``). Every random parameter is drawn once per stack and shared by its slices and by both of
its frames, so a stack stays a consistent volume and a pair stays a pair:

- geometry (:meth:`RandStackAugment.geometry`): flips of either in-plane axis, an in-plane rotation about the
  window's centre and a shift (voxels), one ``affine_grid`` + ``grid_sample`` for every slice (bilinear images,
  nearest labels, zeros outside: the heart window's zero padding);
- intensity and artefacts (:meth:`RandStackAugment.intensity`), the transforms of ``benchmarks/shift_suite.py``
  as batched tensor operations, each on a stack with probability ``intensity_prob``: gamma (``AdjustContrast``
  with ``gamma`` log-uniform in ``gamma_range``: the suite's ``gamma`` 2.0 and ``contrast`` 0.5), a smooth
  multiplicative bias field (Legendre polynomials up to degree 3, coefficients up to ``bias_coeff``:
  ``RandBiasField``), Gibbs ringing (k-space truncated at ``1 - alpha`` of the band: ``GibbsNoise``), a k-space
  spike (on each slice stripes of its own frequency, the same in both frames but each frame with its own phase,
  ``spike_amplitude`` times the window's range: the suite's ``RandKSpaceSpikeNoise`` draws a location per slice,
  keeps each frame's k-space phase and adds stripes of 1-3.6 times a stack's range, up to ~9 times its heart's
  contrast), Gaussian blur (sigma in voxels),
  halved resolution (``coarse``) and Gaussian noise;
- contrast inversion of ONE frame of a pair (``invert_prob``; in one direction of the pair that frame is the
  fixed image, in the other the moving one), ``max - x`` as the suite's ``inverted``.

Randomness comes from one ``torch.Generator`` on the batch's device, so no host synchronisation is needed and a
run resumes the same stream from the generator's saved state.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Mapping, Optional, Tuple

import torch
import torch.nn.functional as F

__all__ = ["StackAugmentConfig", "RandStackAugment", "minmax_per_slice"]


def minmax_per_slice(image: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
    """Each slice of ``(N, C, H, W)`` linearly to ``[0, 1]`` (its own min and max; a constant slice becomes 0):
    ``register``'s ``minmax`` preprocessing of a heart window."""
    lo = image.amin(dim=(-2, -1), keepdim=True)
    span = image.amax(dim=(-2, -1), keepdim=True) - lo
    return torch.where(span > eps, (image - lo) / span.clamp(min=eps), torch.zeros_like(image))


@dataclass(frozen=True)
class StackAugmentConfig:
    """Settings of :class:`RandStackAugment` (angles in degrees, shifts and sigmas in voxels; 0 disables a part)."""

    flip_prob: float = 0.5
    rotate_deg: float = 15.0
    shift: float = 6.0
    intensity_prob: float = 0.15
    gamma_range: Tuple[float, float] = (0.5, 2.0)
    bias_coeff: float = 0.4
    gibbs_alpha: Tuple[float, float] = (0.3, 0.7)
    spike_amplitude: Tuple[float, float] = (0.5, 6.0)
    blur_sigma: Tuple[float, float] = (0.5, 1.5)
    noise_std: Tuple[float, float] = (0.02, 0.08)
    invert_prob: float = 0.1

    def __post_init__(self) -> None:
        for name in ("flip_prob", "intensity_prob", "invert_prob"):
            value = getattr(self, name)
            if not 0.0 <= value <= 1.0:
                raise ValueError(f"{name} must be a probability in [0, 1], got {value}.")
        if self.rotate_deg < 0 or self.shift < 0 or self.bias_coeff < 0:
            raise ValueError(f"rotate_deg, shift and bias_coeff must be >= 0, got {self.rotate_deg}, {self.shift}, {self.bias_coeff}.")

    @classmethod
    def from_mapping(cls, settings: Mapping[str, Any]) -> "StackAugmentConfig":
        """Settings by name over the defaults (e.g. a command line's JSON); an unknown name is refused, naming the known."""
        unknown = set(settings) - set(cls.__dataclass_fields__)
        if unknown:
            raise ValueError(f"augment: unknown settings {sorted(unknown)}; known: {sorted(cls.__dataclass_fields__)}.")
        return cls(**settings)


def _legendre(x: torch.Tensor) -> torch.Tensor:
    """``(..., 4)``: Legendre polynomials ``P_0..P_3`` at ``x`` in ``[-1, 1]``."""
    return torch.stack([torch.ones_like(x), x, 0.5 * (3 * x * x - 1), 0.5 * (5 * x ** 3 - 3 * x)], -1)


def _radial_frequency(h: int, w: int, device: torch.device) -> torch.Tensor:
    """``(h, w)`` radial frequency in cycles per voxel of ``fft2``'s layout (0 .. ~0.71)."""
    fy = torch.fft.fftfreq(h, device=device)[:, None]
    fx = torch.fft.fftfreq(w, device=device)[None, :]
    return torch.sqrt(fy * fy + fx * fx)


class RandStackAugment:
    """Random geometry, intensity shifts and one-frame contrast inversion of whole-stack pairs, batched on the device.

    Args:
        config: the settings (:class:`StackAugmentConfig`).
        generator: the random stream (on the batch's device); a new one seeded with 0 on first use when ``None``.

    ``augment(ed, es, ed_label, es_label, group, n_groups)`` returns the four tensors augmented, images min-maxed
    per slice; shapes are those of the module docstring.
    """

    def __init__(self, config: StackAugmentConfig = StackAugmentConfig(), generator: Optional[torch.Generator] = None) -> None:
        self.config = config
        self.generator = generator

    def _rand(self, *shape: int, device: torch.device) -> torch.Tensor:
        if self.generator is None or self.generator.device != device:
            self.generator = torch.Generator(device=device).manual_seed(0)
        return torch.rand(shape, generator=self.generator, device=device)

    def _uniform(self, n: int, bounds: Tuple[float, float], device: torch.device) -> torch.Tensor:
        return bounds[0] + (bounds[1] - bounds[0]) * self._rand(n, device=device)

    def geometry(self, images: torch.Tensor, labels: torch.Tensor, group: torch.Tensor, n_groups: int) -> Tuple[torch.Tensor, torch.Tensor]:
        """Flip / rotate / shift ``images`` ``(N, Ci, H, W)`` (bilinear) and ``labels`` ``(N, Cl, H, W)`` (nearest)
        with one transform per group."""
        c, dev = self.config, images.device
        h, w = images.shape[-2:]
        flips = torch.where(self._rand(n_groups, 2, device=dev) < c.flip_prob, -1.0, 1.0)
        angle = (2 * self._rand(n_groups, device=dev) - 1) * math.radians(c.rotate_deg)
        shift = (2 * self._rand(n_groups, 2, device=dev) - 1) * c.shift
        cos, sin = torch.cos(angle), torch.sin(angle)
        theta = torch.zeros(n_groups, 2, 3, device=dev)
        # normalised (x = width, y = height) output -> input coordinates: rotation after the flips, then the shift
        theta[:, 0, 0], theta[:, 0, 1] = cos * flips[:, 1], -sin * flips[:, 0]
        theta[:, 1, 0], theta[:, 1, 1] = sin * flips[:, 1], cos * flips[:, 0]
        theta[:, 0, 2], theta[:, 1, 2] = shift[:, 1] * 2 / max(w - 1, 1), shift[:, 0] * 2 / max(h - 1, 1)
        grid = F.affine_grid(theta[group], [images.shape[0], 1, h, w], align_corners=True)
        images = F.grid_sample(images, grid, mode="bilinear", padding_mode="zeros", align_corners=True)
        labels = F.grid_sample(labels, grid.to(labels.dtype), mode="nearest", padding_mode="zeros", align_corners=True)
        return images, labels

    def _chosen(self, group: torch.Tensor, n_groups: int) -> torch.Tensor:
        """``(N, 1, 1, 1)`` bool: the slices of the stacks drawn with probability ``intensity_prob``."""
        pick = self._rand(n_groups, device=group.device) < self.config.intensity_prob
        return pick[group].view(-1, 1, 1, 1)

    def _per_slice(self, group: torch.Tensor, n_groups: int, bounds: Tuple[float, float]) -> torch.Tensor:
        return self._uniform(n_groups, bounds, group.device)[group].view(-1, 1, 1, 1)

    def _lowpass(self, x: torch.Tensor, transfer: torch.Tensor, chosen: torch.Tensor) -> torch.Tensor:
        out = torch.fft.ifft2(torch.fft.fft2(x) * transfer).real
        return torch.where(chosen, out, x)

    def _bias(self, x: torch.Tensor, group: torch.Tensor, n_groups: int) -> torch.Tensor:
        h, w = x.shape[-2:]
        py, px = _legendre(torch.linspace(-1, 1, h, device=x.device)), _legendre(torch.linspace(-1, 1, w, device=x.device))
        coeff = (2 * self._rand(n_groups, 4, 4, device=x.device) - 1) * self.config.bias_coeff
        coeff = coeff * (torch.arange(4, device=x.device)[:, None] + torch.arange(4, device=x.device)[None] <= 3)  # degree <= 3
        field = torch.einsum("gij,hi,wj->ghw", coeff, py, px)[group].unsqueeze(1)
        return torch.where(self._chosen(group, n_groups), x * torch.exp(field), x)

    def _spike(self, x: torch.Tensor, group: torch.Tensor, n_groups: int) -> torch.Tensor:
        n, h, w = x.shape[0], *x.shape[-2:]
        # one k-space location per slice, shared by the pair's frames, each frame with its own phase there (the suite's
        # RandKSpaceSpikeNoise draws a location per slice and keeps each frame's k-space phase)
        freq = (2 * self._rand(n, 2, device=x.device) - 1) * 0.5  # cycles per voxel along (row, col)
        phase = 2 * math.pi * self._rand(n, x.shape[1], device=x.device)
        rows = torch.arange(h, device=x.device, dtype=x.dtype).view(1, 1, h, 1)
        cols = torch.arange(w, device=x.device, dtype=x.dtype).view(1, 1, 1, w)
        wave = freq[:, 0, None, None, None] * rows + freq[:, 1, None, None, None] * cols
        stripes = torch.cos(2 * math.pi * wave + phase[:, :, None, None])
        amplitude = self._uniform(n, self.config.spike_amplitude, x.device).view(-1, 1, 1, 1)
        return torch.where(self._chosen(group, n_groups), x + amplitude * stripes, x)

    def intensity(self, x: torch.Tensor, group: torch.Tensor, n_groups: int) -> torch.Tensor:
        """The shift suite's intensity and artefact transforms on ``x`` ``(N, C, H, W)`` in ``[0, 1]``, each on a
        stack with probability ``intensity_prob`` (the same draw for all channels: both frames of a pair).
        Returns the images min-maxed per slice."""
        c = self.config
        if c.intensity_prob <= 0:
            return minmax_per_slice(x)
        gamma = torch.exp(self._per_slice(group, n_groups, tuple(math.log(g) for g in c.gamma_range)))
        x = torch.where(self._chosen(group, n_groups), x.clamp(min=0) ** gamma, x)
        x = self._bias(x, group, n_groups)
        radius = _radial_frequency(*x.shape[-2:], x.device)
        cut = (1 - self._per_slice(group, n_groups, c.gibbs_alpha)) * radius.max()
        x = self._lowpass(x, (radius <= cut).to(x.dtype), self._chosen(group, n_groups))
        x = self._spike(x, group, n_groups)
        sigma = self._per_slice(group, n_groups, c.blur_sigma)
        x = self._lowpass(x, torch.exp(-2 * (math.pi * sigma * radius) ** 2), self._chosen(group, n_groups))
        coarse = F.interpolate(F.avg_pool2d(x, 2, ceil_mode=True), size=x.shape[-2:], mode="bilinear", align_corners=False)
        x = torch.where(self._chosen(group, n_groups), coarse, x)
        noise = self._per_slice(group, n_groups, c.noise_std) * torch.randn(x.shape, generator=self.generator, device=x.device)
        x = torch.where(self._chosen(group, n_groups), x + noise, x)
        return minmax_per_slice(x)

    def invert_one_frame(self, ed: torch.Tensor, es: torch.Tensor, group: torch.Tensor, n_groups: int) -> Tuple[torch.Tensor, torch.Tensor]:
        """With probability ``invert_prob`` per stack, ED's or ES's contrast (chosen at random) turned upside down."""
        draw = self._rand(n_groups, 2, device=ed.device)
        invert = (draw[:, 0] < self.config.invert_prob)[group].view(-1, 1, 1, 1)
        which_es = (draw[:, 1] < 0.5)[group].view(-1, 1, 1, 1)
        ed = torch.where(invert & ~which_es, ed.amax(dim=(-2, -1), keepdim=True) - ed, ed)
        es = torch.where(invert & which_es, es.amax(dim=(-2, -1), keepdim=True) - es, es)
        return ed, es

    def augment(self, ed: torch.Tensor, es: torch.Tensor, ed_label: torch.Tensor, es_label: torch.Tensor,
                group: torch.Tensor, n_groups: int) -> Tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
        """Geometry, then intensity (both frames alike), then the one-frame inversion; images min-maxed per slice."""
        images, labels = self.geometry(torch.cat([ed, es], 1), torch.cat([ed_label, es_label], 1), group, n_groups)
        images = self.intensity(images, group, n_groups)
        ed, es = self.invert_one_frame(images[:, :1], images[:, 1:], group, n_groups)
        return ed, es, labels[:, :1], labels[:, 1:]
