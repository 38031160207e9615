"""Shipped and saved weights carry a SHA-256 of their tensors, checked on load and by ``monai-npc verify-weights``."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from monai_npc.cli.main import main
from monai_npc.networks.nets import check_weights, load_pretrained, save_pretrained
from monai_npc.networks.nets.pretrained import BUNDLE_MODELS, BUNDLES_DIR, WEIGHTS_DIR
from monai_npc.serialization import CHECKSUM_KEY, ChecksumError, state_dict_sha256

from ._weights_helpers import tiny_net, write_bundle, write_weights


def _flip_a_tensor_byte(path, state):
    """Flip one bit in the middle of the largest tensor of ``state`` whose bytes occur once in the file at ``path``."""
    data = bytearray(path.read_bytes())
    for tensor in sorted(state.values(), key=torch.Tensor.numel, reverse=True):
        raw = tensor.numpy().tobytes()
        start = data.find(raw)
        if len(raw) > 64 and start > 0 and data.find(raw, start + 1) < 0:
            data[start + len(raw) // 2] ^= 0x01
            path.write_bytes(bytes(data))
            return
    raise AssertionError(f"no tensor of {path} found by its bytes")


def test_hash_is_canonical_and_sees_every_change():
    state = tiny_net().state_dict()
    digest = state_dict_sha256(state)
    assert digest == state_dict_sha256(dict(reversed(list(state.items()))))  # order of the dict is irrelevant
    name = next(iter(state))
    flipped = {k: v.clone() for k, v in state.items()}
    flipped[name].view(-1).view(torch.uint8)[3] ^= 0x01
    renamed = {("x." + k if k == name else k): v for k, v in state.items()}
    retyped = {k: (v.double() if k == name else v) for k, v in state.items()}
    reshaped = {k: (v.reshape(-1) if k == name else v) for k, v in state.items()}
    assert len({digest, *(state_dict_sha256(s) for s in (flipped, renamed, retyped, reshaped))}) == 5


def test_flipped_byte_in_a_saved_file_fails_with_the_checksum_error(tmp_path, capsys):
    net = tiny_net()
    path = write_weights(tmp_path / "m.pt", net)
    assert load_pretrained(path).meta[CHECKSUM_KEY] == state_dict_sha256(net.state_dict())
    _flip_a_tensor_byte(path, net.state_dict())
    with pytest.raises(ChecksumError, match=r"m\.pt: the weights do not match their recorded SHA-256.*verify-weights --record"):
        load_pretrained(path)
    assert main(["verify-weights", str(path)]) == 1
    out = capsys.readouterr().out
    assert out.startswith(f"MISMATCH: {path} sha256 ") and "do not match" in out


def test_verify_weights_statuses_and_record(tmp_path, capsys):
    net = tiny_net()
    good = write_weights(tmp_path / "good.pt", net)
    bundle = write_bundle(tmp_path / "bundle", net.state_dict(), metadata={"version": "0.1"})  # bare state dict, no checksum
    assert main(["verify-weights", str(good), str(bundle)]) == 0
    lines = capsys.readouterr().out.splitlines()
    digest = state_dict_sha256(net.state_dict())
    assert lines[0] == f"OK: {good} sha256 {digest}"
    assert lines[1] == f"NO CHECKSUM: {bundle / 'models' / 'model.pt'} sha256 {digest}"
    assert main(["verify-weights", "--record", str(bundle)]) == 0
    assert json.loads((bundle / "configs" / "metadata.json").read_text()) == {"version": "0.1", CHECKSUM_KEY: digest}
    assert check_weights(bundle).status == "ok"
    # the bundle's weights change (e.g. retrained) but its metadata.json still records the old hash
    torch.save(tiny_net().state_dict(), bundle / "models" / "model.pt")
    assert check_weights(bundle).status == "mismatch"
    with pytest.raises(ChecksumError, match="metadata.json records"):
        load_pretrained(bundle)
    assert main(["verify-weights", str(bundle)]) == 1


def test_record_keeps_a_link_and_rewrites_its_target(tmp_path):
    """A bundle whose models/model.pt links to a save_pretrained file (as the shipped bundles do)."""
    target = save_pretrained(tiny_net(), tmp_path / "shared.pt")
    bundle = write_bundle(tmp_path / "bundle", lambda p: p.symlink_to("../../shared.pt"), metadata={})
    assert check_weights(bundle).status == "ok"  # the file's own meta; metadata.json records none yet
    payload = torch.load(target, weights_only=True)
    payload["model"] = tiny_net().state_dict()  # changed on purpose
    torch.save(payload, target)
    assert check_weights(bundle).status == "mismatch"
    check = __import__("monai_npc.networks.nets", fromlist=["record_checksum"]).record_checksum(bundle)
    assert check.status == "ok" and (bundle / "models" / "model.pt").is_symlink()
    assert torch.load(target, weights_only=True)["meta"][CHECKSUM_KEY] == check.actual


@pytest.mark.parametrize("name", sorted({p.stem for p in WEIGHTS_DIR.glob("*.pt")}))
def test_shipped_weights_have_a_matching_checksum(name):
    check = check_weights(name)
    assert check.status == "ok", check.message
    bundle = BUNDLES_DIR / BUNDLE_MODELS.get(name, "-")
    if bundle.is_dir():  # the bundle's models/model.pt is a byte-identical copy of the package file, checked by metadata.json too
        assert (bundle / "models" / "model.pt").read_bytes() == (WEIGHTS_DIR / f"{name}.pt").read_bytes()
        assert check_weights(bundle).recorded == {
            f"meta of {bundle / 'models' / 'model.pt'}": check.actual, str(bundle / "configs" / "metadata.json"): check.actual,
        }


def test_verified_checkpoint_loader(tmp_path):
    """The bundle configs' loader with the checksum check: loads matching weights, refuses changed ones."""
    pytest.importorskip("ignite")
    from ignite.engine import Engine

    from monai_npc.handlers import VerifiedCheckpointLoader

    net = tiny_net()
    bundle = write_bundle(tmp_path / "bundle", lambda p: save_pretrained(net, p), metadata={})
    into = tiny_net()
    VerifiedCheckpointLoader(str(bundle / "models" / "model.pt"), {"model": into})(Engine(lambda e, b: None))
    assert all(torch.equal(a, b) for a, b in zip(into.state_dict().values(), net.state_dict().values()))
    (bundle / "configs" / "metadata.json").write_text(json.dumps({CHECKSUM_KEY: "0" * 64}))
    with pytest.raises(ChecksumError, match="metadata.json records 0000"):
        VerifiedCheckpointLoader(str(bundle / "models" / "model.pt"), {"model": tiny_net()})(Engine(lambda e, b: None))


def test_export_with_link_stores_the_weights_once(tmp_path):
    """A retrained bundle (bare models/model.pt) exported to the package format, then linked to it."""
    from monai_npc.networks.nets import export_bundle_weights

    net = tiny_net()
    stale = {"version": "1.0", "name": "tiny \u00d7", CHECKSUM_KEY: "0" * 64}  # the checksum of the weights before
    bundle = write_bundle(tmp_path / "bundle", net.state_dict(), metadata=stale)
    out = export_bundle_weights(bundle, tmp_path / "weights" / "tiny.pt", {"trained_on": "noise"}, link=True)
    link = bundle / "models" / "model.pt"
    assert link.is_symlink() and link.resolve() == out.resolve() and not link.readlink().is_absolute()
    check = check_weights(bundle)
    assert check.status == "ok" and check.actual == state_dict_sha256(net.state_dict())
    assert json.loads((bundle / "configs" / "metadata.json").read_text()) == {**stale, CHECKSUM_KEY: check.actual}
    assert "tiny \u00d7" in (bundle / "configs" / "metadata.json").read_text(encoding="utf-8")  # not re-escaped
    loaded = load_pretrained(bundle)
    assert loaded.meta["trained_on"] == "noise" and loaded.meta["version"] == "1.0"


def test_export_with_mirror_gives_the_bundle_its_own_identical_copy(tmp_path):
    """A retrained bundle exported to the package format, then given a byte-identical copy (how the shipped bundles are kept)."""
    import shutil

    from monai_npc.networks.nets import export_bundle_weights, mirror_bundle_weights

    net = tiny_net()
    stale = {"version": "1.0", CHECKSUM_KEY: "0" * 64}
    bundle = write_bundle(tmp_path / "bundle", lambda p: p.symlink_to("../../old.pt"), metadata=stale)  # a link, as before
    old = save_pretrained(tiny_net(), tmp_path / "old.pt")
    before = old.read_bytes()
    (bundle / "models" / "model.pt").unlink()
    torch.save(net.state_dict(), bundle / "models" / "model.pt")  # a bundle training's bare state dict
    out = export_bundle_weights(bundle, tmp_path / "weights" / "tiny.pt", {"trained_on": "noise"}, mirror=True)
    copy = bundle / "models" / "model.pt"
    assert not copy.is_symlink() and copy.read_bytes() == out.read_bytes() and old.read_bytes() == before
    check = check_weights(bundle)
    assert check.status == "ok" and check.actual == state_dict_sha256(net.state_dict())
    assert json.loads((bundle / "configs" / "metadata.json").read_text())[CHECKSUM_KEY] == check.actual
    # the copied bundle loads without the package file beside it
    moved = Path(shutil.copytree(bundle, tmp_path / "elsewhere" / "bundle"))
    out.unlink()
    x = torch.rand(1, 2, 32, 32)
    with torch.no_grad():
        torch.testing.assert_close(load_pretrained(moved)(x), net(x))
    # a link already there is replaced by the copy, the file it pointed to is left alone
    copy.unlink()
    copy.symlink_to("../../old.pt")
    mirror_bundle_weights(bundle, old)
    assert not copy.is_symlink() and copy.read_bytes() == before == old.read_bytes()
    # weights without a matching recorded checksum are refused (recording it would make the copy differ)
    torch.save(net.state_dict(), tmp_path / "bare.pt")
    with pytest.raises(ValueError, match=r"bare\.pt: not a save_pretrained file with a recorded weights_sha256"):
        mirror_bundle_weights(bundle, tmp_path / "bare.pt")
    with pytest.raises(ValueError, match=r"link and mirror exclude each other"):
        export_bundle_weights(bundle, tmp_path / "again.pt", link=True, mirror=True)
    assert copy.read_bytes() == before and not (tmp_path / "again.pt").exists()


def test_saving_a_retrained_bundle_replaces_the_link_not_the_shared_file(tmp_path):
    """The bundle trainer's best-model save (atomic_torch_save to models/model.pt) leaves the package's copy alone."""
    from monai_npc.utils import atomic_torch_save

    shared = save_pretrained(tiny_net(), tmp_path / "shared.pt")
    before = shared.read_bytes()
    bundle = write_bundle(tmp_path / "bundle", lambda p: p.symlink_to("../../shared.pt"), metadata={})
    atomic_torch_save(tiny_net().state_dict(), bundle / "models" / "model.pt")
    assert not (bundle / "models" / "model.pt").is_symlink() and shared.read_bytes() == before
    assert check_weights(shared).status == "ok"
