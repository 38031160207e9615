"""The quick-start command runs end to end and reports what it measured."""

import json

import pytest

from monai_npc.cli.main import main


def test_demo_command_writes_metrics_model_and_figure(tmp_path, capsys):
    out = tmp_path / "demo"
    rc = main(["demo", "--out", str(out), "--iterations", "2", "--train-pairs", "2", "--test-pairs", "2", "--batch-size", "2", "--steps", "1"])
    assert rc == 0
    metrics = json.loads((out / "metrics.json").read_text())
    assert metrics["n_test_pairs"] == 2
    assert 0.3 < metrics["dice_mean_initial"] < 0.9  # phantom ED/ES overlap before registration
    assert metrics["epe_initial"] > 1.0  # the phantoms really move
    assert (out / "overview.png").stat().st_size > 10_000
    from monai_npc.networks.nets import load_pretrained

    net = load_pretrained(out / "model.pt")  # usable by `monai-npc register --model demo/model.pt`
    assert net.ode.num_steps == 1 and net.meta["metrics"]["n_test_pairs"] == 2
    assert "Dice" in capsys.readouterr().out


def test_cli_reports_bad_arguments_cleanly(tmp_path, capsys):
    assert main(["demo", "--out", str(tmp_path), "--iterations", "0"]) == 1
    assert "--iterations must be >= 1" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main(["no-such-command"])
