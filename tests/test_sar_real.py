"""Real-scene SAR pairs (issue 14): known warps, the train / test split, the benchmark's metrics and baselines,
and NPCNet's phase-correlation initialisation. Tests that read ../shared/data/sar_real skip without it."""

import numpy as np
import pytest
import torch
from scipy import ndimage

from monai_npc.cli.main import main
from monai_npc.extras.sar.bench_real import pair_errors, skimage_phase_correlation
from monai_npc.extras.sar.real import (
    DEFAULT_ROOT, JEDDAH_COLUMNS, SCENES, RealPairSampler, Source, benchmark_pairs, make_real_pair, random_displacement,
    read_scenes, resample_date, split_sources,
)
from monai_npc.functional.phase_correlation import phase_correlation
from monai_npc.functional.warp import warp_image
from monai_npc.networks.nets import NPCNet, load_pretrained, save_pretrained

SHAPES = {"ottawa": (350, 290), "farmland": (291, 306), "yellow_river": (289, 257), "wenchuan": (301, 442), "jeddah_s1": (512, 1030)}


def _textured(shape, seed=0, sigma=2.0):
    rng = np.random.default_rng(seed)
    return np.exp(ndimage.gaussian_filter(rng.standard_normal(shape), sigma) * 3).astype(np.float32)


@pytest.fixture(scope="module")
def fake_scenes():
    """Scenes with the real sizes and date counts, smooth random content (no shared data needed)."""
    out = {}
    for i, (name, (files, gt, _)) in enumerate(SCENES.items()):
        dates = [_textured(SHAPES[name], 10 * i + k) for k in range(len(files))]
        change = None if gt is None else np.zeros(SHAPES[name], bool)
        out[name] = {"name": name, "dates": dates, "change": change}
    return out


def test_random_displacement_ranges():
    rng = np.random.default_rng(0)
    for _ in range(5):
        ddf = random_displacement((256, 256), rng, max_shift=8.0, nonrigid=3.0)
        assert ddf.shape == (2, 256, 256) and ddf.dtype == np.float32
        # the global part is the per-axis mean of the noise-free shift, within +-8 px (noise mean is small)
        assert np.all(np.abs(ddf.reshape(2, -1).mean(1)) < 8.5)
        nonrigid = ddf - ddf.reshape(2, -1).mean(1)[:, None, None]
        peak = np.sqrt((nonrigid**2).sum(0)).max()
        assert 0.3 < peak < 3.0 * 2  # peak of the non-rigid part (around its own mean) ~ 0.75..3 px
    zero = random_displacement((64, 64), rng, 0.0, 0.0)
    assert np.abs(zero).max() == 0.0


def test_resampled_date_follows_the_warp_convention():
    image = _textured((300, 300), 3)
    ddf = random_displacement((256, 256), np.random.default_rng(1), 6.0, 3.0)
    moving = resample_date(image, (20, 30), ddf)
    back = warp_image(torch.from_numpy(moving)[None, None].double(), torch.from_numpy(ddf)[None].double(), "bilinear", "border")[0, 0].numpy()
    crop = image[20:276, 30:286]
    inner = (slice(24, -24),) * 2
    assert np.corrcoef(back[inner].ravel(), crop[inner].ravel())[0, 1] > 0.99  # moving(x + ddf(x)) = date(x)
    assert np.corrcoef(moving[inner].ravel(), crop[inner].ravel())[0, 1] < 0.9  # and the warp is not trivial


def test_split_is_disjoint_and_fixed(fake_scenes):
    test, train = split_sources("test", fake_scenes), split_sources("train", fake_scenes)
    assert len(test) == 40 and len(train) == 40 and len(set(test)) == 40
    assert {s.scene for s in test} == {"ottawa", "yellow_river", "jeddah_s1"}
    assert {s.scene for s in train} == {"farmland", "wenchuan", "jeddah_s1"}
    reach = 13  # 8 px shift + 3 px non-rigid + the cubic spline's 2 px support
    for s in test:
        if s.scene == "jeddah_s1":
            assert 4 in (s.a, s.b) and s.origin[1] - reach > JEDDAH_COLUMNS["train"][1] - 1 + reach
    for s in train:
        if s.scene == "jeddah_s1":
            assert max(s.a, s.b) <= 3 and s.origin[1] + 256 <= JEDDAH_COLUMNS["train"][1]
    sampler = RealPairSampler(fake_scenes)
    rng = np.random.default_rng(0)
    for _ in range(200):
        s = sampler.source(rng)
        assert s.scene in ("farmland", "wenchuan", "jeddah_s1") and s.a != s.b
        if s.scene == "jeddah_s1":
            assert max(s.a, s.b) <= 3 and s.origin[1] + 256 <= JEDDAH_COLUMNS["train"][1]
    with pytest.raises(ValueError, match="split"):
        split_sources("val", fake_scenes)


def test_benchmark_pairs_are_reproducible(fake_scenes):
    src = split_sources("test", fake_scenes)[5]
    a, b = (make_real_pair(fake_scenes[src.scene], src, np.random.default_rng([3, 5])) for _ in range(2))
    assert np.array_equal(a["moving"], b["moving"]) and np.array_equal(a["ddf"], b["ddf"])
    p = make_real_pair(fake_scenes["ottawa"], Source("ottawa", 0, 1, (10, 20)), np.random.default_rng(0))
    assert p["fixed"].shape == p["moving"].shape == p["change"].shape == (256, 256)
    np.testing.assert_array_equal(p["fixed"], fake_scenes["ottawa"]["dates"][1][10:266, 20:276])
    with pytest.raises(ValueError, match="does not fit"):
        make_real_pair(fake_scenes["ottawa"], Source("ottawa", 0, 1, (200, 0)), np.random.default_rng(0))


def test_pair_errors_split_by_change_map():
    true = np.zeros((2, 64, 64), np.float32)
    ddf = torch.zeros(2, 64, 64)
    ddf[0, :32] = 1.0  # 1 px error in the top half
    change = np.zeros((64, 64), bool)
    change[:32] = True
    e = pair_errors(ddf, true, change, margin=8)
    assert e["epe_changed"] == pytest.approx(1.0) and e["epe_unchanged"] == pytest.approx(0.0)
    assert e["epe"] == pytest.approx(0.5)
    assert np.isnan(pair_errors(ddf, true, None, margin=8)["epe_changed"])


def test_skimage_baseline_sign_and_whitened_phase_correlation():
    image = np.log(_textured((128, 128), 5, sigma=1.0))
    fixed = image[10:110, 10:110]
    moving = image[13:113, 5:105]  # moving(x + (-3, 5)) = fixed(x)
    np.testing.assert_allclose(skimage_phase_correlation(moving, fixed)[:, 0, 0].numpy(), [-3.0, 5.0], atol=0.1)
    m, f = torch.from_numpy(moving)[None, None], torch.from_numpy(fixed)[None, None]
    for p in (1.0, 0.8, 0.0):
        np.testing.assert_allclose(phase_correlation(m, f, 10, window=0.25, whitening=p)[0].numpy(), [-3.0, 5.0], atol=0.15)
    with pytest.raises(ValueError, match="whitening"):
        phase_correlation(m, f, whitening=1.5)


def test_npcnet_phase_init_starts_from_the_global_shift(tmp_path):
    torch.manual_seed(0)
    small = dict(kernel_size=8, stride=4, num_pairs=4, top_k=2, gate_dim=8, hidden_dim=8, num_pe=8, num_steps=1, head_channels=4)
    net = NPCNet(**small, phase_init=0.25).eval()
    image = torch.from_numpy(np.log(_textured((96, 96), 7, sigma=1.0)))
    fixed, moving = image[8:72, 8:72][None, None].float(), image[14:78, 6:70][None, None].float()
    init = net.ode.initial_field(moving, fixed)
    assert init.shape == (1, 2, 64, 64)
    np.testing.assert_allclose(init[0, :, 0, 0].numpy(), [-6.0, 2.0], atol=0.15)
    assert torch.count_nonzero(NPCNet(**small).ode.initial_field(moving, fixed)) == 0  # default: start from zero
    with torch.no_grad():
        _, ddf, diag = net.register(moving, fixed, return_diagnostics=True)
    assert len(diag) == 1 and torch.isfinite(ddf).all()
    save_pretrained(net, tmp_path / "n.pt")
    assert load_pretrained(tmp_path / "n.pt").config["phase_init"] == 0.25


def _port_and_sea(seed, n=128, shift=(5, -3)):
    """Amplitudes ``(moving, fixed)``: 4 bright 3 x 3 scatterers that move by ``shift``
    (``moving(x + shift) = fixed(x)``) on a dim textured background that is unrelated between the dates
    (sea whose wind pattern changed). The texture dominates the log-amplitude spectrum, the scatterers the linear one."""
    from monai_npc.extras.sar.preprocess import sar_normalize

    rng = np.random.default_rng(seed)
    big, o = n + 40, 20
    sea = [np.exp(0.5 * ndimage.gaussian_filter(rng.standard_normal((big, big)), 1.5) / 0.2) for _ in range(2)]
    sea = [0.3 * t / np.median(t) for t in sea]
    pts = np.zeros((big, big))
    idx = rng.integers(0, big, (2, 4))
    pts[idx[0], idx[1]] = 1.0
    pts = 40.0 * ndimage.maximum_filter(pts, 3)
    fixed = sea[0][o:o + n, o:o + n] + pts[o:o + n, o:o + n]
    moving = sea[1][o:o + n, o:o + n] + pts[o - shift[0]:o - shift[0] + n, o - shift[1]:o - shift[1] + n]
    return tuple(torch.from_numpy(sar_normalize(a))[None, None] for a in (moving, fixed))


def test_start_candidates_pick_the_linear_amplitude_shift_where_log_phase_correlation_fails(tmp_path):
    from monai_npc.networks.blocks.warp_ode import candidate_shifts, select_shift

    for seed in (1, 4):  # the two of seeds 0-5 where the log-amplitude start fails
        moving, fixed = _port_and_sea(seed)
        cands = candidate_shifts(moving, fixed, 0.25, (0.0, 3.0))[0]
        assert float((cands[0] - torch.tensor([5.0, -3.0])).norm()) > 20  # log-amplitude: a spurious peak
        np.testing.assert_allclose(cands[1].numpy(), [5.0, -3.0], atol=0.15)  # exp(3 x) ~ linear amplitude
        np.testing.assert_allclose(select_shift(moving, fixed, cands[None].float(), 3.0)[0].numpy(), [5.0, -3.0], atol=0.15)
    # the network option: same start inside NPCNet, saved in its config; the single log start fails here
    small = dict(kernel_size=8, stride=4, num_pairs=4, top_k=2, gate_dim=8, hidden_dim=8, num_pe=8, num_steps=1, head_channels=4)
    net = NPCNet(**small, phase_init=0.25, phase_init_gains=(0.0, 3.0)).eval()
    np.testing.assert_allclose(net.ode.initial_field(moving, fixed)[0, :, 0, 0].numpy(), [5.0, -3.0], atol=0.15)
    assert float(NPCNet(**small, phase_init=0.25).ode.initial_field(moving, fixed)[0, :, 0, 0].norm()) > 20
    save_pretrained(net, tmp_path / "n.pt")
    loaded = load_pretrained(tmp_path / "n.pt")
    assert loaded.config["phase_init_gains"] == [0.0, 3.0] and loaded.ode.phase_init_gains == [0.0, 3.0]
    # where the log start is right (seed 0) the selection keeps the right shift
    moving, fixed = _port_and_sea(0)
    np.testing.assert_allclose(net.ode.initial_field(moving, fixed)[0, :, 0, 0].numpy(), [5.0, -3.0], atol=0.15)
    with pytest.raises(ValueError, match="phase_init_gains"):
        NPCNet(**small, phase_init=0.25, phase_init_gains=())


def test_phase_init_max_shift_rejects_a_far_spurious_start(tmp_path):
    """Seed 1 of the port / sea pairs: the log-amplitude start is a spurious peak > 20 px away. A 16-px bound
    makes the log candidate alone land on the right shift; the option is saved in the config."""
    from monai_npc.networks.blocks.warp_ode import candidate_shifts

    moving, fixed = _port_and_sea(1)
    np.testing.assert_allclose(candidate_shifts(moving, fixed, 0.25, (0.0,), max_shift=16)[0, 0].numpy(), [5.0, -3.0], atol=0.15)
    small = dict(kernel_size=8, stride=4, num_pairs=4, top_k=2, gate_dim=8, hidden_dim=8, num_pe=8, num_steps=1, head_channels=4)
    assert float(NPCNet(**small, phase_init=0.25).ode.initial_field(moving, fixed)[0, :, 0, 0].norm()) > 20
    net = NPCNet(**small, phase_init=0.25, phase_init_max_shift=16).eval()
    np.testing.assert_allclose(net.ode.initial_field(moving, fixed)[0, :, 0, 0].numpy(), [5.0, -3.0], atol=0.15)
    # a bound below the true shift keeps the start inside it (+ < 1 px sub-pixel step)
    assert float(NPCNet(**small, phase_init=0.25, phase_init_max_shift=2).ode.initial_field(moving, fixed).abs().max()) < 3.0
    save_pretrained(net, tmp_path / "n.pt")
    loaded = load_pretrained(tmp_path / "n.pt")
    assert loaded.config["phase_init_max_shift"] == 16.0 and loaded.ode.phase_init_max_shift == 16.0
    assert NPCNet(**small).config["phase_init_max_shift"] is None  # default: unbounded, as before
    with pytest.raises(ValueError, match="phase_init_max_shift"):
        NPCNet(**small, phase_init=0.25, phase_init_max_shift=-1)


def test_flip_ensemble_is_the_mean_over_symmetries_and_equivariant(tmp_path):
    from monai_npc.functional.dihedral import DIHEDRAL_INVERSE, dihedral, dihedral_field

    torch.manual_seed(0)
    small = dict(kernel_size=8, stride=4, num_pairs=4, top_k=2, gate_dim=8, hidden_dim=8, num_pe=8, num_steps=2, head_channels=4)
    plain = NPCNet(**small, phase_init=0.25).eval()
    with torch.no_grad():  # an untrained head outputs ~0: perturb it so that the steps move the field
        for p in plain.parameters():
            p.add_(0.3 * torch.randn_like(p))
    ens = NPCNet(**small, phase_init=0.25, flip_ensemble=8).eval()
    ens.load_state_dict(plain.state_dict())
    image = torch.from_numpy(np.log(_textured((64, 64), 3, sigma=1.0)))
    x = torch.stack([image[4:52, 4:52], image[9:57, 2:50]])[None].float()
    with torch.no_grad():
        out = ens(x)
        manual = torch.stack([dihedral_field(plain(dihedral(x, k)), DIHEDRAL_INVERSE[k]) for k in range(8)]).mean(0)
        torch.testing.assert_close(out, manual, atol=1e-5, rtol=1e-4)
        assert float((plain(x) - out).abs().max()) > 1e-3  # not the single pass
        # the mean over the whole group commutes with every symmetry (5: flip rows, then transpose)
        torch.testing.assert_close(ens(dihedral(x, 5)), dihedral_field(out, 5), atol=1e-4, rtol=1e-4)
        _, reg_ddf, diag = ens.register(x[:, :1], x[:, 1:], return_diagnostics=True)
    torch.testing.assert_close(reg_ddf, out, atol=1e-5, rtol=1e-4)
    assert len(diag) == 2
    with torch.no_grad():  # the diagnostics are the untransformed member's of the same batched pass
        _, _, plain_diag = plain.register(x[:, :1], x[:, 1:], return_diagnostics=True)
    for d, p in zip(diag, plain_diag):
        assert d["residual"].shape == p["residual"].shape
        torch.testing.assert_close(d["residual"], p["residual"], atol=1e-5, rtol=1e-4)
        # the mask is a sigmoid of the residual / 0.1: float rounding of a batch of 8 against 1 shows ~1e-5
        torch.testing.assert_close(d["mask"], p["mask"], atol=1e-4, rtol=1e-4)
    ens.train()
    with torch.no_grad():
        torch.testing.assert_close(ens(x), plain.train()(x))  # training mode: the single pass
    save_pretrained(ens, tmp_path / "e.pt")
    assert load_pretrained(tmp_path / "e.pt").config["flip_ensemble"] == 8 and NPCNet(**small).config["flip_ensemble"] == 1
    with pytest.raises(ValueError, match="flip_ensemble"):
        NPCNet(**small, flip_ensemble=3)
    with pytest.raises(ValueError, match="flip_ensemble"):
        NPCNet(spatial_dims=3, **small, flip_ensemble=2)
    plain.set_flip_ensemble(8)  # after construction: the same ensemble, and the saved config follows
    with torch.no_grad():
        torch.testing.assert_close(plain.eval()(x), out, atol=1e-5, rtol=1e-4)
    assert plain.config["flip_ensemble"] == 8 and plain.flip_inverse == ens.flip_inverse
    with pytest.raises(ValueError, match="flip_ensemble"):
        plain.set_flip_ensemble(3)
    with pytest.raises(ValueError, match="square"):  # transposes need a square grid
        ens.eval()(torch.rand(1, 2, 48, 56))
    assert NPCNet(**small, flip_ensemble=2).eval()(torch.rand(1, 2, 48, 56)).shape == (1, 2, 48, 56)  # flips only


def test_bench_real_cli_names_a_missing_folder(tmp_path, capsys):
    assert main(["sar", "bench-real", "--data", str(tmp_path / "nowhere")]) == 1
    assert "nowhere" in capsys.readouterr().err


@pytest.mark.skipif(not DEFAULT_ROOT.is_dir(), reason="../shared/data/sar_real is absent")
def test_shared_scenes_read_and_test_pairs_have_change_maps():
    scenes = read_scenes()
    assert scenes["ottawa"]["dates"][0].shape == (350, 290) and len(scenes["jeddah_s1"]["dates"]) == 5
    assert 0.15 < scenes["ottawa"]["change"].mean() < 0.17  # README: 15.8 % changed
    pairs = benchmark_pairs("test", scenes, 6.0, seed=0)
    assert len(pairs) == 40 and sum(p["change"] is not None for p in pairs) == 24


def test_bounded_phase_correlation_baseline_uses_the_models_bound():
    """The benchmark's ``phase_correlation_bounded`` searches the peak within the model's own start bound."""
    from monai_npc.extras.sar.bench_real import BASELINES, DEFAULT_BOUND, _bound, _run

    amp = np.exp(_textured((160, 160), 4, sigma=1.5))
    moving, fixed = amp[13:141, 8:136], amp[10:138, 10:138]  # fixed(x) = moving(x + (-3, 2))
    small = dict(kernel_size=8, stride=4, num_pairs=4, top_k=2, gate_dim=8, hidden_dim=8, num_pe=8, num_steps=2, head_channels=4)
    wide, narrow = NPCNet(**small, phase_init=0.25, phase_init_max_shift=16), NPCNet(**small, phase_init=0.25, phase_init_max_shift=1)
    assert _bound(wide) == 16.0 and _bound(narrow) == 1.0 and _bound(NPCNet(**small)) == DEFAULT_BOUND
    free = _run(wide, "phase_correlation", moving, fixed)[:, 0, 0]
    np.testing.assert_allclose(free.numpy(), [-3.0, 2.0], atol=0.2)
    assert _run(wide, "phase_correlation_bounded", moving, fixed).shape == (2, 128, 128)
    torch.testing.assert_close(_run(wide, "phase_correlation_bounded", moving, fixed)[:, 0, 0], free)  # inside the bound: the same
    assert float(_run(narrow, "phase_correlation_bounded", moving, fixed)[:, 0, 0].abs().max()) < 2.0  # outside: cut to the bound
    assert "phase_correlation_bounded" in BASELINES


def test_truth_offset_measures_a_misregistration_between_the_dates(fake_scenes):
    """``truth_offset`` finds the offset between two dates that the synthetic truth leaves out, with its sign."""
    from monai_npc.extras.sar.bench_real import truth_offset

    rng = np.random.default_rng(3)
    base = _textured((140, 140), 7, sigma=1.5) * rng.gamma(4.0, 0.25, (140, 140)).astype(np.float32)  # texture x speckle
    date_a, date_b = base[10:138, 10:138], base[10:138, 11:139]  # date_b(x) = date_a(x + (0, 1)): 1 px apart
    zero = np.zeros((2, 128, 128), np.float32)
    np.testing.assert_allclose(truth_offset(date_a, date_a.copy(), zero), [0.0, 0.0])  # co-registered dates
    np.testing.assert_allclose(truth_offset(date_a, date_b, zero), [0.0, 1.0])  # moving(x + (0, 1)) = fixed(x)
    np.testing.assert_allclose(truth_offset(date_b, date_a, zero), [0.0, -1.0])  # the other date order flips the sign
    shift = np.zeros_like(zero)
    shift[1] = 1.0  # a truth that already holds the offset leaves none
    np.testing.assert_allclose(truth_offset(date_a, date_b, shift), [0.0, 0.0])
    src = Source("jeddah_s1", 0, 4, (0, 656))
    assert make_real_pair(fake_scenes["jeddah_s1"], src, rng)["scene"] == "jeddah_s1"  # the benchmark groups pairs by it

    # in the benchmark: each pair's offset, and every method's EPE against the truth moved by it
    from monai_npc.extras.sar.bench_real import _evaluate, format_truth_check

    small = dict(kernel_size=8, stride=4, num_pairs=4, top_k=2, gate_dim=8, hidden_dim=8, num_pe=8, num_steps=2, head_channels=4)
    pairs = [{"name": f"fake_d1to2_r{k}c0", "scene": "fake", "shift": (0.0, 0.0), "moving": date_a, "fixed": date_b, "ddf": zero, "change": None}
             for k in range(2)]
    run = _evaluate(NPCNet(**small).eval(), pairs, progress=False, truth_check=True)
    row, summary = run["per_pair"][0], run["summary"]
    assert row["truth_offset_px"] == 1.0 and row["epe_none"] == 0.0 and row["epe_aligned_none"] == pytest.approx(1.0)
    assert summary["mean_truth_offset_px_per_scene"] == {"fake": 1.0} and summary["pairs_truth_offset_over_half_px"] == 2
    assert summary["mean_epe_aligned_phase_correlation_bounded"] < 0.2  # phase correlation finds the dates' 1 px
    assert "| 1.00 | 2/2 | fake 1.00 |" in format_truth_check({"runs": {"x": {**run, "summary": {**summary, "split": "t", "max_shift": 6}}}})
