"""Weights are data, never code: a booby-trapped pickle runs at no entry point that reads weights or checkpoints."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from monai_npc.cli.main import main
from monai_npc.networks.nets import load_pretrained
from monai_npc.serialization import UnsafeWeightsError, safe_load

from ._weights_helpers import TINY, Trap, tiny_net, write_bundle, write_trap

REFUSED = "is not a data-only weights file.*convert-weights --i-trust-this-file"


@pytest.fixture
def trap(tmp_path):
    """``(weights file that would create marker when unpickled, marker)``; the marker must never appear."""
    marker = tmp_path / "PWNED"
    yield write_trap(tmp_path / "evil.pt", marker), marker
    assert not marker.exists(), "unpickling ran code from a weights file"


def test_the_trap_is_armed(tmp_path):
    """Guard of the tests below: fully unpickling the file does create the marker."""
    marker = tmp_path / "armed"
    torch.load(write_trap(tmp_path / "evil.pt", marker), weights_only=False)
    assert marker.exists()


def test_load_pretrained_file_refuses(trap):
    with pytest.raises(UnsafeWeightsError, match=REFUSED):
        load_pretrained(trap[0])


def test_load_pretrained_bundle_refuses(tmp_path, trap):
    bundle = write_bundle(tmp_path / "bundle", lambda p: write_trap(p, trap[1]))
    for spec in (bundle, bundle / "models" / "model.pt"):
        with pytest.raises(UnsafeWeightsError, match=REFUSED):
            load_pretrained(spec)


def test_register_api_refuses(trap):
    import monai_npc

    image = np.random.default_rng(0).random((32, 32)).astype(np.float32)
    with pytest.raises(UnsafeWeightsError, match=REFUSED):
        monai_npc.register(image, image, model=str(trap[0]))


@pytest.mark.parametrize("as_bundle", [False, True], ids=["file", "bundle"])
def test_cli_model_refuses(tmp_path, trap, capsys, as_bundle):
    import SimpleITK as sitk

    model = write_bundle(tmp_path / "bundle", lambda p: write_trap(p, trap[1])) if as_bundle else trap[0]
    image = tmp_path / "image.nii.gz"
    sitk.WriteImage(sitk.GetImageFromArray(np.random.default_rng(0).random((32, 32)).astype(np.float32)), str(image))
    code = main(["register", "--moving", str(image), "--fixed", str(image), "--out", str(tmp_path / "out"),
                 "--model", str(model), "--no-overview"])
    assert code == 1
    assert "is not a data-only weights file" in capsys.readouterr().err


def test_verify_weights_cli_refuses(trap, capsys):
    assert main(["verify-weights", str(trap[0])]) == 1
    assert "convert-weights --i-trust-this-file" in capsys.readouterr().err


def test_convert_needs_explicit_trust(tmp_path, trap, capsys):
    assert main(["convert-weights", str(trap[0]), str(tmp_path / "out.pt")]) == 1
    assert "--i-trust-this-file" in capsys.readouterr().err and not (tmp_path / "out.pt").exists()


def test_train_pairs_resume_refuses(tmp_path, trap):
    from monai_npc.engines.loops import train_pairs
    from monai_npc.losses import RegistrationLoss

    torch.save({"network": {}, "iteration": Trap(trap[1])}, tmp_path / "ckpt.pt")
    pairs = [{"moving": np.zeros((32, 32), np.float32), "fixed": np.zeros((32, 32), np.float32)}]
    with pytest.raises(UnsafeWeightsError, match=REFUSED):
        train_pairs(tiny_net(), pairs, RegistrationLoss(), iterations=1, progress=False, checkpoint=tmp_path / "ckpt.pt")


def test_sar_resume_refuses(tmp_path, trap):
    from monai_npc.extras.sar.train import SARTrainConfig, fit

    torch.save({"network": {}, "rng": Trap(trap[1])}, tmp_path / "checkpoint.pt")
    with pytest.raises(UnsafeWeightsError, match=REFUSED):
        fit(tiny_net(), lambda rng: None, SARTrainConfig(iterations=1, model=dict(TINY)), tmp_path, progress=False)


def test_bundle_resume_and_init_weights_refuse(tmp_path, trap):
    pytest.importorskip("ignite")
    from ignite.engine import Engine

    from monai_npc.engines.bundle_args import init_weights
    from monai_npc.handlers import TrainCheckpoint

    net = tiny_net()
    torch.save({"model": net.state_dict(), "trainer": Trap(trap[1])}, tmp_path / "checkpoint_epoch=3.pt")
    handler = TrainCheckpoint(tmp_path, {"model": net}, resume=True, save_interval=0)
    with pytest.raises(RuntimeError, match="no readable checkpoint"):
        handler.attach(Engine(lambda engine, batch: None))
    assert handler.skipped == [tmp_path / "checkpoint_epoch=3.pt"]
    with pytest.raises(Exception, match="(?i)weights only load failed"):
        init_weights(net, tmp_path / "checkpoint_epoch=3.pt")


def test_old_format_gets_the_conversion_command_then_converts(tmp_path):
    """A file of an earlier release (numpy values in meta, "state_dict" key) is refused with the command that converts it."""
    net = tiny_net()
    old = tmp_path / "old.pt"
    torch.save({"config": dict(net.config), "state_dict": net.state_dict(), "meta": {"dice": np.float64(0.5)}}, old)
    with pytest.raises(UnsafeWeightsError, match=f"{REFUSED}.*old_safe.pt") as refused:
        load_pretrained(old)
    assert "(numpy._core.multiarray.scalar)" in str(refused.value) and "add_safe_globals" not in str(refused.value)
    assert main(["convert-weights", "--i-trust-this-file", str(old), str(tmp_path / "new.pt")]) == 0
    loaded = load_pretrained(tmp_path / "new.pt")
    assert loaded.meta["dice"] == 0.5 and type(loaded.meta["dice"]) is float
    assert sorted(safe_load(tmp_path / "new.pt")) == ["config", "meta", "model"]
    x = torch.rand(1, 2, 32, 32)
    torch.testing.assert_close(loaded(x), net(x))
