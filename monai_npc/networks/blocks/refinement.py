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
from monai_npc.functional.similarity import local_ncc, local_target_stats
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
        return (f"iterations={self.iterations}, learning_rate={self.learning_rate}, grid_stride={self.grid_stride}, "
                f"level={self.level}, window={self.window} (at the loss level), lambda_reg={self.lambda_reg}, lambda_jac={self.lambda_jac}, "
                f"lambda_label={self.lambda_label}, label_model_mix={self.label_model_mix}, label_prior_weight={self.label_prior_weight}")

    @torch.jit.ignore
    def forward(self, moving: torch.Tensor, fixed: torch.Tensor, ddf: torch.Tensor, moving_label: Optional[torch.Tensor] = None,
                lambda_label: Optional[float] = None, fixed_prior: Optional[torch.Tensor] = None,
                prior_weight: Optional[float] = None) -> torch.Tensor:
        if self.iterations == 0:
            return ddf
        lam = self.lambda_label if lambda_label is None else float(lambda_label)
        if moving_label is not None and moving_label.shape[0] != ddf.shape[0]:
            raise ValueError(f"moving_label has {moving_label.shape[0]} samples, the field {ddf.shape[0]}.")
        if fixed_prior is not None and (fixed_prior.shape[0] != ddf.shape[0] or fixed_prior.shape[2:] != ddf.shape[2:]):
            raise ValueError(f"fixed_prior {tuple(fixed_prior.shape)} must be (B, K, *S) of the field {tuple(ddf.shape)}.")
        mu = self.label_prior_weight if prior_weight is None else float(prior_weight)
        if not mu >= 0:
            raise ValueError(f"prior_weight must be >= 0, got {prior_weight}.")
        guided = lam > 0 and moving_label is not None and bool((moving_label > 0).any())
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
            moments = (torch.zeros_like(v), torch.zeros_like(v))
            upsample = _linear_upsampler(coarse, full, ddf.dtype, ddf.device)
            prior = fixed_prior.detach().clone() if guided and fixed_prior is not None and mu > 0 else None
            label_term = self._label_term(moving.clone(), fixed.clone(), base, moving_label.clone(), prior, mu) if guided else None
            kept = None  # the indicators of the labels whose carried area is held (lambda_area)
            if self.lambda_area > 0 and self.area_values and moving_label is not None:
                label = moving_label.detach().round().to(torch.int64)
                kept = torch.cat([(label == v) for v in self.area_values], 1).to(ddf.dtype)
            f_stats = local_target_stats(f, self.window)  # the fixed image's part of the LNCC, once
            for step in range(1, self.iterations + 1):
                field = base + upsample(v)  # the regularisers see the full-grid field the caller gets
                coarse_field = field if self.level == 1 else _resize(field, level_size) * axis_scale
                loss = -_per_sample_mean(local_ncc(warp_image(m, coarse_field, "bilinear", "border"), f, self.window, target_stats=f_stats))
                if self.lambda_reg or self.lambda_jac:  # diffusion + JacobianFoldLoss, per pair, closed-form gradient
                    loss = loss + smoothness_fold_penalty(field, self.lambda_reg, self.lambda_jac)
                if label_term is not None:
                    loss = loss + lam * label_term(field)
                if kept is not None:
                    loss = loss + self.lambda_area * carried_area_change(kept, field).square().sum(1)
                # the sum of per-pair losses: each pair's residual gets exactly the gradient (and, Adam being
                # per element, the steps) it would get alone, so a slice registers the same inside its stack
                (grad,) = torch.autograd.grad(loss.sum(), v)
                _adam_step(v, grad, moments, step, self.learning_rate)
        return (base + upsample(v.detach())).detach()

    def _label_term(self, moving: torch.Tensor, fixed: torch.Tensor, ddf: torch.Tensor, moving_label: torch.Tensor,
                    prior: Optional[torch.Tensor] = None, prior_weight: float = 0.0) -> Optional[Callable]:
        """``field -> (B,)`` label-guided cost: intensity models of the moving image under each moving
        label (within the labels dilated by ``label_margin``), scored on the fixed image under the
        labels warped by ``field``, within that region carried by the starting field ``ddf``; plus
        ``prior_weight`` times the prior's cost of those labels (:func:`label_prior_weights`) when a
        ``prior`` of the fixed image is given.
        ``None`` (with a warning) for a label map of more than :data:`MAX_GUIDE_LABELS` values (an
        atlas parcellation: one warped channel per value and step would dominate the time)."""
        label = moving_label.detach().round().to(torch.int64)
        values = [0] + sorted(int(v) for v in torch.unique(label).tolist() if int(v) != 0)
        if len(values) - 1 > MAX_GUIDE_LABELS:
            warnings.warn(f"label guidance skipped: the moving label has {len(values) - 1} values (at most {MAX_GUIDE_LABELS} are used).",
                          RuntimeWarning, stacklevel=3)
            return None
        onehot = label_onehot(label, values).to(ddf.dtype)
        region_m = label_region(label, self.label_margin).to(ddf.dtype)
        means, sds = intensity_models(moving.detach().to(ddf.dtype), onehot, region_m)
        region_f = (warp_image(region_m, ddf.detach(), "bilinear", "zeros") > 0.5).to(ddf.dtype)
        if self.label_model_mix > 0:  # the fixed image's own statistics under the carried labels' insides
            carried = label_core((warp_image(onehot, ddf.detach(), "bilinear", "zeros") > 0.5).to(ddf.dtype), self.label_model_erosion)
            f_means, f_sds = intensity_models(fixed.detach().to(ddf.dtype), carried, region_f)
            means, sds = torch.lerp(means, f_means, self.label_model_mix), torch.lerp(sds, f_sds, self.label_model_mix)
        # the cost is a sum over region_f: evaluate it on the box around region_f in every pair of the batch
        # only (the heart and its margin, a fraction of the grid), sampling the whole one-hot moving labels
        inside = region_f.amax((0, 1)).nonzero()  # (N, D) voxels in the region of some pair
        if inside.numel() == 0:
            return None
        lo, hi = inside.amin(0).tolist(), inside.amax(0).tolist()
        box = (slice(None), slice(None)) + tuple(slice(a, b + 1) for a, b in zip(lo, hi))
        points = identity_grid(list(ddf.shape[2:]), ddf.device, ddf.dtype).unsqueeze(0)[box]
        weights = label_intensity_weights(fixed.detach().to(ddf.dtype)[box], region_f[box], means, sds)  # once
        if prior is not None:
            weights = weights + prior_weight * label_prior_weights(prior.to(ddf.dtype)[box], values, region_f[box])
        return lambda field: (sample_at(onehot, points + field[box], "bilinear", "zeros") * weights).flatten(1).sum(1)
