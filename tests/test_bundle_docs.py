"""The bundle docs state what runs: the Python loading snippet of bundles/README.md, and the
numbers of bundles/npc_acdc/docs/README.md match the shipped model's meta (issue 15, item 9)."""

from __future__ import annotations

import contextlib
import io
import json
import os
import re
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[1]


def _python_blocks(text: str):
    return re.findall(r"```python\n(.*?)```", text, flags=re.S)


def test_bundle_loading_snippet_runs(monkeypatch):
    blocks = _python_blocks((ROOT / "bundles" / "README.md").read_text())
    assert len(blocks) == 1
    monkeypatch.chdir(ROOT)  # the snippet's paths are relative to the repository root
    printed = io.StringIO()
    namespace: dict = {}
    with contextlib.redirect_stdout(printed):
        exec(compile(blocks[0], "bundles/README.md", "exec"), namespace)
    assert printed.getvalue().strip() == "(1, 2, 128, 128)"
    from monai_npc.networks.nets import load_pretrained

    same = load_pretrained("bundles/npc_acdc")  # the one-call form the README names
    x = torch.rand(1, 2, 128, 128)
    with torch.no_grad():
        torch.testing.assert_close(same(x), namespace["net"](x))


def test_docs_have_no_dev_machine_paths_or_index_installs():
    for path in [ROOT / "README.md", ROOT / "bundles" / "README.md", *sorted((ROOT / "bundles").glob("*/docs/README.md"))]:
        text = path.read_text()
        assert "../../../shared" not in text, path
        assert 'pip install "monai_npc[' not in text, path  # not on an index: install from the clone
    assert "placeholder" not in (ROOT / "bundles" / "README.md").read_text().lower()


def test_acdc_readme_numbers_match_the_shipped_meta():
    meta = torch.load(ROOT / "monai_npc" / "weights" / "acdc.pt", weights_only=True)["meta"]
    test = meta["heldout_test"]
    text = (ROOT / "bundles" / "npc_acdc" / "docs" / "README.md").read_text()
    version = json.loads((ROOT / "bundles" / "npc_acdc" / "configs" / "metadata.json").read_text())["version"]
    assert meta["version"] == version
    rows = {
        "npc+refine": f"| **NPC {version}** (bundle default",
        "npc": f"| NPC {version}, network only",
        "demons": "| SimpleITK demons",
        "voxelmorph": "| VoxelMorph",
    }
    section = text[text.index(f"### ACDC test patients ({version})"):]
    for method, start in rows.items():
        row = next(line for line in section.splitlines() if line.startswith(start))
        m = test[method]
        cells = [c.strip().strip("*") for c in row.strip("|").split("|")]
        assert float(cells[1]) == pytest.approx(m["dice_ed_es"], abs=5e-4)
        assert float(cells[2]) == pytest.approx(m["dice_es_ed"], abs=5e-4)
        assert float(cells[3]) == pytest.approx(m["dice_mean"], abs=5e-4)
        assert [float(v) for v in cells[4].split("/")] == pytest.approx([m["dice_rv"], m["dice_myo"], m["dice_lv"]], abs=5e-4)
        assert float(cells[5]) == pytest.approx(m["hd95"], abs=5e-3)
        assert float(cells[6]) == pytest.approx(m["sdlogj"], abs=5e-3)
        assert float(cells[7]) == pytest.approx(m["ndv"], abs=0.05)
        assert float(cells[8]) == pytest.approx(m["folding_percent"], abs=5e-4)
    assert "0.1.0 placeholder" not in text
    assert os.path.getsize(ROOT / "bundles" / "npc_acdc" / "models" / "model.pt") > 1_000_000
