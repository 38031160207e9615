"""Label-guided similarity: does the fixed image look, under each warped moving label, like the moving image under it?

Registration-based label propagation under-contracts: the carried LV label keeps dark myocardium
at end-systole because the image similarity alone does not close a small cavity. When the moving
label is known (label propagation, tracking), each label's intensity in the *moving* image is a
model of what that structure looks like; these functions score how well the fixed image fits the
warped labels under those models: the Gaussian negative log-likelihood of the fixed image under
each warped label (region competition, Zhu & Yuille 1996), ``((fixed - mean_k) / sd_k)^2 + 2 log sd_k``
per voxel of label ``k`` (twice the negative log-likelihood, up to a constant). No label of the
fixed image is used. :class:`~monai_npc.networks.blocks.InstanceRefinement` can mix in the fixed
image's own statistics under the carried labels' insides (:func:`label_core`; ``label_model_mix``).

The ``2 log sd_k`` term matters: without it a label with a broad intensity model (the background
around the heart: lungs, fat, liver) costs less than a narrow one (the myocardium) at every voxel a
few of the narrow label's SDs from its mean, so boundary voxels went to the broad label and the
carried myocardium thinned; with it each voxel goes to the label under which it is more likely
(docs/design_notes.md, "functional/label_intensity.py").

Pure functions, ``(B, ...)`` batches of independent pairs, 2-D or 3-D.
"""

from __future__ import annotations

from typing import Sequence, Tuple

import torch

from monai_npc.functional.similarity import box_sum

__all__ = ["label_onehot", "label_region", "label_core", "intensity_models", "label_intensity_weights", "label_intensity_cost"]


def label_onehot(label: torch.Tensor, values: Sequence[int]) -> torch.Tensor:
    """``(B, 1, *S)`` integer label map -> ``(B, len(values), *S)`` float one-hot (background is ``values[0] = 0``)."""
    return torch.cat([(label == int(v)).to(torch.float32) for v in values], 1)


def label_region(label: torch.Tensor, margin: int) -> torch.Tensor:
    """``(B, 1, *S)`` float mask: the labelled voxels dilated by ``margin`` voxels (a box: a voxel is in
    the region when the box of half-width ``margin`` around it holds a labelled voxel; running sums,
    the cost independent of ``margin``, unlike max pooling)."""
    mask = (label > 0).to(torch.float32)
    if margin <= 0:
        return mask
    return (box_sum(mask, 2 * int(margin) + 1) > 0.5).to(torch.float32)


def label_core(masks: torch.Tensor, erosion: int) -> torch.Tensor:
    """``(B, C, *S)`` binary masks eroded by ``erosion`` voxels (a box: a voxel stays when the whole box of
    half-width ``erosion`` around it is in its mask; outside the grid counts as outside the mask):
    the inside of each label, away from the partial-volume voxels of its border."""
    if erosion <= 0:
        return masks
    width = 2 * int(erosion) + 1
    return (box_sum(masks, width) > width ** (masks.dim() - 2) - 0.5).to(masks.dtype)


def intensity_models(image: torch.Tensor, onehot: torch.Tensor, region: torch.Tensor, min_sd: float = 0.03) -> Tuple[torch.Tensor, torch.Tensor]:
    """Per sample and label: mean and SD of ``image`` ``(B, 1, *S)`` inside ``onehot`` ``(B, C, *S)`` within ``region``.

    Returns ``(means, sds)``, each ``(B, C)``. A label with fewer than 10 voxels in a sample takes
    the statistics of the whole region; ``sds`` are at least ``min_sd`` (in the image's units).
    """
    w = onehot * region
    count = w.flatten(2).sum(2)
    total = region.flatten(2).sum(2).clamp(min=1.0)
    img = image.flatten(2)
    r_mean = (img * region.flatten(2)).sum(2) / total  # (B, 1)
    r_var = ((img - r_mean[..., None]) ** 2 * region.flatten(2)).sum(2) / total
    mean = (w.flatten(2) * img).sum(2) / count.clamp(min=1.0)
    var = (w.flatten(2) * (img - mean[..., None]) ** 2).sum(2) / count.clamp(min=1.0)
    few = count < 10
    mean = torch.where(few, r_mean.expand_as(mean), mean)
    var = torch.where(few, r_var.expand_as(var), var)
    return mean, var.sqrt().clamp(min=float(min_sd))


def label_intensity_weights(fixed: torch.Tensor, region: torch.Tensor, means: torch.Tensor, sds: torch.Tensor) -> torch.Tensor:
    """``(B, C, *S)`` per-voxel, per-label weights ``w`` with ``label_intensity_cost(...) = sum(warped_onehot * w)``
    over each sample: ``((fixed - mean_k) / sd_k)^2 + 2 log sd_k`` inside ``region``, divided by the region's size.
    They do not depend on the field, so a caller scoring many fields computes them once."""
    shape = list(means.shape) + [1] * (fixed.dim() - 2)
    z = ((fixed - means.view(shape)) / sds.view(shape)) ** 2 + 2.0 * torch.log(sds.view(shape))  # (B, C, *S)
    count = region.flatten(1).sum(1).clamp(min=1.0).view([-1] + [1] * (fixed.dim() - 1))
    return z * region / count


def label_intensity_cost(
    fixed: torch.Tensor, warped_onehot: torch.Tensor, region: torch.Tensor, means: torch.Tensor, sds: torch.Tensor
) -> torch.Tensor:
    """``(B,)`` mean over ``region`` of ``sum_k p_k(x) (((fixed(x) - mean_k) / sd_k)^2 + 2 log sd_k)``.

    Args:
        fixed: ``(B, 1, *S)`` image the labels are carried onto.
        warped_onehot: ``(B, C, *S)`` the moving one-hot labels warped onto ``fixed`` (soft, summing to 1).
        region: ``(B, 1, *S)`` where the term is evaluated (on ``fixed``'s grid).
        means, sds: ``(B, C)`` from :func:`intensity_models` of the moving image.
    """
    return (warped_onehot * label_intensity_weights(fixed, region, means, sds)).flatten(1).sum(1)
