"""Clinical inputs for ``monai-npc register``: cine DICOM folders (phase / slice / instance picking),
JPEG against a DICOM frame in pixel space, truncated files, log levels and threads."""

import json
import os

import numpy as np
import pytest
import SimpleITK as sitk

import monai_npc
from monai_npc import runtime
from monai_npc.cli.main import main
from monai_npc.data.io import parse_select, read_dicom_folder, read_sitk_image, read_vector_image
from monai_npc.data.phantoms import cardiac_pair
from monai_npc.interop import read_displacement_field
from tests.dicom_writer import write_dicom

ROW = np.array([np.cos(0.35), np.sin(0.35), 0.0])
COL = np.array([-np.sin(0.35) * np.cos(0.2), np.cos(0.35) * np.cos(0.2), -np.sin(0.2)])  # orthonormal to ROW
NORMAL = np.cross(ROW, COL)


def _dicom(arr, path, position, series, study, number, trigger=None, frames=False):
    write_dicom(arr, path, position, list(ROW) + list(COL), (1.4, 1.4), 8.0, series, study, number, trigger, frames)


@pytest.fixture(scope="module")
def cine(tmp_path_factory):
    """3 slice positions x 4 phases in ONE series (as scanners store short-axis cines); phase p of slice
    z is a phantom shifted by p pixels, so every file is distinguishable."""
    from pydicom.uid import generate_uid

    folder = tmp_path_factory.mktemp("cine") / "SAX"
    folder.mkdir()
    series, study = generate_uid(), generate_uid()
    base = [cardiac_pair(size=48, seed=20 + z)["fixed"] * 1000 for z in range(3)]
    frames = {}
    number = 1
    for z in (2, 0, 1):  # written out of order
        for p in (3, 1, 0, 2):
            frames[z, p] = np.roll(base[z], p, axis=1)
            _dicom(frames[z, p], folder / f"IM{number:04d}", np.array([-30.0, 20.0, 50.0]) + 8.0 * z * NORMAL,
                   series, study, number=z * 4 + p + 1, trigger=40.0 * p)
            number += 1
    return folder, frames


def test_cine_folder_needs_a_phase_and_says_so(cine):
    folder, _ = cine
    with pytest.raises(ValueError) as info:
        read_sitk_image(folder, what="moving image")
    msg = str(info.value)
    for words in ("cine series", "4 phases x 3 slice position(s)", "trigger times 0..120 ms", "phase=K", "--moving-select"):
        assert words in msg, msg
    assert "Non uniform" not in msg


def test_cine_phase_slice_instance_and_trigger_time(cine):
    folder, frames = cine
    vol = read_dicom_folder(folder, "phase=2")
    assert vol.GetSize() == (48, 48, 3)
    np.testing.assert_allclose(vol.GetSpacing(), (1.4, 1.4, 8.0), rtol=1e-6)
    np.testing.assert_allclose(np.asarray(vol.GetDirection()).reshape(3, 3)[:, 2], NORMAL, atol=1e-6)
    arr = sitk.GetArrayFromImage(vol)
    for z in range(3):
        np.testing.assert_array_equal(arr[z], frames[z, 2].astype(np.uint16))
    same = read_dicom_folder(folder, {"trigger_time": 75})  # nearest: 80 ms = phase 2
    np.testing.assert_array_equal(sitk.GetArrayFromImage(same), arr)
    one = read_dicom_folder(folder, "phase=1,slice=2")
    assert one.GetSize() == (48, 48, 1)
    np.testing.assert_array_equal(sitk.GetArrayFromImage(one)[0], frames[2, 1].astype(np.uint16))
    np.testing.assert_allclose(one.GetOrigin(), np.array([-30.0, 20.0, 50.0]) + 16.0 * NORMAL, atol=1e-4)
    inst = read_dicom_folder(folder, "instance=7")  # slice 1, phase 2
    np.testing.assert_array_equal(sitk.GetArrayFromImage(inst)[0], frames[1, 2].astype(np.uint16))
    for spec, words in (("phase=4", "out of range"), ("instance=99", "InstanceNumber 99"), ("phase=0,slice=3", "out of range"),
                        ("colour=1", "unknown selection key"), ("phase=x", "integer"), ("frame=0", "applies to a file")):
        with pytest.raises(ValueError, match=words):
            read_dicom_folder(folder, spec)
    assert parse_select("phase=3, trigger-time=12.5") == {"phase": 3, "trigger_time": 12.5}


def test_cli_registers_two_phases_of_a_cine(cine, tmp_path):
    folder, frames = cine
    out = tmp_path / "out"
    rc = main(["register", "--moving", str(folder), "--moving-select", "phase=0", "--fixed", str(folder),
               "--fixed-select", "phase=3", "--model", "phase-correlation", "--out", str(out), "--no-overview"])
    assert rc == 0
    warped = sitk.ReadImage(str(out / "warped.nii.gz"))
    assert warped.GetSize() == (48, 48, 3)
    ddf, _ = read_displacement_field(out / "transform.h5")
    np.testing.assert_allclose(ddf[2].mean(axis=(1, 2)), -3.0, atol=0.15)  # phase 3 = phase 0 moved 3 px along x
    assert json.loads((out / "summary.json").read_text())["select"] == {"moving": "phase=0", "fixed": "phase=3"}


def test_jpeg_against_a_dicom_frame_in_pixel_space(tmp_path, capsys):
    from PIL import Image
    from pydicom.uid import generate_uid

    fixed = cardiac_pair(size=48, seed=30)["fixed"] * 1000
    _dicom(fixed, tmp_path / "frame.dcm", (-30.0, 20.0, 50.0), generate_uid(), generate_uid(), 1)
    Image.fromarray((np.roll(fixed, (2, -1), axis=(0, 1)) / 1000 * 255).astype(np.uint8)).convert("RGB").save(tmp_path / "photo.jpg", quality=95)
    args = ["register", "--moving", str(tmp_path / "photo.jpg"), "--fixed", str(tmp_path / "frame.dcm"),
            "--model", "phase-correlation", "--no-overview"]
    assert main(args + ["--out", str(tmp_path / "a")]) == 1
    assert "--pixel-space" in capsys.readouterr().err  # 2-D vs 3-D: the error says what to do
    assert main(args + ["--out", str(tmp_path / "b"), "--pixel-space"]) == 0
    warped = sitk.ReadImage(str(tmp_path / "b" / "warped.nii.gz"))
    ref = sitk.ReadImage(str(tmp_path / "frame.dcm"), sitk.sitkFloat32)
    assert warped.GetSize() == (48, 48, 1) and np.allclose(warped.GetOrigin(), ref.GetOrigin())  # the DICOM frame's space
    ddf, _ = read_displacement_field(tmp_path / "b" / "transform.h5")
    np.testing.assert_allclose(ddf[1:, 0].mean(axis=(1, 2)), [2.0, -1.0], atol=0.15)


@pytest.mark.parametrize("suffix", [".nii.gz", ".nii", ".mha", ".nrrd"])
def test_truncated_files_are_one_line_errors(tmp_path, suffix, capsys):
    image = sitk.GetImageFromArray(np.random.default_rng(0).random((64, 64)).astype(np.float32))
    sitk.WriteImage(image, str(tmp_path / f"ok{suffix}"), suffix == ".nii.gz")
    data = (tmp_path / f"ok{suffix}").read_bytes()
    (tmp_path / f"cut{suffix}").write_bytes(data[: len(data) * 2 // 3])
    with pytest.raises(ValueError, match="truncated") as info:
        read_sitk_image(tmp_path / f"cut{suffix}", what="moving image")
    assert str(tmp_path / f"cut{suffix}") in str(info.value) and "\n" not in str(info.value)
    rc = main(["register", "--moving", str(tmp_path / f"cut{suffix}"), "--fixed", str(tmp_path / f"ok{suffix}"),
               "--model", "phase-correlation", "--out", str(tmp_path / "out")])
    err = capsys.readouterr().err
    assert rc == 1 and err.count("\n") == 1 and "install" not in err and "truncated" in err
    assert not (tmp_path / "out").exists()


def test_truncated_displacement_file(tmp_path):
    field = sitk.GetImageFromArray(np.random.default_rng(0).normal(size=(40, 40, 2)), isVector=True)
    sitk.WriteImage(field, str(tmp_path / "d.nii.gz"))
    data = (tmp_path / "d.nii.gz").read_bytes()
    (tmp_path / "cut.nii.gz").write_bytes(data[: len(data) // 2])
    assert read_vector_image(tmp_path / "d.nii.gz")[0].shape == (40, 40, 2)
    with pytest.raises(ValueError, match="truncated"):
        read_vector_image(tmp_path / "cut.nii.gz")
    with pytest.raises(ValueError, match="truncated"):
        read_displacement_field(tmp_path / "cut.nii.gz")


def test_quiet_and_log_level(tmp_path, capsys):
    zeros = tmp_path / "z.nii.gz"
    sitk.WriteImage(sitk.Image([32, 32], sitk.sitkFloat32), str(zeros))
    args = ["register", "--moving", str(zeros), "--fixed", str(zeros), "--model", "phase-correlation", "--no-overview"]
    assert main(args + ["--out", str(tmp_path / "a")]) == 0
    out, err = capsys.readouterr()
    assert "monai-npc: WARNING:" in err and "constant" in err and "registered" in out
    assert main(["--quiet"] + args + ["--out", str(tmp_path / "b")]) == 0
    assert capsys.readouterr() == ("", "")
    assert main(args + ["--out", str(tmp_path / "c"), "--log-level", "error"]) == 0
    assert capsys.readouterr().err == ""
    with pytest.raises(SystemExit):  # argparse: usage error, exit code 2
        main(args + ["--out", str(tmp_path / "d"), "--threads", "0"])
    assert "--threads: must be >= 1" in capsys.readouterr().err
    assert main(args + ["--out", str(tmp_path / "e"), "--threads", "1"]) == 0


def test_threads(monkeypatch):
    import torch

    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    monkeypatch.setattr(os, "getloadavg", lambda: (runtime.available_cores() + 3.0, 0.0, 0.0))
    assert runtime.default_threads() == 1  # a busy machine: one thread
    monkeypatch.setattr(os, "getloadavg", lambda: (0.0, 0.0, 0.0))
    assert runtime.default_threads() == min(runtime.MAX_DEFAULT_THREADS, runtime.available_cores())
    monkeypatch.setenv("OMP_NUM_THREADS", "3")
    assert runtime.default_threads() == 3
    before = torch.get_num_threads()
    with runtime.use_threads(1) as n:
        assert n == 1 and torch.get_num_threads() == 1 and sitk.ProcessObject.GetGlobalDefaultNumberOfThreads() == 1
    assert torch.get_num_threads() == before
    reg = monai_npc.register(np.zeros((16, 32)) + np.arange(32), np.zeros((16, 32)) + np.arange(32), "phase-correlation", threads=1)
    assert reg.summary["identity_slices"] == [] and torch.get_num_threads() == before
    # nested, then overlapping blocks as two server threads run them: each ends on the newest running block's count,
    # the last restores what the first found (before, overlapping blocks restored each other's counts)
    with runtime.use_threads(2):
        with runtime.use_threads(1):
            assert torch.get_num_threads() == 1
        assert torch.get_num_threads() == 2
    assert torch.get_num_threads() == before
    first, second = runtime.use_threads(2), runtime.use_threads(1)
    first.__enter__()
    second.__enter__()
    first.__exit__(None, None, None)  # the first ends while the second still runs
    assert torch.get_num_threads() == 1
    second.__exit__(None, None, None)
    assert torch.get_num_threads() == before


def test_third_party_noise_is_silenced():
    import logging
    import warnings

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        runtime.silence_third_party()
        warnings.warn("monai.metrics.utils get_mask_edges:always_return_as_numpy: Argument `always_return_as_numpy` "
                      "has been deprecated since version 1.5.0.", FutureWarning)
        warnings.warn("a warning of our own", RuntimeWarning)
    assert [str(w.message) for w in caught] == ["a warning of our own"]
    assert logging.getLogger("monai.data.nvimgcodec_pydicom_plugin").getEffectiveLevel() == logging.ERROR
