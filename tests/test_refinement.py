"""Test-time refinement and the box-window LNCC it uses."""

import pytest
import torch
from monai.losses import LocalNormalizedCrossCorrelationLoss

from monai_npc.functional.similarity import box_sum, local_ncc, local_target_stats
from monai_npc.functional.warp import warp_image
from monai_npc.networks.blocks import InstanceRefinement
from monai_npc.networks.nets import NPCNet


@pytest.mark.parametrize("dims", [2, 3])
def test_local_ncc_equals_monai(dims):
    shape = (2, 1) + (24,) * dims
    p, t = torch.rand(shape, dtype=torch.float64), torch.rand(shape, dtype=torch.float64)
    ref = LocalNormalizedCrossCorrelationLoss(spatial_dims=dims, kernel_size=7)(p, t)
    assert torch.allclose(-local_ncc(p, t, 7).mean(), ref, rtol=1e-4)
    assert torch.allclose(-local_ncc(t, t, 7).mean(), torch.tensor(-1.0, dtype=torch.float64), atol=1e-3)
    assert torch.equal(local_ncc(p, t, 7, target_stats=local_target_stats(t, 7)), local_ncc(p, t, 7))  # the refinement's shortcut


def test_box_sum_counts_the_window_with_zero_padding():
    x = torch.ones(1, 1, 9, 9)
    s = box_sum(x, 3)
    assert s[0, 0, 4, 4] == 9 and s[0, 0, 0, 0] == 4 and s[0, 0, 0, 4] == 6
    # windows wider than the axis, odd shapes, 3-D: against an explicit zero-padded convolution
    for shape, window in (((1, 2, 5, 3), 7), ((2, 1, 4, 6, 3), 5), ((1, 1, 1, 7), 9), ((1, 1, 12, 10), 17)):
        y = torch.rand(shape, dtype=torch.float64)
        dims = len(shape) - 2
        conv = (torch.nn.functional.conv2d, torch.nn.functional.conv3d)[dims - 2]
        ref = conv(y.flatten(0, 1)[:, None], torch.ones((1, 1) + (window,) * dims, dtype=torch.float64), padding=window // 2)
        assert torch.allclose(box_sum(y, window), ref.reshape(shape)), (shape, window)
        single = box_sum(y.float(), window)  # each axis summed as the innermost one, the result laid out as the input
        assert single.dtype == torch.float32 and single.is_contiguous() and torch.allclose(single.double(), ref.reshape(shape), atol=1e-5)
    with pytest.raises(ValueError, match="odd"):
        box_sum(x, 4)


@pytest.mark.parametrize("shape", [(2, 2, 12, 10), (1, 2, 6, 5, 7)])
def test_box_sum_gradient_is_the_box_sum_of_the_gradient(shape):
    """The custom backward (the box filter is its own adjoint) against finite differences, 2-D and 3-D."""
    x = torch.rand(shape, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(lambda t: box_sum(t, 5), (x,))
    g = torch.rand(shape, dtype=torch.float64)
    (grad,) = torch.autograd.grad(box_sum(x, 3), x, g)
    assert torch.allclose(grad, box_sum(g, 3))


def _blob_pair(shift: float):
    g = torch.Generator().manual_seed(0)
    noise = torch.rand(1, 1, 64, 64, generator=g)
    kernel = torch.exp(-torch.arange(-6.0, 7.0) ** 2 / 8.0)
    kernel = (kernel[:, None] * kernel[None, :] / kernel.sum() ** 2)[None, None]
    fixed = torch.nn.functional.conv2d(noise, kernel, padding=6)  # smooth random texture
    fixed = (fixed - fixed.min()) / (fixed.max() - fixed.min())
    true = torch.zeros(1, 2, 64, 64)
    true[:, 1] = shift
    moving = warp_image(fixed, -true, "bilinear", "border")  # moving(x + shift) = fixed(x)
    return moving, fixed, true


def test_refinement_recovers_a_shift_the_start_misses():
    moving, fixed, true = _blob_pair(3.0)
    start = torch.zeros_like(true)
    refined = InstanceRefinement(iterations=80, learning_rate=0.3, grid_stride=8, window=15, lambda_reg=0.0, level=1)(moving, fixed, start)
    inner = (slice(None), slice(None), slice(16, 48), slice(16, 48))
    err_before = (start - true)[inner].norm(dim=1).mean()
    err_after = (refined - true)[inner].norm(dim=1).mean()
    assert err_before == pytest.approx(3.0)
    assert err_after < 0.1 * err_before  # 3 px -> < 0.3 px
    assert not refined.requires_grad


def test_refinement_under_inference_mode_and_zero_iterations():
    moving, fixed, true = _blob_pair(2.0)
    start = 0.5 * true
    with torch.inference_mode():
        out = InstanceRefinement(iterations=10, level=2)(moving, fixed, start)
    assert out.shape == start.shape and torch.isfinite(out).all() and not torch.equal(out, start)
    assert InstanceRefinement(iterations=0)(moving, fixed, start) is start
    with pytest.raises(ValueError, match="grid_stride"):
        InstanceRefinement(grid_stride=0)
    with pytest.raises(ValueError, match="iterations"):
        InstanceRefinement(iterations=-1)


def test_npcnet_refine_option_keeps_weights_and_scripting():
    net = NPCNet(num_steps=2, num_pairs=16, top_k=8, gate_dim=16, hidden_dim=16, num_pe=16)
    refined = NPCNet(num_steps=2, num_pairs=16, top_k=8, gate_dim=16, hidden_dim=16, num_pe=16, refine_iterations=5)
    refined.load_state_dict(net.state_dict())  # same parameters: the refinement has none
    x = torch.rand(1, 2, 64, 64)
    with torch.no_grad():
        plain, better = net(x), refined(x)
    assert not torch.equal(plain, better)
    assert refined.config["refine_iterations"] == 5
    scripted = torch.jit.script(net)
    assert torch.allclose(scripted(x), plain, atol=1e-6)


def test_local_ncc_matches_monai_on_flat_regions():
    """Zero background and a nearly flat plateau: the running sums must not turn cancellation into NCC."""
    x = torch.zeros(1, 1, 96, 96)
    x[..., 30:70, 20:80] = 0.5 + 0.01 * torch.rand(40, 60)
    y = x.roll(2, -1)
    ref = LocalNormalizedCrossCorrelationLoss(spatial_dims=2, kernel_size=17)(x, y)
    assert torch.allclose(-local_ncc(x, y, 17).mean(), ref, rtol=1e-3, atol=1e-4)


def test_register_refine_option(tmp_path):
    """``monai_npc.register(..., refine_iterations=N)`` and ``monai-npc register --refine N`` refine the shipped model's field."""
    import numpy as np

    import monai_npc
    from monai_npc.cli.main import main as cli_main
    from monai_npc.data.io import write_image

    moving, fixed, _ = _blob_pair(2.0)
    m, f = moving[0, 0].numpy(), fixed[0, 0].numpy()
    plain = monai_npc.register(m, f, model="acdc", spacing=(1.0, 1.0), threads=1)
    refined = monai_npc.register(m, f, model="acdc", spacing=(1.0, 1.0), threads=1, refine_iterations=10)
    assert not torch.equal(plain.ddf, refined.ddf)
    # register's settings for acdc (apps.registration.register_settings), not the weights' 10 / 50
    assert plain.summary["steps"] == {"num_steps": 6, "refine_iterations": 30} and refined.summary["steps"]["refine_iterations"] == 10
    fewer = monai_npc.register(m, f, model="acdc", spacing=(1.0, 1.0), threads=1, refine_iterations=10, num_steps=4)
    assert fewer.summary["steps"] == {"num_steps": 4, "refine_iterations": 10} and not torch.equal(fewer.ddf, refined.ddf)
    with pytest.raises(ValueError, match="--refine"):
        monai_npc.register(m, f, model="acdc", spacing=(1.0, 1.0), refine_iterations=-1)
    with pytest.raises(ValueError, match="--steps"):
        monai_npc.register(m, f, model="acdc", spacing=(1.0, 1.0), num_steps=0)
    write_image(np.ascontiguousarray(m), tmp_path / "m.nii.gz", spacing=(1.0, 1.0))
    write_image(np.ascontiguousarray(f), tmp_path / "f.nii.gz", spacing=(1.0, 1.0))
    args = ["register", "--moving", str(tmp_path / "m.nii.gz"), "--fixed", str(tmp_path / "f.nii.gz"), "--out", str(tmp_path / "out"),
            "--refine", "10", "--steps", "4", "--no-overview", "--threads", "1", "--quiet"]
    assert cli_main(args) == 0
    import json

    assert json.loads((tmp_path / "out" / "summary.json").read_text())["steps"] == {"num_steps": 4, "refine_iterations": 10}


@pytest.mark.parametrize("coarse,full", [([32, 32], [128, 128]), ([1, 7], [3, 30]), ([2, 5, 4], [10, 21, 16])])
def test_linear_upsampler_equals_interpolate(coarse, full):
    """The refinement's per-axis matrix upsampling against ``F.interpolate`` (values and gradients)."""
    from monai_npc.networks.blocks.refinement import _linear_upsampler, _resize

    v = torch.randn([2, len(coarse)] + coarse, dtype=torch.float64, requires_grad=True)
    up = _linear_upsampler(coarse, full, torch.float64, torch.device("cpu"))
    weight = torch.randn([2, len(coarse)] + full, dtype=torch.float64)
    (g_fast,) = torch.autograd.grad((up(v) * weight).sum(), v)
    (g_ref,) = torch.autograd.grad((_resize(v, full) * weight).sum(), v)
    assert torch.allclose(up(v), _resize(v, full), atol=1e-12)
    assert torch.allclose(g_fast, g_ref, atol=1e-10)


def test_adam_step_is_torch_adam():
    """The refinement's hand-written Adam step equals ``torch.optim.Adam`` bit for bit over many steps."""
    from monai_npc.networks.blocks.refinement import _adam_step

    torch.manual_seed(0)
    target = torch.randn(3, 2, 5, 4)
    a = torch.zeros(3, 2, 5, 4, requires_grad=True)
    b = torch.zeros(3, 2, 5, 4, requires_grad=True)
    opt = torch.optim.Adam([a], lr=0.25)
    moments = (torch.zeros_like(b), torch.zeros_like(b))
    for step in range(1, 31):
        loss_a = ((a - target) ** 4).sum()
        opt.zero_grad()
        loss_a.backward()
        opt.step()
        (grad,) = torch.autograd.grad(((b - target) ** 4).sum(), b)
        _adam_step(b, grad, moments, step, 0.25)
        assert torch.equal(a, b), step
    assert (a - target).abs().max() < (target.abs().max()) / 2  # it moved towards the target


def test_step_size_falls_linearly_from_the_first_step_to_the_last():
    """``learning_rate_end``: the Adam step size goes from ``learning_rate`` (step 1) to it (the last step), linearly, as
    ``torch.optim.lr_scheduler.LinearLR`` over the same steps; ``None`` keeps it constant, bit for bit the old refinement."""
    from monai_npc.networks.blocks.refinement import _step_size

    sizes = [_step_size(s, 30, 0.5, 0.15) for s in range(1, 31)]
    assert sizes[0] == 0.5 and sizes[-1] == pytest.approx(0.15) and all(a > b for a, b in zip(sizes, sizes[1:]))
    assert sizes[15] - sizes[16] == pytest.approx(sizes[0] - sizes[1])
    param = torch.zeros(1, requires_grad=True)
    opt = torch.optim.SGD([param], lr=0.5)
    linear = torch.optim.lr_scheduler.LinearLR(opt, start_factor=1.0, end_factor=0.3, total_iters=29)
    for s in range(1, 31):
        assert opt.param_groups[0]["lr"] == pytest.approx(_step_size(s, 30, 0.5, 0.15)), s
        opt.step()
        linear.step()
    assert _step_size(7, 30, 0.25, None) == 0.25 and _step_size(1, 1, 0.5, 0.15) == 0.5

    moving, fixed, true = _blob_pair(3.0)
    start = torch.zeros_like(true)
    kw = dict(iterations=30, grid_stride=8, window=15, lambda_reg=0.0)
    constant = InstanceRefinement(learning_rate=0.3, **kw)(moving, fixed, start)
    assert torch.equal(InstanceRefinement(learning_rate=0.3, learning_rate_end=0.3, **kw)(moving, fixed, start), constant)
    falling = InstanceRefinement(learning_rate=0.5, learning_rate_end=0.15, **kw)(moving, fixed, start)
    inner = (slice(None), slice(None), slice(16, 48), slice(16, 48))
    assert not torch.equal(falling, constant)
    assert (falling - true)[inner].norm(dim=1).mean() < 0.3  # 3 px -> < 0.3 px, as with a constant step
    with pytest.raises(ValueError, match="learning_rate_end"):
        InstanceRefinement(learning_rate_end=0.0)
