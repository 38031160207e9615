"""Label-guided refinement (monai_npc.functional.label_intensity and InstanceRefinement(lambda_label))."""

import numpy as np
import pytest
import torch

from monai_npc.functional.label_intensity import intensity_models, label_intensity_cost, label_onehot, label_region
from monai_npc.functional.warp import warp_image
from monai_npc.networks.blocks.refinement import InstanceRefinement


def _disc(radius, size=64, value=1.0, background=0.2):
    yy, xx = torch.meshgrid(torch.arange(size, dtype=torch.float32), torch.arange(size, dtype=torch.float32), indexing="ij")
    inside = ((yy - 32) ** 2 + (xx - 32) ** 2) < radius**2
    image = torch.where(inside, torch.tensor(value), torch.tensor(background))
    return image[None, None], inside[None, None].to(torch.int64) * 3  # the disc is label 3 (the LV)


def test_models_and_cost():
    image, label = _disc(10)
    onehot = label_onehot(label, [0, 3])
    region = label_region(label, 5)
    assert region.sum() > (label > 0).sum() and region.max() == 1.0
    means, sds = intensity_models(image, onehot, region)
    np.testing.assert_allclose(means[0].numpy(), [0.2, 1.0], atol=1e-6)
    np.testing.assert_allclose(sds[0].numpy(), [0.03, 0.03])  # constant regions: the SD floor
    # labels that fit their intensities cost only their 2 log sd (here both at the floor)
    fit = float(label_intensity_cost(image, onehot, region, means, sds)[0])
    assert fit == pytest.approx(2 * np.log(0.03), abs=1e-5)
    shifted = torch.roll(onehot, 4, dims=-1)
    assert float(label_intensity_cost(image, shifted, region, means, sds)[0]) > fit + 10.0


def test_a_voxel_goes_to_the_label_it_is_more_likely_under():
    """A narrow label (mean 0.5, SD 0.05) and a broad one (mean 0, SD 0.5); a voxel of 0.6 is 2 SDs
    from the narrow mean and 1.2 from the broad one, but more likely under the narrow model (density
    1.08 against 0.39): the negative log-likelihood gives it to the narrow label, a bare squared
    z-score (4 against 1.44) gave it to the broad one, which thinned the myocardium."""
    from monai_npc.functional.label_intensity import label_intensity_weights

    fixed = torch.full((1, 1, 1, 1), 0.6)
    w = label_intensity_weights(fixed, torch.ones(1, 1, 1, 1), torch.tensor([[0.0, 0.5]]), torch.tensor([[0.5, 0.05]]))
    broad, narrow = float(w[0, 0]), float(w[0, 1])
    assert narrow < broad, (narrow, broad)
    assert broad == pytest.approx(1.2**2 + 2 * np.log(0.5), abs=1e-5) and narrow == pytest.approx(4.0 + 2 * np.log(0.05), abs=1e-4)
    with pytest.raises(ValueError, match="lambda_label"):
        InstanceRefinement(lambda_label=-1.0)


def test_guided_refinement_closes_a_shrinking_cavity():
    """A bright cavity of radius 14 shrinks to 7. With a strong smoothness weight the image term alone
    under-contracts (as registration does at end-systole: measured 555 px carried for 145); with the
    label term the carried area reaches the fixed one (135). Weight 0 or no label: unchanged."""
    moving, label = _disc(14)
    fixed, fixed_label = _disc(7)
    start = torch.zeros(1, 2, 64, 64)
    ref = InstanceRefinement(30, window=9, lambda_reg=0.5, lambda_label=0.0)
    area = lambda ddf: float((warp_image(label_onehot(label, [0, 3]), ddf, "bilinear", "zeros")[:, 1] > 0.5).sum())
    plain = ref(moving, fixed, start)
    guided = ref(moving, fixed, start, label, lambda_label=0.5)
    target = float((fixed_label > 0).sum())
    assert area(plain) > 2.5 * target, (area(plain), target)
    assert abs(area(guided) - target) < 0.2 * target, (area(guided), target)
    torch.testing.assert_close(ref(moving, fixed, start, label), plain)  # weight 0: the label is not used
    torch.testing.assert_close(ref(moving, fixed, start, label, lambda_label=0.0), plain)
    # slices stay independent: a pair gives the same field inside a batch as alone
    batch = ref(torch.cat([moving, fixed]), torch.cat([fixed, fixed]), torch.zeros(2, 2, 64, 64), torch.cat([label, fixed_label]), 0.5)
    torch.testing.assert_close(batch[:1], guided, atol=1e-4, rtol=0)


def test_register_and_track_use_the_moving_label():
    """register(): the moving label changes the field only through label_guidance (recorded in the summary);
    track(label_guidance>0): every registration of the chain gets its moving frame's label; by default only those from the
    reference frame get it (register's own weight); 0: none."""
    from unittest import mock

    import monai_npc
    from monai_npc.data.phantom_cine import cardiac_cine

    c = cardiac_cine(frames=4, size=64, levels=(0.4,), spacing=(8.0, 2.0, 2.0), seed=3)
    ed, es, lab = c["image"][0], c["image"][2], c["label"][0]
    kw = dict(spacing=c["spacing"], refine_iterations=10, threads=1, field_of_view="image")
    plain = monai_npc.register(ed, es, label_prior=0.0, **kw)  # the images alone (without a label the prior would segment)
    off = monai_npc.register(ed, es, moving_label=lab, label_guidance=0.0, **kw)
    on = monai_npc.register(ed, es, moving_label=lab, **kw)
    torch.testing.assert_close(off.ddf, plain.ddf)
    assert on.summary["label_guidance"] == 0.05 and off.summary["label_guidance"] == 0.0
    assert float((on.ddf - plain.ddf).abs().max()) > 1e-3
    with pytest.raises(ValueError, match=r"label_guidance \(--label-guidance\) must be >= 0"):
        monai_npc.register(ed, es, moving_label=lab, label_guidance=-1.0, **kw)

    from monai_npc.apps.tracking import registrations as registrations_module  # where the pairwise registrations call register

    calls = []
    real = registrations_module.register

    def spy(moving, fixed, *args, **kwargs):
        calls.append((kwargs.get("moving_label"), kwargs.get("label_guidance")))
        return real(moving, fixed, *args, **kwargs)

    with mock.patch.object(registrations_module, "register", spy):
        monai_npc.track(c["image"], lab, 0, "sequential", spacing=c["spacing"], refine_iterations=2, threads=1, progress=False,
                        label_guidance=0.05)
    assert len(calls) == 4 and all(lbl is not None and w == 0.05 for lbl, w in calls)
    import SimpleITK as sitk

    np.testing.assert_array_equal(sitk.GetArrayFromImage(calls[0][0]), lab)  # the first step gets the reference label itself
    calls.clear()
    with mock.patch.object(registrations_module, "register", spy):
        monai_npc.track(c["image"], lab, 0, "sequential", spacing=c["spacing"], refine_iterations=2, threads=1, progress=False)
    # default: the registration from the reference frame gets its label with register's own weight, the chain none
    assert len(calls) == 4 and calls[0][0] is not None and calls[0][1] is None
    np.testing.assert_array_equal(sitk.GetArrayFromImage(calls[0][0]), lab)
    assert all(lbl is None and w is None for lbl, w in calls[1:])
    calls.clear()
    with mock.patch.object(registrations_module, "register", spy):
        monai_npc.track(c["image"], lab, 0, "direct", spacing=c["spacing"], refine_iterations=2, threads=1, progress=False,
                        label_guidance=0.0)
    assert len(calls) == 3 and all(lbl is None and w == 0.0 for lbl, w in calls)  # 0: no registration gets a label


def test_many_label_values_skip_the_term_with_a_warning():
    """An atlas parcellation (here 19 values) is not used by the term (one warped channel per value and step)."""
    from monai_npc.networks.blocks.refinement import MAX_GUIDE_LABELS

    moving, fixed, start = torch.rand(1, 1, 32, 32), torch.rand(1, 1, 32, 32), torch.zeros(1, 2, 32, 32)
    atlas = (torch.arange(32 * 32).reshape(1, 1, 32, 32) % 20).to(torch.int64)
    ref = InstanceRefinement(3)
    with pytest.warns(RuntimeWarning, match=f"19 values \\(at most {MAX_GUIDE_LABELS}"):
        out = ref(moving, fixed, start, atlas, 0.05)
    torch.testing.assert_close(out, ref(moving, fixed, start))


def test_label_term_on_the_region_box_equals_the_whole_grid():
    """The refinement evaluates the label cost on the box around its region only: same value and
    gradient as the cost on the whole grid, for a batch whose pairs have their regions in different places."""
    torch.manual_seed(0)
    moving = torch.rand(2, 1, 48, 40)
    fixed = 0.7 * moving + 0.3 * torch.rand(2, 1, 48, 40)  # one contrast (an inverted one: test below)
    label = torch.zeros(2, 1, 48, 40, dtype=torch.int64)
    label[0, 0, 5:12, 4:10] = 1
    label[0, 0, 8:14, 10:16] = 3
    label[1, 0, 30:40, 25:33] = 2
    start = torch.randn(2, 2, 48, 40) * 0.5
    ref = InstanceRefinement(label_margin=3)
    term = ref._label_term(moving, fixed, start, label)
    field = (start + torch.randn(2, 2, 48, 40)).requires_grad_(True)
    values = [0, 1, 2, 3]
    onehot = label_onehot(label, values)
    region_m = label_region(label, 3)
    means, sds = intensity_models(moving, onehot, region_m)
    region_f = (warp_image(region_m, start, "bilinear", "zeros") > 0.5).float()
    assert region_f.sum() < 0.5 * region_f.numel()  # the box is a real crop
    whole = label_intensity_cost(fixed, warp_image(onehot, field, "bilinear", "zeros"), region_f, means, sds)
    boxed = term(field)
    torch.testing.assert_close(boxed, whole, rtol=1e-5, atol=1e-6)
    (g_box,) = torch.autograd.grad(boxed.sum(), field)
    (g_whole,) = torch.autograd.grad(whole.sum(), field)
    torch.testing.assert_close(g_box, g_whole, rtol=1e-4, atol=1e-6)
    assert g_whole.abs().max() > 0


def test_label_core_erodes_by_whole_boxes():
    from monai_npc.functional.label_intensity import label_core

    masks = torch.zeros(1, 2, 12, 12)
    masks[0, 0, 2:9, 3:10] = 1.0  # 7 x 7
    masks[0, 1, 0:3, 0:3] = 1.0  # 3 x 3 at the corner: outside the grid counts as outside
    core = label_core(masks, 1)
    assert core.shape == masks.shape and core[0, 0].sum() == 25 and core[0, 0, 3:8, 4:9].all()
    assert core[0, 1].sum() == 1 and core[0, 1, 1, 1] == 1
    assert torch.equal(label_core(masks, 0), masks)


def test_fixed_image_models_follow_a_structure_whose_brightness_changes():
    """The blood pool shrinks and darkens between frames (1.0 -> 0.6): with the moving image's models
    alone the label term calls the darker pool myocardium and the carried LV collapses; mixing in the
    fixed image's own statistics under the carried labels (``label_model_mix``) follows it."""
    torch.manual_seed(0)
    n = 96
    yy, xx = torch.meshgrid(torch.arange(n).float(), torch.arange(n).float(), indexing="ij")
    r = torch.hypot(yy - 48, xx - 48)

    def frame(r_lv: float, r_epi: float, lv: float):
        lab = torch.where(r <= r_lv, 3, torch.where(r <= r_epi, 2, 0))
        img = torch.where(lab == 3, lv, torch.where(lab == 2, 0.3, 0.05)) + 0.02 * torch.randn(n, n)
        return img[None, None], lab[None, None].float()

    (moving, moving_label), (fixed, fixed_label) = frame(14, 19, 1.0), frame(10, 17, 0.6)

    def dice(a, b, v):
        a, b = a == v, b == v
        return float(2 * (a & b).sum() / (a.sum() + b.sum()))

    result = {}
    for mix in (0.0, 0.5):
        refiner = InstanceRefinement(iterations=40, grid_stride=4, lambda_label=0.05, label_model_mix=mix)
        ddf = refiner(moving, fixed, torch.zeros(1, 2, n, n), moving_label)
        warped = warp_image(moving_label, ddf, "nearest", "zeros")
        result[mix] = dice(warped, fixed_label, 3), dice(warped, fixed_label, 2)
    assert result[0.0][0] < 0.5 and result[0.5][0] > 0.95 and result[0.5][1] > 0.95  # 0.37 against 0.99
    with pytest.raises(ValueError, match="label_model_mix"):
        InstanceRefinement(label_model_mix=1.5)


def test_the_label_term_reads_an_inverted_fixed_image_in_the_moving_contrast():
    moving, label = _disc(10)
    fixed, _ = _disc(7)  # the cavity shrank
    start = torch.zeros(1, 2, 64, 64)
    field = torch.randn(1, 2, 64, 64)
    ref = InstanceRefinement(label_margin=5)
    same = ref._label_term(moving, fixed, start, label)(field)
    inverted = ref._label_term(moving, 1.2 - fixed, start, label)  # max + min - x: the same range
    torch.testing.assert_close(inverted(field), same)
    # what the moving models would say of the inverted image as it is: the wrong labels look likely
    onehot, region = label_onehot(label, [0, 3]), label_region(label, 5)
    means, sds = intensity_models(moving, onehot, region)
    region_f = (warp_image(region, start, "bilinear", "zeros") > 0.5).float()
    as_is = label_intensity_cost(1.2 - fixed, warp_image(onehot, field, "bilinear", "zeros"), region_f, means, sds)
    assert float(as_is[0]) > float(same[0]) + 10.0
