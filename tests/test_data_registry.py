"""The dataset registry: a new dataset is one pair builder and one registration, and the bundle helpers use it."""

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from monai_npc.data.bundle_data import load_pairs, prepare_dataset_dir
from monai_npc.data.datasets import DATASETS, DatasetSpec, dataset_spec, register_dataset


def _write_toy(out, patients=1, seed=0, first_id=1, progress=True):
    """A toy phantom writer: one ``.npy`` image per patient, its values ``seed + patient id``."""
    folders = []
    for pid in range(first_id, first_id + patients):
        folder = Path(out) / f"case{pid}"
        folder.mkdir(parents=True, exist_ok=True)
        np.save(folder / "image.npy", np.full((4, 4), seed + pid, np.float32))
        folders.append(folder)
    return folders


def _toy_pairs(root, split="train", shift=0.0):
    """A toy pair builder: one pair per ``case*/image.npy`` (fixed = moving + ``shift``)."""
    pairs = []
    for f in sorted(Path(root).glob("case*/image.npy")):
        moving = np.load(f)[None]
        pairs.append({"moving": moving, "fixed": moving + shift, "patient": f.parent.name})
    return pairs


@pytest.fixture
def toy(monkeypatch):
    """``"toy"`` registered for one test (removed after)."""
    monkeypatch.setitem(DATASETS, "toy", DatasetSpec(pairs=_toy_pairs, labels={1: "blob"}, phantom=_write_toy))
    return DATASETS["toy"]


def test_builtin_datasets_in_order_and_unknown_names_listed():
    assert tuple(DATASETS)[:2] == ("acdc", "camus")
    assert dataset_spec("acdc").labels == {1: "RV", 2: "Myo", 3: "LV"} and dataset_spec("acdc").phantom_max_slices
    assert dataset_spec("camus").bundle == "npc_camus" and not dataset_spec("camus").phantom_max_slices
    with pytest.raises(ValueError, match=r"dataset must be one of \('acdc', 'camus'.*got 'oasis'"):
        dataset_spec("oasis")
    from monai_npc.data.acdc import ACDC_LABELS, build_acdc_pairs
    from monai_npc.data.camus import CAMUS_LABELS
    from monai_npc.data.phantom_layouts import write_camus_phantom

    assert ACDC_LABELS == dict(dataset_spec("acdc").labels) and CAMUS_LABELS[2] == "LV myocardium"
    assert dataset_spec("acdc").pair_builder() is build_acdc_pairs
    assert dataset_spec("camus").phantom_writer() is write_camus_phantom


def test_listing_the_datasets_imports_no_loader():
    code = ("import sys, monai_npc.data.datasets as d; "
            "print(sorted(d.DATASETS), [m for m in ('monai', 'torch', 'monai_npc.data.acdc') if m in sys.modules])")
    root = str(Path(__file__).resolve().parents[1])
    env = dict(os.environ, PYTHONPATH=root + os.pathsep + os.environ.get("PYTHONPATH", ""))
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, check=True).stdout.strip()
    assert out == "['acdc', 'camus'] []"


def test_a_registered_dataset_runs_through_the_bundle_helpers(toy, tmp_path):
    root = prepare_dataset_dir(None, "toy", tmp_path / "cache", patients=3, first_id=2, seed=10, max_slices=5)
    # no max_slices for a writer that does not take it: neither in the folder name nor in the call
    assert root.name == "toy_seed10_patients2-4" and sorted(p.name for p in root.iterdir() if p.is_dir()) == ["case2", "case3", "case4"]
    assert json.loads((root / ".complete").read_text()) == {"dataset": "toy", "patients": 3, "seed": 10, "first_id": 2}
    pairs = load_pairs("toy", root, split="all", max_pairs=2, shift=1.5)
    assert [p["patient"] for p in pairs] == ["case2", "case3"]
    assert float(pairs[1]["moving"][0, 0, 0]) == 13.0 and float((pairs[1]["fixed"] - pairs[1]["moving"]).max()) == 1.5
    with pytest.raises(ValueError, match=r"dataset_dir='.*empty' \(split 'all'\) gave no registration pairs"):
        (tmp_path / "empty").mkdir()
        load_pairs("toy", tmp_path / "empty", split="all")


def test_dataset_without_phantom_needs_dataset_dir(monkeypatch, tmp_path):
    monkeypatch.setitem(DATASETS, "nophantom", DatasetSpec(pairs=_toy_pairs, labels={1: "blob"}))
    with pytest.raises(ValueError, match="'nophantom' has no phantom data"):
        prepare_dataset_dir(None, "nophantom", tmp_path)
    assert not any(tmp_path.iterdir())
    assert prepare_dataset_dir(tmp_path, "nophantom", None) == tmp_path


def test_register_dataset_checks(monkeypatch):
    monkeypatch.setattr("monai_npc.data.datasets.DATASETS", dict(DATASETS))
    from monai_npc.data import datasets

    spec = DatasetSpec(pairs=f"{__name__}:_toy_pairs", labels={1: "blob"})
    assert register_dataset("toy2", spec) is spec and datasets.DATASETS["toy2"].pair_builder() is _toy_pairs
    assert register_dataset("toy2", DatasetSpec(pairs=f"{__name__}:_toy_pairs", labels={1: "blob"})) is not None  # equal spec: fine
    with pytest.raises(ValueError, match="already registered"):
        register_dataset("toy2", DatasetSpec(pairs=_toy_pairs, labels={1: "other"}))
    register_dataset("toy2", DatasetSpec(pairs=_toy_pairs, labels={1: "other"}), replace=True)
    assert datasets.DATASETS["toy2"].labels == {1: "other"}
    with pytest.raises(TypeError, match="needs a DatasetSpec"):
        register_dataset("toy3", {"pairs": _toy_pairs})
    with pytest.raises(ValueError, match="non-empty string"):
        register_dataset(" ", spec)
    with pytest.raises(ValueError, match="'module:function'"):
        DatasetSpec(pairs="no_colon", labels={}).pair_builder()
