"""ACDC: three layouts, the paper's protocol, phantom round trip, clear errors, real-data counts."""

import shutil
import warnings
from pathlib import Path

import h5py
import numpy as np
import pytest
from scipy import ndimage

from monai_npc.cli.main import main as cli_main
from monai_npc.data.acdc import (
    acdc_patient_split,
    acdc_split_summary,
    build_acdc_dataset,
    build_acdc_pairs,
    find_acdc_patients,
    load_acdc_patient,
)
from monai_npc.transforms import label_union_bbox

SHARED_ACDC = Path(__file__).resolve().parents[1].parent / "shared" / "data" / "acdc_ssl4mis"


def _dice(a, b, k):
    a, b = a == k, b == k
    return 2.0 * (a & b).sum() / max(a.sum() + b.sum(), 1)


def _warp(img, ddf):
    grid = np.mgrid[: img.shape[0], : img.shape[1]].astype(np.float64)
    return ndimage.map_coordinates(img, grid + ddf, order=0, mode="nearest")


@pytest.fixture(scope="module")
def layouts(tmp_path_factory):
    """The same three phantom patients in the official, SSL4MIS-volume and SSL4MIS-slice layouts."""
    base = tmp_path_factory.mktemp("acdc")
    official = base / "official" / "database" / "training"  # nested as in the 2023 release
    assert cli_main(["phantom", "acdc", "--out", str(official), "--patients", "3", "--seed", "4", "--no-progress"]) == 0
    volumes, slices = base / "volumes", base / "slices" / "data"
    volumes.mkdir()
    slices.mkdir(parents=True)
    for patient in find_acdc_patients(official):
        v = load_acdc_patient(patient)
        for frame, phase in ((1, "ed"), (2, "es")):
            with h5py.File(volumes / f"{patient.name}_frame{frame:02d}.h5", "w") as f:
                f["image"], f["label"] = v[f"{phase}_image"], v[f"{phase}_label"]
            for z in range(v["ed_image"].shape[0]):
                with h5py.File(slices / f"{patient.name}_frame{frame:02d}_slice_{z}.h5", "w") as f:
                    f.create_dataset("image", data=v[f"{phase}_image"][z], compression="gzip")
                    f["label"] = v[f"{phase}_label"][z]
    return {"official": base / "official", "volumes": volumes, "slices": base / "slices"}


def test_layouts_are_found(layouts):
    for layout, root in (("official", "official"), ("ssl4mis_volume", "volumes"), ("ssl4mis_slice", "slices")):
        patients = find_acdc_patients(layouts[root])
        assert [p.name for p in patients] == ["patient001", "patient002", "patient003"]
        assert {p.layout for p in patients} == {layout}
    official = find_acdc_patients(layouts["official"])[0]
    assert official.ed_frame == 1 and 9 <= official.es_frame <= 15 and official.info["ED"] == "1"
    assert set(official.ddf) == {"ED->ES", "ES->ED"}
    v = load_acdc_patient(official)
    assert v["ed_image"].ndim == 3 and v["ed_label"].dtype == np.uint8 and v["ddf_ed_es"].shape[1] == 2
    assert 1.3 < v["spacing"][1] < 1.8 and 7.0 < v["spacing"][0] < 10.0


def test_three_layouts_give_identical_pairs(layouts):
    pairs = {k: build_acdc_pairs(root, split="all") for k, root in layouts.items()}
    n = len(pairs["official"])
    assert n >= 2 * 3 * 3 and n % 2 == 0
    for other in ("volumes", "slices"):
        assert len(pairs[other]) == n
        for a, b in zip(pairs["official"], pairs[other]):
            assert (a["patient"], a["slice"], a["direction"]) == (b["patient"], b["slice"], b["direction"])
            for key in ("moving", "fixed", "moving_label", "fixed_label"):
                np.testing.assert_array_equal(a[key], b[key])
            assert "ddf" not in b  # only the phantom's official folder carries the truth


def test_protocol_on_pairs(layouts):
    pairs = build_acdc_pairs(layouts["official"], split="all")
    total_slices = sum(len(load_acdc_patient(p)["slices"]) for p in find_acdc_patients(layouts["official"]))
    assert len(pairs) // 2 < total_slices  # apical slices without RV are dropped
    assert [p["direction"] for p in pairs[:4]] == ["ED->ES", "ES->ED", "ED->ES", "ES->ED"]
    for p in pairs:
        assert p["moving"].shape == (1, 128, 128) and p["moving"].dtype == np.float32
        assert p["moving"].min() == 0.0 and p["moving"].max() == 1.0  # per-slice min-max
        assert p["fixed"].min() == 0.0 and p["fixed"].max() == 1.0
        for key in ("moving_label", "fixed_label"):
            assert p[key].dtype == np.uint8 and {1, 2, 3} <= set(np.unique(p[key]).tolist())
        box = label_union_bbox([p["moving_label"], p["fixed_label"]])
        assert all(abs(lo - (128 - hi)) <= 1 for lo, hi in box)  # centred on the ED/ES union
    fwd, bwd = pairs[0], pairs[1]
    assert fwd["moving"] is bwd["fixed"] and fwd["moving_label"] is bwd["fixed_label"]
    only_fwd = build_acdc_pairs(layouts["official"], split="all", directions=("ED->ES",))
    assert len(only_fwd) == len(pairs) // 2


def test_phantom_truth_survives_loading(layouts):
    """Written by `monai-npc phantom acdc`, read back, cropped: the ddf still maps the labels."""
    pairs = build_acdc_pairs(layouts["official"], split="all")
    initial, warped = [], []
    for p in pairs:
        initial.append(np.mean([_dice(p["moving_label"][0], p["fixed_label"][0], k) for k in (1, 2, 3)]))
        w = _warp(p["moving_label"][0], p["ddf"])
        warped.append(min(_dice(w, p["fixed_label"][0], k) for k in (1, 2, 3)))
    assert 0.45 < np.mean(initial) < 0.8
    assert min(warped) > 0.88


def test_split_counts(layouts):
    split = acdc_patient_split(layouts["slices"], 1, 1, 1, seed=2023)
    assert sorted(sum(split.values(), [])) == ["patient001", "patient002", "patient003"]
    assert split == acdc_patient_split(["patient003", "patient001", "patient002"], 1, 1, 1, seed=2023)
    per_split = {s: build_acdc_pairs(layouts["slices"], s, 1, 1, 1) for s in ("train", "val", "test")}
    assert sum(len(v) for v in per_split.values()) == len(build_acdc_pairs(layouts["slices"], "all"))
    assert {p["patient"] for p in per_split["val"]} == set(split["val"])
    with pytest.warns(UserWarning, match="scaled proportionally to 2/0/1"):
        scaled = acdc_patient_split(layouts["slices"])  # the paper's 80/20/50 on 3 patients
    assert [len(scaled[s]) for s in ("train", "val", "test")] == [2, 0, 1]
    with pytest.raises(ValueError, match=r"no patients: the folder holds 3, and the counts 80/20/50 \(train/val/test\) become 2/0/1"):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            build_acdc_pairs(layouts["slices"], split="val")
    with pytest.raises(ValueError, match="split must be"):
        build_acdc_pairs(layouts["slices"], split="training")


def test_dataset_items_and_batches(layouts):
    from monai.data import DataLoader

    for root in ("volumes", "official"):
        ds = build_acdc_dataset(layouts[root], split="all")
        item = ds[0]
        assert tuple(item["image"].shape) == (2, 128, 128) and str(item["image"].dtype) == "torch.float32"
        assert tuple(item["fixed_label"].shape) == (1, 128, 128)
        assert item["direction"] == "ED->ES" and item["patient"] == "patient001"
        batch = next(iter(DataLoader(ds, batch_size=3)))
        assert tuple(batch["image"].shape) == (3, 2, 128, 128) and batch["direction"][1] == "ES->ED"
    assert tuple(batch["ddf"].shape) == (3, 2, 128, 128)


def _copy(src, dst):
    shutil.copytree(src, dst)
    return dst


def test_errors_are_clear(layouts, tmp_path):
    with pytest.raises(FileNotFoundError, match="not found"):
        find_acdc_patients(tmp_path / "missing")
    (tmp_path / "empty").mkdir()
    with pytest.raises(FileNotFoundError, match="no ACDC data"):
        find_acdc_patients(tmp_path / "empty")
    # official: the ES image named by Info.cfg is missing
    off = _copy(layouts["official"], tmp_path / "off")
    patient = off / "database" / "training" / "patient002"
    es = find_acdc_patients(off)[1].es_frame
    (patient / f"patient002_frame{es:02d}.nii.gz").unlink()
    with pytest.raises(FileNotFoundError, match=f"patient002_frame{es:02d}.nii.gz"):
        find_acdc_patients(off)
    # SSL4MIS volumes: a patient with only ED
    vol = _copy(layouts["volumes"], tmp_path / "vol")
    (vol / "patient003_frame02.h5").unlink()
    with pytest.raises(ValueError, match="patient003"):
        find_acdc_patients(vol)
    # slices: an ES slice is missing
    sl = _copy(layouts["slices"], tmp_path / "sl")
    (sl / "data" / "patient001_frame02_slice_1.h5").unlink()
    with pytest.raises(FileNotFoundError, match="patient001_frame02_slice_1.h5"):
        find_acdc_patients(sl)


def _h5(path, image, label):
    with h5py.File(path, "w") as f:
        f["image"], f["label"] = image, label


def test_content_errors(tmp_path):
    img = np.random.default_rng(0).random((2, 40, 40)).astype(np.float32)
    lab = np.zeros((2, 40, 40), np.uint8)
    lab[:, 10:20, 10:20] = 2  # myocardium only: no slice qualifies
    _h5(tmp_path / "patient001_frame01.h5", img, lab)
    _h5(tmp_path / "patient001_frame02.h5", img, lab)
    with pytest.raises(ValueError, match=r"label values found: \[0, 2\]"):
        build_acdc_pairs(tmp_path, split="all")
    _h5(tmp_path / "patient001_frame02.h5", img[:, :30], lab[:, :30])
    with pytest.raises(ValueError, match="patient001_frame02.h5.*(30, 40)|ES.*patient001_frame02.h5"):
        build_acdc_pairs(tmp_path, split="all")
    _h5(tmp_path / "patient001_frame02.h5", img, lab + 5)
    with pytest.raises(ValueError, match="patient001_frame02.h5 holds values"):
        build_acdc_pairs(tmp_path, split="all")
    (tmp_path / "patient001_frame02.h5").write_bytes(b"\x89HDF corrupt")
    with pytest.raises(ValueError, match="patient001_frame02.h5"):
        build_acdc_pairs(tmp_path, split="all")


@pytest.mark.skipif(not SHARED_ACDC.is_dir(), reason="shared ACDC (SSL4MIS) copy not present")
def test_real_ssl4mis_counts():
    patients = find_acdc_patients(SHARED_ACDC)  # the parent of data/ works
    assert len(patients) == 70 and {p.layout for p in patients} == {"ssl4mis_slice"}
    with pytest.warns(UserWarning, match="scaled proportionally to 38/9/23"):
        summary = acdc_split_summary(SHARED_ACDC)
    assert {s: summary[s]["patients"] for s in summary} == {"train": 38, "val": 9, "test": 23}
    assert sum(v["slices"] for v in summary.values()) == 656  # README: 656 ED/ES slice pairs
    assert {s: summary[s]["kept_slices"] for s in summary} == {"train": 243, "val": 70, "test": 156}
    with pytest.warns(UserWarning):
        val = build_acdc_pairs(SHARED_ACDC / "data", split="val")
    assert len(val) == 2 * 70
    dice = np.mean([[_dice(p["moving_label"], p["fixed_label"], k) for k in (1, 2, 3)] for p in val])
    assert 0.55 < dice < 0.75  # unregistered ED/ES overlap of real hearts


def test_split_file(layouts, tmp_path):
    import json

    from monai_npc.data.splits import read_split_file

    path = tmp_path / "split.json"
    path.write_text(json.dumps({"train": ["patient001", "patient002"], "val": [], "test": ["patient003"]}))
    assert read_split_file(path)["test"] == ["patient003"]
    test = build_acdc_pairs(layouts["slices"], "test", split_file=path)
    assert {p["patient"] for p in test} == {"patient003"}
    train = build_acdc_pairs(layouts["slices"], "train", split_file=path)
    assert {p["patient"] for p in train} == {"patient001", "patient002"}
    path.write_text(json.dumps({"train": ["patient001"], "val": ["patient001"], "test": []}))
    with pytest.raises(ValueError, match="patient001 is in both 'train' and 'val'"):
        build_acdc_pairs(layouts["slices"], "train", split_file=path)
    path.write_text(json.dumps({"train": ["patient009"], "val": [], "test": []}))
    with pytest.raises(ValueError, match="not found"):
        build_acdc_pairs(layouts["slices"], "train", split_file=path)
    with pytest.raises(FileNotFoundError, match="nope.json"):
        build_acdc_pairs(layouts["slices"], "train", split_file=tmp_path / "nope.json")


def test_shipped_split_file_is_disjoint_and_complete():
    from monai_npc.data.splits import read_split_file

    split = read_split_file(Path(__file__).resolve().parents[1] / "bundles/npc_acdc/configs/acdc70_split.json")
    ids = sum(split.values(), [])
    assert len(ids) == len(set(ids)) == 70
    assert [len(split[s]) for s in ("train", "val", "test")] == [44, 6, 20]
    if SHARED_ACDC.is_dir():
        assert set(ids) == {p.name for p in find_acdc_patients(SHARED_ACDC)}
