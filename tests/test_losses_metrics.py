"""Registration losses and metrics on fields and label maps with known answers."""

import math

import pytest
import torch

from monai_npc.functional import jacobian_determinant, warp_image
from monai_npc.losses import PRESETS, JacobianFoldLoss, LogJacobianLoss, RegistrationLoss, bidirectional_loss
from monai_npc.metrics import dice_per_structure, folding_percent, hd95_per_structure, ndv, registration_metrics, sdlogj
from monai_npc.networks.nets import DemonsNet, NPCNet, PhaseCorrelationNet, VoxelMorphNet


def grid2(n=32):
    return torch.stack(torch.meshgrid(torch.arange(float(n)), torch.arange(float(n)), indexing="ij"))


def folding_field(n=32, amp=6.0):
    """A field whose Jacobian is negative in a band: u_0 = -amp * sin(2 pi x_0 / n)."""
    g = grid2(n)
    ddf = torch.zeros(1, 2, n, n)
    ddf[0, 0] = -amp * torch.sin(2 * math.pi * g[0] / n)
    return ddf


def test_fold_and_logj_penalties():
    zero = torch.zeros(2, 2, 16, 16)
    assert JacobianFoldLoss()(zero) == 0 and LogJacobianLoss()(zero) == 0
    ddf = folding_field()
    det = jacobian_determinant(ddf)
    assert JacobianFoldLoss()(ddf).item() == pytest.approx(torch.relu(-det).mean().item())
    assert JacobianFoldLoss()(ddf) > 0
    scale = 0.1 * grid2(16).unsqueeze(0)  # det = 1.21 everywhere
    assert LogJacobianLoss()(scale).item() == pytest.approx(math.log(1.21) ** 2, rel=1e-4)


def test_presets_are_the_papers():
    assert PRESETS["acdc"].window == 17 and PRESETS["acdc"].lambda_reg == 5e-2
    assert PRESETS["acdc"].lambda_jac == 100 and PRESETS["acdc"].lambda_logj == 1e-5
    assert PRESETS["camus"].window == 67 and PRESETS["camus"].lambda_reg == 2e-1
    assert PRESETS["camus"].lambda_jac == 1 and PRESETS["camus"].lambda_logj == 1e-2
    loss = RegistrationLoss("camus", lambda_jac=3.0)
    assert loss.config["window"] == 67 and loss.config["lambda_jac"] == 3.0
    with pytest.raises(ValueError, match="preset"):
        RegistrationLoss("oasis")


def test_registration_loss_components():
    img = torch.rand(2, 1, 32, 32)
    loss = RegistrationLoss("acdc")
    perfect = loss.components(img, img, torch.zeros(2, 2, 32, 32))
    assert perfect["similarity"].item() == pytest.approx(-1.0, abs=1e-3)
    assert perfect["regularization"] == 0 and perfect["fold"] == 0
    bad = loss.components(img, torch.rand(2, 1, 32, 32), folding_field().repeat(2, 1, 1, 1))
    assert bad["similarity"] > -0.5 and bad["fold"] > 0 and bad["regularization"] > 0
    assert bad["loss"] == pytest.approx(float(bad["similarity"] + bad["regularization"] + bad["fold"] + bad["logj"]))


def test_bidirectional_loss_is_mean_of_both_directions():
    net = NPCNet(kernel_size=8, stride=4, num_pairs=8, top_k=4, gate_dim=16, hidden_dim=16, num_pe=16, num_steps=2)
    with torch.no_grad():
        net.ode.stages[0].decoder.head.out.weight.normal_(std=0.3)
    loss = RegistrationLoss("acdc")
    m, f = torch.rand(2, 1, 32, 32), torch.rand(2, 1, 32, 32)
    both = bidirectional_loss(net, loss, m, f)
    fwd = net(torch.cat([m, f], 1))
    bwd = net(torch.cat([f, m], 1))
    l1 = loss(warp_image(m, fwd), f, fwd)
    l2 = loss(warp_image(f, bwd), m, bwd)
    assert both["loss"].item() == pytest.approx(0.5 * (l1 + l2).item(), rel=1e-4)
    assert torch.allclose(both["ddf"][:2], fwd, atol=1e-6)


def test_dice_hd95_and_jacobian_metrics():
    lab = torch.zeros(1, 1, 32, 32)
    lab[..., 4:12, 4:12] = 1
    lab[..., 16:24, 16:28] = 2
    shifted = torch.roll(lab, 2, dims=2)
    d = dice_per_structure(shifted, lab, (1, 2))
    assert d[0, 0].item() == pytest.approx(2 * 48 / 128)
    assert d[0, 1].item() == pytest.approx(2 * 72 / 192)
    assert torch.allclose(hd95_per_structure(shifted, lab, (1, 2)), torch.tensor([[2.0, 2.0]]))
    translation = torch.full((1, 2, 32, 32), 3.0)
    assert sdlogj(translation).item() == pytest.approx(0.0, abs=1e-3)
    assert folding_percent(translation).item() == 0 and ndv(translation, lab, lab).item() == 0
    fold = folding_field()
    frac = (jacobian_determinant(fold) <= 0).float().mean().item()
    assert frac > 0 and folding_percent(fold).item() == pytest.approx(100 * frac)
    fg = torch.ones(1, 1, 32, 32)
    assert ndv(fold, fg, fg).item() == pytest.approx(1e4 * frac)
    smooth = 0.05 * grid2(32).unsqueeze(0)
    expected = 100 * torch.log(jacobian_determinant(smooth) + 3).std().item()
    assert sdlogj(smooth).item() == pytest.approx(expected, rel=1e-5)
    with pytest.raises(ValueError, match="foreground"):
        ndv(fold, torch.zeros(1, 1, 32, 32), torch.zeros(1, 1, 32, 32))


def test_registration_metrics_keys():
    lab = torch.randint(0, 4, (2, 1, 32, 32)).float()
    out = registration_metrics(lab, lab, lab, torch.zeros(2, 2, 32, 32), names=("rv", "myo", "lv"))
    assert set(out) == {"dice_rv", "dice_myo", "dice_lv", "dice_mean", "hd95", "sdlogj", "ndv", "folding_percent"}
    assert torch.allclose(out["dice_mean"], torch.ones(2))


def test_baselines_share_the_api():
    x = torch.rand(2, 2, 64, 64)
    vxm = VoxelMorphNet()
    ddf = vxm(x)
    assert ddf.shape == (2, 2, 64, 64)
    out = bidirectional_loss(vxm, RegistrationLoss("acdc"), x[:, :1], x[:, 1:])
    out["loss"].backward()
    assert all(p.grad is not None for p in vxm.parameters())
    img = torch.nn.functional.avg_pool2d(torch.rand(1, 1, 64, 64), 5, 1, 2)
    fixed = torch.roll(img, (-3, 4), dims=(2, 3))  # fixed(x) = img(x + (3, -4))
    pc = PhaseCorrelationNet()(torch.cat([img, fixed], 1))
    assert torch.allclose(pc[0, :, 10, 10], torch.tensor([3.0, -4.0]), atol=0.06)
    assert torch.allclose(warp_image(img, pc)[..., 8:-8, 8:-8], fixed[..., 8:-8, 8:-8], atol=1e-3)
    with pytest.raises(ValueError, match="moving \\+ fixed"):
        vxm(torch.rand(1, 1, 64, 64))


def test_demons_baseline_follows_the_warp_convention():
    g = grid2(64)
    blob = torch.exp(-((g[0] - 30) ** 2 + (g[1] - 34) ** 2) / 120.0)[None, None]
    fixed = torch.roll(blob, (2, -1), dims=(2, 3))  # fixed(x) = blob(x - (2, -1)): ddf = (-2, 1)
    ddf = DemonsNet(iterations=200, smoothing=2.0)(torch.cat([blob, fixed], 1))
    assert ddf.shape == (1, 2, 64, 64)
    centre = ddf[0, :, 28:36, 31:39].mean((1, 2))
    assert torch.allclose(centre, torch.tensor([-2.0, 1.0]), atol=0.5), centre
    before = (blob - fixed).abs().mean()
    assert (warp_image(blob, ddf) - fixed).abs().mean() < 0.5 * before


def test_warped_label_volume_loss_is_the_relative_stack_volume_error():
    """|V(warped) - V(fixed)| / max(V(moving), V(fixed)) per structure over the stack; a field that contracts the
    moving LV towards the fixed volume lowers it, and its gradient reaches the field."""
    from monai_npc.losses import WarpedLabelVolumeLoss

    moving = torch.zeros(2, 1, 32, 32, dtype=torch.long)
    moving[:, :, 8:24, 8:24] = 3  # ED: LV of 256 voxels per slice
    moving[:, :, 2:6, 2:6] = 1  # RV of 16 voxels, unchanged in the fixed frame
    fixed = moving.clone()
    fixed[fixed == 3] = 2
    fixed[:, :, 10:22, 10:22] = 3  # ES: 144 voxels per slice (EF 43.75 %)
    ddf = torch.zeros(2, 2, 32, 32, requires_grad=True)
    lv = WarpedLabelVolumeLoss((3,))(moving, fixed, ddf)
    assert float(lv) == pytest.approx((256 - 144) / 256, abs=1e-6)  # identity: the whole EF, as a fraction
    assert float(WarpedLabelVolumeLoss((1, 3))(moving, fixed, ddf)) == pytest.approx((0.0 + 112 / 256) / 2, abs=1e-6)
    lv.backward()
    assert float(ddf.grad.abs().sum()) > 0
    yy, xx = torch.meshgrid(torch.arange(32.0), torch.arange(32.0), indexing="ij")
    contract = torch.stack([(yy - 15.5) * 0.25, (xx - 15.5) * 0.25])[None].repeat(2, 1, 1, 1)  # samples 1.25x further out
    assert float(WarpedLabelVolumeLoss((3,))(moving, fixed, contract)) < float(lv) - 0.2
    assert float(WarpedLabelVolumeLoss((2,))(moving, moving, ddf.detach())) == 0.0  # absent in both: 0, not NaN


def test_warped_label_dice_loss_over_a_stack_is_the_3d_dice():
    """``batch=True``: one Dice per structure over all slices (the stack's 3-D Dice), not a mean of per-slice Dice.

    A stack whose LV has left its basal slice in the fixed frame: per slice, that slice scores 0 for the LV
    however few voxels remain; over the stack, its voxels count as false positives only.
    """
    from monai_npc.losses import WarpedLabelDiceLoss

    moving = torch.zeros(3, 1, 16, 16, dtype=torch.long)
    moving[:, :, 4:12, 4:12] = 3  # LV of 64 voxels on every slice
    fixed = moving.clone()
    fixed[0] = 0  # gone from the basal slice
    ddf = torch.zeros(3, 2, 16, 16)
    stack = float(WarpedLabelDiceLoss((3,), smooth=1.0, batch=True)(moving, fixed, ddf))
    per_slice = float(WarpedLabelDiceLoss((3,), smooth=1.0)(moving, fixed, ddf))
    assert stack == pytest.approx(1.0 - (2 * 128 + 1.0) / (192 + 128 + 1.0), abs=1e-6)  # 3-D Dice 0.8 -> loss 0.2
    assert per_slice == pytest.approx((1.0 - 1.0 / 65.0) / 3.0, abs=1e-6)  # the basal slice alone: loss ~1
    # a field that shrinks the basal LV lowers the stack's loss
    shrink = ddf.clone()
    yy, xx = torch.meshgrid(torch.arange(16.0), torch.arange(16.0), indexing="ij")
    shrink[0, 0], shrink[0, 1] = (yy - 7.5) * 1.0, (xx - 7.5) * 1.0  # samples twice as far out: the LV halves in width
    assert float(WarpedLabelDiceLoss((3,), smooth=1.0, batch=True)(moving, fixed, shrink)) < stack - 0.05
