"""Hand-written gradients of the refinement's terms against autograd through the plain expressions."""

import pytest
import torch
import torch.nn.functional as F

from monai_npc.functional import sample_at, warp_image
from monai_npc.functional.label_intensity import label_region
from monai_npc.functional.regularisers import diffusion_per_sample, fold_per_sample, smoothness_fold_penalty
from monai_npc.functional.similarity import box_sum, local_ncc, local_target_stats


@pytest.mark.parametrize("shape", [(3, 2, 20, 24), (2, 3, 6, 10, 12)])
@pytest.mark.parametrize("scale", [0.05, 0.4])  # no fold / folds in every sample
def test_smoothness_fold_penalty_matches_autograd(shape, scale):
    torch.manual_seed(0)
    ddf = (torch.randn(*shape, dtype=torch.float64) * scale).requires_grad_(True)
    weight = torch.rand(shape[0], dtype=torch.float64) + 0.5
    folds = fold_per_sample(ddf.detach())
    assert (folds > 0).all() if scale > 0.1 else (folds == 0).all()  # both branches of the backward are exercised
    fast = smoothness_fold_penalty(ddf, 0.05, 100.0)
    (g_fast,) = torch.autograd.grad((fast * weight).sum(), ddf)
    plain = 0.05 * diffusion_per_sample(ddf) + 100.0 * fold_per_sample(ddf)
    (g_plain,) = torch.autograd.grad((plain * weight).sum(), ddf)
    assert torch.allclose(fast, plain, rtol=0, atol=1e-12)
    assert torch.allclose(g_fast, g_plain, rtol=1e-10, atol=1e-12)
    assert g_fast.abs().max() > 1e-5  # not a vacuous comparison
    assert torch.autograd.gradcheck(lambda x: smoothness_fold_penalty(x, 0.05, 100.0), (ddf[:1, ..., :5],))


def test_smoothness_fold_penalty_mixed_batch_and_single_terms():
    """Only the folding sample gets a fold gradient; each term alone equals its plain expression."""
    torch.manual_seed(1)
    ddf = torch.cat([torch.randn(1, 2, 16, 16) * 0.02, torch.randn(1, 2, 16, 16) * 0.5]).double().requires_grad_(True)
    for lam_reg, lam_jac in ((0.1, 0.0), (0.0, 10.0), (0.1, 10.0)):
        (g,) = torch.autograd.grad(smoothness_fold_penalty(ddf, lam_reg, lam_jac).sum(), ddf)
        (ref,) = torch.autograd.grad((lam_reg * diffusion_per_sample(ddf) + lam_jac * fold_per_sample(ddf)).sum(), ddf)
        assert torch.allclose(g, ref, atol=1e-12)
    (g,) = torch.autograd.grad(smoothness_fold_penalty(ddf, 0.0, 10.0).sum(), ddf)
    assert g[0].abs().max() == 0 and g[1].abs().max() > 0


@pytest.mark.parametrize("dims", [2, 3])
def test_local_ncc_closed_form_gradient_matches_autograd(dims):
    torch.manual_seed(2)
    shape = (2, 1) + ((18, 15) if dims == 2 else (6, 9, 8))
    target = torch.rand(shape, dtype=torch.float64)
    target[..., :4] = 0.3  # a flat band: clamped variances take the other branch
    pred = torch.rand(shape, dtype=torch.float64).requires_grad_(True)
    stats = local_target_stats(target, 5)
    fast = local_ncc(pred, target, 5, target_stats=stats)  # closed-form backward
    (g_fast,) = torch.autograd.grad(fast.sum(), pred)
    plain = local_ncc(pred, target.clone().requires_grad_(True), 5)  # the target needs a gradient: autograd path
    (g_plain,) = torch.autograd.grad(plain.sum(), pred)
    assert torch.equal(fast, plain.detach())
    assert torch.allclose(g_fast, g_plain, rtol=1e-9, atol=1e-12)
    assert torch.autograd.gradcheck(lambda p: local_ncc(p, target, 5, target_stats=stats), (pred,))


@pytest.mark.parametrize("shape", [(3, 1, 40, 37), (2, 1, 7, 30, 25), (2, 1, 50)])
def test_label_region_is_a_box_dilation(shape):
    torch.manual_seed(3)
    label = (torch.rand(shape) > 0.99).long() * 2
    pool = (F.max_pool1d, F.max_pool2d, F.max_pool3d)[len(shape) - 3]
    for margin in (0, 1, 4, 10, 30):
        ref = pool((label > 0).float(), 2 * margin + 1, stride=1, padding=margin) if margin else (label > 0).float()
        assert torch.equal(label_region(label, margin), ref), (shape, margin)


def test_box_sum_is_exact_for_counts_and_windows_wider_than_the_axis():
    x = torch.ones(1, 1, 3, 5)
    assert torch.equal(box_sum(x, 21), torch.full_like(x, 15.0))


def test_sample_at_a_crop_equals_the_crop_of_the_warp():
    torch.manual_seed(4)
    image = torch.rand(2, 3, 20, 18)
    ddf = torch.randn(2, 2, 20, 18) * 2
    grid = torch.stack(torch.meshgrid(torch.arange(20.0), torch.arange(18.0), indexing="ij"))[None]
    crop = (slice(None), slice(None), slice(5, 14), slice(3, 11))
    for padding in ("zeros", "border"):
        full = warp_image(image, ddf, "bilinear", padding)
        assert torch.allclose(sample_at(image, (grid + ddf)[crop], "bilinear", padding), full[crop], atol=1e-6)
    with pytest.raises(ValueError, match="channels"):
        sample_at(image, ddf[:, :1])


def test_sample_at_in_1d_and_3d_equals_the_warp():
    torch.manual_seed(5)
    for shape in ((2, 1, 30), (1, 2, 6, 9, 8)):
        image = torch.rand(shape)
        dims = len(shape) - 2
        ddf = torch.randn((shape[0], dims) + shape[2:]) * 1.5
        grid = torch.stack(torch.meshgrid(*[torch.arange(float(n)) for n in shape[2:]], indexing="ij"))[None]
        torch.testing.assert_close(sample_at(image, grid + ddf, "bilinear", "zeros"), warp_image(image, ddf, "bilinear", "zeros"))
        assert not torch.allclose(sample_at(image, grid + ddf), image)  # it moved


@pytest.mark.parametrize("scale", [0.05, 0.6])  # no fold / folds
def test_stack_smoothness_fold_matches_autograd_through_the_plain_expressions(scale):
    from monai_npc.functional.stack_penalty import stack_diffusion_per_slice, stack_fold_per_slice, stack_smoothness_fold

    torch.manual_seed(6)
    group = torch.tensor([0, 0, 0, 0, 1, 2, 2])  # stacks of 4, 1 and 2 slices
    ddf = (torch.randn(7, 3, 9, 11, dtype=torch.float64) * scale).requires_grad_(True)
    weight = torch.rand(7, dtype=torch.float64) + 0.5
    folds = stack_fold_per_slice(ddf.detach(), group, 3)
    assert (folds > 0).sum() >= 5 if scale > 0.1 else (folds == 0).all()  # both branches of the backward
    for lam_reg, lam_jac in ((0.05, 100.0), (0.1, 0.0), (0.0, 10.0)):
        fast = stack_smoothness_fold(ddf, group, 3, lam_reg, lam_jac)
        (g_fast,) = torch.autograd.grad((fast * weight).sum(), ddf)
        plain = lam_reg * stack_diffusion_per_slice(ddf, group, 3) + lam_jac * stack_fold_per_slice(ddf, group, 3)
        (g_plain,) = torch.autograd.grad((plain * weight).sum(), ddf)
        assert torch.allclose(fast, plain, rtol=0, atol=1e-12)
        assert torch.allclose(g_fast, g_plain, rtol=1e-10, atol=1e-12), (lam_reg, lam_jac)
        assert (g_fast.abs().max() > 1e-5) == bool(lam_reg or scale > 0.1)  # zero only without diffusion and folds
    # a smooth field with one local fold: the fold gradient is computed on the box around it
    smooth = torch.zeros(7, 3, 24, 20, dtype=torch.float64)
    smooth[2, 1:, 10:13, 8:11] = torch.randn(2, 3, 3, dtype=torch.float64) * 2.0
    smooth.requires_grad_(True)
    assert 0 < int((stack_fold_per_slice(smooth.detach(), group, 3) > 0).sum()) <= 3
    (g_fast,) = torch.autograd.grad((stack_smoothness_fold(smooth, group, 3, 0.0, 100.0) * weight).sum(), smooth)
    (g_plain,) = torch.autograd.grad((100.0 * stack_fold_per_slice(smooth, group, 3) * weight).sum(), smooth)
    assert torch.allclose(g_fast, g_plain, rtol=1e-10, atol=1e-12) and g_fast.abs().max() > 0
    # one slice's value depends on its own stack only: the one-slice stack's gradient stays in it
    (g,) = torch.autograd.grad(stack_smoothness_fold(ddf, group, 3, 0.05, 100.0)[4], ddf)
    assert g[4].abs().max() > 0 and g[[0, 1, 2, 3, 5, 6]].abs().max() == 0
    assert torch.autograd.gradcheck(lambda x: stack_smoothness_fold(x, group[:4], 1, 0.05, 100.0), (ddf[:4, ..., :4].detach().requires_grad_(True),))
    with pytest.raises(ValueError, match="group must be"):
        stack_smoothness_fold(ddf, group[:3], 3)
