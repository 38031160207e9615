"""``monai_npc.register`` (in memory) and what ``Registration.save`` / ``monai-npc register`` write:
ITK-identical warping (border included), readable displacement files, clean output folders."""

import json
import os
import threading
from pathlib import Path

import numpy as np
import pytest
import SimpleITK as sitk
import torch

import monai_npc
from monai_npc.cli.main import main
from monai_npc.data.phantoms import cardiac_pair
from monai_npc.functional import warp_image
from monai_npc.interop import ddf_to_physical, grid_mismatch
from monai_npc.apps.registration.files import register_batch, register_files
from monai_npc.networks.nets import NPCNet
from tests.dicom_writer import write_dicom


def _image(arr, spacing=(0.9, 1.6), origin=(12.0, -30.0), angle=0.4, pixel=sitk.sitkFloat32):
    image = sitk.Cast(sitk.GetImageFromArray(np.asarray(arr)), pixel)
    c, s = np.cos(angle), np.sin(angle)
    image.SetSpacing(spacing)
    image.SetOrigin(origin)
    image.SetDirection((c, -s, s, c))
    return image


@pytest.fixture(scope="module")
def tiny_net():
    """A tiny NPCNet whose output layer makes a clearly non-zero field (~1-5 voxels)."""
    torch.manual_seed(0)
    net = NPCNet(kernel_size=8, stride=4, num_pairs=8, top_k=4, gate_dim=8, hidden_dim=8, num_pe=8, num_steps=2)
    with torch.no_grad():
        head = net.ode.stages[0].decoder.head.out
        torch.nn.init.normal_(head.weight, std=4.0)
        head.bias.copy_(torch.tensor([1.5, -1.0]))
    return net.eval()


@pytest.fixture(scope="module")
def pair():
    p = cardiac_pair(size=96, seed=1)
    fixed = _image(p["fixed"][:, :80] * 300)
    other = _image(np.zeros((70, 90)), spacing=(1.3, 1.25), origin=(5.0, -40.0), angle=0.25)  # moving on its own grid
    moving = sitk.Resample(_image(p["moving"][:, :80] * 300), other, sitk.Transform(), sitk.sitkLinear, 0.0)
    mlab = sitk.Resample(_image(p["moving_label"][:, :80], pixel=sitk.sitkUInt8), other, sitk.Transform(), sitk.sitkNearestNeighbor, 0)
    return moving, fixed, mlab, _image(p["fixed_label"][:, :80], pixel=sitk.sitkUInt8)


def test_in_memory_api_is_what_sitk_resample_gives(tiny_net, pair):
    moving, fixed, mlab, flab = pair
    reg = monai_npc.register(moving, fixed, tiny_net, moving_label=mlab, fixed_label=flab)
    assert isinstance(reg, monai_npc.Registration)
    assert grid_mismatch(reg.warped, fixed) is None and grid_mismatch(reg.warped_label, fixed) is None
    # the transform reproduces .warped and .warped_label exactly, every voxel
    theirs = sitk.Resample(moving, fixed, reg.transform, sitk.sitkLinear, 0.0)
    np.testing.assert_array_equal(sitk.GetArrayFromImage(theirs), sitk.GetArrayFromImage(reg.warped))
    lab = sitk.Resample(mlab, fixed, reg.transform, sitk.sitkLabelLinear, 0)
    np.testing.assert_array_equal(sitk.GetArrayFromImage(lab), sitk.GetArrayFromImage(reg.warped_label))
    # .ddf (fixed voxels, MONAI convention) is the transform's field in mm
    assert reg.ddf.shape == (2, 96, 80) and reg.ddf.abs().mean() > 0.5
    field = sitk.GetArrayFromImage(reg.transform.GetDisplacementField())
    np.testing.assert_allclose(ddf_to_physical(reg.ddf.double(), fixed.GetSpacing(), fixed.GetDirection()), field, atol=1e-4)
    # ... and MONAI-style warping of the moving image on the fixed grid agrees away from the border
    on_fixed = torch.from_numpy(sitk.GetArrayFromImage(sitk.Resample(moving, fixed, sitk.Transform(), sitk.sitkLinear, 0.0)))
    monai_warp = warp_image(on_fixed[None, None].double(), reg.ddf[None].double(), "bilinear", "zeros")[0, 0].numpy()
    ours = sitk.GetArrayFromImage(reg.warped)
    inner = (slice(12, -12), slice(12, -12))
    assert np.median(np.abs(monai_warp - ours)[inner]) < 2.0  # range ~300: two interpolations against one
    s = reg.summary
    assert s["moving"].startswith("<in-memory") and s["dice_mean"] is not None and s["identity_slices"] == []
    assert 0.0 <= s["folding_percent"] < 100.0 and reg.reliability is not None and reg.jacobian.GetSize() == fixed.GetSize()


def test_numpy_inputs_with_spacing(tiny_net):
    p = cardiac_pair(size=64, seed=3)
    reg = monai_npc.register(p["moving"].astype(np.float64), (p["fixed"] * 1000).astype(np.int16), tiny_net, spacing=(1.5, 0.75))
    assert reg.warped.GetSpacing() == (0.75, 1.5) and reg.warped.GetSize() == (64, 64)
    assert reg.warped.GetPixelID() == sitk.sitkFloat32
    with pytest.raises(ValueError, match="complex"):
        monai_npc.register(p["moving"].astype(np.complex64), p["fixed"], tiny_net)
    with pytest.raises(ValueError, match="spacing"):
        monai_npc.register(p["moving"], p["fixed"], tiny_net, spacing=(1.0,))
    double = NPCNet(kernel_size=8, stride=4, num_pairs=8, top_k=4, gate_dim=8, hidden_dim=8, num_pe=8, num_steps=1).double()
    assert monai_npc.register(p["moving"], p["fixed"], double).ddf.dtype == torch.float32  # float32 images, float64 model: cast


def test_saved_warped_equals_itk_everywhere_incl_border(tiny_net, pair, tmp_path):
    """warped.nii.gz = ITK resampling of the moving file with transform.h5 at every voxel, the border strip included."""
    moving, fixed, mlab, flab = pair
    sitk.WriteImage(moving, str(tmp_path / "m.mha"))
    sitk.WriteImage(fixed, str(tmp_path / "f.nrrd"))
    s = register_files(tmp_path / "m.mha", tmp_path / "f.nrrd", tmp_path / "out", model=tiny_net, overview=False)
    assert s["outputs"]["warped"] == "warped.nii.gz"
    warped = sitk.GetArrayFromImage(sitk.ReadImage(str(tmp_path / "out" / "warped.nii.gz")))
    tx = sitk.ReadTransform(str(tmp_path / "out" / "transform.h5"))
    itk = sitk.GetArrayFromImage(sitk.Resample(sitk.ReadImage(str(tmp_path / "m.mha")), fixed, tx, sitk.sitkLinear, 0.0))
    border = np.ones(warped.shape, bool)
    border[3:-3, 3:-3] = False
    assert (itk[border] != 0).mean() > 0.3  # the strip holds image values, not padding
    np.testing.assert_array_equal(warped[border], itk[border])
    np.testing.assert_array_equal(warped, itk)


def test_single_dicom_frame_displacement_is_a_displacement_field(tmp_path):
    row = np.array([np.cos(0.35), np.sin(0.35), 0.0])
    col = np.array([-np.sin(0.35) * np.cos(0.2), np.cos(0.35) * np.cos(0.2), -np.sin(0.2)])  # orthonormal, oblique
    frames = [cardiac_pair(size=48, seed=7)[k] * 1000 for k in ("moving", "fixed")]
    for name, arr in zip(("m.dcm", "f.dcm"), frames):
        write_dicom(arr, tmp_path / name, (-40.0, 25.0, 60.0), list(row) + list(col), (0.9, 0.8), 6.0)
    rc = main(["register", "--moving", str(tmp_path / "m.dcm"), "--fixed", str(tmp_path / "f.dcm"),
               "--model", "phase-correlation", "--out", str(tmp_path / "out"), "--no-overview"])
    assert rc == 0
    field = sitk.ReadImage(str(tmp_path / "out" / "displacement.nii.gz"))
    assert field.GetDimension() == 3 and field.GetNumberOfComponentsPerPixel() == 3
    tx = sitk.DisplacementFieldTransform(sitk.Cast(field, sitk.sitkVectorFloat64))
    fixed = sitk.ReadImage(str(tmp_path / "f.dcm"), sitk.sitkFloat32)
    moving = sitk.ReadImage(str(tmp_path / "m.dcm"), sitk.sitkFloat32)
    from_nifti = sitk.GetArrayFromImage(sitk.Resample(moving, fixed, tx, sitk.sitkLinear, 0.0))
    warped = sitk.GetArrayFromImage(sitk.ReadImage(str(tmp_path / "out" / "warped.nii.gz")))
    assert warped.shape == (1, 48, 48) and np.abs(from_nifti - warped).max() < 1e-2  # float32 field vs double h5


def test_stale_files_are_gone_and_out_is_checked_first(tmp_path, capsys):
    p = cardiac_pair(size=48, seed=5)
    for name, arr, pixel in (("m", p["moving"], sitk.sitkFloat32), ("f", p["fixed"], sitk.sitkFloat32),
                             ("ml", p["moving_label"], sitk.sitkUInt8)):
        sitk.WriteImage(_image(arr, pixel=pixel), str(tmp_path / f"{name}.nii.gz"))
    args = ["register", "--moving", str(tmp_path / "m.nii.gz"), "--fixed", str(tmp_path / "f.nii.gz"), "--model", "phase-correlation"]
    assert main(args + ["--moving-label", str(tmp_path / "ml.nii.gz"), "--out", str(tmp_path / "out")]) == 0
    assert (tmp_path / "out" / "warped_label.nii.gz").is_file()
    assert main(args + ["--out", str(tmp_path / "out"), "--no-overview"]) == 0
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == sorted(
        json.loads((tmp_path / "out" / "summary.json").read_text())["outputs"].values()
    )  # no warped_label.nii.gz or overview.png left from the first run
    assert not [q for q in tmp_path.iterdir() if q.name.startswith(".")]  # no temporary folders left
    capsys.readouterr()
    (tmp_path / "afile").write_text("x")
    for out, words in ((tmp_path / "afile", "is an existing file"), (tmp_path / "afile" / "sub", "cannot write output folder"),
                       (tmp_path, "holds files that are not outputs")):
        assert main(args + ["--out", str(out)]) == 1
        err = capsys.readouterr().err
        assert words in err and str(out) in err and "Traceback" not in err
    assert (tmp_path / "m.nii.gz").is_file()  # a folder with other files is never replaced


def test_concurrent_saves_never_mix(tmp_path):
    p = cardiac_pair(size=48, seed=6)
    regs = [monai_npc.register(p["moving"], np.roll(p["fixed"], k, axis=1), "phase-correlation") for k in (0, 3)]
    shifts = [r.summary["displacement_mm_mean"] for r in regs]
    assert abs(shifts[1] - shifts[0]) > 1.0
    errors = []

    def work(reg):
        try:
            for _ in range(6):
                reg.save(tmp_path / "out", overview=False)
        except Exception as err:  # pragma: no cover - reported below
            errors.append(err)

    threads = [threading.Thread(target=work, args=(r,)) for r in regs]
    [t.start() for t in threads]
    [t.join() for t in threads]
    assert not errors
    summary = json.loads((tmp_path / "out" / "summary.json").read_text())
    k = shifts.index(summary["displacement_mm_mean"])
    np.testing.assert_array_equal(
        sitk.GetArrayFromImage(sitk.ReadImage(str(tmp_path / "out" / "warped.nii.gz"))), sitk.GetArrayFromImage(regs[k].warped)
    )  # the warped image of the run whose summary is there
    assert [q.name for q in tmp_path.iterdir()] == ["out"]


def test_batch_carries_on_past_a_bad_out(tmp_path):
    p = cardiac_pair(size=48, seed=5)
    sitk.WriteImage(_image(p["moving"]), str(tmp_path / "m.nii.gz"))
    sitk.WriteImage(_image(p["fixed"]), str(tmp_path / "f.nii.gz"))
    (tmp_path / "taken").write_text("a file where an output folder should go")
    (tmp_path / "pairs.csv").write_text("moving,fixed,out\nm.nii.gz,f.nii.gz,taken\nm.nii.gz,f.nii.gz,good\n")
    results = register_batch(tmp_path / "pairs.csv", model="phase-correlation", out=tmp_path / "report", progress=False, overview=False)
    assert "existing file" in results[0]["error"] and "error" not in results[1]
    assert (tmp_path / "good" / "summary.json").is_file()
    text = (tmp_path / "report" / "batch_summary.csv").read_text()
    assert "existing file" in text and text.count("\n") == 3


@pytest.mark.parametrize("model", ["tiny", "phase-correlation"])
def test_constant_images_give_identity_and_zero_reliability(tiny_net, model, tmp_path):
    net = tiny_net if model == "tiny" else model
    zeros = np.zeros((64, 64), np.float32)
    with pytest.warns(RuntimeWarning, match="constant"):
        reg = monai_npc.register(zeros, zeros + 1e-6 * np.random.default_rng(0).random((64, 64)), net)
    assert float(reg.ddf.abs().max()) == 0.0 and reg.summary["identity_slices"] == [0]
    assert reg.summary["reliability_mean"] == 0.0 and reg.summary["displacement_mm_max"] == 0.0
    # a volume with one blank slice: that slice only
    vol = np.stack([cardiac_pair(size=64, seed=s)["moving"] for s in range(3)])
    fixed = np.roll(vol, (2, -1), axis=(1, 2))  # a shift phase correlation finds
    vol[1] = 7.0
    with pytest.warns(RuntimeWarning, match=r"slice\(s\) \[1\]"):
        reg = monai_npc.register(vol, fixed, net)
    assert float(reg.ddf[:, 1].abs().max()) == 0.0 and float(reg.ddf[:, [0, 2]].abs().max()) > 0.0
    if reg.reliability is not None:
        assert float(np.abs(sitk.GetArrayFromImage(reg.reliability)[1]).max()) == 0.0


def test_large_image_end_to_end_and_deterministic_summary(tmp_path):
    """1024 x 1024 (a size that crashed with a view of a freed image) twice: identical summaries."""
    rng = np.random.default_rng(0)
    img = sitk.SmoothingRecursiveGaussian(sitk.GetImageFromArray(rng.random((1024, 1024)).astype(np.float32)), 4.0) * 1000
    sitk.WriteImage(img, str(tmp_path / "f.nii.gz"))
    sitk.WriteImage(sitk.Resample(img, img, sitk.TranslationTransform(2, (24.0, -16.0)), sitk.sitkLinear, 0.0), str(tmp_path / "m.nii.gz"))
    summaries = []
    for k in range(2):
        rc = main(["register", "--moving", str(tmp_path / "m.nii.gz"), "--fixed", str(tmp_path / "f.nii.gz"),
                   "--model", "phase-correlation", "--out", str(tmp_path / f"out{k}")])
        assert rc == 0
        s = json.loads((tmp_path / f"out{k}" / "summary.json").read_text())
        summaries.append({key: v for key, v in s.items() if not key.startswith("seconds")})
    assert summaries[0] == summaries[1]
    assert abs(summaries[0]["displacement_mm_mean"] - np.hypot(24.0, 16.0)) < 1.0


def test_register_path_imports_no_heavy_module(tmp_path):
    """The cold start of ``monai-npc register`` is ``import torch`` plus our work: a whole shell call
    (shipped acdc weights, all outputs) must not import MONAI, ITK Python, matplotlib or scipy."""
    import subprocess
    import sys

    p = cardiac_pair(size=64, seed=8)
    for key in ("moving", "fixed"):
        sitk.WriteImage(_image(p[key]), str(tmp_path / f"{key}.nii.gz"))
    code = (
        "import sys\nfrom monai_npc.cli.main import main\n"
        f"rc = main(['register', '--moving', {str(tmp_path / 'moving.nii.gz')!r}, '--fixed', {str(tmp_path / 'fixed.nii.gz')!r}, "
        f"'--out', {str(tmp_path / 'out')!r}])\n"
        "heavy = sorted(m for m in ('monai', 'itk', 'matplotlib', 'scipy', 'ignite') if m in sys.modules)\n"
        "print(rc, heavy)\n"
    )
    root = str(Path(__file__).resolve().parents[1])
    env = dict(os.environ, PYTHONPATH=root + os.pathsep + os.environ.get("PYTHONPATH", ""))
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, cwd=str(tmp_path), check=True)
    assert out.stdout.strip().splitlines()[-1] == "0 []", out.stdout + out.stderr
    assert (tmp_path / "out" / "overview.png").is_file()
