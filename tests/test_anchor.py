"""The anchored tracking scheme: its box, its correction of a chained field, and the scheme on a phantom cine."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from monai_npc.data.phantom_cine import cardiac_cine
from monai_npc.apps.tracking.anchor import (
    ANCHOR_GRID_STRIDE,
    ANCHOR_ITERATIONS,
    ANCHOR_TAPER,
    ReferenceAnchor,
    frame_distances,
    label_box,
)
from monai_npc.apps.tracking.track import label_dice, track_schemes


def test_label_box_grows_and_clips():
    lab = np.zeros((2, 40, 50), np.int32)
    lab[0, 10:15, 20:30] = 3
    lab[1, 12:20, 5:8] = 1
    assert label_box(lab, 4) == (slice(6, 24), slice(1, 34))  # rows 10-19, cols 5-29, grown by 4, clipped at 0
    assert label_box(lab, 100) == (slice(0, 40), slice(0, 50))
    assert label_box(np.zeros((1, 7, 9)), 3) == (slice(0, 7), slice(0, 9))  # empty label: the whole grid
    # at least 30 a side around the box's centre, slid back into the grid at the border
    assert label_box(lab, 4, 30) == (slice(0, 30), slice(1, 34))  # rows 6-23 grown to 30 and slid in; cols already 33


def _shifted_frames(shift: float):
    """Two frames of smoothed noise; frame 1 is frame 0 moved by ``shift`` rows. A square label on frame 0."""
    from scipy.ndimage import gaussian_filter, shift as nd_shift

    img = gaussian_filter(np.random.default_rng(0).random((64, 64)), 2.0).astype(np.float32)
    frames = np.stack([img[None], nd_shift(img, (shift, 0.0), order=3, mode="nearest")[None].astype(np.float32)])
    label = np.zeros((1, 64, 64), np.int32)
    label[0, 24:40, 22:38] = 3
    return frames, label


def test_anchor_corrects_a_wrong_start_inside_the_box_only():
    """Frame 1 = frame 0 moved 1 row down (Warp convention: label_1(x) = label_0(x + u(x)), so u = -1 row):
    from a start 0.7 columns off, the default 6 steps find it under the label; outside the box the start
    is kept. Each Adam step moves the residual by about the learning rate (0.25 voxels), so 6 steps
    correct at most about 1.5 voxels: a 2-row error is only partly corrected."""
    frames, label = _shifted_frames(1.0)
    anchor = ReferenceAnchor(frames, 0, label, label_guidance=0.0, margin=12, size=0)
    assert anchor.box == (slice(12, 52), slice(10, 50)) and anchor.iterations == ANCHOR_ITERATIONS == 6
    assert anchor.refiner.grid_stride == ANCHOR_GRID_STRIDE == 2
    start = torch.zeros(1, 2, 64, 64)
    start[:, 1] = 0.7
    out = anchor(1, start)
    rows, cols = out[0, 0, 24:40, 22:38], out[0, 1, 24:40, 22:38]
    assert float(rows.mean()) == pytest.approx(-1.0, abs=0.25), float(rows.mean())  # measured -1.10
    assert abs(float(cols.mean())) < 0.3, float(cols.mean())  # -0.19, from 0.7
    far, _ = _shifted_frames(2.0)
    partly = float(ReferenceAnchor(far, 0, label, label_guidance=0.0, margin=12, size=0)(1, start)[0, 0, 24:40, 22:38].mean())
    assert -1.6 < partly < -0.9, partly  # -1.21 of -2
    outside = torch.ones(64, 64, dtype=torch.bool)
    outside[anchor.box] = False
    assert torch.equal(out[:, :, outside], start[:, :, outside])
    # the correction falls to zero at the box's edge: no seam
    edge = out[0, :, anchor.box[0].start, anchor.box[1]] - start[0, :, anchor.box[0].start, anchor.box[1]]
    assert float(edge.abs().max()) < 1e-6 and ANCHOR_TAPER > 0


def test_label_guidance_grows_with_the_distance_to_the_reference():
    """The label term's weight is ``label_guidance`` x the frame's mean squared difference to the reference
    over the largest: 0 on the reference, full on the farthest frame, in between for the others."""
    frames = np.zeros((4, 1, 8, 8), np.float32)
    frames[1], frames[2], frames[3] = 1.0, 2.0, 0.5  # squared distances to frame 0: 1, 4, 0.25
    d = frame_distances(torch.from_numpy(frames), 0)
    assert torch.allclose(d, torch.tensor([0.0, 0.25, 1.0, 0.0625]))
    assert torch.equal(frame_distances(torch.zeros(3, 2, 4), 1), torch.zeros(3))  # a still cine: no guidance anywhere
    label = np.zeros((1, 8, 8), np.int32)
    label[0, 2:6, 2:6] = 3
    anchor = ReferenceAnchor(frames, 2, label, label_guidance=0.1, margin=1)
    # robust_unit scales each frame (constant frames -> 0) before the distances are taken: here all frames become equal
    assert [anchor.guidance(t) for t in range(4)] == [0.0] * 4
    frames, label = _shifted_frames(2.0)
    anchor = ReferenceAnchor(np.concatenate([frames, frames[:1]]), 0, label, label_guidance=0.1, margin=4)
    assert anchor.guidance(0) == 0.0 and anchor.guidance(2) == 0.0 and anchor.guidance(1) == pytest.approx(0.1)


def test_anchor_takes_constant_steps_whatever_the_network_refines_with():
    """The correction's few steps keep ``ANCHOR_LEARNING_RATE`` at every step, also from a refiner whose step size falls
    (``register``'s settings of ``acdc``, which a stack network's tracking loads); the caller's refiner is not changed."""
    from monai_npc.apps.tracking.anchor import ANCHOR_LEARNING_RATE
    from monai_npc.networks.blocks import InstanceRefinement

    frames, label = _shifted_frames(2.0)
    falling = InstanceRefinement(iterations=30, learning_rate=0.5, learning_rate_end=0.15, grid_stride=8)
    anchor = ReferenceAnchor(frames, 0, label, falling, label_guidance=0.0, margin=12, size=0)
    plain = ReferenceAnchor(frames, 0, label, InstanceRefinement(grid_stride=8), label_guidance=0.0, margin=12, size=0)
    assert (anchor.refiner.learning_rate, anchor.refiner.learning_rate_end) == (ANCHOR_LEARNING_RATE, None) == (0.25, None)
    assert (falling.iterations, falling.learning_rate, falling.learning_rate_end) == (30, 0.5, 0.15)
    start = torch.zeros(1, 2, 64, 64)
    assert torch.equal(anchor(1, start), plain(1, start))


def test_anchor_rejects_bad_input():
    frames, label = _shifted_frames(1.0)
    with pytest.raises(ValueError, match=r"\(T, Z, H, W\)"):
        ReferenceAnchor(frames[:, 0], 0, label)
    with pytest.raises(ValueError, match="label_guidance"):
        ReferenceAnchor(frames, 0, label, label_guidance=-1.0)
    with pytest.raises(ValueError, match="grid_stride"):
        ReferenceAnchor(frames, 0, label, grid_stride=0)
    zero = ReferenceAnchor(frames, 0, label, iterations=0)
    start = torch.randn(1, 2, 64, 64)
    assert zero(1, start) is start


def test_anchored_scheme_on_a_phantom_cine():
    """The network alone between consecutive frames, each composed field refined against frame 0: on a
    10-frame phantom cine it keeps closer to the truth than the sequential chain and drifts less (on a
    6-frame cine, where the chain hardly drifts, it is 0.008 below: docs/tracking.md)."""
    c = cardiac_cine(frames=10, levels=(0.3, 0.6), seed=5)
    res = track_schemes(c["image"], c["label"][0], 0, ("sequential", "anchored"), spacing=c["spacing"], threads=1, progress=False,
                        basal_descent=False)
    dice = {s: [np.nanmean(list(label_dice(r.labels[t], c["label"][t]).values())) for t in range(10)] for s, r in res.items()}
    drift = {s: np.nanmean(list(r.drift.values())) for s, r in res.items()}
    a = res["anchored"]
    chain = dict(a.settings["consecutive frames"])
    assert chain.pop("settings")["refine_iterations"] == {"value": 0, "source": "default"}  # the scheme's own, in register's record
    settings = dict(a.settings, **{"consecutive frames": chain})
    assert settings.pop("fold_repair")["registrations"] == 10  # register's fold repair, recorded for every registration
    assert settings.pop("structures")["values"] == {"rv": 1, "myo": 2, "lv": 3}  # the label's numbering the volumes read
    assert a.registrations == 10 and settings == {
        "consecutive frames": {"model": "acdc", "num_steps": 4, "refine_iterations": 0},
        "anchored to the reference": {"refine_iterations": 6, "grid_stride": 2, "label_guidance": 0.05,
                                      "label_guidance_by": "frame distance"}}
    assert min(dice["anchored"][1:]) > 0.95, dice
    assert np.mean(dice["anchored"][1:]) > np.mean(dice["sequential"][1:]), dice  # measured 0.978 vs 0.961
    assert drift["anchored"] > drift["sequential"] + 0.02, drift  # 0.979 vs 0.945
    assert a.function["es_frame"] == c["es"]
