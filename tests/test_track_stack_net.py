"""``track`` with a stack network: every scheme composes and applies its 3-D fields on the ``(Z, H, W)`` grid, the
labels move through the plane, and what does not apply to such a network is recorded in ``Tracking.settings``."""

from __future__ import annotations

import json
import warnings
from typing import List

import numpy as np
import pytest
import SimpleITK as sitk
import torch
from torch import nn

from monai_npc.apps.registration.models import register_settings
from monai_npc.apps.tracking.fields import STACK_NOT_APPLIED, carry_label, compose_fields
from monai_npc.apps.tracking.result import label_dice
from monai_npc.apps.tracking.track import LABEL_SIGMA, SCHEMES, track, track_schemes
from monai_npc.data.phantom_cine import cardiac_cine
from monai_npc.functional.label_warp import indicator_tensor
from monai_npc.networks.nets import SliceContextNPC, load_pretrained, save_pretrained

SPACING = (8.0, 1.5, 1.5)  # (slice, row, col) mm
Z, T, SIZE = 6, 3, 40  # slices, frames, pixels a side


class SliceShift(nn.Module):
    """An analytic stack network: the whole-slice through-plane shift ``d`` (``fixed[z] = moving[z + d]``, the one of
    least squared difference over the slices both stacks share) as a constant field, no in-plane motion."""

    stack_network = True

    def __init__(self) -> None:
        super().__init__()
        self.meta = {"field_of_view": "image", "input_size": 32}
        self.shifts: List[int] = []

    def forward(self, stack: torch.Tensor) -> torch.Tensor:
        """``(Z, 2, h, w)`` -> ``(Z, 3, h, w)``: channel 0 = ``d`` slices, channels 1-2 = 0."""
        moving, fixed = stack[:, 0], stack[:, 1]
        z = stack.shape[0]

        def miss(d: int) -> float:
            return float(((fixed[max(0, -d):z - max(0, d)] - moving[max(0, d):z + min(0, d)]) ** 2).mean())

        shift = min(range(-(z - 2), z - 1), key=miss)
        self.shifts.append(shift)
        ddf = stack.new_zeros((z, 3) + tuple(stack.shape[2:]))
        ddf[:, 0] = float(shift)
        return ddf


def _shifted_cine():
    """``(cine (T, Z, H, W), label (Z, H, W))``: frame ``t`` is the stack of smooth random slices ``t .. t + Z - 1``
    (the heart moving ``t`` slices towards the base), so ``frame_t(z) = frame_0(z + t)``; the label of frame 0 has a box
    on every slice, its value and place changing from slice to slice."""
    rng = np.random.default_rng(0)
    noise = torch.from_numpy(rng.random((Z + T, 1, SIZE, SIZE)).astype(np.float32))
    smooth = torch.nn.functional.avg_pool2d(torch.nn.functional.avg_pool2d(noise, 5, 1, 2), 5, 1, 2)[:, 0].numpy()
    label = np.zeros((Z, SIZE, SIZE), np.int32)
    for k in range(Z):
        label[k, 10 + k:24 + k, 12:28] = 1 + k % 3
    return np.stack([smooth[t:t + Z] for t in range(T)]), label


def _shifted(label: np.ndarray, slices: int) -> np.ndarray:
    """What the tracked label of a frame ``slices`` slices on is: the reference label (smoothed in-plane as tracking
    smooths it) read ``slices`` slices further, nothing beyond the stack's last slice."""
    smooth = carry_label(indicator_tensor(label, [1, 2, 3], LABEL_SIGMA), torch.zeros(Z, 2, SIZE, SIZE))
    out = np.zeros_like(smooth)
    out[:Z - slices] = smooth[slices:]
    return out


def test_3d_composition_reads_the_first_field_through_the_plane():
    first = torch.zeros(Z, 3, 4, 5)
    first[:, 0] = 0.5 * torch.arange(Z, dtype=torch.float32).view(Z, 1, 1)  # varies from slice to slice
    first[:, 2] = torch.arange(Z, dtype=torch.float32).view(Z, 1, 1)
    then = torch.zeros(Z, 3, 4, 5)
    then[:, 0] = 1.0
    out = compose_fields(first, then)
    read = torch.clamp(torch.arange(Z) + 1, max=Z - 1).float()  # first read one slice on, clamped to the stack
    np.testing.assert_allclose(out[:, 0, 0, 0].numpy(), (1.0 + 0.5 * read).numpy(), atol=1e-5)
    np.testing.assert_allclose(out[:, 2, 0, 0].numpy(), read.numpy(), atol=1e-5)
    assert float(out[:, 1].abs().max()) == 0.0
    then[:, 0] = 0.5  # half a slice: trilinear between two slices
    np.testing.assert_allclose(compose_fields(first, then)[:Z - 1, 0, 2, 2].numpy(), 0.5 + 0.5 * (np.arange(Z - 1) + 0.5), atol=1e-5)
    in_plane = torch.randn(Z, 2, 4, 5)  # a 2-D network's fields still compose slice by slice
    assert compose_fields(in_plane, torch.zeros(Z, 2, 4, 5)).shape == (Z, 2, 4, 5)


def test_every_scheme_carries_the_label_through_the_plane():
    cine, label = _shifted_cine()
    net = SliceShift()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        results = track_schemes(cine, label, 0, SCHEMES, model=net, spacing=SPACING, progress=False)
    assert not [w for w in caught if "ignored" in str(w.message)]  # nothing asked for that could not apply
    assert sorted(set(net.shifts)) == [-2, -1, 1, 2]  # consecutive frames +1, backwards -1, direct +2, the cycle's close -2
    for name, tracking in results.items():
        anchored = name == "anchored"  # its correction refines the in-plane channels against the reference frame
        assert tracking.ddf.shape == (T, 3, Z, SIZE, SIZE)
        if anchored:  # where frame t matches the reference t slices on (away from the slices it cannot), the correction
            # stays within its few Adam steps
            assert float(tracking.ddf[1, 1:, :Z - 2].abs().max()) < 0.5 and float(tracking.ddf[2, 1:, :Z - 3].abs().max()) < 0.5
        else:
            assert float(tracking.ddf[:, 1:].abs().max()) == 0.0, name
        for t in range(T):  # frame t is t slices on: +1 per consecutive pair composed to +t (sequential's chain and the others')
            np.testing.assert_allclose(tracking.ddf[t, 0].numpy(), float(t), atol=1e-5, err_msg=f"{name} frame {t}")
            expected = label if t == 0 else _shifted(label, t)
            agree = float((tracking.labels[t] == expected).mean())
            assert agree == 1.0 or (anchored and agree > 0.99), f"{name} frame {t}"
            assert not tracking.labels[t][Z - t:].any()  # what leaves the stack is gone: nothing is clamped into the last slice
        voxel_ml = np.prod(SPACING) / 1000.0
        assert tracking.volumes["lv"][2] == pytest.approx((_shifted(label, 2) == 3).sum() * voxel_ml, rel=0.02 if anchored else 1e-6)
        record = tracking.settings["stack_network"]
        assert record["through_plane"] == "network" and set(STACK_NOT_APPLIED) <= set(record["not_applied"])
        assert ("anchored_correction" in record) == anchored and "anchored_correction" not in record["not_applied"]
        assert "basal rules in the transform" not in tracking.settings  # 6 slices: on for a 2-D network, not applied here
        assert ("anchored to the reference" in tracking.settings) == anchored
        if tracking.drift is not None:  # the chain closes the cycle: +1 +1 -2 is no motion
            assert min(tracking.drift.values()) > (0.95 if anchored else 0.98)
    strain_note = results["sequential"].settings["stack_network"]["strain"]
    assert "in-plane" in strain_note


def test_a_stack_network_without_refinement_has_nothing_for_the_label_to_steer():
    cine, label = _shifted_cine()
    tracking = track(cine, label, 0, "sequential", model=SliceShift(), spacing=SPACING, progress=False, label_guidance=0.05)
    assert "label" not in tracking.settings  # the label acts in the refinement only: no registration records one
    np.testing.assert_allclose(tracking.ddf[2, 0].numpy(), 2.0, atol=1e-5)


def test_a_stack_network_registers_from_the_reference_with_its_label_as_register_does():
    """The reference label steers a stack network's refinement (its in-plane channels), as ``register``'s."""
    npc = load_pretrained("acdc", refine_iterations=4)
    npc.set_flip_ensemble(1)
    net = SliceContextNPC.from_npc(npc).eval()
    phantom = cardiac_cine(frames=6, size=96, levels=(0.3, 0.5, 0.7), seed=1)
    cine, label = phantom["image"][:3], phantom["label"][0]
    kwargs = dict(spacing=tuple(float(s) for s in phantom["spacing"]), progress=False, basal_descent=False, field_of_view="heart-stack")
    guided = track(cine, label, 0, "direct", model=net, **kwargs)
    plain = track(cine, label, 0, "direct", model=net, label_guidance=0.0, **kwargs)
    assert guided.settings["label"]["label_guidance"][0] > 0 and "label" not in plain.settings
    assert "label_guidance" not in guided.settings["stack_network"]["not_applied"]
    moved = (guided.ddf[1:, 1:] - plain.ddf[1:, 1:]).abs().amax()
    assert 0.01 < float(moved) < 5.0  # the label moved the in-plane field a little
    assert float((guided.ddf[:, 0] - plain.ddf[:, 0]).abs().max()) == 0.0  # the network's through-plane channel is kept
    for t in (1, 2):  # a phantom without through-plane motion: the label term moving all three channels lowered its
        # Dice (0.960 -> 0.871); on the in-plane ones it stays with the unguided field
        truth = phantom["label"][t]
        with_label, without = (float(np.mean(list(label_dice(x.labels[t], truth).values()))) for x in (guided, plain))
        assert with_label > 0.93 and abs(with_label - without) < 0.02, (t, with_label, without)


@pytest.fixture(scope="module")
def networks():
    """``(SliceContextNPC, its 2-D network)`` from the acdc weights, both used as they are (no refinement, no flip)."""
    npc = load_pretrained("acdc", refine_iterations=0)
    npc.set_flip_ensemble(1)
    return SliceContextNPC.from_npc(npc).eval(), npc


def test_slice_context_from_acdc_tracks_like_its_2d_network(networks):
    net, npc = networks
    phantom = cardiac_cine(frames=6, size=96, levels=(0.3, 0.5, 0.7), seed=1)
    cine, label = phantom["image"][:3], phantom["label"][0]
    kwargs = dict(spacing=tuple(float(s) for s in phantom["spacing"]), progress=False, basal_descent=False, field_of_view="heart-stack")
    schemes = ("direct", "sequential", "bidirectional")
    stack, flat = track_schemes(cine, label, 0, schemes, model=net, **kwargs), track_schemes(cine, label, 0, schemes, model=npc, **kwargs)
    for name in schemes:
        assert float(stack[name].ddf[:, 0].abs().max()) == 0.0  # exactly 0 through the plane: the heads start at zero
        assert float(flat[name].ddf[:, 1:].abs().max()) > 1.0  # the phantom moves
        assert float((stack[name].ddf - flat[name].ddf).abs().max()) < 2e-3  # the 3-D warp's float rounding only
        for t in (1, 2):
            assert min(label_dice(stack[name].labels[t], flat[name].labels[t]).values()) >= 0.99, (name, t)
        assert "stack_network" in stack[name].settings and "stack_network" not in flat[name].settings


def _write_4d(image: np.ndarray, path) -> sitk.Image:
    out = sitk.JoinSeries([sitk.GetImageFromArray(f) for f in image])  # (T, Z, H, W) -> size (W, H, Z, T)
    out.SetSpacing((2.0, 2.0, 8.0, 30.0))
    sitk.WriteImage(out, str(path))
    return sitk.ReadImage(str(path))


def test_cli_tracks_with_a_saved_stack_network(networks, tmp_path):
    from monai_npc.cli.main import main

    weights = save_pretrained(networks[0], tmp_path / "slice_context.pt", meta=networks[0].meta)
    assert isinstance(load_pretrained(weights), SliceContextNPC)  # architecture "slice_context" rebuilds the class
    phantom = cardiac_cine(frames=6, size=96, levels=(0.3, 0.5, 0.7), seed=1)
    reference = _write_4d(phantom["image"][:3], tmp_path / "cine_4d.nii.gz")
    lab = sitk.GetImageFromArray(phantom["label"][0].astype(np.int16))
    lab.CopyInformation(sitk.Extract(reference, list(reference.GetSize()[:3]) + [0], [0, 0, 0, 0]))
    sitk.WriteImage(lab, str(tmp_path / "gt.nii.gz"))
    out = tmp_path / "out"
    rc = main(["--threads", "1", "--quiet", "track", "--cine", str(tmp_path / "cine_4d.nii.gz"), "--label", str(tmp_path / "gt.nii.gz"),
               "--label-frame", "0", "--model", str(weights), "--scheme", "sequential", "--out", str(out), "--no-progress",
               "--no-figure", "--strain"])
    assert rc == 0
    summary = json.loads((out / "function.json").read_text())
    settings = summary["registration_settings"]
    assert settings["stack_network"]["through_plane"] == "network"
    # register's settings for the weights (their 3-D refinement), not tracking's 2-D steps between consecutive frames
    refine = register_settings(load_pretrained(weights))["refine_iterations"]
    assert refine > 0 and "refinement" not in settings["stack_network"]["not_applied"]
    assert settings["consecutive frames"]["model"] == str(weights) and settings["consecutive frames"]["refine_iterations"] == refine
    assert "basal rules in the transform" not in settings  # 3 slices: basal_descent's default is on, recorded as not applied
    assert "basal_rules" in settings["stack_network"]["not_applied"]
    labels = sitk.GetArrayFromImage(sitk.ReadImage(str(out / "labels_4d.nii.gz")))
    assert labels.shape == (3, 3, 96, 96) and np.array_equal(labels[0], phantom["label"][0])
    notes = json.loads((out / "strain.json").read_text())["notes"]
    assert "does not read that motion" in notes[0]


def test_a_two_frame_cine_with_stack_weights_is_register(networks, tmp_path):
    weights = save_pretrained(networks[0], tmp_path / "slice_context.pt", meta=networks[0].meta)
    phantom = cardiac_cine(frames=6, size=96, levels=(0.3, 0.5, 0.7), seed=1)
    tracking = track(phantom["image"][[0, 2]], phantom["label"][0], 0, model=str(weights),
                     spacing=tuple(float(s) for s in phantom["spacing"]), progress=False)
    assert tracking.settings["stack_network"]["through_plane"] == "network"
    assert tracking.settings["pair"]["basal_descent"]["applied"] is False  # register's own record
    assert tracking.ddf.shape == (2, 3, 3, 96, 96) and float(tracking.ddf[:, 0].abs().max()) == 0.0
