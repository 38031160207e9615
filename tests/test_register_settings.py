"""``register``'s settings record: one value and one source (argument, weights, dataset, default) per setting, in
``summary.json`` and as the values that ran."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

import monai_npc
from monai_npc.apps.registration.models import resolve_model
from monai_npc.apps.registration.settings import DEFAULTS, SOURCES, RegisterSettings, resolve_settings
from monai_npc.data.phantoms import cardiac_pair


@pytest.fixture(scope="module")
def pair():
    p = cardiac_pair(128, seed=3)
    return {k: (p[k] * 300).astype(np.float32) for k in ("moving", "fixed")} | {"moving_label": p["moving_label"]}


def _record(reg):
    return {k: (v["value"], v["source"]) for k, v in reg.summary["settings"].items()}


def test_acdc_defaults_come_from_its_dataset_and_arguments_win(pair):
    reg = monai_npc.register(pair["moving"], pair["fixed"], "acdc", moving_label=pair["moving_label"], spacing=(1.5, 1.5), threads=1,
                             num_steps=4, label_sigma=0.0)
    rec = _record(reg)
    assert set(rec) == {f.name for f in dataclasses.fields(RegisterSettings)} - {"sources"}
    assert all(source in SOURCES for _, source in rec.values())
    assert rec["num_steps"] == (4, "argument") and rec["label_sigma"] == (0.0, "argument")
    assert rec["refine_iterations"] == (30, "dataset") and rec["field_of_view"] == ("heart-stack", "dataset")
    assert rec["refine_learning_rate"] == (0.5, "dataset") and rec["refine_learning_rate_end"] == (0.15, "dataset")
    assert rec["label_prior"] == ("acdc_heart", "dataset") and rec["label_prior_weight"] == (8.0, "dataset")
    assert rec["label_guidance"] == (DEFAULTS["label_guidance"], "default") and rec["align"] == ("auto", "default")
    assert rec["size"] == (128, "weights")
    # the record is what ran
    assert reg.summary["steps"] == {"num_steps": 4, "refine_iterations": 30} and reg.summary["label_sigma"] == 0.0


def test_a_network_configured_once_keeps_its_sources_and_one_used_as_it_is_says_weights(pair):
    from monai_npc.networks.nets.pretrained import load_pretrained

    net, _ = resolve_model("acdc")  # as monai-npc register --batch and quickstart load it once for many pairs
    rec = _record(monai_npc.register(pair["moving"], pair["fixed"], net, spacing=(1.5, 1.5), threads=1))
    assert rec["num_steps"] == (6, "dataset") and rec["flip_ensemble"] == (2, "dataset")
    own = load_pretrained("acdc")  # a network a user loaded: used as it is (the weights' own steps and window)
    settings = resolve_settings(own, {})
    assert (settings.num_steps, settings.sources["num_steps"]) == (10, "weights")
    assert (settings.field_of_view, settings.sources["field_of_view"]) == ("heart", "dataset")
    assert (settings.label_sigma, settings.sources["label_sigma"]) == (1.0, "dataset")


def test_networks_without_steps_record_none(pair):
    rec = _record(monai_npc.register(pair["moving"], pair["fixed"], "phase-correlation", spacing=(1.5, 1.5), threads=1))
    assert rec["num_steps"] == (None, "default") and rec["refine_iterations"] == (None, "default")
    assert rec["label_prior"] == (None, "default") and rec["label_prior_weight"] == (0.0, "default")
    assert rec["field_of_view"] == ("image", "default")


@pytest.mark.parametrize("arguments, match", [
    ({"label_sigma": -1}, r"label_sigma \(--label-sigma\)"), ({"label_guidance": -0.1}, r"label_guidance \(--label-guidance\)"),
    ({"num_steps": 0}, r"num_steps \(--steps\)"), ({"refine_iterations": -1}, r"refine_iterations \(--refine\)"),
    ({"label_prior": float("nan")}, r"label_prior \(--label-prior\)"),
])
def test_bad_settings_fail_before_any_reading(arguments, match):
    with pytest.raises(ValueError, match=match):
        monai_npc.register("/no/such/moving.nii.gz", "/no/such/fixed.nii.gz", "acdc", **arguments)


def test_a_prior_weight_for_weights_without_a_prior_names_the_model():
    net, _ = resolve_model("phase-correlation")
    with pytest.raises(ValueError, match="names no label prior"):
        resolve_settings(net, {"label_prior": 2.0}, "phase-correlation")


def test_tracking_records_register_settings_of_each_kind_of_registration():
    """``Tracking.settings`` carries register's record for the registrations each scheme made (direct: register's
    settings from the dataset; sequential: tracking's own steps, its defaults)."""
    from monai_npc.data.phantom_cine import cardiac_cine

    cine = cardiac_cine(frames=4, levels=(0.2, 0.55), seed=3)
    from monai_npc.apps.tracking import track_schemes

    out = track_schemes(cine["image"], cine["label"][0], 0, ("direct", "sequential"), spacing=cine["spacing"], progress=False,
                                  threads=1)
    direct = out["direct"].settings["register's settings"]["settings"]
    assert direct["num_steps"] == {"value": 6, "source": "dataset"} and direct["label_prior"]["value"] == "acdc_heart"
    chain = out["sequential"].settings["consecutive frames"]["settings"]
    assert chain["num_steps"] == {"value": 4, "source": "default"} and chain["refine_iterations"] == {"value": 10, "source": "default"}
    assert chain["flip_ensemble"] == {"value": 2, "source": "default"} and chain["field_of_view"]["source"] == "dataset"
