"""SAR extra: preprocessing, speckle statistics, the synthetic generator's displacement convention,
amplitude I/O, phase correlation as the baseline, metrics and the ``monai-npc sar`` commands.
(The shipped weights are exercised in ``test_sar_model.py``.)"""

import json

import numpy as np
import pytest
import torch

from monai_npc.cli.main import main
from monai_npc.extras.sar import (
    SARPairConfig, endpoint_error, log_amplitude, make_sar_pair, ncc, phase_correlation_shift, read_amplitude,
    sar_normalize, write_amplitude,
)
from monai_npc.extras.sar.evaluate import evaluate_sar, register_sar
from monai_npc.extras.sar.experiment import read_pair_folder
from monai_npc.extras.sar.preprocess import preprocess_slices
from monai_npc.extras.sar.synthetic import smooth_deformation, speckle
from monai_npc.extras.sar.train import crop_pairs, dihedral
from monai_npc.functional.warp import warp_image


class _Zero(torch.nn.Module):
    def forward(self, x):
        return torch.zeros((x.shape[0], 2) + tuple(x.shape[2:]))


def test_sar_normalize_range_scale_invariance_and_nodata():
    rng = np.random.default_rng(0)
    amp = speckle(np.exp(rng.normal(0, 1, (64, 64))), 3, rng)
    out = sar_normalize(amp)
    assert out.dtype == np.float32 and out.shape == (64, 64)
    assert out.min() == 0.0 and out.max() == 1.0
    # log + percentiles: a global gain (calibration constant) changes nothing
    np.testing.assert_allclose(sar_normalize(37.5 * amp), out, atol=1e-5)
    holed = amp.copy()
    holed[:8] = np.nan
    res = sar_normalize(holed)
    assert np.all(res[:8] == 0.0) and np.isfinite(res).all()
    # a few very bright scatterers do not squash the scene (min-max would)
    bright = amp.copy()
    bright[0, :5] = 1e4
    assert np.median(sar_normalize(bright)) > 0.3
    assert preprocess_slices(np.stack([amp, amp])).shape == (2, 64, 64)
    with pytest.raises(ValueError, match="negative"):
        log_amplitude(-amp)
    with pytest.raises(ValueError, match=r"\(H, W\)"):
        sar_normalize(amp[None])


@pytest.mark.parametrize("looks", [1, 4])
def test_speckle_is_gamma_with_l_looks(looks):
    rng = np.random.default_rng(1)
    intensity = speckle(np.full((256, 256), 2.0), looks, rng).astype(np.float64) ** 2
    assert intensity.mean() == pytest.approx(2.0, rel=0.02)  # unit-mean multiplicative noise
    assert intensity.var() == pytest.approx(4.0 / looks, rel=0.05)  # Var = sigma0^2 / L


def test_generator_convention_moving_at_x_plus_ddf_is_fixed():
    cfg = SARPairConfig(size=96, looks=(400, 400), change_probability=0.0)
    p = make_sar_pair(cfg, seed=3)
    assert p["moving"].shape == (96, 96) and p["ddf"].shape == (2, 96, 96) and p["looks"] == 400
    m = torch.from_numpy(np.log(p["moving"]))[None, None]
    f = torch.from_numpy(np.log(p["fixed"]))[None, None]
    ddf = torch.from_numpy(p["ddf"])[None]
    aligned = (warp_image(m, ddf) - f)[..., 12:-12, 12:-12].abs().mean()
    unaligned = (m - f)[..., 12:-12, 12:-12].abs().mean()
    assert aligned < 0.25 * unaligned
    # non-rigid part: peak magnitude as asked
    field = smooth_deformation(np.random.default_rng(0), 64, 3.0)
    assert np.sqrt((field**2).sum(0)).max() == pytest.approx(3.0)
    # same seed, same pair; changes only on the fixed date
    q = make_sar_pair(SARPairConfig(size=64, change_probability=1.0), seed=5)
    np.testing.assert_array_equal(q["moving"], make_sar_pair(SARPairConfig(size=64, change_probability=1.0), seed=5)["moving"])
    assert q["changed"].any()
    with pytest.raises(ValueError, match="looks"):
        SARPairConfig(looks=(0, 2))


def test_dihedral_keeps_the_convention_and_crops_tile():
    cfg = SARPairConfig(size=64, looks=(300, 300), change_probability=0.0)
    p = make_sar_pair(cfg, seed=3)
    m, f = (torch.from_numpy(np.log(p[k]))[None, None] for k in ("moving", "fixed"))
    d = torch.from_numpy(p["ddf"])[None]
    base = float((warp_image(m, d) - f)[..., 10:-10, 10:-10].abs().mean())
    for k in range(8):
        a, b, c = dihedral(m, f, d, k)
        assert float((warp_image(a, c) - b)[..., 10:-10, 10:-10].abs().mean()) == pytest.approx(base, rel=1e-4)
    tiles = crop_pairs([p], 32)
    assert len(tiles) == 4 and tiles[3]["ddf"].shape == (2, 32, 32)
    np.testing.assert_array_equal(tiles[3]["moving"], p["moving"][32:, 32:])


def test_amplitude_io_roundtrip_and_errors(tmp_path):
    rng = np.random.default_rng(2)
    amp = rng.gamma(2.0, 1.0, (40, 50)).astype(np.float32)
    np.testing.assert_array_equal(read_amplitude(write_amplitude(tmp_path / "a.tif", amp)), amp)
    png = read_amplitude(write_amplitude(tmp_path / "a.png", amp))
    np.testing.assert_allclose(png / png.max(), amp / amp.max(), atol=2e-5)
    tifffile = pytest.importorskip("tifffile")
    slc = (amp * np.exp(1j * rng.uniform(0, 6.28, amp.shape))).astype(np.complex64)
    tifffile.imwrite(str(tmp_path / "slc.tif"), slc)
    np.testing.assert_allclose(read_amplitude(tmp_path / "slc.tif"), amp, rtol=1e-5)
    tifffile.imwrite(str(tmp_path / "two.tif"), np.stack([amp, amp + 1]))
    with pytest.raises(ValueError, match="single-band"):
        read_amplitude(tmp_path / "two.tif")
    with pytest.raises(FileNotFoundError, match="missing.tif"):
        read_amplitude(tmp_path / "missing.tif")
    with pytest.raises(ValueError, match="unsupported"):
        read_amplitude(write_amplitude(tmp_path / "b.tif", amp).rename(tmp_path / "b.xyz"))


def test_phase_correlation_recovers_pure_shift_on_speckled_pair():
    cfg = SARPairConfig(size=128, max_shift=5.0, nonrigid=0.0, change_probability=0.0)
    for seed in (11, 12):
        p = make_sar_pair(cfg, seed=seed)
        s = phase_correlation_shift(p["moving"], p["fixed"])
        np.testing.assert_allclose(s.numpy(), p["shift"], atol=0.15)
        ddf = register_sar(None, p["moving"], p["fixed"], "phase_correlation")
        assert ddf.shape == (2, 128, 128) and float(endpoint_error(ddf[None], torch.from_numpy(p["ddf"])[None])) < 0.15


def test_metrics_and_evaluation_structure():
    a = torch.rand(2, 1, 40, 40)
    np.testing.assert_allclose(ncc(a, 3 * a + 1).numpy(), [1.0, 1.0], atol=1e-6)
    np.testing.assert_allclose(ncc(a, -a, margin=4).numpy(), [-1.0, -1.0], atol=1e-6)
    d = torch.zeros(1, 2, 40, 40)
    d[:, 0] = 3.0
    d[:, 1] = 4.0
    assert float(endpoint_error(d, torch.zeros_like(d), 5)) == pytest.approx(5.0)
    pairs = [make_sar_pair(SARPairConfig(size=96), seed=s) for s in (0, 1)]
    r = evaluate_sar(_Zero(), pairs, margin=8)
    assert r["n_pairs"] == 2 and set(r["wins"]) == {"ncc", "epe"}
    assert r["mean"]["ncc_npc"] == pytest.approx(r["mean"]["ncc_none"])  # a zero field is no registration
    assert r["mean"]["epe_phase_correlation"] < r["mean"]["epe_none"]
    assert r["ddf"]["phase_correlation"].shape == (2, 2, 96, 96)


def test_sar_generate_and_evaluate_cli(tmp_path, capsys):
    assert main(["sar", "generate", "--out", str(tmp_path / "pairs"), "--n", "2", "--size", "64", "--no-progress"]) == 0
    pairs = read_pair_folder(tmp_path / "pairs")
    assert len(pairs) == 2 and pairs[0]["ddf"].shape == (2, 64, 64)
    assert (tmp_path / "pairs" / "pairs.csv").read_text().splitlines()[0] == "moving,fixed,out"
    rc = main(["sar", "evaluate", "--data", str(tmp_path / "pairs"), "--out", str(tmp_path / "eval"), "--rows", "2", "--margin", "8", "--no-progress"])
    assert rc == 0
    metrics = json.loads((tmp_path / "eval" / "metrics.json").read_text())
    assert metrics["n_pairs"] == 2 and 0 <= metrics["wins"]["ncc"] <= 2
    assert (tmp_path / "eval" / "sar_panel.png").stat().st_size > 10_000
    assert "NPC beats phase correlation" in capsys.readouterr().out
    assert main(["sar", "evaluate", "--data", str(tmp_path / "nowhere"), "--out", str(tmp_path / "e2")]) == 1


def test_train_sar_fine_tunes_from_given_weights(tmp_path):
    from monai_npc.extras.sar.train import SARTrainConfig, train_sar
    from monai_npc.networks.nets import NPCNet, save_pretrained

    small = dict(kernel_size=8, stride=4, num_pairs=4, top_k=2, gate_dim=8, hidden_dim=8, num_pe=8, num_steps=2, head_channels=4)
    start = NPCNet(**small)
    save_pretrained(start, tmp_path / "start.pt", {"schedule": {"iterations": 7}})
    cfg = SARTrainConfig(n_pairs=1, crop=0, iterations=1, batch_size=1, lr=1e-3, init=str(tmp_path / "start.pt"))
    net = train_sar(tmp_path / "run", cfg, SARPairConfig(size=32, change_probability=0.0), progress=False)
    assert net.config["num_pairs"] == 4  # the model came from the file, not SAR_CONFIG
    assert net.meta["schedule"]["init_schedule"] == {"iterations": 7}
    change = max((a - b).abs().max().item() for a, b in zip(net.state_dict().values(), start.state_dict().values()))
    assert 0.0 < change <= 2e-3  # one Adam step of lr 1e-3 away from the starting weights


def test_train_sar_resumes_only_what_it_was_asked(tmp_path, caplog):
    """A checkpoint resumes with a warning, towards more iterations, with the settings it was trained with;
    other settings, fewer iterations and bad values are errors naming them."""
    import logging

    from monai_npc.extras.sar.train import SARTrainConfig, train_sar

    small = dict(kernel_size=8, stride=4, num_pairs=4, top_k=2, gate_dim=8, hidden_dim=8, num_pe=8, num_steps=2, head_channels=4)
    data = SARPairConfig(size=32, change_probability=0.0)
    cfg = dict(n_pairs=1, crop=0, batch_size=1, lr=1e-3, model=small)
    train_sar(tmp_path / "run", SARTrainConfig(iterations=2, **cfg), data, progress=False)
    with caplog.at_level(logging.WARNING, logger="monai_npc.extras.sar.train"):
        net = train_sar(tmp_path / "run", SARTrainConfig(iterations=3, **cfg), data, progress=False)
    assert "resuming" in caplog.text and "at iteration 2 of 3" in caplog.text
    assert len(json.loads((tmp_path / "run" / "train_history.json").read_text())) == 3 and net.meta["schedule"]["lr"] == 1e-3
    with pytest.raises(ValueError, match=r"trained with other settings \(lr 0.001 -> 0.5\)"):
        train_sar(tmp_path / "run", SARTrainConfig(iterations=4, **dict(cfg, lr=0.5)), data, progress=False)
    with pytest.raises(ValueError, match=r"holds 3 iterations; --iterations 1 would train none"):
        train_sar(tmp_path / "run", SARTrainConfig(iterations=1, **cfg), data, progress=False)
    with pytest.raises(ValueError, match=r"iterations must be >= 1, got 0; lr must be a number > 0, got -1"):
        SARTrainConfig(iterations=0, lr=-1.0)
