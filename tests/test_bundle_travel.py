"""The MONAI bundles ``bundles/npc_acdc`` and ``bundles/npc_camus`` travel: each folder holds its own weights
(``models/model.pt``, byte-identical to the package's ``monai_npc/weights/NAME.pt``, no links), and a copy of it,
zipped and unzipped elsewhere, runs its ``configs/inference.json`` with the commands its README documents for a
copy of the folder (phantom data, one thread), without touching the repository's ``bundles/``."""

from __future__ import annotations

import hashlib
import json
import os
import re
import shlex
import shutil
from pathlib import Path
from typing import Dict, List, Tuple

import pytest

pytest.importorskip("ignite")

ROOT = Path(__file__).resolve().parents[1]
BUNDLES = ROOT / "bundles"
WEIGHTS = ROOT / "monai_npc" / "weights"
#: bundle -> the package weights its models/model.pt mirrors
MIRRORS = {"npc_acdc": WEIGHTS / "acdc.pt", "npc_camus": WEIGHTS / "camus.pt"}
#: the README section that documents running a copy of the folder
SECTION = "## A copy of this folder"
#: appended to the README's phantom command: one small phantom patient, few refinement steps, no figures
SMALL = {
    "npc_acdc": {"phantom_patients": 1, "phantom_max_slices": 2, "refine_iterations": 2, "overview": False, "progress": False},
    "npc_camus": {"phantom_patients": 1, "write_panels": False},
}

pytestmark = pytest.mark.usefixtures("one_thread")


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def _links(folder: Path) -> List[str]:
    """Every symbolic link below ``folder`` (files and folders, not followed), relative to it."""
    found = []
    for here, dirs, files in os.walk(folder):
        found += [os.path.relpath(os.path.join(here, n), folder) for n in dirs + files if os.path.islink(os.path.join(here, n))]
    return sorted(found)


def _snapshot(folder: Path) -> Dict[str, Tuple[int, int]]:
    """``relative path -> (size, mtime_ns)`` of every entry below ``folder`` (links not followed)."""
    out = {}
    for here, dirs, files in os.walk(folder):
        for name in dirs + files:
            st = os.lstat(os.path.join(here, name))
            out[os.path.relpath(os.path.join(here, name), folder)] = (st.st_size, st.st_mtime_ns)
    return out


def _copy_commands(bundle: str) -> Tuple[List[str], List[List[str]]]:
    """``(cd lines, monai.bundle run commands as argument lists)`` of the README's block for a copy of the folder."""
    text = (BUNDLES / bundle / "docs" / "README.md").read_text()
    assert SECTION in text, f"{bundle}/docs/README.md has no section {SECTION!r}"
    section = text[text.index(SECTION) + len(SECTION):]
    section = section[: section.index("\n## ")] if "\n## " in section else section
    (block,) = re.findall(r"```bash\n(.*?)```", section, flags=re.S)
    lines = [line.split("#")[0].strip() for line in block.splitlines()]
    cds = [line for line in lines if line.startswith("cd ")]
    runs = [shlex.split(line)[4:] for line in lines if line.startswith("python -m monai.bundle run ")]
    return cds, runs


def _kwargs(args: List[str]) -> Dict[str, str]:
    """``["--config_file", "configs/x.json", "--key", "value"]`` -> ``{"config_file": ..., "key": ...}``."""
    assert len(args) % 2 == 0 and all(a.startswith("--") for a in args[::2]), args
    return {k[2:]: v for k, v in zip(args[::2], args[1::2])}


@pytest.mark.parametrize("bundle", sorted(MIRRORS))
def test_bundle_weights_mirror_the_package_weights(bundle):
    """``models/model.pt`` is a file of the bundle (no link anywhere in the folder) with the bytes of the package's copy."""
    import torch

    root = BUNDLES / bundle
    assert _links(root) == []
    weights = root / "models" / "model.pt"
    assert weights.is_file() and not weights.is_symlink()
    assert _sha256(weights) == _sha256(MIRRORS[bundle]), f"{weights} differs from {MIRRORS[bundle]}: mirror_bundle_weights"
    # and both record the checksum of the tensors that the bundle's metadata.json names
    meta = torch.load(weights, map_location="cpu", weights_only=True)["meta"]
    assert meta["bundle"] == bundle
    assert json.loads((root / "configs" / "metadata.json").read_text())["weights_sha256"] == meta["weights_sha256"]


@pytest.mark.parametrize("bundle", sorted(MIRRORS))
def test_readme_documents_commands_for_a_copy(bundle):
    """The README's block for a copy changes into the folder and names only configs of the bundle, by relative
    paths, with overrides those configs define."""
    from monai.bundle import ConfigParser

    cds, runs = _copy_commands(bundle)
    assert len(cds) == 1 and len(runs) >= 2
    assert ["--config_file", "configs/inference.json"] in runs  # the phantom run, as the next test runs it
    for args in runs:
        kwargs = _kwargs(args)
        config = kwargs.pop("config_file")
        assert not os.path.isabs(config) and (BUNDLES / bundle / config).is_file(), config
        parser = ConfigParser()
        parser.read_config(str(BUNDLES / bundle / config))
        assert parser.get("bundle_root") == "." and all(k in parser for k in kwargs), (config, kwargs)


@pytest.mark.parametrize("bundle", sorted(MIRRORS))
def test_zipped_copy_runs_inference_from_its_own_folder(bundle, tmp_path, monkeypatch):
    """copytree -> zip -> unzip elsewhere -> the README's ``configs/inference.json`` run from the unzipped folder
    (MONAI's bundle runner in-process, the folder as working directory): outputs and weights of the copy only."""
    from monai.bundle import run

    before = _snapshot(BUNDLES)
    copy = Path(shutil.copytree(BUNDLES / bundle, tmp_path / "copy" / bundle, symlinks=True))  # links kept, as `cp -r` keeps them
    archive = shutil.make_archive(str(tmp_path / bundle), "zip", root_dir=tmp_path / "copy", base_dir=bundle)
    shutil.rmtree(tmp_path / "copy")
    shutil.unpack_archive(archive, tmp_path / "unzipped")
    here = tmp_path / "unzipped" / bundle
    assert _links(here) == [] and _sha256(here / "models" / "model.pt") == _sha256(MIRRORS[bundle])

    monkeypatch.chdir(here)
    kwargs = {**_kwargs(["--config_file", "configs/inference.json"]), **SMALL[bundle]}
    run(logging_file=False, **kwargs)  # logging_file: leave the test session's logging as it is
    assert _snapshot(BUNDLES) == before  # nothing written into, or changed in, the repository's bundles/

    out = here / "eval" / "inference"
    if bundle == "npc_acdc":
        summary = json.loads((out / "summary.json").read_text())
        assert Path(summary["root"]).resolve().is_relative_to(here.resolve())  # phantoms written into the copy
        assert summary["n_done"] == 1 and summary["n_skipped"] == 0
        for folder in ("ED_to_ES", "ES_to_ED"):
            pair = json.loads((out / "patient101" / folder / "summary.json").read_text())
            assert pair["model_grid"]["field_of_view"] == "heart-stack" and pair["folding_percent"] < 1.0
            # the label prior comes from the installed package by name (the bundle does not carry it)
            prior = pair["label_prior"]
            assert prior["name"] == "acdc_heart" and 0.5 < prior["agreement"] <= 1.0
            assert prior["weight"] > 0 or "aside" in prior  # acted, or judged the phantom's transform as good as itself
            assert (out / "patient101" / folder / "warped_label.nii.gz").is_file()
    else:
        metrics = json.loads((out / "metrics.json").read_text())
        assert Path(metrics["checkpoint"]) == (here / "models" / "model.pt").resolve()  # the copy's weights
        assert Path(metrics["dataset_dir"]).is_relative_to(here.resolve())
        assert metrics["n_pairs"] == 2  # 2CH and 4CH of one phantom patient
        # the shipped weights register the phantoms: better than no motion, without folding
        assert metrics["dice_mean"] > metrics["dice_mean_initial"] + 0.05 and metrics["folding_percent"] < 1.0
        assert metrics["epe"] < metrics["epe_initial"]
