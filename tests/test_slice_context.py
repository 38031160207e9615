"""SliceContextNPC: the 2-D NPC on whole stacks with its neighbouring slices as context and a
through-plane component out; its 3-D warp, Jacobian and loss; training it with the whole-stack script; export."""

from __future__ import annotations

import importlib.util
import json

import pytest
import torch
import torch.nn.functional as F

from monai_npc.engines.stack_data import DeviceStacks, StackBatch
from monai_npc.engines.stack_distributed import EpochShares
from monai_npc.data.stack_pack import load_stack_pack
from monai_npc.engines.stack_training import StackTrainingConfig, build_network, export_weights, validate_stacks
from monai_npc.functional import jacobian_determinant, stack_jacobian_determinant, stack_neighbours, warp_image, warp_stack_slices
from monai_npc.losses import StackRegistrationLoss
from monai_npc.losses.stack import StackDiceLoss
from monai_npc.networks.nets import NPCNet, SliceContextNPC, load_pretrained, save_pretrained

from .test_stack_training import ROOT, TINY, pack_file  # noqa: F401  (the fixture)


def _two_stacks(z: int = 6, size: int = 32):
    """Two stacks of smooth random slices, one with its moving frame a slice below the fixed one (``dz = -1``), one
    a slice above (``dz = +1``): ``(pair (2z, 2, size, size), group (2z,), truth (2,))``."""
    torch.manual_seed(0)
    p = F.avg_pool2d(F.avg_pool2d(torch.rand(z + 2, 1, size, size), 5, 1, 2), 5, 1, 2)[:, 0]
    p = (p - p.amin((1, 2), keepdim=True)) / (p.amax((1, 2), keepdim=True) - p.amin((1, 2), keepdim=True))
    fixed = torch.cat([p[1 : z + 1], p[1 : z + 1]])
    moving = torch.cat([p[2:], p[:z]])  # stack 0: moving(z - 1) = fixed(z); stack 1: moving(z + 1) = fixed(z)
    return torch.stack([moving, fixed], 1), torch.arange(2).repeat_interleave(z), torch.tensor([-1.0, 1.0])


def test_stack_neighbours_stay_within_each_stack():
    group = torch.tensor([0, 0, 0, 1, 2, 2])
    previous, following = stack_neighbours(group, 3)
    assert previous.tolist() == [0, 0, 1, 3, 4, 4] and following.tolist() == [1, 2, 2, 3, 5, 5]


def test_a_through_plane_displacement_of_one_slice_shifts_the_stack_by_one_slice():
    torch.manual_seed(1)
    image = torch.rand(7, 2, 12, 10)
    group = torch.tensor([0, 0, 0, 0, 1, 1, 1])
    ddf = torch.zeros(7, 3, 12, 10)
    ddf[:, 0] = 1.0  # out(z) = image(z + 1), the last slice of each stack replicated
    out = warp_stack_slices(image, ddf, group, 2)
    torch.testing.assert_close(out, image[[1, 2, 3, 3, 5, 6, 6]], rtol=0, atol=1e-6)
    ddf[:, 0] = -0.5  # halfway to the slice before
    torch.testing.assert_close(warp_stack_slices(image, ddf, group, 2), 0.5 * (image + image[[0, 0, 1, 2, 4, 4, 5]]), rtol=0,
                               atol=1e-5)
    ddf = torch.randn(7, 3, 12, 10)
    ddf[:, 0] = 0.0  # in-plane only: the 2-D warp of every slice
    torch.testing.assert_close(warp_stack_slices(image, ddf, group, 2), warp_image(image, ddf[:, 1:]), rtol=0, atol=1e-5)
    with pytest.raises(ValueError, match=r"\(N, 3, H, W\)"):
        warp_stack_slices(image, ddf[:, 1:], group, 2)


def test_stack_jacobian_is_the_3d_jacobian_of_each_stack():
    torch.manual_seed(2)
    ddf = 0.3 * torch.randn(9, 3, 8, 8)
    group = torch.tensor([0] * 5 + [1] * 4)
    det = stack_jacobian_determinant(ddf, group, 2)
    for g, rows in ((0, slice(0, 5)), (1, slice(5, 9))):
        volume = ddf[rows].movedim(0, 1).unsqueeze(0)  # (1, 3, Z, H, W)
        torch.testing.assert_close(det[rows], jacobian_determinant(volume)[0], msg=f"stack {g}")


def test_init_from_the_acdc_weights_gives_their_in_plane_field_and_no_through_plane_motion():
    npc = load_pretrained("acdc", refine_iterations=0)
    net = SliceContextNPC.from_npc(npc).eval()
    assert net.config["architecture"] == "slice_context" and net.config["refine_iterations"] == 0
    for k, v in npc.state_dict().items():
        assert torch.equal(net.npc.state_dict()[k], v), k
    built = build_network(StackTrainingConfig(pack="-", out_dir="-", init="acdc", architecture="slice_context"))
    assert isinstance(built, SliceContextNPC) and all(torch.equal(built.npc.state_dict()[k], v) for k, v in npc.state_dict().items())
    # trained with each ODE step's gradient alone unless told otherwise (the recurrence through the 3-D warp explodes)
    assert built.ode.detach_steps and built.config["detach_steps"]
    told = build_network(StackTrainingConfig(pack="-", out_dir="-", init="acdc", architecture="slice_context",
                                             network={"detach_steps": False}))
    assert not told.ode.detach_steps and not build_network(StackTrainingConfig(pack="-", out_dir="-", init="acdc")).ode.detach_steps
    pair, group, _ = _two_stacks(5, 48)
    with torch.no_grad():
        ddf, ddf_2d = net.forward_stacks(pair, group, 2), npc(pair)
    assert ddf.shape == (10, 3, 48, 48) and float(ddf_2d.abs().max()) > 0.5
    assert bool((ddf[:, 0] == 0).all())  # exactly: the heads' output layers start at zero
    # the in-plane field: the 2-D network's, up to the float rounding of the 3-D warp's kernel (~1e-7 per warp), which
    # the network amplifies as it does a 1e-7 change of its input (its soft top-K): ~6e-4 voxels at most here
    with torch.no_grad():
        rounding = float((npc(pair + 1e-7 * torch.randn(pair.shape, generator=torch.Generator().manual_seed(0))) - ddf_2d).abs().max())
    assert float((ddf[:, 1:] - ddf_2d).abs().max()) <= max(1e-4, 3 * rounding)
    assert float((ddf[:, 1:] - ddf_2d).abs().mean()) < 1e-4


def test_stacks_in_one_batch_do_not_see_each_other_and_reversing_a_stack_negates_its_through_plane_motion():
    torch.manual_seed(3)
    net = SliceContextNPC(context_channels=8, **TINY).eval()
    for head in net.context:  # a trained-looking head
        torch.nn.init.normal_(head.out.weight, std=0.3)
        torch.nn.init.normal_(head.out.bias, std=0.3)
    pair, group, _ = _two_stacks(5, 32)
    with torch.no_grad():
        both = net.forward_stacks(pair, group, 2)
        first, second = net(pair[:5]), net(pair[5:])
        reversed_first = net(pair[:5].flip(0)).flip(0)
    assert float(both[:, 0].abs().max()) > 0.05
    torch.testing.assert_close(both, torch.cat([first, second]), rtol=0, atol=2e-4)  # float rounding only
    torch.testing.assert_close(reversed_first[:, 0], -first[:, 0], rtol=0, atol=2e-4)
    torch.testing.assert_close(reversed_first[:, 1:], first[:, 1:], rtol=0, atol=2e-4)
    with torch.no_grad():  # one frame's contrast inverted: the same field, through-plane component included
        inverted = net.forward_stacks(torch.stack([pair[:, 0], 1.0 - pair[:, 1]], 1), group, 2)
    torch.testing.assert_close(inverted, both, rtol=0, atol=2e-3)


def _split_gradients(fn, sizes, through_plane):
    """``fn(rows, group, n_groups) -> scalar`` differentiated once on the batch of all stacks of ``sizes`` and once
    per stack alone (summed): the two gradients, each a list of tensors."""
    whole = fn(torch.arange(sum(sizes)), torch.arange(len(sizes)).repeat_interleave(torch.tensor(sizes)), len(sizes))
    parts, start = 0, 0
    for z in sizes:
        parts = parts + fn(torch.arange(start, start + z), torch.zeros(z, dtype=torch.int64), 1)
        start += z
    params = through_plane()
    return torch.autograd.grad(whole, params, allow_unused=True), torch.autograd.grad(parts, params, allow_unused=True)


def test_a_stack_warp_gradient_depends_on_the_stack_only():
    """At an integer slice coordinate (a zero through-plane component) trilinear sampling is one-sided: a stack's
    last slice must not read the next stack's first slice (or the zero padding), nor the batch's first slice the
    volume's border, so its gradient is the same whichever stacks share the batch."""
    torch.manual_seed(4)
    sizes = [3, 4, 1, 2]
    n = sum(sizes)
    image, weight = torch.rand(n, 2, 9, 8, dtype=torch.float64), torch.rand(n, 2, 9, 8, dtype=torch.float64)
    for through in (0.0, 1.0, None):  # zero, integer and fractional through-plane components
        field = 0.4 * torch.randn(n, 3, 9, 8, dtype=torch.float64)
        if through is not None:
            field[:, 0] = through
        field.requires_grad_(True)

        def loss(rows, group, n_groups):
            return (warp_stack_slices(image[rows], field[rows], group, n_groups) * weight[rows]).sum()

        whole, parts = _split_gradients(loss, sizes, lambda: [field])
        assert float(whole[0][:, 0].abs().max()) > 0.01
        torch.testing.assert_close(whole[0], parts[0], rtol=0, atol=1e-12, msg=f"through-plane component {through}")


def test_a_batch_of_stacks_has_the_gradient_of_its_stacks_one_by_one():
    """The whole-stack loss of a batch of stacks, as the sum of its stacks' losses (image terms are means over the
    batch's slices, the Dice term a mean over its stacks), has the sum of their gradients: float64, an untrained
    network (heads at zero: an integer through-plane coordinate at every ODE step) and one with trained-looking heads."""
    torch.manual_seed(5)
    sizes, size = [3, 4], 32
    n = sum(sizes)
    pair, _, _ = _two_stacks(4, size)
    pair = pair[1:].double()
    labels = torch.zeros(n, 2, 1, size, size, dtype=torch.float64)
    labels[:, :, :, 6:26, 6:26] = 1
    labels[:, :, :, 10:22, 9:23] = 2
    labels[:, 1, :, 13:19, 12:20] = 3
    labels[:, 0, :, 12:20, 13:21] = 3
    loss = StackRegistrationLoss("acdc", label_weight=1.0)
    for trained in (False, True):
        net = SliceContextNPC(context_channels=4, **TINY).double()
        if trained:
            for head in net.context:
                torch.nn.init.normal_(head.out.weight, std=0.3)
                torch.nn.init.normal_(head.out.bias, std=0.3)

        def total(rows, group, n_groups):
            ddf = net.forward_stacks(pair[rows], group, n_groups)
            terms = loss(pair[rows, :1], pair[rows, 1:], labels[rows, 0], labels[rows, 1], ddf, group, n_groups)
            image = terms["loss"] - terms["label"]
            return image * len(rows) + terms["label"] * n_groups

        whole, parts = _split_gradients(total, sizes, lambda: list(net.parameters()))
        for (name, _), a, b in zip(net.named_parameters(), whole, parts):
            assert (a is None) == (b is None), name
            if a is not None:
                torch.testing.assert_close(a, b, rtol=1e-9, atol=1e-12 * (1 + float(a.abs().max())), msg=f"{name}, trained={trained}")
        head = dict(zip([k for k, _ in net.named_parameters()], whole))["context.0.out.weight"]
        assert float(head.abs().max()) > 1e-4


def test_two_ranks_shares_of_a_step_have_the_whole_steps_gradient():
    """Two ranks' shares of a step (:class:`EpochShares`: one stack each, both directions, their loss scales), averaged
    as DistributedDataParallel averages, give the gradient of one process training the whole step (float64, an
    untrained slice-context network)."""
    torch.manual_seed(6)
    sizes, size = [3, 4], 32
    half = sum(sizes)
    pair, _, _ = _two_stacks(4, size)
    ed, es = pair[1:, :1].double(), pair[1:, 1:].double()
    label = torch.zeros(half, 1, size, size, dtype=torch.float64)
    label[..., 6:26, 6:26] = 1
    label[..., 10:22, 9:23] = 2
    label[..., 13:19, 12:20] = 3
    moved = torch.roll(label, 2, -1)
    group = torch.arange(2).repeat_interleave(torch.tensor(sizes))
    batch = StackBatch(moving=torch.cat([ed, es]), fixed=torch.cat([es, ed]), moving_label=torch.cat([label, moved]),
                       fixed_label=torch.cat([moved, label]), group=torch.cat([group, group + 2]), n_groups=4, stacks=[0, 1])
    net = SliceContextNPC(context_channels=4, **TINY).double()
    loss = StackRegistrationLoss("acdc", label_weight=1.0)

    def gradient(b, scale=(1.0, 1.0)):
        terms = loss(b.moving, b.fixed, b.moving_label, b.fixed_label, net.forward_stacks(b.pair, b.group, b.n_groups),
                     b.group, b.n_groups)
        return torch.autograd.grad(scale[0] * (terms["loss"] - terms["label"]) + scale[1] * terms["label"], list(net.parameters()))

    whole = gradient(batch)
    ranks = [gradient(*EpochShares([[0, 1]], sizes, r, 2, torch.device("cpu")).take(0, batch)) for r in range(2)]
    for (name, _), a, b0, b1 in zip(net.named_parameters(), whole, *ranks):
        torch.testing.assert_close((b0 + b1) / 2, a, rtol=1e-9, atol=1e-12 * (1 + float(a.abs().max())), msg=name)


def test_a_through_plane_shift_is_learned_in_a_few_cpu_steps():
    pair, group, truth = _two_stacks(6, 32)
    torch.manual_seed(0)
    net = SliceContextNPC(context_channels=8, **TINY)
    opt = torch.optim.Adam(net.parameters(), lr=1e-2)
    loss = StackRegistrationLoss("acdc", label_weight=0.0)
    labels = torch.zeros(12, 1, 32, 32)
    history, shifts = [], None
    for _ in range(20):
        ddf = net.forward_stacks(pair, group, 2)
        terms = loss(pair[:, :1], pair[:, 1:], labels, labels, ddf, group, 2)
        opt.zero_grad()
        terms["loss"].backward()
        opt.step()
        history.append(float(terms["similarity"].detach()))
        shifts = torch.stack([ddf[1:5, 0].mean(), ddf[7:11, 0].mean()]).detach()  # interior slices
    assert history[-1] < history[0] - 0.05, history
    assert bool((shifts * truth > 0.3).all()), shifts  # each stack's own direction, not a shared constant


def test_the_3d_loss_terms_are_finite_and_a_2d_field_keeps_the_2d_path():
    pair, group, _ = _two_stacks(4, 24)
    labels = (pair[:, :1] > 0.5).float() * 3
    loss = StackRegistrationLoss("acdc", label_weight=1.0)
    ddf = torch.zeros(8, 3, 24, 24, requires_grad=True)
    terms = loss(pair[:, :1], pair[:, 1:], labels, labels, ddf, group, 2)
    assert float(terms["fold"].detach()) == 0 and float(terms["regularization"].detach()) == 0
    terms["loss"].backward()
    assert float(ddf.grad[:, 0].abs().sum()) > 0  # the through-plane component gets a gradient
    flat = torch.zeros(8, 2, 24, 24)
    two_d, three_d = loss(pair[:, :1], pair[:, 1:], labels, labels, flat, group, 2), terms
    torch.testing.assert_close(two_d["similarity"], three_d["similarity"].detach(), rtol=0, atol=1e-6)


def _script():
    spec = importlib.util.spec_from_file_location("train_stacks_gpu", ROOT / "examples" / "train_stacks_gpu.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_training_script_trains_the_slice_context_network_and_exports_it(pack_file, tmp_path):  # noqa: F811
    out = tmp_path / "run"
    args = ["train", "--pack", str(pack_file), "--out", str(out), "--device", "cpu", "--max-epochs", "1", "--stacks-per-batch", "2",
            "--timing-steps", "1", "--val-every", "1", "--network", "slice_context", "--network-args",
            json.dumps({**TINY, "context_channels": 8})]
    assert _script().main(args) == 0
    state = torch.load(out / "checkpoint.pt", weights_only=True)
    assert state["network_class"] == "SliceContextNPC" and state["network_config"]["architecture"] == "slice_context"
    assert state["step"] == 2 and state["train_config"]["architecture"] == "slice_context"
    net = load_pretrained(out / "best.pt")  # the shipped weights format rebuilds the class
    assert isinstance(net, SliceContextNPC) and net.config["context_channels"] == 8
    data = DeviceStacks(load_stack_pack(pack_file), [3], torch.device("cpu"))
    exported = load_pretrained(export_weights(out / "checkpoint.pt", tmp_path / "ctx.pt", {"note": "test"}))
    assert isinstance(exported, SliceContextNPC) and exported.meta["note"] == "test"
    assert validate_stacks(exported, data)["val_dice"] == pytest.approx(state["curve"][-1]["val_dice"], abs=1e-5)
    assert _script().main(args[:-4] + ["--network", "npc3d", "--out", str(tmp_path / "bad")]) == 2  # a one-line error


def test_trainable_context_trains_the_heads_and_freezes_the_shared_2d_part(pack_file, tmp_path):  # noqa: F811
    out = tmp_path / "run"
    args = ["train", "--pack", str(pack_file), "--out", str(out), "--device", "cpu", "--max-epochs", "1", "--stacks-per-batch", "2",
            "--timing-steps", "1", "--val-every", "1", "--network", "slice_context", "--trainable", "context", "--network-args",
            json.dumps({**TINY, "context_channels": 8}), "--seed", "3"]
    assert _script().main(args) == 0
    state = torch.load(out / "checkpoint.pt", weights_only=True)
    torch.manual_seed(3)  # the run's initial weights
    start = build_network(StackTrainingConfig(pack="-", out_dir="-", architecture="slice_context",
                                              network={**TINY, "context_channels": 8})).state_dict()
    moved = {k: float((v - start[k]).abs().max()) for k, v in state["model"].items() if v.is_floating_point()}
    assert all(v == 0.0 for k, v in moved.items() if k.startswith("npc.")), moved  # the shared 2-D part: frozen
    assert max(v for k, v in moved.items() if k.startswith("context.")) > 1e-4  # the heads: trained
    with pytest.raises(ValueError, match="trainable"):
        StackTrainingConfig(pack="-", out_dir="-", trainable="context")  # npc2d has no heads


def test_save_and_load_round_trip_and_register_takes_it_as_a_stack_network(tmp_path):
    from monai_npc.apps.registration.models import is_stack_network, resolve_model

    torch.manual_seed(4)
    net = SliceContextNPC.from_npc(NPCNet(**TINY), context_channels=4).eval()
    torch.nn.init.normal_(net.context[0].out.weight, std=0.1)
    path = save_pretrained(net, tmp_path / "ctx.pt", {"preprocessing": "minmax"})
    loaded = load_pretrained(path)
    pair, _, _ = _two_stacks(4, 24)
    with torch.no_grad():
        torch.testing.assert_close(loaded(pair[:4]), net(pair[:4]), rtol=0, atol=0)
    resolved, _ = resolve_model(str(path))  # register's model step (tests/test_register_stack_net.py runs it)
    assert isinstance(resolved, SliceContextNPC) and is_stack_network(resolved)
    refining, _ = resolve_model(str(path), refine_iterations=5)  # the refinement register runs on the 3-D field
    assert refining.refiner.iterations == 5 and refining.config["refine_iterations"] == 5
    with torch.no_grad():  # forward is the network's field: the refinement is register's
        torch.testing.assert_close(refining(pair[:4]), net(pair[:4]), rtol=0, atol=0)
    with pytest.raises(ValueError, match="flip_ensemble"):  # a 2-D test-time option it has no counterpart of
        load_pretrained(path, flip_ensemble=2)


def test_labels_beyond_a_stack_are_background_as_the_written_transform_carries_them():
    """``through_padding="zeros"``: nearest neighbour reads the end slice within half a slice of the stack and nothing
    beyond (ITK's resampling of a label through transform.h5), linear fades to zero over one slice, never another
    stack's slices; the image padding ("border") replicates the end slices."""
    group = torch.tensor([0] * 4 + [1] * 2)
    label = torch.tensor([1.0, 2, 3, 4, 10, 11]).view(6, 1, 1, 1).expand(6, 1, 3, 3).contiguous()

    def warp(dz: float, mode: str, padding: str) -> list:
        ddf = torch.zeros(6, 3, 3, 3)
        ddf[:, 0] = dz
        return warp_stack_slices(label, ddf, group, 2, mode, padding)[:, 0, 1, 1].tolist()

    assert warp(-0.3, "nearest", "zeros") == [1.0, 2.0, 3.0, 4.0, 10.0, 11.0]
    assert warp(-0.7, "nearest", "zeros") == [0.0, 1.0, 2.0, 3.0, 0.0, 10.0]
    assert warp(1.2, "nearest", "zeros") == [2.0, 3.0, 4.0, 0.0, 11.0, 0.0]
    assert warp(-0.7, "nearest", "border") == [1.0, 1.0, 2.0, 3.0, 10.0, 10.0]
    assert warp(-0.25, "bilinear", "zeros")[0] == pytest.approx(0.75) and warp(-2.0, "bilinear", "zeros")[0] == 0.0
    with pytest.raises(ValueError, match="through_padding"):
        warp(0.0, "nearest", "reflect")


def test_the_dice_term_can_clear_a_basal_slice_by_reading_above_the_stack():
    """A fixed stack whose first (basal) slice has lost its label, the moving one labelled on every slice: the soft 3-D
    Dice improves as the first slice's through-plane displacement goes up out of the stack (it has a gradient there),
    where replicating the first slice (the image padding) could not change it."""
    z, size = 4, 16
    moving = torch.zeros(z, 1, size, size)
    moving[:, :, 4:12, 4:12] = 3
    fixed = moving.clone()
    fixed[0] = 0
    group = torch.zeros(z, dtype=torch.int64)
    loss = StackDiceLoss((3,))
    up = torch.zeros(z, 3, size, size)
    up[0, 0] = -1.0
    for start in (0.0, 0.2):  # from no through-plane motion (an integer coordinate: the loss's central derivative) too
        ddf = (start * up).requires_grad_()
        (grad,) = torch.autograd.grad(loss(moving, fixed, ddf, group, 1), ddf)
        assert float(grad[0, 0].sum()) > 0.03  # lowering slice 0's through-plane coordinate lowers the loss
        (border,) = torch.autograd.grad(_border_dice(moving, fixed, ddf, group), ddf)
        assert float(border[0, 0].abs().sum()) < 1e-6  # the image padding: slice 0 read above the stack is slice 0
    assert float(loss(moving, fixed, up, group, 1)) < 1e-3 < float(loss(moving, fixed, torch.zeros_like(up), group, 1))


def _border_dice(moving: torch.Tensor, fixed: torch.Tensor, ddf: torch.Tensor, group: torch.Tensor) -> torch.Tensor:
    """1 - the soft Dice of value 3 with the moving mask warped with the image padding (the first slice replicated)."""
    warped = warp_stack_slices((moving == 3).float(), ddf, group, 1)
    target = (fixed == 3).float()
    return 1 - 2 * (warped * target).sum() / (warped.sum() + target.sum())


def test_the_heads_learn_at_their_own_rate_when_asked():
    """parameter_groups: one group for npc2d; for a slice-context network the 2-D part at the rate and the heads at
    context_lr_scale times it (every parameter in exactly one group); the epoch's rate reaches both."""
    from monai_npc.engines.stack_optim import group_rates, parameter_groups

    plain = NPCNet(**TINY)
    assert [g["lr_scale"] for g in parameter_groups(plain, "all", 5.0)] == [1.0]
    net = SliceContextNPC.from_npc(NPCNet(**TINY), context_channels=4)
    groups = parameter_groups(net, "all", 5.0)
    assert [g["lr_scale"] for g in groups] == [1.0, 5.0]
    assert sum(len(g["params"]) for g in groups) == len(list(net.parameters()))
    assert {id(p) for p in groups[1]["params"]} == {id(p) for p in net.context.parameters()}
    opt = torch.optim.AdamW(groups, lr=1.0)
    group_rates(opt, 2e-4)
    assert [g["lr"] for g in opt.param_groups] == [pytest.approx(2e-4), pytest.approx(1e-3)]
    with pytest.raises(ValueError, match="context_lr_scale"):
        StackTrainingConfig(pack="-", out_dir="-", architecture="slice_context", context_lr_scale=0.0)
