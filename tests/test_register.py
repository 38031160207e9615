"""``monai-npc register`` / ``register_files``: outputs that SimpleITK, ANTs and Slicer-style 3-D readers
reproduce, DICOM series end to end, PNG/TIFF, batch CSV, and clear errors."""

import csv
import importlib.util
import json
from pathlib import Path

import numpy as np
import pytest
import SimpleITK as sitk
import torch

from monai_npc.cli.main import main
from monai_npc.data.phantoms import cardiac_pair
from monai_npc.interop import grid_mismatch, read_displacement_field
from monai_npc.apps.registration.files import register_files
from monai_npc.networks.nets import NPCNet, save_pretrained

ROOT = Path(__file__).resolve().parents[1]
SPACING, ORIGIN, ANGLE = (0.9, 1.6), (12.0, -30.0), 0.4  # anisotropic, shifted, oblique


def _direction(angle, dims=2):
    c, s = np.cos(angle), np.sin(angle)
    return (c, -s, s, c) if dims == 2 else (c, -s, 0.0, s, c, 0.0, 0.0, 0.0, 1.0)


def _image(arr, spacing=SPACING, origin=ORIGIN, angle=ANGLE, pixel=sitk.sitkFloat32):
    image = sitk.Cast(sitk.GetImageFromArray(np.asarray(arr)), pixel)
    image.SetSpacing(spacing)
    image.SetOrigin(origin)
    image.SetDirection(_direction(angle, image.GetDimension()))
    return image


def _write(image, path):
    sitk.WriteImage(image, str(path))
    return path


def _inside(ddf, margin=1.0):
    """Voxels whose target ``i + ddf(i)`` lies inside the grid (``margin`` voxels from the border)."""
    shape = ddf.shape[1:]
    idx = np.stack(np.meshgrid(*[np.arange(n) for n in shape], indexing="ij")) + ddf
    return np.all([(idx[k] >= margin) & (idx[k] <= shape[k] - 1 - margin) for k in range(len(shape))], 0)


@pytest.fixture(scope="module")
def tiny_model(tmp_path_factory):
    """A tiny NPCNet whose output layer is set so the field is clearly non-zero (~1-5 voxels)."""
    torch.manual_seed(0)
    net = NPCNet(kernel_size=8, stride=4, num_pairs=8, top_k=4, gate_dim=8, hidden_dim=8, num_pe=8, num_steps=2)
    with torch.no_grad():
        head = net.ode.stages[0].decoder.head.out
        torch.nn.init.normal_(head.weight, std=4.0)
        head.bias.copy_(torch.tensor([1.5, -1.0]))
    return save_pretrained(net, tmp_path_factory.mktemp("model") / "tiny.pt")


@pytest.fixture(scope="module")
def oblique_run(tiny_model, tmp_path_factory):
    """One registration of a 96 x 80 cardiac phantom pair on an anisotropic, shifted, oblique grid."""
    d = tmp_path_factory.mktemp("oblique")
    pair = cardiac_pair(size=96, seed=1)
    files = {
        "moving": _write(_image(pair["moving"][:, :80] * 300), d / "m.nii.gz"),
        "fixed": _write(_image(pair["fixed"][:, :80] * 300), d / "f.nii.gz"),
        "moving_label": _write(_image(pair["moving_label"][:, :80], pixel=sitk.sitkUInt8), d / "ml.nii.gz"),
        "fixed_label": _write(_image(pair["fixed_label"][:, :80], pixel=sitk.sitkUInt8), d / "fl.nii.gz"),
    }
    summary = register_files(out=d / "out", model=tiny_model, **files)
    return d / "out", files, summary


def test_outputs_and_summary(oblique_run, tiny_model):
    out, files, s = oblique_run
    for name in ("warped.nii.gz", "warped_label.nii.gz", "transform.h5", "displacement.nii.gz", "transform_slicer.h5",
                 "jacobian.nii.gz", "reliability.nii.gz", "overview.png", "summary.json"):
        assert (out / name).is_file(), name
    assert json.loads((out / "summary.json").read_text())["model"] == str(tiny_model) == s["model"]
    fixed = sitk.ReadImage(str(files["fixed"]))
    for name in ("warped.nii.gz", "warped_label.nii.gz", "jacobian.nii.gz", "reliability.nii.gz"):
        assert grid_mismatch(sitk.ReadImage(str(out / name)), fixed) is None, name  # fixed physical space
    assert set(s["dice"]) == {"1", "2", "3"} and 0.0 < s["dice_mean"] <= 1.0 and 0.0 < s["dice_mean_initial"] < 1.0
    assert s["displacement_mm_mean"] > 1.0  # the tiny model moves things
    assert 0.0 <= s["folding_percent"] < 100.0 and s["seconds"] > 0 and s["reliability_mean"] > 0
    assert s["model_grid"]["size"] == [128, 128] and s["overlap_percent"] == 100.0
    jac = sitk.GetArrayFromImage(sitk.ReadImage(str(out / "jacobian.nii.gz")))
    assert abs(100.0 * (jac <= 0).mean() - s["folding_percent"]) < 1e-9


def test_simpleitk_reproduces_warped(oblique_run):
    out, files, s = oblique_run
    warped = sitk.ReadImage(str(out / "warped.nii.gz"))
    tx = sitk.ReadTransform(str(out / "transform.h5"))
    theirs = sitk.GetArrayFromImage(sitk.Resample(sitk.ReadImage(str(files["moving"])), warped, tx, sitk.sitkLinear, 0.0))
    ours = sitk.GetArrayFromImage(warped)
    ddf, _ = read_displacement_field(out / "transform.h5")
    inside = _inside(ddf)
    assert inside.mean() > 0.8
    diff = np.abs(ours - theirs)[inside]
    assert diff.max() < 1e-2 and diff.mean() < 1e-3, (diff.max(), diff.mean())  # image range ~300
    labels = sitk.Resample(sitk.ReadImage(str(files["moving_label"])), warped, tx, sitk.sitkLabelLinear, 0)
    ours_lab = sitk.GetArrayFromImage(sitk.ReadImage(str(out / "warped_label.nii.gz")))
    assert (sitk.GetArrayFromImage(labels) == ours_lab)[inside].mean() > 0.995
    # Dice in the summary is the Dice of the written label against the fixed label
    fixed_lab = sitk.GetArrayFromImage(sitk.ReadImage(str(files["fixed_label"])))
    lv = 2 * ((ours_lab == 3) & (fixed_lab == 3)).sum() / ((ours_lab == 3).sum() + (fixed_lab == 3).sum())
    assert abs(lv - s["dice"]["3"]) < 1e-9


def test_ants_reproduces_warped(oblique_run):
    ants = pytest.importorskip("ants")
    out, files, _ = oblique_run
    ours = sitk.GetArrayFromImage(sitk.ReadImage(str(out / "warped.nii.gz"))).T  # ANTs numpy is (x, y)
    inside = _inside(read_displacement_field(out / "transform.h5")[0]).T
    fixed, moving = ants.image_read(str(files["fixed"])), ants.image_read(str(files["moving"]))
    for transform in ("displacement.nii.gz", "transform.h5"):
        theirs = ants.apply_transforms(fixed=fixed, moving=moving, transformlist=[str(out / transform)], interpolator="linear")
        diff = np.abs(theirs.numpy() - ours)[inside]
        assert diff.max() < 1e-2 and diff.mean() < 1e-3, (transform, diff.max(), diff.mean())


def test_slicer_transform_agrees_in_plane(oblique_run):
    out, files, _ = oblique_run
    t2, t3 = sitk.ReadTransform(str(out / "transform.h5")), sitk.ReadTransform(str(out / "transform_slicer.h5"))
    assert (t2.GetDimension(), t3.GetDimension()) == (2, 3) and t3.GetName() == "DisplacementFieldTransform"
    fixed = sitk.ReadImage(str(files["fixed"]))
    for idx in ([3.2, 5.7], [40.0, 50.5], [77.0, 90.0]):
        p = fixed.TransformContinuousIndexToPhysicalPoint(idx)
        a, b = np.array(t2.TransformPoint(p)), np.array(t3.TransformPoint(tuple(p) + (0.0,)))
        np.testing.assert_allclose(b, list(a) + [0.0], atol=1e-9)


def test_moving_on_another_grid(tiny_model, tmp_path):
    """Moving image with its own spacing, origin and direction: resampled into the fixed space."""
    pair = cardiac_pair(size=96, seed=2)
    fixed = _image(pair["fixed"] * 300)
    moving_native = _image(pair["moving"] * 300)
    other = _image(np.zeros((110, 90)), spacing=(1.3, 1.25), origin=(0.0, -40.0), angle=0.25)
    moving = sitk.Resample(moving_native, other, sitk.Transform(), sitk.sitkLinear, 0.0)
    s = register_files(_write(moving, tmp_path / "m.mha"), _write(fixed, tmp_path / "f.nrrd"), tmp_path / "out",
                       model=tiny_model, overview=False)
    assert "warped_label" not in s["outputs"] and "dice" not in s
    warped = sitk.ReadImage(str(tmp_path / "out" / "warped.nii.gz"))
    assert grid_mismatch(warped, fixed) is None
    tx = sitk.ReadTransform(str(tmp_path / "out" / "transform.h5"))
    theirs = sitk.GetArrayFromImage(sitk.Resample(moving, warped, tx, sitk.sitkLinear, 0.0))
    inside = _inside(read_displacement_field(tmp_path / "out" / "transform.h5")[0], margin=3)
    inside &= sitk.GetArrayFromImage(sitk.Resample(moving * 0 + 1, warped, tx, sitk.sitkNearestNeighbor, 0.0)) > 0
    diff = np.abs(sitk.GetArrayFromImage(warped) - theirs)
    eroded = inside[1:-1, 1:-1] & inside[:-2, 1:-1] & inside[2:, 1:-1] & inside[1:-1, :-2] & inside[1:-1, 2:]
    diff = diff[1:-1, 1:-1][eroded]
    # two linear interpolations (moving -> fixed grid, then warp) against one: interpolation error only
    assert diff.mean() < 2.0 and np.percentile(diff, 99) < 15.0, (diff.mean(), np.percentile(diff, 99))


def _dicom_slice(arr, path, position, orientation, spacing, series, study, number, thickness):
    from pydicom.dataset import Dataset, FileMetaDataset
    from pydicom.uid import ExplicitVRLittleEndian, MRImageStorage, generate_uid

    meta = FileMetaDataset()
    meta.MediaStorageSOPClassUID = MRImageStorage
    meta.MediaStorageSOPInstanceUID = generate_uid()
    meta.TransferSyntaxUID = ExplicitVRLittleEndian
    ds = Dataset()
    ds.file_meta = meta
    ds.SOPClassUID, ds.SOPInstanceUID = MRImageStorage, meta.MediaStorageSOPInstanceUID
    ds.StudyInstanceUID, ds.SeriesInstanceUID = study, series
    ds.Modality, ds.PatientID, ds.InstanceNumber = "MR", "NPC", number
    ds.ImagePositionPatient = [float(v) for v in position]
    ds.ImageOrientationPatient = [float(v) for v in orientation]
    ds.PixelSpacing = [spacing[1], spacing[0]]  # row spacing (y), column spacing (x)
    ds.SliceThickness = thickness
    ds.Rows, ds.Columns = arr.shape
    ds.SamplesPerPixel, ds.PhotometricInterpretation = 1, "MONOCHROME2"
    ds.BitsAllocated, ds.BitsStored, ds.HighBit, ds.PixelRepresentation = 16, 16, 15, 0
    ds.PixelData = arr.astype(np.uint16).tobytes()
    ds.save_as(path, enforce_file_format=True)


def _dicom_series(frames, folder, spacing=(0.8, 0.9), gap=6.0):
    """Write ``frames`` ``(Z, H, W)`` as an oblique DICOM series; returns the folder."""
    from pydicom.uid import generate_uid

    folder.mkdir()
    c, s = np.cos(0.35), np.sin(0.35)
    row, col = np.array([c, s, 0.0]), np.array([0.0, np.cos(0.2), -np.sin(0.2)])  # oblique plane
    normal = np.cross(row, col)
    series, study = generate_uid(), generate_uid()
    for k in (1, 0, 2)[: len(frames)]:
        pos = np.array([-40.0, 25.0, 60.0]) + gap * k * normal
        _dicom_slice(frames[k], folder / f"im{k}.dcm", pos, list(row) + list(col), spacing, series, study, k + 1, gap)
    return folder


def _read_series(folder):
    reader = sitk.ImageSeriesReader()
    reader.SetFileNames(reader.GetGDCMSeriesFileNames(str(folder)))
    return sitk.Cast(reader.Execute(), sitk.sitkFloat32)


def test_dicom_series_end_to_end(tiny_model, tmp_path):
    pairs = [cardiac_pair(size=64, seed=10 + k) for k in range(3)]
    fixed_dir = _dicom_series(np.stack([p["fixed"][:, :56] * 1000 for p in pairs]), tmp_path / "fixed")
    moving_dir = _dicom_series(np.stack([p["moving"][:, :56] * 1000 for p in pairs]), tmp_path / "moving")
    fixed, moving = _read_series(fixed_dir), _read_series(moving_dir)  # SimpleITK's own DICOM reading
    assert fixed.GetSize() == (56, 64, 3)
    label = sitk.GetImageFromArray(np.stack([p["moving_label"][:, :56] for p in pairs]))
    label.CopyInformation(moving)
    _write(label, tmp_path / "ml.nii.gz")
    rc = main(["register", "--moving", str(moving_dir), "--fixed", str(fixed_dir), "--moving-label",
               str(tmp_path / "ml.nii.gz"), "--model", str(tiny_model), "--out", str(tmp_path / "out"), "--no-overview"])
    assert rc == 0
    out = tmp_path / "out"
    warped = sitk.ReadImage(str(out / "warped.nii.gz"))
    assert grid_mismatch(warped, fixed) is None  # the DICOM series' physical space
    assert not (out / "transform_slicer.h5").exists()  # 3-D: transform.h5 is what Slicer loads
    tx = sitk.ReadTransform(str(out / "transform.h5"))
    assert tx.GetDimension() == 3
    ddf, _ = read_displacement_field(out / "transform.h5")
    assert np.abs(ddf[0]).max() < 1e-6 and np.abs(ddf[1:]).mean() > 0.5  # in-plane only, slice by slice
    theirs = sitk.GetArrayFromImage(sitk.Resample(moving, warped, tx, sitk.sitkLinear, 0.0))
    rows, cols = np.meshgrid(np.arange(64), np.arange(56), indexing="ij")
    r, c = rows + ddf[1], cols + ddf[2]
    inside = (r >= 1) & (r <= 62) & (c >= 1) & (c <= 54)
    diff = np.abs(sitk.GetArrayFromImage(warped) - theirs)[inside]
    assert diff.max() < 0.05 and diff.mean() < 5e-3, (diff.max(), diff.mean())  # range ~1000
    lab = sitk.Resample(label, warped, tx, sitk.sitkLabelLinear, 0)
    ours_lab = sitk.GetArrayFromImage(sitk.ReadImage(str(out / "warped_label.nii.gz")))
    assert (sitk.GetArrayFromImage(lab) == ours_lab)[inside].mean() > 0.995
    # a single DICOM file keeps its 3-D position: one-slice 3-D outputs
    s = register_files(moving_dir / "im1.dcm", fixed_dir / "im1.dcm", tmp_path / "one", model="phase-correlation", overview=False)
    one = sitk.ReadImage(str(tmp_path / "one" / "warped.nii.gz"))
    ref = sitk.ReadImage(str(fixed_dir / "im1.dcm"))
    assert one.GetSize() == (56, 64, 1) and grid_mismatch(one, sitk.Cast(ref, sitk.sitkFloat32)) is None
    assert "transform_slicer" not in s["outputs"]


def test_png_tiff_translation_with_phase_correlation(tmp_path):
    """A pure translation: PNG fixed, TIFF moving; the transform holds it in mm with the right sign."""
    from PIL import Image

    moving = (cardiac_pair(size=64, seed=4)["moving"] * 255).astype(np.uint8)
    fixed = np.roll(moving, (3, -2), axis=(0, 1))  # fixed(i) = moving(i - (3, -2)): ddf = (-3, +2)
    Image.fromarray(moving).save(tmp_path / "m.tif")
    Image.fromarray(fixed).save(tmp_path / "f.png")
    rc = main(["register", "--moving", str(tmp_path / "m.tif"), "--fixed", str(tmp_path / "f.png"),
               "--model", "phase-correlation", "--out", str(tmp_path / "out")])
    assert rc == 0
    ddf, grid = read_displacement_field(tmp_path / "out" / "transform.h5")
    np.testing.assert_allclose(ddf[:, 32, 32], [-3.0, 2.0], atol=0.1)
    tx = sitk.ReadTransform(str(tmp_path / "out" / "transform.h5"))
    np.testing.assert_allclose(tx.TransformPoint((30.0, 20.0)), (32.0, 17.0), atol=0.1)  # PNG: 1 mm pixels, x right
    warped = sitk.GetArrayFromImage(sitk.ReadImage(str(tmp_path / "out" / "warped.nii.gz")))
    assert np.abs(warped - fixed)[5:-5, 5:-5].mean() < 2.0 < np.abs(moving.astype(float) - fixed)[5:-5, 5:-5].mean()
    assert (tmp_path / "out" / "overview.png").stat().st_size > 10_000
    assert "reliability" not in json.loads((tmp_path / "out" / "summary.json").read_text())["outputs"]


def test_batch_csv(tmp_path, capsys):
    pair = cardiac_pair(size=48, seed=5)
    _write(_image(pair["moving"]), tmp_path / "m.nii.gz")
    _write(_image(pair["fixed"]), tmp_path / "f.nii.gz")
    _write(_image(pair["moving_label"], pixel=sitk.sitkUInt8), tmp_path / "ml.nii.gz")
    _write(_image(pair["fixed_label"], pixel=sitk.sitkUInt8), tmp_path / "fl.nii.gz")
    with (tmp_path / "pairs.csv").open("w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["moving", "fixed", "moving_label", "fixed_label", "out"])
        w.writerow(["m.nii.gz", "f.nii.gz", "ml.nii.gz", "fl.nii.gz", "pair0"])
        w.writerow(["f.nii.gz", "m.nii.gz", "", "", "pair1"])
        w.writerow(["missing.nii.gz", "f.nii.gz", "", "", "pair2"])
    rc = main(["register", "--batch", str(tmp_path / "pairs.csv"), "--model", "phase-correlation",
               "--out", str(tmp_path / "report"), "--no-overview", "--no-progress"])
    assert rc == 1  # one pair failed, the others ran
    assert "missing.nii.gz" in capsys.readouterr().out
    assert "dice_mean" in json.loads((tmp_path / "pair0" / "summary.json").read_text())
    assert (tmp_path / "pair1" / "transform.h5").is_file()
    with (tmp_path / "report" / "batch_summary.csv").open() as f:
        rows = list(csv.DictReader(f))
    assert [bool(r["error"]) for r in rows] == [False, False, True]


def _errors_setup(tmp_path):
    good = _write(_image(np.random.default_rng(0).random((40, 40))), tmp_path / "good.nii.gz")
    return good


@pytest.mark.parametrize(
    "case, error, words",
    [
        ("missing", FileNotFoundError, ["moving image", "nope.nii.gz"]),
        ("corrupt", ValueError, ["moving image", "corrupt.nii.gz"]),
        ("dims", ValueError, ["3-D", "vol.nii.gz", "both must be 2-D"]),
        ("nan", ValueError, ["nan.nii.gz", "non-finite"]),
        ("label_grid", ValueError, ["lab.nii.gz", "does not match the grid", "spacing"]),
        ("label_float", ValueError, ["labf.nii.gz", "non-integer"]),
        ("weights", FileNotFoundError, ["no shipped weights", "phase-correlation"]),
        ("no_overlap", ValueError, ["far.nii.gz", "does not overlap"]),
    ],
)
def test_clear_errors(tmp_path, case, error, words):
    good = _errors_setup(tmp_path)
    kw = dict(moving=good, fixed=good, out=tmp_path / "out", model="phase-correlation")
    if case == "missing":
        kw["moving"] = tmp_path / "nope.nii.gz"
    elif case == "corrupt":
        (tmp_path / "corrupt.nii.gz").write_bytes(b"this is not a nifti file")
        kw["moving"] = tmp_path / "corrupt.nii.gz"
    elif case == "dims":
        kw["fixed"] = _write(_image(np.zeros((3, 40, 40)), spacing=(1, 1, 1), origin=(0, 0, 0)), tmp_path / "vol.nii.gz")
    elif case == "nan":
        arr = np.random.default_rng(0).random((40, 40))
        arr[3, 4] = np.nan
        kw["moving"] = _write(_image(arr), tmp_path / "nan.nii.gz")
    elif case == "label_grid":
        kw["moving_label"] = _write(_image(np.zeros((40, 40)), spacing=(1.0, 1.0), pixel=sitk.sitkUInt8), tmp_path / "lab.nii.gz")
    elif case == "label_float":
        kw["fixed_label"] = _write(_image(np.full((40, 40), 0.5)), tmp_path / "labf.nii.gz")
    elif case == "weights":
        kw["model"] = "no_such_model"
    elif case == "no_overlap":
        kw["moving"] = _write(_image(np.ones((40, 40)), origin=(500.0, 0.0)), tmp_path / "far.nii.gz")
    with pytest.raises(error) as info:
        register_files(**kw)
    for word in words:
        assert word in str(info.value), (word, str(info.value))


def test_cli_prints_clean_errors(tmp_path, capsys):
    good = _errors_setup(tmp_path)
    rc = main(["register", "--moving", str(good), "--fixed", str(good), "--out", str(tmp_path / "o"), "--model", "no_such_model"])
    err = capsys.readouterr().err
    assert rc == 1 and "no shipped weights" in err and "Traceback" not in err
    assert main(["register", "--moving", str(good), "--model", "phase-correlation"]) == 1
    assert "missing --fixed, --out" in capsys.readouterr().err


def test_slicer_example_builds_the_command(tmp_path):
    spec = importlib.util.spec_from_file_location("npc_slicer_example", ROOT / "examples/slicer/NPCRegistration/NPCRegistration.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)  # outside Slicer: only the helpers
    good = _errors_setup(tmp_path)
    cmd = module.build_register_command("monai-npc", str(good), str(good), str(tmp_path / "out"), "phase-correlation")
    assert cmd[:2] == ["monai-npc", "register"]
    assert main(cmd[1:] + ["--no-overview"]) == 0
    files = module.result_files(str(tmp_path / "out"))
    assert files["transform"].endswith("transform_slicer.h5") and Path(files["transform"]).is_file()
    assert "warped_label" not in files


def test_cli_heart_centre_places_the_window(oblique_run, tiny_model, tmp_path):
    """``--heart-centre ROW COL``: the heart window goes there (summary.json records it), not where the frames differ."""
    _, files, found = oblique_run
    args = ["register", "--moving", str(files["moving"]), "--fixed", str(files["fixed"]), "--model", str(tiny_model),
            "--field-of-view", "heart", "--size", "48", "--threads", "1"]
    assert main(args + ["--out", str(tmp_path / "auto"), "--no-overview"]) == 0
    assert main(args + ["--heart-centre", "30", "25", "--out", str(tmp_path / "given")]) == 0
    from PIL import Image

    with Image.open(tmp_path / "given" / "overview.png") as png:  # 5 model-grid panels + the window on the whole slice
        assert png.size[0] > 5 * 256 + 6 * 6 + 100
    auto = json.loads((tmp_path / "auto" / "summary.json").read_text())["model_grid"]["centre_voxel"]
    given = json.loads((tmp_path / "given" / "summary.json").read_text())["model_grid"]["centre_voxel"]
    assert given == pytest.approx([30.0, 25.0]) and auto != pytest.approx(given, abs=1.0)
