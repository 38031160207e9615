"""Outputs are all or nothing: a full disk, a failed writer or a kill never leaves a partial result.

Each case runs on a small generated pair with the weight-free ``phase-correlation`` model.
"""

import errno
import json
import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest
import SimpleITK as sitk

from monai_npc import io_safety
from monai_npc.cli.main import main
from monai_npc.data.phantoms import cardiac_pair
from monai_npc.io_safety import AtomicFolder, OutputError, atomic_write, atomic_write_text, recover_folder

IO_SAFETY = Path(io_safety.__file__)


def _pair(folder: Path) -> list:
    p = cardiac_pair(size=48, seed=3)
    for name, arr in (("m", p["moving"]), ("f", p["fixed"])):
        sitk.WriteImage(sitk.GetImageFromArray(arr.astype(np.float32)), str(folder / f"{name}.nii.gz"))
    return ["register", "--moving", str(folder / "m.nii.gz"), "--fixed", str(folder / "f.nii.gz"),
            "--model", "phase-correlation", "--no-overview"]


def _snapshot(folder: Path) -> dict:
    return {p.name: p.read_bytes() for p in sorted(folder.iterdir())}


def _hidden(folder: Path) -> list:
    return [p.name for p in folder.iterdir() if p.name.startswith(".")]


def _truncate_after(write):
    """A writer that writes the file, then leaves only its first half (a full disk the writer ignores)."""

    def wrapped(image, path, *args):
        write(image, path, *args)
        size = os.path.getsize(path)
        with open(path, "r+b") as f:
            f.truncate(size // 2)

    return wrapped


def _raise_after_half(write):
    def wrapped(image, path, *args):
        write(image, path, *args)
        with open(path, "r+b") as f:
            f.truncate(os.path.getsize(path) // 2)
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(path))

    return wrapped


def _hdf5_failure(obj, path, *args):
    Path(path).write_bytes(b"\x89HDF\r\n\x1a\n")  # a header, then the disk is full
    raise RuntimeError("Exception thrown in ITK HDF5TransformIO\nHDF5-DIAG: Error detected in HDF5 (1.14)\n  #000: H5Dio.c")


@pytest.mark.parametrize("case", ["silent_truncation", "enospc_midway", "hdf5_full_disk", "full_at_start"])
def test_full_disk_keeps_previous_result_and_says_one_line(case, tmp_path, monkeypatch, capsys):
    args = _pair(tmp_path)
    out = tmp_path / "out"
    assert main(args + ["--out", str(out)]) == 0
    before = _snapshot(out)
    capsys.readouterr()
    if case == "silent_truncation":
        monkeypatch.setattr(sitk, "WriteImage", _truncate_after(sitk.WriteImage))
    elif case == "enospc_midway":
        monkeypatch.setattr(sitk, "WriteImage", _raise_after_half(sitk.WriteImage))
    elif case == "hdf5_full_disk":
        monkeypatch.setattr(sitk, "WriteTransform", _hdf5_failure)
    else:
        def no_space(*a, **k):
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

        monkeypatch.setattr(io_safety.tempfile, "mkdtemp", no_space)
    if case in ("silent_truncation", "hdf5_full_disk"):  # the writers give no errno: the free space tells
        monkeypatch.setattr(io_safety.shutil, "disk_usage", lambda p: type("U", (), {"free": 0})())
    assert main(args + ["--out", str(out)]) == 1
    err = capsys.readouterr().err
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1 and "Traceback" not in err, err
    assert str(out) in lines[0] and "disk full (ENOSPC)" in lines[0], lines[0]
    assert _snapshot(out) == before  # the previous result, untouched
    assert _hidden(tmp_path) == []  # no partial files or temporary folders left


def test_atomic_write_failure_keeps_previous_file(tmp_path):
    target = tmp_path / "metrics.json"
    target.write_text('{"old": true}')

    def half_then_full(path):
        path.write_text('{"new": ')
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(path))

    with pytest.raises(OutputError) as info:
        atomic_write(target, half_then_full)
    assert str(target) in str(info.value) and "disk full" in str(info.value) and "\n" not in str(info.value)
    assert target.read_text() == '{"old": true}' and sorted(p.name for p in tmp_path.iterdir()) == ["metrics.json"]
    with pytest.raises(OutputError, match="incomplete"):  # written without error but not valid: caught by the check
        atomic_write(target, lambda path: path.write_text('{"truncated": '))
    assert target.read_text() == '{"old": true}' and _hidden(tmp_path) == []
    atomic_write_text(target, '{"new": true}')
    assert json.loads(target.read_text()) == {"new": True} and _hidden(tmp_path) == []


def test_missing_parent_and_permission_are_named(tmp_path):
    blocker = tmp_path / "afile"
    blocker.write_text("x")
    with pytest.raises(OutputError, match=r"afile.*(a parent is not a folder|existing file)"):
        atomic_write_text(blocker / "sub" / "metrics.json", "{}")
    err = PermissionError(errno.EACCES, "Permission denied", str(tmp_path / "x"))
    assert io_safety.describe_os_error(err) == "permission denied (EACCES)"
    assert "missing folder" in io_safety.describe_os_error(FileNotFoundError(errno.ENOENT, "No such file"))


def _commit_script(out: Path, kill_at: str, exchange: bool) -> str:
    """A child process that commits a new ``out`` and is SIGKILLed at ``kill_at`` (io_safety loaded alone)."""
    return textwrap.dedent(f"""
        import importlib.util, os, signal
        spec = importlib.util.spec_from_file_location("io_safety", {str(IO_SAFETY)!r})
        io = importlib.util.module_from_spec(spec); spec.loader.exec_module(io)
        if not {exchange!r}:
            io._RENAMEAT2 = None
        die = lambda *a, **k: os.kill(os.getpid(), signal.SIGKILL)
        setattr(io, {kill_at!r}, die)
        folder = io.AtomicFolder({str(out)!r})
        folder.put("summary.json", lambda p: p.write_text('{{"run": "new"}}'))
        folder.commit()
    """)


@pytest.mark.parametrize("exchange, kill_at, expected", [
    (False, "_between_renames", "old"),  # portable fallback: out renamed to a backup, killed before the new one lands
    (True, "_remove", "new"),  # renameat2 swap done, killed before the old content is removed
])
def test_kill_during_commit_leaves_old_or_new_content(exchange, kill_at, expected, tmp_path):
    if exchange and io_safety._RENAMEAT2 is None:
        pytest.skip("renameat2 is not available here")
    out = tmp_path / "out"
    out.mkdir()
    (out / "summary.json").write_text('{"run": "old"}')
    proc = subprocess.run([sys.executable, "-c", _commit_script(out, kill_at, exchange)], capture_output=True, text=True)
    assert proc.returncode == -signal.SIGKILL, proc.stderr
    if exchange:
        assert json.loads((out / "summary.json").read_text())["run"] == "new"  # never missing
    recover_folder(out)  # what every new run does first (OutputFolder / AtomicFolder)
    assert json.loads((out / "summary.json").read_text())["run"] == expected
    assert _hidden(tmp_path) == []  # the backup restored or removed


def test_failure_between_renames_restores_previous_folder(tmp_path, monkeypatch):
    out = tmp_path / "out"
    out.mkdir()
    (out / "summary.json").write_text('{"run": "old"}')
    monkeypatch.setattr(io_safety, "_RENAMEAT2", None)

    def interrupted():
        raise KeyboardInterrupt

    monkeypatch.setattr(io_safety, "_between_renames", interrupted)
    folder = AtomicFolder(out)
    folder.put("summary.json", lambda p: p.write_text('{"run": "new"}'))
    with pytest.raises(KeyboardInterrupt):
        folder.commit()
    assert json.loads((out / "summary.json").read_text())["run"] == "old" and _hidden(tmp_path) == []


def test_exchange_replaces_a_folder_in_one_step(tmp_path):
    if io_safety._RENAMEAT2 is None:
        pytest.skip("renameat2 is not available here")
    a, b = tmp_path / "a", tmp_path / "b"
    a.mkdir(), b.mkdir()
    (a / "x").write_text("a"), (b / "x").write_text("b")
    assert io_safety.exchange(a, b)
    assert (a / "x").read_text() == "b" and (b / "x").read_text() == "a"
