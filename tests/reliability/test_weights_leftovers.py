"""Temporaries of killed checkpoint saves are deleted when training starts again, and never loaded."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from monai_npc.serialization import remove_leftovers

from ._weights_helpers import TINY, tiny_net

#: what a kill during ``atomic_torch_save(obj, folder / NAME)`` leaves: ``.NAME.XXXXXXXX.tmp``
LEFTOVER = ".{}.k1ll3d_x.tmp"


def _plant(folder, name, content):
    """A leftover temporary of ``name`` in ``folder`` holding ``content`` (a loadable checkpoint: it must still be ignored)."""
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / LEFTOVER.format(name)
    torch.save(content, path)
    return path


def test_remove_leftovers_takes_only_temporaries(tmp_path):
    keep = [tmp_path / n for n in ("checkpoint.pt", "notes.tmp", ".hidden", "model.pt.tmp")]
    for path in keep:
        path.write_bytes(b"x")
    mine = [_plant(tmp_path, "checkpoint.pt", {}), tmp_path / "checkpoint.tmp"]  # atomic_torch_save's, an older writer's
    mine[1].write_bytes(b"x")
    other = _plant(tmp_path, "model.pt", {})
    folder = tmp_path / ".checkpoint.pt.abcdefgh.tmp"  # a temporary folder
    folder.mkdir()
    (folder / "part").write_bytes(b"x")
    assert sorted(remove_leftovers(tmp_path, ["checkpoint.pt"])) == sorted(mine + [folder])
    assert all(p.exists() for p in keep + [other])
    assert remove_leftovers(tmp_path) == [other] and remove_leftovers(tmp_path / "missing") == []


def test_train_pairs_deletes_and_ignores_leftovers(tmp_path):
    from monai_npc.engines.loops import train_pairs
    from monai_npc.losses import RegistrationLoss

    net = tiny_net()
    stale = _plant(tmp_path, "ckpt.pt", {"network": net.state_dict(), "iteration": 99})  # would skip training if loaded
    rng = np.random.default_rng(0)
    pairs = [{"moving": rng.random((32, 32), dtype=np.float32), "fixed": rng.random((32, 32), dtype=np.float32)}]
    history = train_pairs(net, pairs, RegistrationLoss(), iterations=2, batch_size=1, progress=False,
                          checkpoint=tmp_path / "ckpt.pt")
    assert len(history) == 2 and not stale.exists()
    assert torch.load(tmp_path / "ckpt.pt", weights_only=True)["iteration"] == 2
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ckpt.pt"]


def test_sar_fit_deletes_and_ignores_leftovers(tmp_path):
    from monai_npc.extras.sar.train import SARTrainConfig, fit

    net = tiny_net().train()
    planted = {"network": net.state_dict(), "iteration": 99, "history": [], "rng": {}}
    stale = [_plant(tmp_path, "checkpoint.pt", planted), tmp_path / "checkpoint.tmp"]
    torch.save(planted, stale[1])  # the temporary name of earlier releases

    def draw(rng):
        image = torch.as_tensor(rng.random((1, 1, 32, 32), dtype=np.float32))
        return image, image, torch.zeros(1, 2, 32, 32)

    history, _, _ = fit(net, draw, SARTrainConfig(iterations=1, batch_size=1, model=dict(TINY)), tmp_path, progress=False)
    assert len(history) == 1 and not any(p.exists() for p in stale)
    assert torch.load(tmp_path / "checkpoint.pt", weights_only=True)["iteration"] == 1


def test_train_checkpoint_deletes_and_never_resumes_leftovers(tmp_path, caplog):
    pytest.importorskip("ignite")
    from ignite.engine import Engine

    from monai_npc.handlers import TrainCheckpoint, list_checkpoints

    net = tiny_net()
    stale = _plant(tmp_path, "checkpoint_epoch=9.pt", {"model": net.state_dict(), "trainer": {"epoch": 9}})
    hidden = tmp_path / ".checkpoint_epoch=8.pt"
    torch.save({"model": net.state_dict()}, hidden)
    assert list_checkpoints(tmp_path) == []  # neither is a checkpoint
    handler = TrainCheckpoint(tmp_path, {"model": net}, resume=True)
    handler.attach(Engine(lambda engine, batch: None))
    assert handler.loaded_from is None and not stale.exists()
    assert "training from scratch" in caplog.text
