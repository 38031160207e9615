"""Strain from ``track``: ``Tracking.strain`` / ``monai_npc.strain`` on the analytic strain phantom, and the files of
``monai-npc track --strain`` (single study and ``--batch``)."""

import csv
import json

import numpy as np
import pytest

import monai_npc
from monai_npc.apps.tracking.cohort import STRAIN_COLUMNS
from monai_npc.apps.tracking.outputs import ALL_OUTPUTS
from monai_npc.apps.tracking.strain_outputs import STRAIN_OUTPUTS
from monai_npc.cli.main import main
from monai_npc.data.phantom_cine import write_cardiac_cine
from monai_npc.data.strain_phantom import strain_phantom


@pytest.fixture(scope="module")
def tracked():
    ph = strain_phantom(frames=6, size=96, slices=3)
    tracking = monai_npc.track(ph.images, ph.labels[0], reference_frame=0, spacing=ph.spacing, progress=False, basal_descent=False, threads=1)
    return ph, tracking


def test_tracked_circumferential_strain_follows_the_phantom(tracked):
    """The phantom's incompressible contraction through track (the acdc network, the default direct scheme): the peak
    circumferential strain within 2 points of the truth, every frame within 3, the peak radial strain within 4
    (measured 1.5, 1.5 and 2.9 on this small phantom; docs/strain.md)."""
    ph, tracking = tracked
    st = tracking.strain
    truth = ph.true_global["circumferential"]
    assert st.peak["circumferential"] == pytest.approx(truth.min(), abs=2.0)
    assert np.nanmax(np.abs(st.curves["circumferential"] - truth)) < 3.0
    assert abs(st.curves["circumferential"][0]) < 1e-9 and st.reference_frame == 0
    assert st.peak["radial"] == pytest.approx(ph.true_global["radial"].max(), abs=4.0)  # the wall thickens


def test_strain_function_and_property_agree(tracked):
    _, tracking = tracked
    a, b = tracking.strain, monai_npc.strain(tracking)
    np.testing.assert_allclose(a.curves["circumferential"], b.curves["circumferential"])
    timed = monai_npc.strain(tracking, frame_ms=40.0)
    assert timed.time_unit == "ms" and timed.time_to_peak["circumferential"] == 40.0 * a.peak_frame["circumferential"]
    with pytest.raises(ValueError, match="frame_ms"):
        monai_npc.strain(tracking, frame_ms=0)
    with pytest.raises(ValueError, match="grid"):
        monai_npc.strain(tracking, label=np.zeros((2, 8, 8)))


@pytest.fixture(scope="module")
def cine_study(tmp_path_factory):
    return write_cardiac_cine(tmp_path_factory.mktemp("cine"), "p", frames=5, size=64, levels=(0.2, 0.55), seed=3)


def test_cli_track_strain_writes_the_strain_files(cine_study, tmp_path):
    out = tmp_path / "out"
    assert main(["track", "--cine", str(cine_study["cine"]), "--label", str(cine_study["label"]), "--out", str(out), "--strain",
                 "--frame-ms", "30", "--threads", "1", "--no-progress", "--quiet"]) == 0
    assert sorted(p.name for p in out.iterdir()) == sorted(ALL_OUTPUTS)
    function = json.loads((out / "function.json").read_text())
    strain = json.loads((out / STRAIN_OUTPUTS["json"]).read_text())
    assert function["strain"]["circumferential"]["peak"] == strain["global"]["circumferential"]["peak"] < 0
    assert strain["units"]["time"] == "ms" and strain["frame_times"] == [0.0, 30.0, 60.0, 90.0, 120.0]
    assert function["request"]["settings"]["strain"] is True
    rows = list(csv.reader(open(out / STRAIN_OUTPUTS["csv"])))
    assert len(rows) == 1 + 5  # header + one row per frame


def test_cli_track_without_strain_or_figures(cine_study, tmp_path):
    out = tmp_path / "plain"
    assert main(["track", "--cine", str(cine_study["cine"]), "--label", str(cine_study["label"]), "--out", str(out), "--threads", "1",
                 "--no-progress", "--quiet"]) == 0
    assert not any(p.name.startswith("strain") for p in out.iterdir())
    assert "strain" not in json.loads((out / "function.json").read_text())
    out2 = tmp_path / "nofig"
    assert main(["track", "--cine", str(cine_study["cine"]), "--label", str(cine_study["label"]), "--out", str(out2), "--strain",
                 "--no-figure", "--threads", "1", "--no-progress", "--quiet"]) == 0
    assert {p.name for p in out2.iterdir()} == {"labels_4d.nii.gz", "volumes.csv", "function.json", "strain.csv", "strain.json"}


def test_cohort_csv_gets_the_strain_peaks(cine_study, tmp_path):
    cohort = tmp_path / "cohort_in.csv"
    cohort.write_text(f"cine,label\n{cine_study['cine']},{cine_study['label']}\n")
    out = tmp_path / "cohort"
    assert main(["track", "--batch", str(cohort), "--out", str(out), "--strain", "--no-figure", "--threads", "1", "--no-progress", "--quiet"]) == 0
    row = next(csv.DictReader(open(out / "cohort.csv")))
    assert float(row[STRAIN_COLUMNS[0]]) < 0 < float(row[STRAIN_COLUMNS[1]])
