"""``monai-npc quickstart``: the README's first command registers phantom pairs with a shipped model."""

from __future__ import annotations

import json

import SimpleITK as sitk

from monai_npc.cli.main import main


def test_quickstart_registers_phantoms_with_the_shipped_model(tmp_path, capsys):
    out = tmp_path / "qs"
    assert main(["quickstart", "--out", str(out), "--pairs", "2"]) == 0
    metrics = json.loads((out / "metrics.json").read_text())
    assert metrics["model"] == "acdc" and metrics["n_pairs"] == 2
    assert metrics["dice_mean"] > metrics["dice_mean_initial"] + 0.2  # ED -> ES Dice about 0.6 -> 0.95
    assert metrics["folding_percent"] < 0.1
    assert (out / "overview.png").stat().st_size > 10_000
    for pair in ("pair00", "pair01"):
        summary = json.loads((out / "registered" / pair / "summary.json").read_text())
        assert summary["dice_mean"] == next(r["dice"] for r in metrics["pairs"] if r["pair"] == pair)
        assert sitk.ReadTransform(str(out / "registered" / pair / "transform.h5")).GetName() == "DisplacementFieldTransform"
    assert "registered 2 phantom ED -> ES pairs with acdc" in capsys.readouterr().out
    assert main(["quickstart", "--out", str(out), "--pairs", "0"]) == 1
    assert "--pairs must be >= 1" in capsys.readouterr().err
