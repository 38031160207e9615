"""Crash-safe checkpoints and exact resume of the bundle trainer (issue 16, items 2 and 3).

A kill during a checkpoint write is simulated by a ``torch.save`` that writes part of the file and
raises; an unreadable newest checkpoint by a 0-byte file. Exact resume: a run stopped after some
epochs and resumed with ``resume=True`` ends with the same weights, bit for bit, as a run never
stopped (shuffled batches and random flips included), on a tiny phantom ACDC run.
"""

from __future__ import annotations

import logging

import pytest
import torch

pytest.importorskip("ignite")

from monai_npc.handlers import AtomicCheckpointSaver, list_checkpoints  # noqa: E402
from monai_npc.utils import atomic_torch_save  # noqa: E402

from .test_bundle import PHANTOM, TINY, _workflow, phantom_dir  # noqa: E402,F401  (fixtures shared with test_bundle)

pytestmark = pytest.mark.usefixtures("one_thread")



def _train(tmp_path, phantom_dir, epochs, resume=False, **extra):
    common = dict(
        TINY, output_dir=str(tmp_path / "out"), ckpt_dir=str(tmp_path / "models"), phantom_dir=str(phantom_dir),
        batch_size=2, max_val_pairs=2, **PHANTOM["npc_acdc"],
    )
    common.update(extra)
    wf = _workflow("npc_acdc", "train_crops.json", "train", epochs=epochs, resume=resume, **common)
    wf.initialize()
    wf.run()
    return wf


def _weights(wf) -> dict:
    return {k: v.detach().clone() for k, v in wf.parser.get_parsed_content("network_def").state_dict().items()}


def _torn_save(real_save):
    """A ``torch.save`` that writes a few bytes and dies, like a kill during the write."""

    def save(obj, f, *args, **kwargs):  # noqa: ARG001
        if hasattr(f, "write"):
            f.write(b"PK\x03\x04 torn")
        else:
            with open(f, "wb") as out:
                out.write(b"PK\x03\x04 torn")
        raise KeyboardInterrupt("killed while writing")

    return save


def test_atomic_torch_save_keeps_previous_file(tmp_path, monkeypatch):
    path = tmp_path / "model.pt"
    atomic_torch_save({"w": torch.ones(3)}, path)
    monkeypatch.setattr(torch, "save", _torn_save(torch.save))
    with pytest.raises(KeyboardInterrupt):
        atomic_torch_save({"w": torch.zeros(3)}, path)
    monkeypatch.undo()
    assert torch.equal(torch.load(path, weights_only=True)["w"], torch.ones(3))
    assert sorted(p.name for p in tmp_path.iterdir()) == ["model.pt"]  # no temporary file left


def test_saver_deletes_old_checkpoint_only_after_the_new_one(tmp_path, monkeypatch):
    """ignite removes the oldest file before writing the next: a kill then would leave nothing."""
    from ignite.engine import Engine

    net = torch.nn.Linear(2, 1)
    objects = {"model": net, "optimizer": torch.optim.SGD(net.parameters(), lr=0.1)}
    engine = Engine(lambda e, b: None)
    AtomicCheckpointSaver(str(tmp_path), objects, save_interval=1, n_saved=1).attach(engine)
    real_save, seen = torch.save, []

    def save(obj, f, *args, **kwargs):
        seen.append(sorted(p.name for p in tmp_path.glob("*.pt")))
        return real_save(obj, f, *args, **kwargs)

    monkeypatch.setattr(torch, "save", save)
    engine.run([0], max_epochs=3)
    # while epoch N is written, epoch N-1 is still on disk; afterwards only the newest is kept
    assert seen == [[], ["checkpoint_epoch=1.pt"], ["checkpoint_epoch=2.pt"]]
    assert [p.name for p in tmp_path.iterdir()] == ["checkpoint_epoch=3.pt"]

    # a kill during the write of epoch 4 leaves epoch 3, readable
    engine2 = Engine(lambda e, b: None)
    AtomicCheckpointSaver(str(tmp_path), objects, save_interval=1, n_saved=1).attach(engine2)
    monkeypatch.setattr(torch, "save", _torn_save(real_save))
    with pytest.raises(KeyboardInterrupt):
        engine2.run([0], max_epochs=1)
    monkeypatch.undo()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["checkpoint_epoch=3.pt"]
    assert torch.equal(torch.load(tmp_path / "checkpoint_epoch=3.pt", weights_only=True)["model"]["weight"], net.weight.detach())


def test_kill_during_checkpoint_write_then_resume(tmp_path, phantom_dir, monkeypatch):
    """A kill while epoch 2 is saved leaves epoch 1 and the best model.pt readable; resume continues."""
    _train(tmp_path, phantom_dir, epochs=1, max_iterations_per_epoch=1)
    ckpt_dir, best = tmp_path / "out" / "checkpoints", tmp_path / "models" / "model.pt"
    best_before = best.read_bytes()
    assert len(best_before) > 1000

    monkeypatch.setattr(torch, "save", _torn_save(torch.save))  # every write of epoch 2 dies
    with pytest.raises(KeyboardInterrupt):
        _train(tmp_path, phantom_dir, epochs=2, resume=True, max_iterations_per_epoch=1)
    monkeypatch.undo()
    assert [p.name for p in ckpt_dir.iterdir()] == ["checkpoint_epoch=1.pt"]  # nothing torn, nothing lost
    assert best.read_bytes() == best_before
    wf = _train(tmp_path, phantom_dir, epochs=2, resume=True, max_iterations_per_epoch=1)
    handler = [h for h in wf.parser.get_parsed_content("train#handlers") if type(h).__name__ == "TrainCheckpoint"][0]
    assert handler.loaded_from == ckpt_dir / "checkpoint_epoch=1.pt"
    assert wf.trainer.state.epoch == 2 and [p.name for p in ckpt_dir.iterdir()] == ["checkpoint_epoch=2.pt"]


def test_resume_skips_unreadable_newest_checkpoint(tmp_path, phantom_dir, caplog):
    _train(tmp_path, phantom_dir, epochs=1, max_iterations_per_epoch=1)
    ckpt_dir = tmp_path / "out" / "checkpoints"
    (ckpt_dir / "checkpoint_epoch=2.pt").write_bytes(b"")  # what a kill used to leave
    with caplog.at_level(logging.WARNING):
        wf = _train(tmp_path, phantom_dir, epochs=2, resume=True, max_iterations_per_epoch=1)
    handler = [h for h in wf.parser.get_parsed_content("train#handlers") if type(h).__name__ == "TrainCheckpoint"][0]
    assert handler.loaded_from == ckpt_dir / "checkpoint_epoch=1.pt"
    assert handler.skipped == [ckpt_dir / "checkpoint_epoch=2.pt"]
    assert "skipping unreadable checkpoint" in caplog.text and "checkpoint_epoch=2.pt (0 bytes, EOFError" in caplog.text
    assert wf.trainer.state.iteration == 2
    assert [p.name for p in list_checkpoints(ckpt_dir)] == ["checkpoint_epoch=2.pt"]
    torch.load(ckpt_dir / "checkpoint_epoch=2.pt", weights_only=True)  # now a real checkpoint

    # only unreadable files: a clear error instead of a silent fresh start or a bare EOFError
    (ckpt_dir / "checkpoint_epoch=2.pt").write_bytes(b"")
    with pytest.raises(RuntimeError) as err:  # the config parser wraps the handler's error
        _train(tmp_path, phantom_dir, epochs=3, resume=True, max_iterations_per_epoch=1)
    cause = err.value if "no readable" in str(err.value) else err.value.__cause__
    assert "no readable checkpoint" in str(cause) and "checkpoint_epoch=2.pt" in str(cause)


@pytest.mark.parametrize("epoch_length", [None, 3])
def test_resume_is_bit_exact(tmp_path, phantom_dir, epoch_length):
    """Kill after epoch 2 + resume to epoch 3 == 3 epochs in one go (shuffling and flips on).

    ``epoch_length=3`` is shorter than the loader (4 batches), so an epoch ends part-way through a
    shuffled pass: the resumed run must rebuild that pass at the right place.
    """
    extra = dict(max_iterations_per_epoch=epoch_length, flip_prob=0.5, batch_size=1, train_directions=["ED->ES", "ES->ED"])
    straight = _weights(_train(tmp_path / "straight", phantom_dir, epochs=3, **extra))
    _train(tmp_path / "killed", phantom_dir, epochs=2, **extra)
    torch.manual_seed(1234)  # a new process has another random state
    resumed_wf = _train(tmp_path / "killed", phantom_dir, epochs=3, resume=True, **extra)
    assert len(resumed_wf.parser.get_parsed_content("train#dataloader")) == 4
    resumed = _weights(resumed_wf)
    assert straight.keys() == resumed.keys()
    for name in straight:
        assert torch.equal(straight[name], resumed[name]), name
    # and the random state matters: without it the resumed weights differ
    _train(tmp_path / "norandom", phantom_dir, epochs=2, **extra)
    ckpt = tmp_path / "norandom" / "out" / "checkpoints" / "checkpoint_epoch=2.pt"
    state = torch.load(ckpt, weights_only=True)
    state.pop("random")
    torch.save(state, ckpt)
    torch.manual_seed(1234)
    other = _weights(_train(tmp_path / "norandom", phantom_dir, epochs=3, resume=True, **extra))
    assert max(float((straight[k] - other[k]).abs().max()) for k in straight) > 1e-6


def test_resume_says_which_settings_it_keeps(tmp_path, phantom_dir, caplog):
    """A resumed run continues the checkpoint's learning-rate schedule and epoch length: asked for others, it says so."""
    _train(tmp_path, phantom_dir, epochs=1, max_iterations_per_epoch=2)
    with caplog.at_level(logging.INFO, logger="monai_npc.handlers.checkpoint"):
        wf = _train(tmp_path, phantom_dir, epochs=2, resume=True, max_iterations_per_epoch=1, learning_rate=0.5)
    assert "continues its own learning-rate schedule" in caplog.text and "[0.5] is not used" in caplog.text
    assert "runs 2 iterations per epoch; this run's 1 is not used" in caplog.text
    assert "at epoch 1 (iteration 2) of 2" in caplog.text and wf.trainer.state.iteration == 4
