"""The 3D Slicer module's command building and background job, without Slicer (issue 15, item 2).

Windows paths are split as on Windows (``windows=True``) on any platform; paths with spaces are
run for real through :class:`RegisterJob` with a ``monai-npc`` launcher in a folder with a space.
"""

from __future__ import annotations

import importlib.util
import os
import stat
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import SimpleITK as sitk

from monai_npc.data.phantoms import cardiac_pair

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def module():
    spec = importlib.util.spec_from_file_location("npc_slicer_module", ROOT / "examples/slicer/NPCRegistration/NPCRegistration.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)  # outside Slicer: only the plain-Python helpers
    assert mod.slicer is None
    return mod


def test_windows_command_paths_keep_backslashes(module):
    split = module.split_command
    exe = r"C:\Users\me\venv\Scripts\monai-npc.exe"
    assert split(exe, windows=True) == [exe]  # POSIX shlex gave C:UsersmevenvScriptsmonai-npc.exe
    spaced = r"C:\Program Files\My Env\Scripts\monai-npc.exe"
    assert split(f'"{spaced}" --threads 1', windows=True) == [spaced, "--threads", "1"]
    assert split([spaced, "--threads", "1"], windows=True) == [spaced, "--threads", "1"]  # a list is never split
    assert split(r"/opt/my\ tools/monai-npc", windows=False) == ["/opt/my tools/monai-npc"]
    assert split("'/opt/my tools/monai-npc' --quiet", windows=False) == ["/opt/my tools/monai-npc", "--quiet"]
    for empty in ("", "   ", []):
        with pytest.raises(ValueError, match="empty"):
            split(empty)


def test_register_command_with_windows_paths_and_spaces(module):
    moving, fixed = r"C:\Users\me\My Data\ED frame.nii.gz", r"C:\Users\me\My Data\ES frame.nii.gz"
    out, label = r"C:\Users\me\AppData\Local\Temp\npc out", r"C:\Users\me\My Data\ED label.nii.gz"
    cmd = module.build_register_command(r'"C:\Program Files\NPC\monai-npc.exe"', moving, fixed, out, "camus", label, windows=True)
    assert cmd == [r"C:\Program Files\NPC\monai-npc.exe", "register", "--moving", moving, "--fixed", fixed, "--out", out,
                   "--model", "camus", "--moving-label", label]


def _launcher(folder: Path) -> Path:
    """A ``monai-npc`` executable in a folder whose name has a space (like a user's venv)."""
    folder.mkdir(parents=True)
    exe = folder / "monai-npc"
    exe.write_text(f"#!{sys.executable}\nimport sys\nfrom monai_npc.cli.main import main\nsys.exit(main())\n")
    exe.chmod(exe.stat().st_mode | stat.S_IXUSR)
    return exe


def _write(arr, path, pixel=sitk.sitkFloat32):
    image = sitk.Cast(sitk.GetImageFromArray(arr), pixel)
    image.SetSpacing((1.5, 1.5))
    sitk.WriteImage(image, str(path))
    return str(path)


def _wait(job, timeout=120.0):
    start = time.time()
    while job.poll() is None:  # what the module's QTimer does, without blocking the GUI
        assert time.time() - start < timeout
        time.sleep(0.1)
    return job.poll()


@pytest.mark.skipif(os.name == "nt", reason="the launcher is a POSIX script")
def test_background_job_runs_with_spaces_in_every_path(module, tmp_path):
    exe = _launcher(tmp_path / "my env" / "bin")
    data = tmp_path / "my data"
    data.mkdir()
    pair = cardiac_pair(size=64, seed=2)
    moving, fixed = _write(pair["moving"], data / "ED frame.nii.gz"), _write(pair["fixed"], data / "ES frame.nii.gz")
    label = _write(pair["moving_label"], data / "ED label.nii.gz", sitk.sitkUInt8)
    out = tmp_path / "npc out"
    env = dict(os.environ, PYTHONPATH=str(ROOT), OMP_NUM_THREADS="1")
    cmd = module.build_register_command(str(exe), moving, fixed, str(out), "phase-correlation", label)
    job = module.RegisterJob(cmd + ["--no-overview"], str(tmp_path / "npc out.log"), env).start()
    assert _wait(job) == 0, job.log()
    files = module.result_files(str(out))
    assert Path(files["transform"]).name == "transform_slicer.h5" and Path(files["warped_label"]).is_file()
    warped = sitk.ReadImage(files["warped"])
    assert warped.GetSize() == (64, 64) and np.allclose(warped.GetSpacing(), (1.5, 1.5))

    # a failing run: exit code 1 and the CLI's message in the log (what the module shows)
    bad = module.build_register_command(str(exe), moving, fixed, str(tmp_path / "bad"), "no_such_model")
    job = module.RegisterJob(bad, str(tmp_path / "bad.log"), env).start()
    assert _wait(job) == 1 and "no shipped weights named 'no_such_model'" in job.log()

    # a bare name is looked up on the child's PATH (Slicer's startup environment), with a clear error if absent
    job = module.RegisterJob(["monai-npc", "--help"], str(tmp_path / "help.log"), dict(env, PATH=str(exe.parent))).start()
    assert _wait(job) == 0 and job.command[0] == str(exe)
    with pytest.raises(FileNotFoundError, match="not found on the PATH Slicer was started with"):
        module.RegisterJob(["monai-npc"], str(tmp_path / "x.log"), dict(env, PATH=str(tmp_path / "nowhere"))).start()
