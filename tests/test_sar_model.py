"""The shipped SAR weights (``monai_npc/weights/sar.pt``): a pure shift is recovered by both NPC and
phase correlation; on speckled non-rigid pairs NPC's endpoint error is lower; ``register --model sar``
uses the SAR preprocessing on amplitude PNG / TIFF files."""

import json

import numpy as np
import pytest
import torch

from monai_npc.extras.sar import SARPairConfig, endpoint_error, make_sar_pair, register_sar, write_amplitude
from monai_npc.extras.sar.real import DEFAULT_ROOT, Source, make_real_pair, read_scenes, resample_date
from monai_npc.extras.sar.train import TEST_SEED
from monai_npc.networks.nets import load_pretrained


@pytest.fixture(scope="module")
def net():
    # one thread: the shipped model runs its flip ensemble as one batch of 8, which two threads on a
    # shared 2-core CPU slow down about tenfold (23 s instead of 2 s for the three pairs below)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield load_pretrained("sar")
    torch.set_num_threads(threads)


def test_shipped_sar_weights_meta(net):
    assert net.meta["preprocessing"] == "sar" and net.meta["input_size"] == 256
    assert len(net.config["stages"]) == 2  # the coarse + fine cascade
    assert net.config["phase_init"] == 0.25  # the integration starts from windowed phase correlation
    assert net.config["phase_init_gains"] == [0.0, 3.0] and net.ode.phase_init_gains == [0.0, 3.0]  # log + linear candidates
    assert net.config["phase_init_max_shift"] == 16.0 and net.ode.phase_init_max_shift == 16.0  # bounded start
    assert net.config["flip_ensemble"] == 8 and net.flip_codes == list(range(8))  # mean over the 8 flips / transposes
    assert {"data", "schedule", "metrics", "metrics_real"} <= set(net.meta)
    assert net.meta["metrics"]["n_pairs"] == 40
    assert {"test_6", "test_8", "train_6", "train_8"} <= set(net.meta["metrics_real"])


def test_pure_shift_recovered_by_npc_and_phase_correlation(net):
    cfg = SARPairConfig(max_shift=3.5, nonrigid=0.0, change_probability=0.0)
    p = make_sar_pair(cfg, seed=TEST_SEED + 777)
    true = torch.from_numpy(p["ddf"])[None]
    pc = register_sar(net, p["moving"], p["fixed"], "phase_correlation")[None]
    npc = register_sar(net, p["moving"], p["fixed"], "npc")[None]
    assert float(endpoint_error(pc, true, 16)) < 0.1
    assert float(endpoint_error(npc, true, 16)) < 0.5
    np.testing.assert_allclose(npc[0, :, 16:-16, 16:-16].mean((1, 2)).numpy(), p["shift"], atol=0.3)


def test_npc_beats_phase_correlation_on_speckled_nonrigid_pairs(net):
    epe = {"npc": [], "phase_correlation": []}
    for i in range(3):
        p = make_sar_pair(SARPairConfig(change_probability=0.0), seed=TEST_SEED + 900 + i)
        true = torch.from_numpy(p["ddf"])[None]
        for method in epe:
            epe[method].append(float(endpoint_error(register_sar(net, p["moving"], p["fixed"], method)[None], true, 16)))
    # measured: NPC 0.59 / 0.63 / 0.34 px, phase correlation 1.06 / 0.61 / 1.08 px (pair 2: weak non-rigid part, a tie)
    assert np.mean(epe["npc"]) < 0.75 * np.mean(epe["phase_correlation"])
    assert sum(n < p for n, p in zip(epe["npc"], epe["phase_correlation"])) >= 2
    assert max(epe["npc"]) < 0.8


def test_register_cli_with_the_sar_model(tmp_path):
    from monai_npc.cli.main import main
    from monai_npc.apps.registration.models import model_profile

    p = make_sar_pair(SARPairConfig(max_shift=3.0, nonrigid=0.0, change_probability=0.0), seed=TEST_SEED + 5)
    write_amplitude(tmp_path / "moving.tif", p["moving"])
    write_amplitude(tmp_path / "fixed.png", p["fixed"])
    rc = main(["register", "--moving", str(tmp_path / "moving.tif"), "--fixed", str(tmp_path / "fixed.png"),
               "--model", "sar", "--out", str(tmp_path / "out"), "--no-overview"])
    assert rc == 0
    summary = json.loads((tmp_path / "out" / "summary.json").read_text())
    assert summary["model"] == "sar" and summary["model_grid"]["size"] == [256, 256]
    assert 0.5 < summary["reliability_mean"] <= 1.0  # the [0, 1] scale of monai_npc.functional.reliability_map
    # the pure shift comes out in the written field: mean displacement ~ |shift| mm (1 mm PNG/TIFF pixels)
    assert summary["displacement_mm_mean"] == pytest.approx(float(np.linalg.norm(p["shift"])), abs=0.4)
    # the hook: SAR models get log-amplitude + robust scaling, other models min-max
    amp = np.stack([p["moving"]])
    sar_net = load_pretrained("sar")
    sar_in = model_profile(sar_net).inputs(amp, sar_net.meta)  # resolved through the PREPROCESSING registry
    plain = model_profile(torch.nn.Identity()).inputs(amp, {})
    assert np.median(sar_in) > 0.3 > np.median(plain)


@pytest.mark.skipif(not DEFAULT_ROOT.is_dir(), reason="../shared/data/sar_real is absent")
def test_real_held_out_scene_large_shift_is_captured(net):
    """Held-out scene (ottawa, never trained on), real date pair, global shifts near the +-8 px range."""
    scenes = read_scenes(names=["ottawa"])
    rng = np.random.default_rng(8)
    epe = {"npc": [], "phase_correlation": []}
    for i, shift in enumerate(([7.5, -7.0], [-6.5, 7.8])):
        pair = make_real_pair(scenes["ottawa"], Source("ottawa", i % 2, 1 - i % 2, (47, 17)), rng, 0.0, 2.0)
        pair["ddf"] = pair["ddf"] + np.asarray(shift, np.float32)[:, None, None]
        pair["moving"] = resample_date(scenes["ottawa"]["dates"][i % 2], (47, 17), pair["ddf"])
        true = torch.from_numpy(pair["ddf"])[None]
        for method in epe:
            epe[method].append(float(endpoint_error(register_sar(net, pair["moving"], pair["fixed"], method)[None], true, 24)))
    # measured: NPC 0.59 / 0.57 px, windowed phase correlation 0.42 / 0.61 px; the weights before the
    # phase-correlation start (no capture of shifts this large): NPC 9.1 / 8.7 px. NPC does not reliably beat
    # phase correlation on this held-out scene (docs/sar.md), so only the capture is asserted.
    assert max(epe["npc"]) < 0.8
    assert max(epe["phase_correlation"]) < 0.8
