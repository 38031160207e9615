"""Myocardial strain: the pure functions, the AHA segments, the analytic phantom and the output files."""

from __future__ import annotations

import csv
import json
import logging
import math

import numpy as np
import pytest
import torch

from monai_npc.cardiac.aha import AHA_SEGMENTS, aha_segments, screen_angles
from monai_npc.cardiac.strain import Strain, strain_from_displacements
from monai_npc.apps.tracking.strain_outputs import STRAIN_OUTPUTS, strain_csv_header, write_strain
from monai_npc.data.strain_phantom import ANTERIOR_INSERTION_DEG, strain_phantom
from monai_npc.functional.strain import (
    deformation_gradient, invert_displacement, normal_strain, polar_directions, reference_deformation_gradient,
)
from monai_npc.functional.warp import identity_grid
from monai_npc.io_safety import AtomicFolder

COMPONENTS = ("circumferential", "radial")


@pytest.fixture(scope="module")
def phantom():
    return strain_phantom(frames=10, size=112, slices=6, seed=1)


@pytest.fixture(scope="module")
def phantom_strain(phantom):
    return strain_from_displacements(phantom.ddf, phantom.labels[0], phantom.spacing, 0, phantom.frame_times)


def _grid_mm(shape, centre, spacing):
    """``(1, 2, H, W)`` float64 mm coordinates relative to ``centre`` (voxels)."""
    g = identity_grid(list(shape), torch.device("cpu"), torch.float64).unsqueeze(0)
    c = torch.as_tensor(centre, dtype=torch.float64).view(1, 2, 1, 1)
    return (g - c) * torch.as_tensor(spacing, dtype=torch.float64).view(1, 2, 1, 1)


def _stack(field_2d, frames_fields):
    """``(T, 2, Z, H, W)`` from per-frame ``(2, H, W)`` fields, the same on every slice."""
    return torch.stack([f.expand(frames_fields, -1, -1, -1).permute(1, 0, 2, 3) for f in field_2d])


def _affine_ddfs(label, spacing, matrix, offset_mm=(0.0, 0.0), centre=None):
    """Frame 0 still, frame 1 the affine motion ``X -> c + A (X - c) + offset`` (mm) of the reference, as the
    ``"to_reference"`` field ``u(x) = psi^-1(x) - x`` in voxels: ``(2, 2, Z, H, W)``."""
    z, h, w = label.shape
    sp = torch.as_tensor(spacing[1:], dtype=torch.float64)
    if centre is None:
        centre = np.argwhere(label[z // 2] == 3).mean(0)
    x = _grid_mm((h, w), centre, spacing[1:])
    a_inv = torch.linalg.inv(torch.as_tensor(matrix, dtype=torch.float64))
    ref = torch.einsum("ij,bjhw->bihw", a_inv, x - torch.as_tensor(offset_mm, dtype=torch.float64).view(1, 2, 1, 1))
    u = ((ref - x) / sp.view(1, 2, 1, 1))[0].float()  # (2, H, W) voxels
    return _stack([torch.zeros_like(u)[None], u[None]], z)


# ----------------------------------------------------------------------------- exact answers on analytic fields


def test_area_changes_no_muscle_makes_are_left_out(phantom):
    """A voxel whose area the motion changes more than MAX_AREA_RATIO-fold (a field nearly folding) is left out like a
    fold; up to that, the strain is kept; max_area_ratio=None keeps all but folds; a bound <= 1 is refused."""
    from monai_npc.cardiac.strain import MAX_AREA_RATIO

    label, spacing = phantom.labels[0], (8.0, 1.5, 1.5)
    kept_scale = (1.0 / MAX_AREA_RATIO) ** 0.5 * 1.05  # area ratio just inside the bound
    cut_scale = (1.0 / MAX_AREA_RATIO) ** 0.5 * 0.95  # just outside
    kept = strain_from_displacements(_affine_ddfs(label, spacing, np.diag([kept_scale] * 2)), label, spacing)
    assert kept.unresolved[1] == 0.0 and kept.curves["circumferential"][1] == pytest.approx(100 * (kept_scale - 1), abs=0.05)
    cut = _affine_ddfs(label, spacing, np.diag([cut_scale] * 2))
    s = strain_from_displacements(cut, label, spacing)
    assert s.unresolved[1] == 1.0 and np.isnan(s.curves["circumferential"][1])
    s = strain_from_displacements(cut, label, spacing, max_area_ratio=None)
    assert s.unresolved[1] == 0.0 and s.curves["circumferential"][1] == pytest.approx(100 * (cut_scale - 1), abs=0.05)
    with pytest.raises(ValueError, match="max_area_ratio"):
        strain_from_displacements(cut, label, spacing, max_area_ratio=1.0)


@pytest.mark.parametrize("spacing", [(8.0, 1.5, 1.5), (10.0, 1.25, 1.75)])
def test_uniform_contraction_gives_the_known_strain(phantom, spacing):
    a = 0.85
    label = phantom.labels[0]
    ddfs = _affine_ddfs(label, spacing, [[a, 0.0], [0.0, a]])
    for kind, expected in (("engineering", 100 * (a - 1)), ("green", 50 * (a * a - 1))):
        s = strain_from_displacements(ddfs, label, spacing, kind=kind)
        for c in COMPONENTS:
            assert s.curves[c][0] == pytest.approx(0.0, abs=1e-9)
            assert s.curves[c][1] == pytest.approx(expected, abs=2e-3), (kind, c)
            assert np.nanmax(np.abs(s.segment_curves[c][1] - expected)) < 2e-3
        assert s.peak["circumferential"] == pytest.approx(expected, abs=2e-3)
        assert s.peak_frame == {"circumferential": 1, "radial": 0}  # uniform shrinking: radial strain never positive


@pytest.mark.parametrize("spacing", [(8.0, 1.5, 1.5), (10.0, 1.25, 1.75)])
def test_rigid_motion_gives_zero_strain(phantom, spacing):
    label = phantom.labels[0]
    shift = _affine_ddfs(label, spacing, np.eye(2), offset_mm=(4.3, -3.1))
    angle = math.radians(12.0)
    rot = [[math.cos(angle), -math.sin(angle)], [math.sin(angle), math.cos(angle)]]
    turn = _affine_ddfs(label, spacing, rot)  # about the LV centre
    turn_elsewhere = _affine_ddfs(label, spacing, rot, offset_mm=(1.0, 2.0), centre=(50.0, 60.0))
    for ddfs in (shift, turn, turn_elsewhere):
        assert float(ddfs[1].abs().max()) > 1.5  # the motion is real
        s = strain_from_displacements(ddfs, label, spacing)
        assert np.nanmax(np.abs(s.strain_map)) < 2e-3
        assert abs(s.peak["circumferential"]) < 2e-3 and abs(s.peak["radial"]) < 2e-3


def test_rotation_in_mm_needs_the_spacing(phantom):
    """A rotation in mm on anisotropic pixels is rigid only with the right spacing: with it ignored it strains."""
    spacing = (10.0, 1.25, 1.75)
    label = phantom.labels[0]
    angle = math.radians(12.0)
    ddfs = _affine_ddfs(label, spacing, [[math.cos(angle), -math.sin(angle)], [math.sin(angle), math.cos(angle)]])
    right = strain_from_displacements(ddfs, label, spacing)
    wrong = strain_from_displacements(ddfs, label, (10.0, 1.5, 1.5))
    assert np.nanmax(np.abs(right.strain_map)) < 2e-3
    assert np.nanmax(np.abs(wrong.strain_map)) > 1.0


def test_deformation_gradient_follows_the_convention():
    """The tissue contracting by ``a``: ``F = a I`` from either field, ``I / a`` from a misread one."""
    a, sp = 0.8, (1.5, 1.5)
    x = _grid_mm((48, 48), (23.5, 23.5), sp).float()
    to_ref = (1 / a - 1) * x / 1.5  # frame point -> reference point, voxels
    from_ref = (a - 1) * x / 1.5  # reference point -> frame point
    eye = torch.eye(2)
    f1, res = reference_deformation_gradient(to_ref, sp)
    res = float(res.max())
    f2, _ = reference_deformation_gradient(from_ref, sp, convention="from_reference")
    assert res < 1e-3
    assert torch.allclose(f1[0, 10:-10, 10:-10], a * eye, atol=1e-5)
    assert torch.allclose(f2, a * eye, atol=1e-5)
    misread, _ = reference_deformation_gradient(to_ref, sp, convention="from_reference")
    assert torch.allclose(misread, eye / a, atol=1e-5)
    assert torch.allclose(deformation_gradient(to_ref, sp), eye / a, atol=1e-5)


def test_steep_invertible_field_is_inverted():
    """``u`` with slope up to 1.5 (the plain fixed-point iteration diverges there): the frame points are found
    and ``F`` is ``1 / (1 + u')`` along the rows."""
    rows = torch.arange(64, dtype=torch.float64)
    u0 = 6.0 * torch.tanh((rows - 32.0) / 4.0)  # x -> x + u0(x) has slope 1 + 1.5 sech^2 in [1, 2.5]: invertible
    ddf = torch.stack([u0.view(64, 1).expand(64, 48), torch.zeros(64, 48, dtype=torch.float64)]).unsqueeze(0)
    f, miss = reference_deformation_gradient(ddf, (1.0, 1.0))
    inner = slice(12, 52)
    assert float(miss[0, inner].max()) < 1e-3
    dense = torch.linspace(-20, 84, 200001, dtype=torch.float64)
    phi = dense + 6.0 * torch.tanh((dense - 32.0) / 4.0)
    y = np.interp(rows.numpy(), phi.numpy(), dense.numpy())  # the exact frame point of each reference row
    slope = 1.0 + 1.5 / np.cosh((y - 32.0) / 4.0) ** 2
    assert np.allclose(f[0, inner, 20, 0, 0].numpy(), 1.0 / slope[inner], atol=0.015)  # central differences of a steep tanh
    assert np.allclose(f[0, inner, 20, 1, 1].numpy(), 1.0)


def test_folding_field_leaves_its_voxels_out(phantom, caplog):
    label, sp = phantom.labels[0], phantom.spacing
    r0 = int(round(np.argwhere(label[0] == 3)[:, 0].mean()))
    rows = torch.arange(label.shape[1], dtype=torch.float32)
    u0 = -3.0 * torch.tanh((rows - r0) / 2.0)  # slope 1 - 1.5 sech^2 < 0 within 1.3 rows of r0: folds there
    field_ = torch.stack([u0.view(-1, 1).expand(-1, label.shape[2]), torch.zeros(label.shape[1:])])
    ddfs = _stack([torch.zeros_like(field_)[None], field_[None]], label.shape[0])
    with caplog.at_level(logging.WARNING, logger="monai_npc.cardiac.strain"):
        s = strain_from_displacements(ddfs, label, sp)
    myo = label == 2
    left_out = myo & np.isnan(s.strain_map[1, 0])
    assert s.unresolved[0] == 0 and s.unresolved[1] == pytest.approx(left_out.sum() / myo.sum())
    assert left_out.any() and set(np.argwhere(left_out)[:, 1].tolist()) == {r0}  # the folded row, only
    assert np.isfinite(s.global_circumferential).all() and "left out" in caplog.text


def test_normal_strain_and_directions():
    f = torch.tensor([[1.1, 0.0], [0.0, 0.9]])
    e = torch.tensor([[1.0, 0.0], [0.0, 1.0], [0.6, 0.8]])
    eng = normal_strain(f.expand(3, 2, 2), e)
    green = normal_strain(f.expand(3, 2, 2), e, "green")
    assert torch.allclose(eng, torch.tensor([0.1, -0.1, math.hypot(0.66, 0.72) - 1]), atol=1e-6)
    assert torch.allclose(green, 0.5 * ((1 + eng) ** 2 - 1), atol=1e-6)
    pts = torch.tensor([[[10.0, 5.0, 5.0], [5.0, 9.0, 5.0]]])  # (1, 2, 3): below, right of and at the centre (5, 5)
    radial, circ = polar_directions(pts, torch.tensor([[5.0, 5.0]]), (2.0, 1.0))
    assert torch.allclose(radial[0], torch.tensor([[1.0, 0.0], [0.0, 1.0], [0.0, 0.0]]))
    assert torch.allclose(circ[0, 1], torch.tensor([-1.0, 0.0]))  # right of the centre, counterclockwise on screen = up
    with pytest.raises(ValueError, match="kind"):
        normal_strain(f, e[0], "lagrange")


# ----------------------------------------------------------------------------- the phantom


def test_phantom_exact_displacements_give_its_strain(phantom, phantom_strain):
    s, p = phantom_strain, phantom
    for c, tol in (("circumferential", 0.05), ("radial", 0.15)):
        assert np.abs(s.curves[c] - p.true_global[c]).max() < tol, c
        assert np.nanmax(np.abs(s.segment_curves[c] - p.true_segments[c])) < 0.6, c
        true_peak = p.true_global[c].min() if c == "circumferential" else p.true_global[c].max()
        assert s.peak[c] == pytest.approx(true_peak, abs=tol)
    es = int(np.argmax(p.contraction))
    assert s.peak_frame == {"circumferential": es, "radial": es}
    assert s.time_to_peak["circumferential"] == pytest.approx(p.frame_times[es])
    assert p.true_global["circumferential"][es] < -10 and p.true_global["radial"][es] > 10  # a real contraction
    # the hypokinetic inferolateral wall (segments 5, 11) is recovered as such
    assert s.segments[5]["circumferential"] > s.segments[2]["circumferential"] + 5
    inside = np.isfinite(p.true_map)
    assert np.array_equal(inside, np.isfinite(s.strain_map))
    assert np.median(np.abs(s.strain_map[inside] - p.true_map[inside])) < 0.05
    assert s.inversion_residual.max() < 0.01


def test_phantom_green_strain():
    p = strain_phantom(frames=5, size=112, slices=4, kind="green", seed=2)
    s = strain_from_displacements(p.ddf, p.labels[0], p.spacing, 0, p.frame_times, kind="green")
    for c in COMPONENTS:
        assert np.abs(s.curves[c] - p.true_global[c]).max() < 0.15


def test_inverse_convention_both_ways_on_the_phantom():
    """The tracking field (frame -> reference) and its inverse (reference -> frame) give the true strain; reading
    one as the other, or the frame gradient at the reference point without moving to the frame point, does not."""
    spacing = (8.0, 1.2, 1.7)
    p = strain_phantom(frames=5, size=112, slices=3, spacing=spacing, seed=3)
    es = int(np.argmax(p.contraction))
    label = p.labels[0]
    ddfs = torch.from_numpy(p.ddf[[0, es], 1:])
    inverse = torch.stack([invert_displacement(d.permute(1, 0, 2, 3)).permute(1, 0, 2, 3) for d in ddfs])
    truth = {c: p.true_global[c][es] for c in COMPONENTS}
    to_ref = strain_from_displacements(ddfs, label, spacing)
    from_ref = strain_from_displacements(inverse, label, spacing, convention="from_reference")
    misread = strain_from_displacements(ddfs, label, spacing, convention="from_reference")
    for c, tol in (("circumferential", 0.05), ("radial", 0.15)):
        assert to_ref.curves[c][1] == pytest.approx(truth[c], abs=tol)
        assert from_ref.curves[c][1] == pytest.approx(truth[c], abs=tol)
        assert abs(misread.curves[c][1] - truth[c]) > 5.0
    # (I + grad u)^-1 taken at the reference point itself, not at its frame point
    myo = torch.from_numpy(label == 2)
    centres = torch.tensor(np.stack([np.argwhere(label[z] == 3).mean(0) for z in range(label.shape[0])]))
    grid = identity_grid(list(label.shape[1:]), torch.device("cpu"), torch.float32).unsqueeze(0).expand(label.shape[0], -1, -1, -1)
    _, circ = polar_directions(grid, centres, spacing[1:])
    naive = torch.linalg.inv(deformation_gradient(ddfs[1].permute(1, 0, 2, 3).contiguous(), spacing[1:]))
    naive_gcs = 100 * float(normal_strain(naive, circ)[myo].mean())
    assert abs(naive_gcs - truth["circumferential"]) > 2.0


def test_through_plane_channel_is_ignored(phantom):
    ddfs = torch.from_numpy(phantom.ddf[:3].copy())
    ddfs[:, 0] = torch.randn(ddfs[:, 0].shape) * 3  # channel 0: through-plane
    three = strain_from_displacements(ddfs, phantom.labels[0], phantom.spacing)
    two = strain_from_displacements(ddfs[:, 1:], phantom.labels[0], phantom.spacing)
    assert np.array_equal(three.global_circumferential, two.global_circumferential)
    assert np.allclose(three.global_circumferential, phantom.true_global["circumferential"][:3], atol=0.05)


def test_two_frame_ed_es(phantom):
    es = int(np.argmax(phantom.contraction))
    s = strain_from_displacements(phantom.ddf[[0, es]], phantom.labels[0], phantom.spacing, 0, phantom.frame_times[[0, es]])
    assert s.frames == 2
    assert s.peak["circumferential"] == pytest.approx(phantom.true_global["circumferential"][es], abs=0.05)
    rate = s.strain_rate["circumferential"]
    expected = s.global_circumferential[1] / 100 / (phantom.frame_times[es] / 1000)
    assert rate == pytest.approx([expected, expected])
    assert s.rate_unit == "1/s" and s.time_unit == "ms"


def test_time_to_peak_and_rate_from_a_later_reference():
    curve = np.array([-5.0, -10.0, -2.0, 0.0, -1.0])
    s = Strain(global_circumferential=curve, global_radial=-curve, segment_curves={c: np.full((5, 16), np.nan) for c in COMPONENTS},
               strain_map=np.zeros((5, 2, 1, 1, 1), np.float32), reference_frame=3, frame_times=np.arange(5) * 50.0)
    assert s.peak == {"circumferential": -10.0, "radial": 10.0}
    assert s.time_to_peak["circumferential"] == pytest.approx(150.0)  # 3 -> 4 -> (0) -> 1, 50 ms apart over a 250 ms cycle
    assert s.strain_rate["circumferential"] == pytest.approx(np.gradient(curve / 100, np.arange(5) * 0.05))
    assert s.peak_strain_rate["circumferential"] == pytest.approx(-1.0)  # (-0.10 + 0.05) / 0.05 s, one-sided at frame 0
    assert all(math.isnan(v) for seg in s.segments.values() for v in seg.values())
    assert json.loads(json.dumps(s.summary, allow_nan=False))["segments"]["1"]["circumferential"] is None


# ----------------------------------------------------------------------------- AHA segments


def test_aha_segments_on_the_phantom(phantom):
    label = phantom.labels[0]
    aha = aha_segments(label, phantom.spacing)
    assert sorted(np.unique(aha.segments[aha.segments > 0]).tolist()) == list(range(1, 17))
    assert aha.levels == ("basal", "basal", "mid", "mid", "apical", "apical")
    assert aha.found.tolist() == [True] * 5 + [False]  # the last slice has no RV: it takes its neighbour's angle
    assert np.abs(aha.insertion_deg - ANTERIOR_INSERTION_DEG).max() < 3.0
    assert (aha.segments == phantom.segments).mean() > 0.998
    # segment 1 (7, 13) lies just clockwise of the anterior insertion point, 2 (8) just counterclockwise, 14 from 15 degrees on
    for z in range(label.shape[0]):
        pts = np.argwhere(label[z] == 2)
        ang = screen_angles(pts, aha.centres[z], phantom.spacing[1:])
        seg = aha.segments[z][tuple(pts.T)]
        before = (ang > ANTERIOR_INSERTION_DEG - 25) & (ang < ANTERIOR_INSERTION_DEG - 5)
        first = {"basal": 1, "mid": 7, "apical": 13}[aha.levels[z]]
        start = 5 if first < 13 else 20  # apical: 13 reaches 15 degrees past the insertion point
        after = (ang > ANTERIOR_INSERTION_DEG + start) & (ang < ANTERIOR_INSERTION_DEG + start + 20)
        assert set(seg[before].tolist()) == {first}
        assert set(seg[after].tolist()) == {first + 1}


def test_aha_segments_mirror_and_base(phantom):
    label = phantom.labels[0]
    aha = aha_segments(label, phantom.spacing)
    flipped = aha_segments(label[:, :, ::-1], phantom.spacing, mirrored=True)
    assert np.array_equal(flipped.segments, aha.segments[:, :, ::-1])
    reversed_stack = aha_segments(label[::-1], phantom.spacing)  # base found at the other end
    assert np.array_equal(reversed_stack.segments, aha.segments[::-1])
    forced = aha_segments(label, phantom.spacing, base="last")
    assert forced.levels == aha.levels[::-1]
    assert AHA_SEGMENTS[1] == "basal anterior" and AHA_SEGMENTS[14] == "apical septal"


def test_no_rv_skips_the_segments(phantom, caplog):
    label = np.where(phantom.labels[0] == 1, 0, phantom.labels[0])
    with pytest.raises(ValueError, match="RV"):
        aha_segments(label, phantom.spacing)
    with caplog.at_level(logging.WARNING, logger="monai_npc.cardiac.strain"):
        s = strain_from_displacements(phantom.ddf[:3], label, phantom.spacing)
    assert "no AHA segments" in caplog.text
    assert s.aha is None and np.isnan(s.segment_curves["circumferential"]).all()
    assert np.allclose(s.global_circumferential, phantom.true_global["circumferential"][:3], atol=0.05)


# ----------------------------------------------------------------------------- bad input


def test_bad_inputs_are_named(phantom):
    label, sp, ddf = phantom.labels[0], phantom.spacing, phantom.ddf[:3]
    with pytest.raises(ValueError, match="ddfs"):
        strain_from_displacements(ddf[0], label, sp)
    with pytest.raises(ValueError, match="ddfs"):
        strain_from_displacements(ddf[:1], label, sp)
    with pytest.raises(ValueError, match="reference_label"):
        strain_from_displacements(ddf, label[:, 1:], sp)
    with pytest.raises(ValueError, match="myocardium"):
        strain_from_displacements(ddf, np.where(label == 2, 0, label), sp)
    with pytest.raises(ValueError, match="reference_frame"):
        strain_from_displacements(ddf, label, sp, reference_frame=3)
    with pytest.raises(ValueError, match="frame_times"):
        strain_from_displacements(ddf, label, sp, frame_times=[0.0, 10.0, 5.0])
    with pytest.raises(ValueError, match="spacing"):
        strain_from_displacements(ddf, label, (8.0, -1.0, 1.0))
    with pytest.raises(ValueError, match="convention"):
        strain_from_displacements(ddf, label, sp, convention="push")
    with pytest.raises(ValueError, match="base"):
        strain_from_displacements(ddf, label, sp, base="apex")


def test_moving_reference_frame_is_reported(phantom, caplog):
    with caplog.at_level(logging.WARNING, logger="monai_npc.cardiac.strain"):
        strain_from_displacements(phantom.ddf[:5], phantom.labels[0], phantom.spacing, reference_frame=4)
    assert "reference_frame" in caplog.text


# ----------------------------------------------------------------------------- files


def test_write_strain_makes_the_four_files(phantom, phantom_strain, tmp_path):
    s = phantom_strain
    paths = write_strain(s, tmp_path / "out")
    assert sorted(paths) == sorted(STRAIN_OUTPUTS)
    with open(paths["csv"]) as f:
        rows = list(csv.reader(f))
    assert rows[0] == strain_csv_header() and len(rows[0]) == 2 + 2 + 32
    assert len(rows) == 1 + s.frames
    assert [float(r[2]) for r in rows[1:]] == pytest.approx(s.global_circumferential, abs=1e-3)
    assert float(rows[5][rows[0].index("seg05_radial")]) == pytest.approx(s.segment_curves["radial"][4, 4], abs=1e-3)
    summary = json.loads(open(paths["json"]).read())
    assert summary["reference_frame"] == 0 and summary["units"] == {"strain": "%", "time": "ms", "strain_rate": "1/s"}
    assert summary["global"]["circumferential"]["peak"] == pytest.approx(s.peak["circumferential"])
    assert summary["global"]["radial"]["time_to_peak"] == pytest.approx(s.time_to_peak["radial"])
    assert summary["segments"]["5"]["name"] == "basal inferolateral"
    assert summary["segments"]["5"]["circumferential"] == pytest.approx(s.segments[5]["circumferential"])
    for key in ("curves", "bullseye"):
        with open(paths[key], "rb") as f:
            assert f.read(8) == b"\x89PNG\r\n\x1a\n"


def test_write_strain_into_a_run_folder(phantom_strain, tmp_path):
    folder = AtomicFolder(tmp_path / "run")
    paths = write_strain(phantom_strain, folder, figures=False)
    assert sorted(paths) == ["csv", "json"]
    assert not (tmp_path / "run").exists()  # nothing there before the owner commits
    folder.commit()
    assert sorted(p.name for p in (tmp_path / "run").iterdir()) == ["strain.csv", "strain.json"]
