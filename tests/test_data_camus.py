"""CAMUS: MHD and NIfTI releases, sequence frames, 1 mm resampling + centre crop, errors."""

import shutil
from pathlib import Path

import numpy as np
import pytest
from scipy import ndimage

from monai_npc.cli.main import main as cli_main
from monai_npc.data.camus import (
    build_camus_dataset,
    build_camus_pairs,
    camus_patient_split,
    find_camus_patients,
    load_camus_view,
)
from monai_npc.data.io import read_array, write_image


def _dice(a, b, k):
    a, b = a == k, b == k
    return 2.0 * (a & b).sum() / max(a.sum() + b.sum(), 1)


def _warp(img, ddf):
    grid = np.mgrid[: img.shape[0], : img.shape[1]].astype(np.float64)
    return ndimage.map_coordinates(img, grid + ddf, order=0, mode="nearest")


@pytest.fixture(scope="module")
def releases(tmp_path_factory):
    base = tmp_path_factory.mktemp("camus")
    mhd, nifti = base / "CAMUS" / "training", base / "CAMUS_public" / "database_nifti"
    assert cli_main(["phantom", "camus", "--out", str(mhd), "--patients", "2", "--seed", "3", "--no-progress"]) == 0
    assert cli_main(
        ["phantom", "camus", "--out", str(nifti), "--patients", "1", "--seed", "3", "--format", "nifti", "--no-progress"]
    ) == 0
    return {"mhd": base / "CAMUS", "nifti": base / "CAMUS_public"}


def test_official_files_are_written(releases):
    folder = releases["mhd"] / "training" / "patient0001"
    for view in ("2CH", "4CH"):
        for name in ("ED", "ES", "ED_gt", "ES_gt", "ddf_ED_ES", "ddf_ES_ED"):
            assert (folder / f"patient0001_{view}_{name}.mhd").is_file()
            assert (folder / f"patient0001_{view}_{name}.raw").is_file()
        assert (folder / f"Info_{view}.cfg").is_file()
    header = (folder / "patient0001_2CH_ED.mhd").read_text()
    assert "ElementSpacing = 0.69999999999999996 0.34999999999999998" in header
    assert "ElementType = MET_UCHAR" in header
    assert (releases["nifti"] / "database_nifti" / "patient0001" / "patient0001_4CH_ES_gt.nii.gz").is_file()


def test_load_view(releases):
    patients = find_camus_patients(releases["mhd"])
    assert [p.name for p in patients] == ["patient0001", "patient0002"]
    assert patients[0].info["2CH"]["ED"] == "1" and "ImageQuality" in patients[0].info["4CH"]
    v = load_camus_view(patients[0], "2CH")
    assert v["spacing"] == pytest.approx((0.35, 0.7))
    assert v["ed"].shape == v["es_label"].shape and v["ed"].shape[0] > 380  # >= 140 mm deep
    assert v["ddf_ed_es"].shape == (2,) + v["ed"].shape
    assert set(np.unique(v["ed_label"]).tolist()) == {0, 1, 2, 3}


def test_both_releases_give_the_same_pairs(releases):
    a = build_camus_pairs(releases["mhd"], split="all")
    b = build_camus_pairs(releases["nifti"], split="all")
    assert len(a) == 4 and len(b) == 2  # one ED->ES pair per view and patient
    for x, y in zip(a[:2], b):
        assert (x["patient"], x["view"], x["direction"]) == (y["patient"], y["view"], y["direction"])
        for key in ("moving", "fixed", "moving_label", "fixed_label", "ddf"):
            np.testing.assert_allclose(x[key], y[key], atol=1e-4)  # NIfTI stores float32 spacing


def test_protocol_and_truth(releases):
    pairs = build_camus_pairs(releases["mhd"], split="all", directions=("ED->ES", "ES->ED"))
    assert [p["view"] for p in pairs[:4]] == ["2CH", "2CH", "4CH", "4CH"]
    raw, _ = read_array(releases["mhd"] / "training" / "patient0001" / "patient0001_2CH_ED_gt.mhd", dtype=None)
    for p in pairs:
        assert p["moving"].shape == (1, 128, 128) and p["spacing"] == (1.0, 1.0) and p["slice"] == 0
        assert p["moving"].min() == 0.0 and p["moving"].max() == 1.0
        assert p["moving_label"].dtype == np.uint8
        w = _warp(p["moving_label"][0], p["ddf"])
        assert _dice(w, p["fixed_label"][0], 2) > 0.88  # LV myocardium, the evaluated structure
        assert _dice(p["moving_label"][0], p["fixed_label"][0], 2) < 0.85  # there is motion to recover
    # 1 mm resampling keeps the physical LV-myocardium area (mm^2) up to the crop
    area_raw = (raw == 2).sum() * 0.35 * 0.7
    area_1mm = (pairs[0]["moving_label"] == 2).sum()
    assert abs(area_1mm - area_raw) < 0.05 * area_raw


def test_sequence_frames_and_split(releases, tmp_path):
    root = tmp_path / "seq"
    shutil.copytree(releases["mhd"] / "training", root)
    folder = root / "patient0002"
    ed, sp = read_array(folder / "patient0002_4CH_ED.mhd")
    es, _ = read_array(folder / "patient0002_4CH_ES.mhd")
    seq = np.stack([np.zeros_like(ed), ed, 0.5 * (ed + es), es]).astype(np.uint8)  # frames 1..4
    write_image(seq, folder / "patient0002_4CH_half_sequence.mhd", spacing=(1.0,) + tuple(sp))
    (folder / "Info_4CH.cfg").write_text("ED: 2\nES: 4\nNbFrame: 4\n")
    for phase in ("ED", "ES"):
        for ext in (".mhd", ".raw"):
            (folder / f"patient0002_4CH_{phase}{ext}").unlink()
    from_seq = load_camus_view(find_camus_patients(root)[1], "4CH")
    np.testing.assert_array_equal(from_seq["ed"], ed)
    np.testing.assert_array_equal(from_seq["es"], es)
    split = camus_patient_split(root, 1, None, 0, seed=42)
    assert [len(split[s]) for s in ("train", "val", "test")] == [1, 1, 0]
    with pytest.warns(UserWarning, match="300/100/100"):
        camus_patient_split(root)
    from monai.data import DataLoader

    ds = build_camus_dataset(root, split="all", views=("4CH",))
    assert len(ds) == 2 and tuple(ds[1]["image"].shape) == (2, 128, 128)
    batch = next(iter(DataLoader(ds, batch_size=2)))
    assert tuple(batch["image"].shape) == (2, 2, 128, 128) and batch["view"] == ["4CH", "4CH"]


def test_errors(releases, tmp_path):
    with pytest.raises(FileNotFoundError, match="not found"):
        find_camus_patients(tmp_path / "nothing")
    (tmp_path / "empty").mkdir()
    with pytest.raises(FileNotFoundError, match="no CAMUS patient folders"):
        find_camus_patients(tmp_path / "empty")
    root = tmp_path / "c"
    shutil.copytree(releases["mhd"] / "training", root)
    (root / "patient0001" / "patient0001_2CH_ES_gt.mhd").unlink()
    with pytest.raises(FileNotFoundError, match="patient0001_2CH_ES_gt"):
        find_camus_patients(root)
    assert len(find_camus_patients(root, views=("4CH",))) == 2  # the other view is complete
    (root / "patient0002" / "patient0002_4CH_ES.raw").write_bytes(b"\x00" * 10)  # truncated
    with pytest.raises(ValueError, match="patient0002_4CH_ES.mhd"):
        build_camus_pairs(root, split="all", views=("4CH",))
    (root / "patient0002" / "patient0002_4CH_ES.raw").unlink()
    with pytest.raises(FileNotFoundError, match="patient0002_4CH_ES.raw"):
        build_camus_pairs(root, split="all", views=("4CH",))
    with pytest.raises(ValueError, match="views"):
        find_camus_patients(root, views=("3CH",))


def _png_copy(src_root, dst_root):
    """The phantom patients re-written as the public 224 x 224 PNG copy (train/ and val/ folders, uint8)."""
    from PIL import Image

    from monai_npc.data.camus import find_camus_patients, load_camus_view

    patients = find_camus_patients(src_root)
    for i, patient in enumerate(patients):
        folder = dst_root / ("val" if i == len(patients) - 1 else "train") / patient.name
        folder.mkdir(parents=True)
        for view in ("2CH", "4CH"):
            data = load_camus_view(patient, view)
            for phase in ("ED", "ES"):
                img = np.asarray(data[phase.lower()], np.float64)
                img = (img - img.min()) / max(img.max() - img.min(), 1e-9)
                img = np.asarray(Image.fromarray(np.round(255 * img).astype(np.uint8)).resize((224, 224), Image.BILINEAR))
                lab = np.asarray(Image.fromarray(data[f"{phase.lower()}_label"]).resize((224, 224), Image.NEAREST))
                Image.fromarray(img).save(folder / f"{patient.name}_{view}_{phase}.png")
                Image.fromarray(lab).save(folder / f"{patient.name}_{view}_{phase}_gt.png")
    return [p.name for p in patients]


def test_png_copy_layout_resize_protocol_and_split_file(releases, tmp_path):
    import json

    names = _png_copy(releases["mhd"], tmp_path / "camus_224")
    pairs = build_camus_pairs(tmp_path / "camus_224", "all", views=("4CH",))
    assert len(pairs) == len(names)
    p = pairs[0]
    assert p["moving"].shape == (1, 128, 128) and p["moving"].dtype == np.float32
    assert p["moving"].min() == 0.0 and p["moving"].max() == pytest.approx(1.0)
    assert set(np.unique(p["moving_label"])) <= {0, 1, 2, 3} and p["moving_label"].dtype == np.uint8
    # the resize protocol keeps the anatomy: myocardium fraction of the image is that of the 224 x 224 label
    from PIL import Image

    lab224 = np.asarray(Image.open(tmp_path / "camus_224" / "train" / p["patient"] / f"{p['patient']}_4CH_ED_gt.png"))
    assert (p["moving_label"] == 2).mean() == pytest.approx((lab224 == 2).mean(), rel=0.05)
    both = build_camus_pairs(tmp_path / "camus_224", "all", directions=("ED->ES", "ES->ED"))
    assert len(both) == 4 * len(names)
    split = tmp_path / "split.json"
    split.write_text(json.dumps({"train": names[:-1], "val": [], "test": names[-1:]}))
    test = build_camus_pairs(tmp_path / "camus_224", "test", split_file=split)
    assert {q["patient"] for q in test} == {names[-1]}
    with pytest.raises(ValueError, match=r"PNG copy of CAMUS: split 'test' needs a split_file"):  # no silent generated split
        build_camus_pairs(tmp_path / "camus_224", "test")
    with pytest.raises(ValueError, match="protocol must be one of"):
        build_camus_pairs(tmp_path / "camus_224", "all", protocol="crop")
    with pytest.raises(ValueError, match="directions"):
        build_camus_pairs(tmp_path / "camus_224", "all", directions=("ED->ED",))
    (tmp_path / "camus_224" / "train" / names[0] / f"{names[0]}_2CH_ES_gt.png").unlink()
    with pytest.raises(FileNotFoundError, match=f"{names[0]} 2CH: ES label"):
        build_camus_pairs(tmp_path / "camus_224", "all")


SHARED_CAMUS = Path(__file__).resolve().parents[1].parent / "shared" / "data" / "camus_224"


@pytest.mark.skipif(not SHARED_CAMUS.is_dir(), reason="shared CAMUS 224 copy not present")
def test_real_camus_224_split_and_unregistered_dice():
    split_file = Path(__file__).resolve().parents[1] / "bundles/npc_camus/configs/camus224_split.json"
    pairs = build_camus_pairs(SHARED_CAMUS, "test", split_file=split_file)
    assert len(pairs) == 100  # 50 validation patients x 2 views, ED -> ES
    dice = np.mean([_dice(p["moving_label"], p["fixed_label"], 2) for p in pairs])
    assert 0.60 < dice < 0.72  # README: about 0.65 unregistered LV-myocardium Dice
