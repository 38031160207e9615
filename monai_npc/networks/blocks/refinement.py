"""Test-time refinement: a few optimiser steps on a smooth residual field after the network's estimate."""

from __future__ import annotations

import warnings
from typing import Callable, List, Optional, Sequence, Tuple

import torch
import torch.nn.functional as F
from torch import nn

from monai_npc.functional.area import carried_area_change
from monai_npc.functional.label_intensity import intensity_models, label_core, label_intensity_weights, label_onehot, label_region
from monai_npc.functional.label_prior import label_prior_weights
from monai_npc.functional.polarity import matched_contrast
from monai_npc.functional.similarity import local_ncc, local_target_stats
from monai_npc.functional.stack_field import warp_stack_slices
from monai_npc.functional.stack_penalty import stack_smoothness_fold
from monai_npc.functional.stack_taps import stack_tap_slabs, through_plane_taps, warp_stack_taps
from monai_npc.functional.regularisers import smoothness_fold_penalty
from monai_npc.functional.warp import identity_grid, sample_at, warp_image

__all__ = ["InstanceRefinement", "MAX_GUIDE_LABELS"]

#: the label-guided term is used for label maps of at most this many values (cardiac labels have 3)
MAX_GUIDE_LABELS = 16


def _resize(x: torch.Tensor, size: list) -> torch.Tensor:
    mode = ("linear", "bilinear", "trilinear")[x.dim() - 3]
    return F.interpolate(x, size=size, mode=mode, align_corners=False)


def _linear_upsampler(coarse: List[int], full: List[int], dtype: torch.dtype, device: torch.device) -> Callable[[torch.Tensor], torch.Tensor]:
    """``(B, C, *coarse) -> (B, C, *full)``: :func:`_resize` (linear, ``align_corners=False``) as one small
    matrix product per axis (the interpolation is separable): the same values to float rounding, and
    with its backward pass faster than ``F.interpolate`` on the refinement's grids."""
    mats = [F.interpolate(torch.eye(c, dtype=dtype, device=device)[:, None], size=n, mode="linear", align_corners=False)[:, 0].T.contiguous()
            for c, n in zip(coarse, full)]  # (n, c): column j = the coarse unit vector j interpolated

    def upsample(x: torch.Tensor) -> torch.Tensor:
        for axis, mat in enumerate(mats, start=2):
            x = (x.movedim(axis, -1) @ mat.T).movedim(-1, axis)
        return x

    return upsample


def _adam_step(param: torch.Tensor, grad: torch.Tensor, moments: Tuple[torch.Tensor, torch.Tensor], step: int, lr: float,
               betas: Tuple[float, float] = (0.9, 0.999), eps: float = 1e-8) -> None:
    """Step ``step`` (1, 2, ...) of ``torch.optim.Adam`` (no weight decay) on ``param`` in place: the same
    arithmetic, operation for operation, without the optimizer object, whose first construction in a
    process imports ``torch._dynamo`` (a large part of a command-line registration's time)."""
    exp_avg, exp_avg_sq = moments
    exp_avg.lerp_(grad, 1 - betas[0])
    exp_avg_sq.mul_(betas[1]).addcmul_(grad, grad, value=1 - betas[1])
    denom = (exp_avg_sq.sqrt() / (1 - betas[1] ** float(step)) ** 0.5).add_(eps)
    with torch.no_grad():
        param.addcdiv_(exp_avg, denom, value=-lr / (1 - betas[0] ** float(step)))


def _step_size(step: int, iterations: int, start: float, end: Optional[float]) -> float:
    """The step size of step ``step`` (1 .. ``iterations``): ``start`` at the first, ``end`` at the last, linear in
    between; ``start`` throughout when ``end`` is ``None``."""
    if end is None or iterations <= 1:
        return start
    return start + (end - start) * (step - 1) / (iterations - 1)


def _last_slabs(taps: Tuple[torch.Tensor, torch.Tensor]) -> Callable[[torch.Tensor], torch.Tensor]:
    """``image -> stack_tap_slabs(image, taps)``, kept for the last image given: a refinement warps the same image (and
    the same labels) at every step, so its neighbour slices are gathered once."""
    last: List[torch.Tensor] = []

    def slabs_of(image: torch.Tensor) -> torch.Tensor:
        if not last or last[0] is not image:
            last[:] = [image, stack_tap_slabs(image, taps)]
        return last[1]

    return slabs_of


def _per_sample_mean(x: torch.Tensor) -> torch.Tensor:
    """``(B, ...)`` -> ``(B,)``: the mean over every axis but the batch."""
    return x.reshape(x.shape[0], -1).mean(1)


class InstanceRefinement(nn.Module):
    """Refine a displacement by optimising a coarse residual field against the image pair.

    Starting from the network's field ``ddf0``, a residual ``v`` on a grid ``grid_stride`` voxels
    apart is optimised with Adam for ``iterations`` steps so that ``ddf = ddf0 + upsample(v)``
    minimises the unsupervised loss ``-LNCC(moving o ddf, fixed) + lambda_reg ||grad ddf||^2 +
    lambda_jac fold(ddf)``. The regularisers act on the *whole* field, so the refinement keeps
    the smoothness the network learned, and the coarse grid keeps ``v`` smooth. The loss is
    similarity is evaluated on images average-pooled by ``level`` (LNCC window ``window // level``,
    odd), which makes the costly part of a step about ``level ** D`` times cheaper; the
    regularisers always see the full-grid field that is returned.

    It runs under ``torch.no_grad`` / ``torch.inference_mode`` callers too (gradients are switched
    on locally for ``v`` only) and never changes any network parameter.

    Args:
        iterations: optimiser steps; 0 returns ``ddf0`` unchanged.
        learning_rate: Adam step size (voxels of the full grid, roughly, per step).
        learning_rate_end: the step size of the last step, reached linearly from ``learning_rate`` at the first
            (long steps while far from the optimum, short ones as it settles); ``None``: ``learning_rate`` throughout.
        grid_stride: residual grid spacing in full-grid voxels (an integer >= 1).
        window: LNCC window width in full-grid voxels (odd).
        lambda_reg: weight of the diffusion regulariser (field in full-grid voxels).
        lambda_jac: weight of the Jacobian fold penalty.
        level: image down-sampling factor for the loss (1 = full resolution).
        lambda_label: weight of the label-guided term when ``forward`` gets the moving label
            (:mod:`~monai_npc.functional.label_intensity`: each warped label should cover fixed
            voxels that look like the moving image under that label; 0 = off). A call's
            ``lambda_label`` overrides it.
        label_margin: the label term is evaluated within the moving labels dilated by this many
            voxels and carried by the starting field.
        label_model_mix: each label's intensity model (mean and SD) is the moving image's under the
            moving label mixed with this weight of the fixed image's own under the label carried by
            the starting field (eroded by ``label_model_erosion`` voxels, away from its uncertain
            border): 0 = the moving image's alone. A structure need not look the same in the two
            frames (each is scaled on its own; flow and partial volume change with the phase).
        label_model_erosion: erosion (voxels) of the carried labels for the fixed image's models.
        label_prior_weight: weight, within the label-guided term, of a segmentation prior of the fixed
            image when ``forward`` gets one (``fixed_prior``; :mod:`~monai_npc.functional.label_prior`:
            each carried label pays ``-log p_label(x)`` on the voxels it covers). A call's
            ``prior_weight`` overrides it.
        lambda_area, area_values: with a moving label, ``lambda_area`` times the squared relative change of the
            area each of the label values ``area_values`` covers once carried by the field
            (:func:`~monai_npc.functional.area.carried_area_change`): the myocardium (ACDC value 2) is nearly
            incompressible, so its carried area should stay what it was. 0 / empty = off.

    Pairs of a batch are independent: the loss is the sum of per-pair losses, so a pair is refined
    exactly as it would be in a batch of one (a slice inside its stack as alone).

    ``forward(moving, fixed, ddf, moving_label=None, lambda_label=None, fixed_prior=None, prior_weight=None)``
    with images ``(B, 1, *S)``, ``ddf`` ``(B, D, *S)`` (voxels, MONAI ``Warp`` convention), an optional
    integer label map ``(B, 1, *S)`` of ``moving`` and optional class probabilities ``(B, K, *S)`` of
    ``fixed`` (channel ``k`` = label value ``k``; used by the label-guided term only) returns the
    refined ``(B, D, *S)`` field (no gradient).
    """

    def __init__(
        self,
        iterations: int = 50,
        learning_rate: float = 0.25,
        learning_rate_end: Optional[float] = None,
        grid_stride: int = 4,
        window: int = 17,
        lambda_reg: float = 0.05,
        lambda_jac: float = 100.0,
        level: int = 1,
        lambda_label: float = 0.0,
        label_margin: int = 10,
        label_model_mix: float = 0.0,
        label_model_erosion: int = 1,
        label_prior_weight: float = 1.0,
        lambda_area: float = 0.0,
        area_values: Sequence[int] = (),
    ) -> None:
        super().__init__()
        if int(iterations) < 0:
            raise ValueError(f"iterations must be >= 0, got {iterations}.")
        for name, value in (("grid_stride", grid_stride), ("level", level), ("window", window)):
            if int(value) < 1:
                raise ValueError(f"{name} must be an integer >= 1, got {value}.")
        if float(learning_rate) <= 0:
            raise ValueError(f"learning_rate must be > 0, got {learning_rate}.")
        self.iterations = int(iterations)
        self.learning_rate = float(learning_rate)
        if learning_rate_end is not None and not float(learning_rate_end) > 0:
            raise ValueError(f"learning_rate_end must be > 0 or None, got {learning_rate_end}.")
        self.learning_rate_end = None if learning_rate_end is None else float(learning_rate_end)
        self.grid_stride = int(grid_stride)
        self.level = int(level)
        self.window = max(1, (int(window) // self.level) // 2 * 2 + 1)
        self.lambda_reg = float(lambda_reg)
        self.lambda_jac = float(lambda_jac)
        if float(lambda_label) < 0:
            raise ValueError(f"lambda_label must be >= 0, got {lambda_label}.")
        self.lambda_label = float(lambda_label)
        self.label_margin = int(label_margin)
        if not 0.0 <= float(label_model_mix) <= 1.0:
            raise ValueError(f"label_model_mix must be in [0, 1], got {label_model_mix}.")
        self.label_model_mix = float(label_model_mix)
        self.label_model_erosion = int(label_model_erosion)
        if not float(label_prior_weight) >= 0:
            raise ValueError(f"label_prior_weight must be >= 0, got {label_prior_weight}.")
        self.label_prior_weight = float(label_prior_weight)
        if not float(lambda_area) >= 0:
            raise ValueError(f"lambda_area must be >= 0, got {lambda_area}.")
        self.lambda_area = float(lambda_area)
        self.area_values = tuple(int(v) for v in area_values)

    def extra_repr(self) -> str:
        return (f"iterations={self.iterations}, learning_rate={self.learning_rate}, learning_rate_end={self.learning_rate_end}, "
                f"grid_stride={self.grid_stride}, "
                f"level={self.level}, window={self.window} (at the loss level), lambda_reg={self.lambda_reg}, lambda_jac={self.lambda_jac}, "
                f"lambda_label={self.lambda_label}, label_model_mix={self.label_model_mix}, label_prior_weight={self.label_prior_weight}")

    @torch.jit.ignore
    def forward(self, moving: torch.Tensor, fixed: torch.Tensor, ddf: torch.Tensor, moving_label: Optional[torch.Tensor] = None,
                lambda_label: Optional[float] = None, fixed_prior: Optional[torch.Tensor] = None,
                prior_weight: Optional[float] = None) -> torch.Tensor:
        if self.iterations == 0:
            return ddf
        lam, mu, guided = self._label_weights(ddf, moving_label, lambda_label, fixed_prior, prior_weight)
        full = list(ddf.shape[2:])
        level_size = [max(1, s // self.level) for s in full]
        coarse = [max(1, s // self.grid_stride) for s in full]
        scale = [ls / s for ls, s in zip(level_size, full)]  # full-grid voxels -> loss-level voxels, per axis
        with torch.inference_mode(False), torch.enable_grad():
            pool = (F.adaptive_avg_pool1d, F.adaptive_avg_pool2d, F.adaptive_avg_pool3d)[len(full) - 1]
            m = pool(moving.detach().clone(), level_size)
            f = pool(fixed.detach().clone(), level_size)
            axis_scale = torch.tensor(scale, dtype=ddf.dtype, device=ddf.device).view([1, -1] + [1] * len(full))
            base = ddf.detach().clone()
            v = torch.zeros([ddf.shape[0], ddf.shape[1]] + coarse, dtype=ddf.dtype, device=ddf.device, requires_grad=True)
            upsample = _linear_upsampler(coarse, full, ddf.dtype, ddf.device)
            prior = fixed_prior.detach().clone() if guided and fixed_prior is not None and mu > 0 else None
            label_term = self._label_term(moving.clone(), fixed.clone(), base, moving_label.clone(), prior, mu) if guided else None
            kept = None  # the indicators of the labels whose carried area is held (lambda_area)
            if self.lambda_area > 0 and self.area_values and moving_label is not None:
                label = moving_label.detach().round().to(torch.int64)
                kept = torch.cat([(label == v) for v in self.area_values], 1).to(ddf.dtype)
            f_stats = local_target_stats(f, self.window)  # the fixed image's part of the LNCC, once

            def objective(field: torch.Tensor) -> torch.Tensor:
                coarse_field = field if self.level == 1 else _resize(field, level_size) * axis_scale
                loss = -_per_sample_mean(local_ncc(warp_image(m, coarse_field, "bilinear", "border"), f, self.window, target_stats=f_stats))
                if self.lambda_reg or self.lambda_jac:  # diffusion + JacobianFoldLoss, per pair, closed-form gradient
                    loss = loss + smoothness_fold_penalty(field, self.lambda_reg, self.lambda_jac)
                if label_term is not None:
                    loss = loss + lam * label_term(field)
                if kept is not None:
                    loss = loss + self.lambda_area * carried_area_change(kept, field).square().sum(1)
                return loss

            # the regularisers see the full-grid field the caller gets
            return self._descend(v, lambda r: base + upsample(r), objective)

    def _label_weights(self, ddf: torch.Tensor, moving_label: Optional[torch.Tensor], lambda_label: Optional[float],
                       fixed_prior: Optional[torch.Tensor], prior_weight: Optional[float]) -> Tuple[float, float, bool]:
        """``(label term weight, prior weight within it, whether the label term acts)`` of a call, its arguments checked
        against the field ``ddf`` ``(B, D, *S)``."""
        lam = self.lambda_label if lambda_label is None else float(lambda_label)
        if moving_label is not None and moving_label.shape[0] != ddf.shape[0]:
            raise ValueError(f"moving_label has {moving_label.shape[0]} samples, the field {ddf.shape[0]}.")
        if fixed_prior is not None and (fixed_prior.shape[0] != ddf.shape[0] or fixed_prior.shape[2:] != ddf.shape[2:]):
            raise ValueError(f"fixed_prior {tuple(fixed_prior.shape)} must be (B, K, *S) of the field {tuple(ddf.shape)}.")
        mu = self.label_prior_weight if prior_weight is None else float(prior_weight)
        if not mu >= 0:
            raise ValueError(f"prior_weight must be >= 0, got {prior_weight}.")
        return lam, mu, lam > 0 and moving_label is not None and bool((moving_label > 0).any())

    def _descend(self, v: torch.Tensor, field_of: Callable[[torch.Tensor], torch.Tensor],
                 objective: Callable[[torch.Tensor], torch.Tensor]) -> torch.Tensor:
        """``iterations`` Adam steps on the residual ``v`` (leaf, ``requires_grad``) against ``objective(field_of(v))``
        (``(B,)`` per-pair losses); returns ``field_of(v)`` at the end, detached."""
        moments = (torch.zeros_like(v), torch.zeros_like(v))
        for step in range(1, self.iterations + 1):
            loss = objective(field_of(v))
            # the sum of per-pair losses: each pair's residual gets exactly the gradient (and, Adam being
            # per element, the steps) it would get alone, so a slice registers the same inside its stack
            (grad,) = torch.autograd.grad(loss.sum(), v)
            _adam_step(v, grad, moments, step, _step_size(step, self.iterations, self.learning_rate, self.learning_rate_end))
        return field_of(v.detach()).detach()

    @torch.jit.ignore
    def refine_stack(self, moving: torch.Tensor, fixed: torch.Tensor, ddf: torch.Tensor, moving_label: Optional[torch.Tensor] = None,
                     lambda_label: Optional[float] = None, fixed_prior: Optional[torch.Tensor] = None,
                     prior_weight: Optional[float] = None, through_plane: bool = False, label_through_plane: bool = True) -> torch.Tensor:
        """The same refinement of one stack's 3-D field (a stack network's, e.g.
        :class:`~monai_npc.networks.nets.SliceContextNPC`): ``moving``, ``fixed`` ``(Z, 1, H, W)`` (the stack's slices in
        order), ``ddf`` ``(Z, 3, H, W)`` (voxels, channel 0 through the plane in slices, MONAI ``Warp`` convention on the
        stack's ``(Z, H, W)`` grid) -> the refined ``(Z, 3, H, W)`` (no gradient).

        The residual lives on each slice's in-plane grid ``grid_stride`` voxels apart: by default its two in-plane
        components, the network's through-plane channel 0 kept as given; ``through_plane=True`` adds a third, through the
        plane. Not the default: with the moving label, refining through the plane lowered phantom cines' Dice (8-slice
        phantoms without through-plane motion, ED -> frame 2, 3 seeds: 0.945 -> 0.902, in-plane only 0.945 as the 2-D
        path), the label term borrowing neighbouring slices' outlines (docs/training_gpu.md). The objective is the 2-D one summed over
        the slices, each term in its 3-D form: the in-plane LNCC of the trilinearly warped moving slices
        (:func:`~monai_npc.functional.warp_stack_slices`; with channel 0 held, the same warp as the neighbour slices' trilinear
        weights computed once and 2-D samples, :func:`~monai_npc.functional.warp_stack_taps`), ``lambda_reg`` times the diffusion energy over the three axes
        and ``lambda_jac`` times the fold of the 3-D Jacobian (:func:`~monai_npc.functional.stack_smoothness_fold`), and
        with ``moving_label`` ``(Z, 1, H, W)`` the label-guided term (:meth:`forward`'s, the labels warped in 3-D), with
        the prior's ``fixed_prior`` ``(Z, K, H, W)`` (``label_through_plane=False``: that term moves the in-plane channels
        only, the through-plane one follows the images and the regulariser). The loss is evaluated at full resolution (``level`` and the area
        term ``lambda_area`` are 2-D only)."""
        if self.iterations == 0:
            return ddf
        z = ddf.shape[0]
        if ddf.dim() != 4 or ddf.shape[1] != 3 or tuple(moving.shape) != (z, 1) + tuple(ddf.shape[2:]) or moving.shape != fixed.shape:
            raise ValueError(f"refine_stack needs moving, fixed (Z, 1, H, W) and ddf (Z, 3, H, W) of one stack; got "
                             f"{tuple(moving.shape)}, {tuple(fixed.shape)} and {tuple(ddf.shape)}.")
        lam, mu, guided = self._label_weights(ddf, moving_label, lambda_label, fixed_prior, prior_weight)
        group = torch.zeros(z, dtype=torch.int64, device=ddf.device)
        full = list(ddf.shape[2:])
        coarse = [max(1, s // self.grid_stride) for s in full]
        window = max(1, int(self.window) * self.level // 2 * 2 + 1) if self.level > 1 else self.window
        with torch.inference_mode(False), torch.enable_grad():
            m, f = moving.detach().clone().to(ddf.dtype), fixed.detach().clone().to(ddf.dtype)
            base = ddf.detach().clone()
            v = torch.zeros([z, 3 if through_plane else 2] + coarse, dtype=ddf.dtype, device=ddf.device, requires_grad=True)
            upsample = _linear_upsampler(coarse, full, ddf.dtype, ddf.device)

            # images replicate a stack's end slices beyond it, labels are background there (as the written transform
            # carries them)
            if through_plane:
                def warp(image: torch.Tensor, field: torch.Tensor) -> torch.Tensor:
                    return warp_stack_slices(image, field, group, 1)

                def carry(label: torch.Tensor, field: torch.Tensor, region: Optional[Tuple[slice, slice]] = None) -> torch.Tensor:
                    out = warp_stack_slices(label, field, group, 1, through_padding="zeros")
                    return out if region is None else out[..., region[0], region[1]]

                def field_of(r: torch.Tensor) -> torch.Tensor:
                    return base + upsample(r)

                def whole(field: torch.Tensor) -> torch.Tensor:
                    return field
            else:  # channel 0 stays the network's: its trilinear weights once, then 2-D warps (the same values, faster);
                # the optimised field is the in-plane (Z, 2, H, W) one, so no gradient passes through a slice of the whole
                taps = through_plane_taps(base[:, 0], group, 1)
                label_taps = through_plane_taps(base[:, 0], group, 1, "zeros")
                through = base[:, :1]
                image_slabs, label_slabs = _last_slabs(taps), _last_slabs(label_taps)

                def warp(image: torch.Tensor, field: torch.Tensor) -> torch.Tensor:
                    return warp_stack_taps(image, field, taps, slabs=image_slabs(image))

                def carry(label: torch.Tensor, field: torch.Tensor, region: Optional[Tuple[slice, slice]] = None) -> torch.Tensor:
                    return warp_stack_taps(label, field, label_taps, region, label_slabs(label))

                def field_of(r: torch.Tensor) -> torch.Tensor:
                    return base[:, 1:] + upsample(r)

                def whole(field: torch.Tensor) -> torch.Tensor:
                    return torch.cat([through, field], 1)

            prior = fixed_prior.detach().clone().to(ddf.dtype) if guided and fixed_prior is not None and mu > 0 else None
            start = base if through_plane else base[:, 1:]  # the field the label term's carry takes
            label_term = self._label_term(m, f, start, moving_label.clone(), prior, mu, carry) if guided else None
            f_stats = local_target_stats(f, window)

            def objective(field: torch.Tensor) -> torch.Tensor:
                loss = -_per_sample_mean(local_ncc(warp(m, field), f, window, target_stats=f_stats))
                loss = loss + stack_smoothness_fold(whole(field), group, 1, self.lambda_reg, self.lambda_jac)
                if label_term is None:
                    return loss
                held = label_through_plane or not through_plane  # in-plane mode: channel 0 is held anyway
                return loss + lam * label_term(field if held else torch.cat([field[:, :1].detach(), field[:, 1:]], 1))

            return whole(self._descend(v, field_of, objective))

    def _label_term(self, moving: torch.Tensor, fixed: torch.Tensor, ddf: torch.Tensor, moving_label: torch.Tensor,
                    prior: Optional[torch.Tensor] = None, prior_weight: float = 0.0,
                    warp: Optional[Callable[..., torch.Tensor]] = None) -> Optional[Callable]:
        """``field -> (B,)`` label-guided cost: intensity models of the moving image under each moving
        label (within the labels dilated by ``label_margin``), scored on the fixed image under the
        labels warped by ``field``, within that region carried by the starting field ``ddf``; plus
        ``prior_weight`` times the prior's cost of those labels (:func:`label_prior_weights`) when a
        ``prior`` of the fixed image is given.
        ``None`` (with a warning) for a label map of more than :data:`MAX_GUIDE_LABELS` values (an
        atlas parcellation: one warped channel per value and step would dominate the time). ``warp(image, field,
        region=None)``: how labels are carried by a field, ``region`` the ``(rows, columns)`` slices of the grid to
        return (``None``: in 2-D, :func:`warp_image` with zero padding; :meth:`refine_stack` gives the 3-D warp of a
        stack); ``ddf`` and the term's ``field`` are in the form ``warp`` takes (a held through-plane channel: the in-plane
        channels only)."""
        carry = warp or (lambda image, field: warp_image(image, field, "bilinear", "zeros"))
        label = moving_label.detach().round().to(torch.int64)
        values = [0] + sorted(int(v) for v in torch.unique(label).tolist() if int(v) != 0)
        if len(values) - 1 > MAX_GUIDE_LABELS:
            warnings.warn(f"label guidance skipped: the moving label has {len(values) - 1} values (at most {MAX_GUIDE_LABELS} are used).",
                          RuntimeWarning, stacklevel=3)
            return None
        onehot = label_onehot(label, values).to(ddf.dtype)
        region_m = label_region(label, self.label_margin).to(ddf.dtype)
        # the moving image's intensity models hold for the fixed image in the moving one's contrast
        fixed = matched_contrast(fixed.detach(), moving.detach())
        means, sds = intensity_models(moving.detach().to(ddf.dtype), onehot, region_m)
        region_f = (carry(region_m, ddf.detach()) > 0.5).to(ddf.dtype)
        if self.label_model_mix > 0:  # the fixed image's own statistics under the carried labels' insides
            carried = label_core((carry(onehot, ddf.detach()) > 0.5).to(ddf.dtype), self.label_model_erosion)
            f_means, f_sds = intensity_models(fixed.detach().to(ddf.dtype), carried, region_f)
            means, sds = torch.lerp(means, f_means, self.label_model_mix), torch.lerp(sds, f_sds, self.label_model_mix)
        # the cost is a sum over region_f: evaluate it on the box around region_f in every pair of the batch
        # only (the heart and its margin, a fraction of the grid), sampling the whole one-hot moving labels
        inside = region_f.amax((0, 1)).nonzero()  # (N, D) voxels in the region of some pair
        if inside.numel() == 0:
            return None
        lo, hi = inside.amin(0).tolist(), inside.amax(0).tolist()
        box = (slice(None), slice(None)) + tuple(slice(a, b + 1) for a, b in zip(lo, hi))
        weights = label_intensity_weights(fixed.detach().to(ddf.dtype)[box], region_f[box], means, sds)  # once
        if prior is not None:
            weights = weights + prior_weight * label_prior_weights(prior.to(ddf.dtype)[box], values, region_f[box])
        if warp is not None:  # sampled on the box only
            return lambda field: (warp(onehot, field, box[2:]) * weights).flatten(1).sum(1)
        points = identity_grid(list(ddf.shape[2:]), ddf.device, ddf.dtype).unsqueeze(0)[box]
        return lambda field: (sample_at(onehot, points + field[box], "bilinear", "zeros") * weights).flatten(1).sum(1)
