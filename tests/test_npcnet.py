"""NPCNet and its blocks: shapes, gradients, the ODE's re-evaluation, TorchScript, bad input."""

import io

import json

import pytest
import torch

from monai_npc.functional import warp_image
from monai_npc.networks.blocks import (
    MiniUNetHead,
    NPCStage,
    PairedFilterBank,
    PairInteraction,
    PositionalEncodingDecoder,
    ResidualTopKMask,
    Warp,
    WarpODE,
    split_steps,
)
from monai_npc.networks.nets import ACDC_CONFIG, CAMUS_CONFIG, NPCNet

SMALL = dict(kernel_size=8, stride=4, num_pairs=16, top_k=8, gate_dim=32, hidden_dim=32, num_pe=32, num_steps=3)


def count(net):
    return sum(p.numel() for p in net.parameters())


def test_acdc_configuration_parameter_count_matches_paper():
    net = NPCNet()
    assert {k: getattr(net.ode.stages[0].filters, "kernel_size") for k in ["kf"]} == {"kf": ACDC_CONFIG["kernel_size"]}
    n = count(net)
    assert abs(n - 0.32e6) / 0.32e6 < 0.10, n  # paper: 0.32 M
    assert net.ode.num_steps == 10 and net.ode.stages[0].mask.top_k == 64


def test_camus_cascade_configuration():
    net = NPCNet(**CAMUS_CONFIG)
    assert net.ode.steps_per_stage == [5, 5]
    assert [s.filters.kernel_size for s in net.ode.stages] == [64, 32]
    assert [s.filters.stride for s in net.ode.stages] == [8, 4]
    out = net(torch.rand(1, 2, 128, 128))
    assert out.shape == (1, 2, 128, 128)


def test_blocks_shapes():
    bank = PairedFilterBank(2, 16, 8, 4)
    a, b = bank(torch.rand(2, 1, 40, 32), torch.rand(2, 1, 40, 32))
    assert a.shape == b.shape == (2, 2, 16, 10, 8)
    feats, res = PairInteraction()(a, b)
    assert feats.shape == (2, 3, 16, 10, 8) and res.shape == (2, 16, 10, 8)
    mask, threshold = ResidualTopKMask(4)(res)
    assert torch.allclose(mask.sum(1), torch.full((2, 10, 8), 4.0), atol=1e-3)
    assert threshold.shape == (2, 1, 10, 8)
    warm, _ = ResidualTopKMask(4)(res, threshold + 0.05)  # warm start from a nearby threshold
    assert torch.allclose(warm, mask, atol=1e-3)
    dec = PositionalEncodingDecoder(2, 16, 32, 32, 32)
    gamma, gate = dec.encoding([10, 8], a)
    assert gamma.shape == (1, 32, 10, 8) and gate.shape == (1, 32, 10, 8)
    assert dec(feats.flatten(1, 2), gamma, gate).shape == (2, 2, 10, 8)
    assert MiniUNetHead(3, 8, 3)(torch.rand(1, 8, 6, 6, 6)).shape == (1, 3, 6, 6, 6)
    assert Warp()(torch.rand(1, 1, 9, 9), torch.zeros(1, 2, 9, 9)).shape == (1, 1, 9, 9)
    assert split_steps(10, 2) == [5, 5] and split_steps(7, 2) == [4, 3]
    ode = WarpODE([torch.nn.Identity(), torch.nn.Identity()], 10)
    ode.set_steps(5)
    assert ode.steps_per_stage == [3, 2] and ode.num_steps == 5
    ode.set_steps([1, 4])
    assert ode.steps_per_stage == [1, 4] and ode.num_steps == 5
    with pytest.raises(ValueError, match="must be >= number of stages"):
        ode.set_steps(1)
    with pytest.raises(ValueError, match="does not give >= 1 step"):
        ode.set_steps([3, 0])


@pytest.mark.parametrize("dims,head", [(2, "unet"), (2, "linear"), (3, "unet"), (1, "linear")])
def test_decoder_folded_head_matches_the_paper_equation(dims, head):
    """forward folds the head's first layer into MLP_pe's last one; reference_forward forms delta_gamma."""
    torch.manual_seed(dims)
    dec = PositionalEncodingDecoder(dims, 8, 16, 12, 12 * dims, head=head)
    for p in dec.parameters():  # away from the near-zero initial output layer, so the head matters
        torch.nn.init.normal_(p, std=0.2)
    grid = [7, 6, 5][:dims]
    features = torch.randn(2, 24, *grid)
    gamma, gate = dec.encoding(grid, features)
    out, ref = dec(features, gamma, gate), dec.reference_forward(features, gamma, gate)
    assert out.shape == ref.shape == (2, dims, *grid)
    assert ref.abs().max() > 0.1
    assert (out - ref).abs().max() <= 1e-5 * ref.abs().max()  # float rounding only
    scripted = torch.jit.script(dec)
    assert (scripted(features, gamma, gate) - out).abs().max() <= 1e-6 * out.abs().max()


def test_filters_are_unit_norm_at_use_time():
    bank = PairedFilterBank(2, 4, 8, 4, init="random")
    with torch.no_grad():
        bank.psi.mul_(5.0)
    img = torch.rand(1, 1, 16, 16)
    ref = PairedFilterBank(2, 4, 8, 4, init="random")
    ref.load_state_dict(bank.state_dict())
    with torch.no_grad():
        ref.psi.div_(5.0)
    assert torch.allclose(bank.moving_responses(img), ref.moving_responses(img), atol=1e-5)


def test_output_shape_and_gradients_reach_every_parameter():
    net = NPCNet(**SMALL)
    with torch.no_grad():  # leave the near-zero output init so every path carries gradient
        for s in net.ode.stages:
            s.decoder.head.out.weight.normal_(std=0.1)
    x = torch.rand(2, 2, 32, 32)
    ddf = net(x)
    assert ddf.shape == (2, 2, 32, 32)
    (ddf**2).mean().backward()
    missing = [n for n, p in net.named_parameters() if p.grad is None or not torch.isfinite(p.grad).all() or p.grad.abs().sum() == 0]
    assert not missing, missing


def test_ode_re_evaluates_model_against_progressively_warped_image():
    net = NPCNet(**dict(SMALL, num_steps=4))
    with torch.no_grad():
        for s in net.ode.stages:
            s.decoder.head.out.weight.normal_(std=0.5)
    seen = []
    net.ode.stages[0].register_forward_hook(lambda mod, inp, out: seen.append(inp[0].detach().clone()))
    moving, fixed = torch.rand(1, 1, 32, 32), torch.rand(1, 1, 32, 32)
    _, ddf, diag = net.register(moving, fixed, return_diagnostics=True)
    assert len(seen) == 4 and len(diag) == 4
    assert torch.equal(seen[0], moving)
    for i in range(1, 4):
        expected = warp_image(moving, diag[i - 1]["ddf"])
        assert torch.allclose(seen[i], expected, atol=1e-6)
        assert not torch.allclose(seen[i], seen[i - 1])  # the field moved between steps
    assert torch.equal(diag[-1]["ddf"], ddf.detach())
    assert diag[0]["residual"].shape == (1, 16, 8, 8) and diag[0]["mask"].shape == (1, 16, 8, 8)


def test_cascade_runs_stages_in_order():
    net = NPCNet(**dict(SMALL, stages=[{"kernel_size": 16, "stride": 8, "num_steps": 2}, {"num_steps": 3}]))
    calls = []
    for i, s in enumerate(net.ode.stages):
        s.register_forward_hook(lambda mod, inp, out, i=i: calls.append(i))
    _, _, diag = net.register(torch.rand(1, 1, 32, 32), torch.rand(1, 1, 32, 32), True)
    assert calls == [0, 0, 1, 1, 1]
    assert [int(d["stage"]) for d in diag] == calls
    assert diag[0]["residual"].shape[-1] == 4 and diag[-1]["residual"].shape[-1] == 8


@pytest.mark.parametrize("value", [0.0, 0.7])
def test_constant_images_give_finite_output_and_gradients(value):
    net = NPCNet(**SMALL)
    x = torch.full((1, 2, 32, 32), value, requires_grad=True)
    ddf = net(x)
    assert torch.isfinite(ddf).all()
    ddf.sum().backward()
    assert torch.isfinite(x.grad).all()
    assert all(torch.isfinite(p.grad).all() for p in net.parameters() if p.grad is not None)


def test_one_flat_image_against_textured_gives_finite_gradients():
    net = NPCNet(**SMALL)
    x = torch.cat([torch.zeros(1, 1, 32, 32), torch.rand(1, 1, 32, 32)], 1).requires_grad_(True)
    net(x).pow(2).sum().backward()
    assert torch.isfinite(x.grad).all()


def test_torchscript_round_trip_and_trace():
    net = NPCNet(**SMALL).eval()
    x = torch.rand(2, 2, 32, 32)
    ref = net(x)
    buf = io.BytesIO()
    torch.jit.save(torch.jit.script(net), buf)
    buf.seek(0)
    loaded = torch.jit.load(buf)
    assert torch.allclose(loaded(x), ref, atol=1e-6)
    traced = torch.jit.trace(net, x, check_trace=False)
    assert torch.allclose(traced(x), ref, atol=1e-6)
    assert torch.jit.script(Warp())(x[:, :1], ref).shape == (2, 1, 32, 32)


def test_bad_input_raises_clear_errors():
    net = NPCNet(**SMALL)
    with pytest.raises(ValueError, match="2 channels"):
        net(torch.rand(1, 3, 32, 32))
    with pytest.raises(ValueError, match="spatial dims"):
        net(torch.rand(1, 2, 32, 32, 32))
    bad = torch.rand(1, 2, 32, 32)
    bad[0, 1, 3, 3] = float("nan")
    with pytest.raises(ValueError, match="NaN"):
        net(bad)
    with pytest.raises(ValueError, match="spatial size"):
        net(torch.rand(1, 2, 2, 32))
    with pytest.raises(ValueError, match="unknown stage option"):
        NPCNet(stages=[{"kernel": 3}])
    with pytest.raises(ValueError, match="num_pe"):
        NPCNet(num_pe=250)
    with pytest.raises(ValueError, match="head"):
        NPCNet(head="mlp")
    with pytest.raises(ValueError, match="empty batch"):
        net(torch.rand(0, 2, 32, 32))
    with pytest.raises(ValueError, match="real-valued"):
        net(torch.rand(1, 2, 32, 32) > 0.5)


def test_float64_and_integer_images_are_cast():
    net = NPCNet(**SMALL).eval()
    x = torch.rand(1, 2, 32, 32)
    with torch.no_grad():
        ref = net(x)
        assert net(x.double()).dtype == torch.float32
        torch.testing.assert_close(net(x.double()), ref)
        pixels = (x * 255).round().to(torch.uint8)
        torch.testing.assert_close(net(pixels), net(pixels.float()))
        _, ddf, _ = net.register(x[:, :1].double(), x[:, 1:].double())
        torch.testing.assert_close(ddf, ref)
        assert net.double()(x).dtype == torch.float64  # a float64 network takes float32 input too


def test_unmasked_model_uses_every_pair():
    net = NPCNet(**dict(SMALL, top_k=16))
    _, _, diag = net.register(torch.rand(1, 1, 32, 32), torch.rand(1, 1, 32, 32), True)
    assert torch.equal(diag[0]["mask"], torch.ones_like(diag[0]["mask"]))


def test_identity_pair_gives_zero_residual_with_fourier_init():
    """Both banks start equal, so an image registered to itself has r = 0 at every pair and location."""
    net = NPCNet(**SMALL)
    img = torch.rand(1, 1, 32, 32)
    _, _, diag = net.register(img, img, True)
    assert diag[0]["residual"].abs().max() < 1e-8


def test_three_dimensional_network():
    net = NPCNet(spatial_dims=3, kernel_size=4, stride=2, num_pairs=8, top_k=4, gate_dim=8, hidden_dim=8, num_pe=12, num_steps=2)
    assert net(torch.rand(1, 2, 8, 8, 8)).shape == (1, 3, 8, 8, 8)


def test_save_and_load_pretrained_round_trip(tmp_path):
    from monai_npc.networks.nets import load_pretrained, save_pretrained
    from monai_npc.serialization import state_dict_sha256

    net = NPCNet(**dict(SMALL, stages=[{"kernel_size": 16, "stride": 8, "num_steps": 1}, {"num_steps": 2}])).eval()
    path = save_pretrained(net, tmp_path / "m.pt", meta={"note": "test"})
    loaded = load_pretrained(path)
    x = torch.rand(1, 2, 32, 32)
    assert torch.allclose(loaded(x), net(x))
    assert loaded.meta == {"note": "test", "weights_sha256": state_dict_sha256(net.state_dict())}
    assert loaded.config == net.config
    assert load_pretrained(path, num_steps=5).ode.num_steps == 3  # per-stage steps win over num_steps
    with pytest.raises(FileNotFoundError, match="no shipped weights named 'no_such_model'; a model may be a shipped name"):
        load_pretrained("no_such_model")
    for empty in ("", "  "):
        with pytest.raises(ValueError, match="the model argument is empty; a model may be"):
            load_pretrained(empty)
    with pytest.raises(FileNotFoundError, match="is a folder but not a MONAI bundle.*a model may be"):
        load_pretrained(tmp_path)
    (tmp_path / "empty.pt").write_bytes(b"")
    with pytest.raises(ValueError, match="empty.pt is empty"):
        load_pretrained(tmp_path / "empty.pt")
    (tmp_path / "bad.pt").write_bytes(b"not a checkpoint")
    with pytest.raises(ValueError, match="cannot read"):
        load_pretrained(tmp_path / "bad.pt")


def reference_stage_velocity(stage, moving, fixed):
    """The straightforward NPC step: strided convolution with explicit patch standardisation,
    separate interaction / polar / residual functions, a bisection top-K, NCHW everywhere."""
    import math

    import torch.nn.functional as F

    from monai_npc.functional import pair_interaction, pair_residual, polar_features, positional_encoding, same_padding, unit_normalize_filters

    bank = stage.filters

    def responses(img, filters):
        k, s = bank.kernel_size, bank.stride
        padded = F.pad(img, same_padding(k, s, 2), mode=bank.padding_mode)
        w = unit_normalize_filters(filters)  # (C, 2, k, k)
        out = []
        for j in range(2):
            raw = F.conv2d(padded, w[:, j : j + 1], stride=s)
            mean = F.avg_pool2d(padded, k, s)
            var = (F.avg_pool2d(padded**2, k, s) - mean**2).clamp(min=0)
            out.append((raw - mean * w[:, j].sum((-1, -2)).view(1, -1, 1, 1)) / torch.sqrt(var + bank.eps))
        return torch.stack(out, 2)  # (B, C, 2, g, g)

    a, b = responses(moving, bank.psi), responses(fixed, bank.phi)
    feats = polar_features(pair_interaction(a, b, 2), 2, eps=1e-12)  # (B, C, 3, g, g)
    _, res = pair_residual(a, b, 2, eps=1e-6)
    tau, k = stage.mask.temperature, stage.mask.top_k
    lo, hi = res.amin(1, keepdim=True) - 20, res.amax(1, keepdim=True) + 20
    for _ in range(60):
        mid = 0.5 * (lo + hi)
        below = torch.sigmoid((mid - res) / tau).sum(1, keepdim=True) < k
        lo, hi = torch.where(below, mid, lo), torch.where(below, hi, mid)
    mask = torch.sigmoid((0.5 * (lo + hi) - res) / tau)
    feats = (feats * mask.unsqueeze(2)).transpose(1, 2).flatten(1, 2)  # channel j * C + k
    dec = stage.decoder
    gamma = positional_encoding(list(a.shape[-2:]), dec.num_pe).unsqueeze(0)
    delta = dec.mlp_pe(dec.mlp_z(feats) * dec.w_gamma(gamma)) - gamma
    coarse = dec.head(delta)
    return F.interpolate(coarse, size=moving.shape[2:], mode="bilinear", align_corners=False), res, mask


def test_fast_stage_matches_the_straightforward_reference():
    net = NPCNet(**dict(SMALL, num_pairs=16, top_k=8))
    stage = net.ode.stages[0]
    with torch.no_grad():
        stage.decoder.head.out.weight.normal_(std=0.2)
        stage.filters.psi.add_(0.3 * torch.randn_like(stage.filters.psi))
    moving, fixed = torch.rand(2, 1, 32, 32), torch.rand(2, 1, 32, 32)
    with torch.no_grad():
        ref_v, ref_r, ref_m = reference_stage_velocity(stage, moving, fixed)
        v, r, m, _ = stage(moving, *stage.prepare(fixed))
    assert torch.allclose(r, ref_r, rtol=1e-3, atol=1e-4)
    assert torch.allclose(m, ref_m, atol=1e-3)
    assert torch.allclose(v, ref_v, rtol=1e-3, atol=1e-5)


def test_warm_started_top_k_gives_the_same_field():
    net = NPCNet(**dict(SMALL, num_steps=4))
    with torch.no_grad():
        net.ode.stages[0].decoder.head.out.weight.normal_(std=0.3)
    x = torch.rand(2, 2, 32, 32)
    warm = net(x)
    net.ode.stages[0].mask.warm_start = False
    cold = net(x)
    assert torch.allclose(warm, cold, atol=1e-4)


def test_shipped_acdc_model_registers_a_cardiac_phantom():
    from monai_npc.data.phantoms import cardiac_pair
    from monai_npc.metrics import dice_per_structure
    from monai_npc.networks.nets import available_models, load_pretrained

    assert "acdc" in available_models()
    net = load_pretrained("acdc", num_steps=4)
    assert sum(p.numel() for p in net.parameters()) == 1_039_268  # 0.4.0: the two-stage cascade
    test = net.meta["heldout_test"]
    assert test["n_pairs"] == 282 and test["npc+refine"]["dice_mean"] > test["demons"]["dice_mean"]
    p = cardiac_pair(128, seed=7)
    m, f = torch.tensor(p["moving"])[None, None], torch.tensor(p["fixed"])[None, None]
    ml, fl = torch.tensor(p["moving_label"])[None, None].float(), torch.tensor(p["fixed_label"])[None, None].float()
    with torch.no_grad():
        ddf = net(torch.cat([m, f], 1))
    before = dice_per_structure(ml, fl).nanmean()
    after = dice_per_structure(warp_image(ml, ddf, "nearest"), fl).nanmean()
    assert after > before + 0.15, (before, after)


def test_model_resolution_bundle_folder_and_state_dict(tmp_path):
    """A bundle folder, its models/model.pt and the exported named file give the same network."""
    import json
    import shutil

    from monai_npc.networks.nets import bundle_network_config, export_bundle_weights, load_pretrained

    bundle = tmp_path / "my bundle"  # a space in the path on purpose
    (bundle / "configs").mkdir(parents=True)
    (bundle / "models").mkdir()
    cfg = {"num_steps": 3, "network_def": {"_target_": "monai_npc.networks.nets.NPCNet", "num_steps": "@num_steps",
                                           **{k: v for k, v in SMALL.items() if k != "num_steps"}}}
    (bundle / "configs" / "inference.json").write_text(json.dumps(cfg))
    (bundle / "configs" / "metadata.json").write_text(json.dumps({
        "version": "9.9.9", "name": "tiny", "changelog": {"9.9.9": "trained on nothing"},
        "network_data_format": {"inputs": {"image": {"spatial_shape": [32, 32]}}},
    }))
    net = NPCNet(**dict(SMALL, num_steps=3)).eval()
    torch.save(net.state_dict(), bundle / "models" / "model.pt")
    assert bundle_network_config(bundle) == dict(SMALL, num_steps=3)
    x = torch.rand(1, 2, 32, 32)
    with torch.no_grad():
        ref = net(x)
        for spec in (bundle, str(bundle / "models" / "model.pt")):
            loaded = load_pretrained(spec)
            torch.testing.assert_close(loaded(x), ref)
            assert loaded.meta["version"] == "9.9.9" and loaded.meta["input_size"] == 32
        out = export_bundle_weights(bundle, tmp_path / "named.pt", {"trained_on": "phantoms"})
        named = load_pretrained(out)
        torch.testing.assert_close(named(x), ref)
    assert named.meta["trained_on"] == "phantoms" and named.meta["changelog"] == "trained on nothing"
    assert named.meta["bundle"] == "my bundle" and named.config["num_steps"] == 3
    # a bare state dict outside a bundle has no configuration: say so
    shutil.copy(bundle / "models" / "model.pt", tmp_path / "loose.pt")
    with pytest.raises(ValueError, match="bare state dict without its network configuration.*export_bundle_weights.py"):
        load_pretrained(tmp_path / "loose.pt")
    # ... and a training's weights or checkpoint written outside the bundle export with its network_def
    other = NPCNet(**dict(SMALL, num_steps=3)).eval()
    torch.save({"model": other.state_dict(), "optimizer": {}, "trainer": {"epoch": 1}}, tmp_path / "checkpoint_epoch=1.pt")
    for weights in (tmp_path / "loose.pt", tmp_path / "checkpoint_epoch=1.pt"):
        exported = load_pretrained(export_bundle_weights(bundle, tmp_path / "exported.pt", weights=weights))
        source = net if weights.name == "loose.pt" else other
        with torch.no_grad():
            torch.testing.assert_close(exported(x), source(x))
        assert exported.meta["network_def_version"] == "9.9.9" and "version" not in exported.meta
        assert exported.meta["weights_file"] == str(weights.resolve())


def test_camus_is_a_named_model_equal_to_the_bundle():
    from monai_npc.networks.nets import available_models, load_pretrained
    from monai_npc.networks.nets.pretrained import BUNDLES_DIR

    assert {"acdc", "camus"} <= set(available_models())
    camus = load_pretrained("camus")
    version = json.loads((BUNDLES_DIR / "npc_camus" / "configs" / "metadata.json").read_text())["version"] if BUNDLES_DIR.is_dir() else "0.4.0"
    assert camus.meta["version"] == version and "real CAMUS" in camus.meta["trained_on"]
    assert len(camus.ode.stages) == 2 and camus.meta["input_size"] == 128
    bundle = BUNDLES_DIR / "npc_camus"
    if not bundle.is_dir():
        pytest.skip("bundles/ is only in a clone")
    from_bundle = load_pretrained(bundle)
    for (name, a), b in zip(camus.state_dict().items(), from_bundle.state_dict().values()):
        assert torch.equal(a, b), name  # camus.pt is an export of the shipped bundle weights
    assert from_bundle.config == camus.config


def test_network_field_is_register_before_its_refinement():
    """``register(field=network_field(...))`` is ``register`` (the refinement starts from the network's own field, so a
    caller that looks at that field first pays no second pass); without refinement steps it is that field."""
    net = NPCNet(**dict(SMALL, refine_iterations=3)).eval()
    net.set_flip_ensemble(2)
    g = torch.Generator().manual_seed(0)
    m, f = torch.rand(2, 1, 32, 32, generator=g), torch.rand(2, 1, 32, 32, generator=g)
    with torch.no_grad():
        ddf, diagnostics = net.network_field(m, f, True)
        assert ddf.shape == (2, 2, 32, 32) and len(diagnostics) == SMALL["num_steps"]
        assert torch.allclose(ddf, net._integrate_ensemble(m, f))
    warped, refined, diag = net.register(m, f, True)
    warped2, refined2, diag2 = net.register(m, f, True, field=(ddf, diagnostics))
    assert torch.equal(refined, refined2) and torch.equal(warped, warped2)
    assert not torch.equal(refined, ddf)  # three refinement steps moved it
    assert all(torch.equal(a["residual"], b["residual"]) for a, b in zip(diag, diag2))


def test_a_contrast_inverted_image_gives_the_field_of_the_uninverted_pair():
    from monai_npc.data.phantoms import cardiac_pair
    from monai_npc.networks.nets import load_pretrained

    p = cardiac_pair(128, seed=3)
    m, f = torch.tensor(p["moving"])[None, None], torch.tensor(p["fixed"])[None, None]
    net = load_pretrained("acdc", num_steps=4).eval()
    with torch.no_grad():
        ddf = net.network_field(m, f)[0]
        for moving, fixed in ((m, f.max() - f), (1.5 - m, f)):  # either image inverted
            # equal up to float rounding through the ODE (adding an offset alone moves it by up to 0.006 voxels)
            error = (net.network_field(moving, fixed)[0] - ddf).abs()
            assert float(error.max()) < 0.05 and float(error.mean()) < 1e-3
        net.ode.match_polarity = False  # the paper's interaction: a wrong, large field (4.8 voxels off on average)
        assert float((net.network_field(m, f.max() - f)[0] - ddf).abs().mean()) > 1.0


def test_polarity_is_decided_per_batch_item_by_the_low_frequency_correlation():
    from monai_npc.functional import contrast_polarity

    torch.manual_seed(0)
    x = torch.nn.functional.avg_pool2d(torch.rand(3, 1, 64, 64), 9, 1, 4)  # organ-sized structure
    y = torch.roll(x, 2, -1) + 0.02 * torch.randn_like(x)  # the same anatomy, moved a little
    assert contrast_polarity(x, torch.cat([y[:1], 1 - y[1:2], y[2:]])).tolist() == [1.0, -1.0, 1.0]
    # a k-space spike's stripes (beyond the band) twice the image's range, in opposite phases in the two images
    rows, cols = torch.meshgrid(torch.arange(64.0), torch.arange(64.0), indexing="ij")
    stripes = lambda phase: 2 * (x.amax() - x.amin()) * torch.cos(2 * torch.pi * (0.25 * rows + 0.17 * cols) + phase)
    assert float(((x + stripes(0.0)) * (y + stripes(torch.pi))).mean() - (x + stripes(0.0)).mean() * (y + stripes(torch.pi)).mean()) < 0
    assert contrast_polarity(x + stripes(0.0), y + stripes(torch.pi)).tolist() == [1.0, 1.0, 1.0]
    assert contrast_polarity(torch.ones(2, 1, 8, 8), torch.ones(2, 1, 8, 8)).tolist() == [1.0, 1.0]  # no vote: +1
    assert contrast_polarity(x[..., :32].unsqueeze(-1).expand(-1, -1, -1, -1, 4), 1 - x[..., :32].unsqueeze(-1).expand(-1, -1, -1, -1, 4)).tolist() == [-1.0] * 3  # 3-D
