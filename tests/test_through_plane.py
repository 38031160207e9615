"""Basal descent and ascent (monai_npc.cardiac.through_plane): which slices a structure leaves at ES and
re-enters at ED, and track's use of it."""

import numpy as np
import pytest
import torch

from monai_npc.cardiac.through_plane import (
    PRIOR_LEFT_SHARE,
    apply_basal_ascent,
    apply_basal_descent,
    ascent_fractions,
    base_end,
    basal_left_by_prior,
    clear_basal_by_prior,
    diastolic_phase,
    slab_fractions,
    systolic_phase,
    volume_error_by_position,
)


def _stack(slices=8, flip=False):
    """``(Z, 32, 32)`` label: LV (3) discs shrinking from base (slice 0) to apex, RV (1) on the basal 5 slices."""
    lab = np.zeros((slices, 32, 32), np.int32)
    yy, xx = np.mgrid[:32, :32]
    for z in range(slices):
        r = 12 - z
        lab[z][(yy - 16) ** 2 + (xx - 20) ** 2 < r * r] = 3
        if z < 5:
            lab[z][(yy - 16) ** 2 + (xx - 5) ** 2 < (8 - z) ** 2] = 1
    return lab[::-1].copy() if flip else lab


@pytest.mark.parametrize("flip", [False, True])
def test_base_end_either_orientation(flip):
    lab = _stack(flip=flip)
    assert base_end(lab) == ((7, -1) if flip else (0, +1))
    with pytest.raises(ValueError, match="empty"):
        base_end(np.zeros_like(lab))


def test_slab_fractions_follow_the_descent():
    lab = _stack()
    np.testing.assert_allclose(slab_fractions(lab, 1, 10.0, 12.0)[:3], [1.0, 0.2, 0.0])
    np.testing.assert_allclose(slab_fractions(lab, 1, 5.0, 12.0)[:4], [1.0, 1.0, 0.4, 0.0])
    assert not slab_fractions(lab, 1, 10.0, 0.0).any()
    assert not slab_fractions(lab, 2, 10.0, 12.0).any()  # no myocardium on this label: nothing to clear


@pytest.mark.parametrize("flip", [False, True])
def test_apply_clears_basal_rv_only(flip):
    ref = _stack(flip=flip)
    base = 7 if flip else 0
    for spacing, cleared in ((10.0, 1), (5.0, 2)):
        out = apply_basal_descent(ref, ref, spacing)  # default: RV 12 mm
        rv = (out == 1).reshape(8, -1).sum(1)
        order = rv[::-1] if flip else rv
        assert (order[:cleared] == 0).all() and (order[cleared:5] > 0).all(), (spacing, order)
        np.testing.assert_array_equal(out == 3, ref == 3)  # the LV keeps every slice
    half = apply_basal_descent(ref, ref, 10.0, phase=0.3)  # 3.6 mm: under half a slab, nothing cleared
    np.testing.assert_array_equal(half, ref)
    assert (apply_basal_descent(ref, ref, 10.0, descent_mm={"lv": 25.0}) == 3).reshape(8, -1).any(1).sum() == 5
    assert (ref[base] == 1).any()  # the input is not changed
    with pytest.raises(ValueError, match="not one of the structures"):
        apply_basal_descent(ref, ref, 10.0, descent_mm={"la": 10.0})
    with pytest.raises(ValueError, match="differ in shape"):
        apply_basal_descent(ref[1:], ref, 10.0)


def test_ascent_fractions_basal_of_the_first_slice():
    es = apply_basal_descent(_stack(), _stack(), 10.0)  # the ES label: no RV on slice 0
    np.testing.assert_allclose(ascent_fractions(es, 1, 10.0, 12.0)[:3], [1.0, 0.0, 0.0])
    es2 = _stack()
    es2[:2][es2[:2] == 1] = 0  # RV from slice 2
    np.testing.assert_allclose(ascent_fractions(es2, 1, 10.0, 12.0)[:3], [0.2, 1.0, 0.0])
    assert not ascent_fractions(es2, 3, 10.0, 12.0).any()  # the LV starts at the stack's first slice: nothing above it
    assert not ascent_fractions(es2, 2, 10.0, 12.0).any()  # absent structure


@pytest.mark.parametrize("flip", [False, True])
def test_apply_ascent_fills_the_slice_the_structure_re_enters(flip):
    ed = _stack(flip=flip)
    es = apply_basal_descent(ed, ed, 10.0)  # the RV leaves the basal slice
    base = 7 if flip else 0
    nxt = 6 if flip else 1
    out = apply_basal_ascent(es, es, 10.0)  # default: RV, myocardium, LV 12 mm
    # the basal slice gets the RV outline of the next slice, on background only (the LV there is kept)
    expected = (es[nxt] == 1) & (es[base] == 0)
    np.testing.assert_array_equal(out[base] == 1, expected)
    np.testing.assert_array_equal(out[base] == 3, es[base] == 3)
    other = np.arange(8) != base
    np.testing.assert_array_equal(out[other], es[other])
    assert (out[base] == 1).sum() > 0.5 * (ed[base] == 1).sum()  # most of the ED RV on that slice back
    np.testing.assert_array_equal(apply_basal_ascent(es, es, 10.0, phase=0.3), es)  # 3.6 mm: under half a slab
    assert not (es[base] == 1).any()  # the input is not changed
    with pytest.raises(ValueError, match="not one of the structures"):
        apply_basal_ascent(es, es, 10.0, ascent_mm={"la": 10.0})
    with pytest.raises(ValueError, match="differ in shape"):
        apply_basal_ascent(es[1:], es, 10.0)


def test_systolic_phase():
    v = np.array([100.0, 80, 50, 40, 60, 90])
    np.testing.assert_allclose(systolic_phase(v, 0), [0, 1 / 3, 5 / 6, 1, 2 / 3, 1 / 6])
    assert not systolic_phase(v, 3).any()  # the reference is ES, not ED: no descent known
    assert not systolic_phase(np.full(4, 70.0), 0).any()
    np.testing.assert_allclose(diastolic_phase(v, 3), [1, 2 / 3, 1 / 6, 0, 1 / 3, 5 / 6])
    assert not diastolic_phase(v, 0).any()  # the reference is ED: no ascent
    w = np.array([100.0, 50, 40, 47, 80])  # ES plateau: the reference is 7 of 60 mL (12 %) above the smallest
    assert diastolic_phase(w, 3)[0] == 1.0 and not diastolic_phase(w, 3, tolerance=0.1).any()


def test_track_applies_descent_on_stacks_only():
    """track(): RV cleared on the basal slice at ES (3-slice phantom), not at ED; off with basal_descent=False."""
    from monai_npc import track
    from monai_npc.data.phantom_cine import cardiac_cine

    c = cardiac_cine(frames=6, size=64, levels=(0.15, 0.4, 0.65), spacing=(10.0, 2.0, 2.0), seed=1)
    kw = dict(spacing=c["spacing"], refine_iterations=0, threads=1, progress=False)
    on = track(c["image"], c["label"][0], 0, **kw)
    off = track(c["image"], c["label"][0], 0, basal_descent=False, **kw)
    es = on.function["es_frame"]
    base = base_end(c["label"][0])[0]
    assert (off.labels[es, base] == 1).sum() > 50  # the in-plane result keeps the RV on the basal slice
    assert (on.labels[es, base] == 1).sum() == 0
    np.testing.assert_array_equal(on.labels[0], off.labels[0])
    np.testing.assert_array_equal(on.labels[es] == 3, off.labels[es] == 3)
    assert on.function["rv_esv"] < off.function["rv_esv"]
    _labels_are_the_fields(on)
    assert es in on.settings["basal rules in the transform"]["frames"] and float(on.ddf[es, 0].abs().max()) >= 1.0
    two = track(c["image"][:, :2], c["label"][0][:2], 0, **kw)  # 2 slices: auto is off
    assert (two.labels[es, base] == 1).sum() > 50


def test_track_from_es_fills_the_basal_slice_at_ed():
    """track() from an ES label that lacks the basal RV: the frames towards ED get it back (ascent), not ES itself."""
    from monai_npc import track
    from monai_npc.data.phantom_cine import cardiac_cine

    c = cardiac_cine(frames=6, size=64, levels=(0.15, 0.4, 0.65), spacing=(10.0, 2.0, 2.0), seed=1)
    es = int(c["es"])
    base = base_end(c["label"][0])[0]
    es_label = c["label"][es].copy()
    es_label[base][es_label[base] == 1] = 0  # as an expert draws ES: the base has left the RV
    kw = dict(spacing=c["spacing"], refine_iterations=0, threads=1, progress=False)
    on = track(c["image"], es_label, es, **kw)
    off = track(c["image"], es_label, es, basal_descent=False, **kw)
    assert (off.labels[0, base] == 1).sum() == 0  # in-plane: the basal slice stays without RV at ED
    assert (on.labels[0, base] == 1).sum() > 0.5 * (c["label"][0, base] == 1).sum()
    np.testing.assert_array_equal(on.labels[es], off.labels[es])
    np.testing.assert_array_equal(on.labels[:, base] == 3, off.labels[:, base] == 3)  # the LV holds that slice already
    assert on.function["rv_edv"] > off.function["rv_edv"]
    _labels_are_the_fields(on)
    assert 0 in on.settings["basal rules in the transform"]["frames"]


def _labels_are_the_fields(tracking):
    """Every frame's label is the reference label carried by that frame's field (through-plane channel included):
    trilinear indicators as track smooths them, the largest wins; the rules edit no label afterwards."""
    from monai_npc.apps.tracking.track import LABEL_SIGMA
    from monai_npc.functional.label_warp import indicator_tensor, warp_indicators_volume

    ref = tracking.labels[tracking.reference_frame]
    values = [int(v) for v in np.unique(ref) if v]
    indicators = indicator_tensor(ref, values, LABEL_SIGMA)
    for t in range(len(tracking.labels)):
        if t != tracking.reference_frame:
            carried = warp_indicators_volume(*indicators, tracking.ddf[t])
            labelled = (carried > 0) | (tracking.labels[t] > 0)
            assert (carried == tracking.labels[t])[labelled].mean() >= 0.999, t


@pytest.mark.parametrize("flip", [False, True])
def test_volume_error_by_position_finds_the_basal_slice_the_lv_left(flip):
    """The ED label carried unchanged to an ES label whose basal slice lost the LV and whose mid slices shrank:
    the error splits into the basal slice (all of its LV), mid and apical, summing to the whole ESV error."""
    ed = _stack(flip=flip)
    es = ed.copy()
    basal = 7 if flip else 0
    es[basal][es[basal] == 3] = 0  # the base left the basal slice
    mids = [z for z in range(8) if z not in (basal, 7 - basal, 6 if not flip else 1)]
    for z in mids[:2]:
        es[z][(es[z] == 3) & (np.arange(32)[None, :] < 16)] = 2  # half of two mid slices' LV becomes myocardium
    e = volume_error_by_position(ed, ed, es, 3)
    volume = (ed == 3).sum()
    assert e["basal"] == pytest.approx(100 * (ed[basal] == 3).sum() / volume)
    assert e["mid"] > 0 and e["apical"] == 0.0 and e["basal_left"] == 1.0
    assert e["basal"] + e["mid"] + e["apical"] == pytest.approx(100 * ((ed == 3).sum() - (es == 3).sum()) / volume)
    assert volume_error_by_position(ed, ed, ed, 3) == {"basal": 0.0, "mid": 0.0, "apical": 0.0, "basal_left": 0.0}
    with pytest.raises(ValueError, match="absent"):
        volume_error_by_position(ed, ed, es, 2)
    with pytest.raises(ValueError, match="shape"):
        volume_error_by_position(ed, ed[1:], es, 3)


@pytest.mark.parametrize("flip", [False, True])
def test_the_label_prior_tells_when_the_lv_left_the_basal_slice(flip):
    """The ED label (reference) has the LV on every slice; the ES frame's own segmentation (the label prior's)
    keeps 20 % of the basal slice's LV area (the base left it: cleared, LV and myocardium, RV kept) or 60 %
    (it did not: nothing changes)."""
    ref = _stack(flip=flip)
    base = 7 if flip else 0
    ref[base][(ref[base] == 0) & (np.hypot(*np.mgrid[-16:16, -20:12]) < 14)] = 2  # a myocardium ring around the basal LV
    carried = ref.copy()
    for keep, left in ((0.2, True), (0.6, False)):
        prior = ref.copy()
        lv = np.argwhere(ref[base] == 3)
        drop = lv[int(keep * len(lv)):]
        prior[base][drop[:, 0], drop[:, 1]] = 0
        assert basal_left_by_prior(ref, prior) == (base if left else None)
        out, z = clear_basal_by_prior(carried, ref, prior)
        assert z == (base if left else None)
        if left:
            assert not np.isin(out[base], [2, 3]).any() and (out[base] == 1).sum() == (ref[base] == 1).sum()
            np.testing.assert_array_equal(np.delete(out, base, 0), np.delete(carried, base, 0))  # the other slices as they were
        else:
            np.testing.assert_array_equal(out, carried)
    assert 0.0 < PRIOR_LEFT_SHARE < 1.0
    assert basal_left_by_prior(ref, ref, value=5) is None  # a structure the reference lacks: nothing has left
    out, z = clear_basal_by_prior(carried, ref, None)  # no prior acted: nothing cleared
    assert z is None and out is not carried and np.array_equal(out, carried)
    with pytest.raises(ValueError, match="one \\(Z, H, W\\) shape"):
        basal_left_by_prior(ref, ref[1:])


def test_through_plane_field_makes_the_transform_do_what_the_rule_did():
    """A 5-slice stack: the basal RV slice cleared (ED->ES) and a basal slice filled (ES->ED) by the rules; the field
    that through_plane_field returns, written as an ITK transform and resampled with ITK's label-linear interpolation,
    gives exactly the rule's label; voxels the rules did not touch keep the in-plane field."""
    import SimpleITK as sitk

    from monai_npc.cardiac.through_plane import apply_basal_ascent, apply_basal_descent, through_plane_field
    from monai_npc.interop.transforms import displacement_field_transform

    lab = np.zeros((5, 24, 24), np.int32)
    lab[0:4, 6:12, 4:10] = 1  # RV, basal end at slice 0
    lab[0:5, 8:18, 10:18] = 3  # LV
    lab[0:5, 7:19, 9:10] = 2
    ddf = np.zeros((3, 5, 24, 24))
    ddf[1] = 0.4  # a small in-plane shift everywhere
    image = sitk.GetImageFromArray(lab.astype(np.float32))
    image.SetSpacing((1.5, 1.5, 10.0))

    def carry(field):
        out = sitk.Resample(sitk.Cast(image, sitk.sitkInt32), image, displacement_field_transform(field, image), sitk.sitkLabelLinear, 0)
        return sitk.GetArrayFromImage(out)

    carried = carry(ddf)
    descended = apply_basal_descent(carried, lab, 10.0)
    assert (descended != carried).any()
    field = through_plane_field(descended, carried, lab, ddf)
    np.testing.assert_array_equal(carry(field), descended)
    untouched = descended == carried
    np.testing.assert_array_equal(field[:, untouched], ddf[:, untouched])
    assert (field[0][~untouched] == -1).all()  # one slice beyond the base (outside the stack)

    es = lab.copy()
    es[0] = 0  # the ES label has nothing on slice 0: the structures re-enter it at ED
    carried = es.copy()  # the ES label carried by an identity field: nothing on slice 0
    ascended = apply_basal_ascent(carried, es, 10.0)
    assert (ascended[0] > 0).any()
    field = through_plane_field(ascended, carried, es, np.zeros_like(ddf))
    source = sitk.GetImageFromArray(es.astype(np.float32))
    source.CopyInformation(image)
    out = sitk.Resample(sitk.Cast(source, sitk.sitkInt32), image, displacement_field_transform(field, image), sitk.sitkLabelLinear, 0)
    np.testing.assert_array_equal(sitk.GetArrayFromImage(out), ascended)
    with pytest.raises(ValueError, match="one structure into another"):
        through_plane_field(np.where(carried == 3, 1, carried), carried, es, np.zeros_like(ddf))


def test_through_plane_field_keeps_the_slices_in_order_where_rules_act_over_several_slices():
    """Fills chained over two basal slices (ES->ED) and clearings on two slices (the RV on the basal one, the LV below
    it): the written label is the rules' (ITK label-linear), and the full 3-D Jacobian of the written field is positive
    everywhere (a one-slice copy, as a fill that reads its source slice exactly, would give det J = 0 there). A voxel
    to clear under a structure the basal slice keeps cannot be cleared without reversing the slices: it is left."""
    import SimpleITK as sitk

    from monai_npc.apps.registration.result import field_jacobian
    from monai_npc.cardiac.through_plane import RULE_SLICE_MARGIN, base_end, through_plane_field
    from monai_npc.interop.transforms import displacement_field_transform

    es = np.zeros((6, 24, 24), np.int32)
    es[2:6, 8:18, 10:18] = 3
    es[2:5, 6:12, 4:10] = 1
    ddf = np.zeros((3, 6, 24, 24))
    ddf[1] = np.linspace(-0.3, 0.3, 6)[:, None, None]  # in-plane shifts that differ from slice to slice
    image = sitk.GetImageFromArray(es.astype(np.float32))
    image.SetSpacing((1.5, 1.5, 10.0))

    def carry(label, field):
        source = sitk.GetImageFromArray(label.astype(np.int32))
        source.CopyInformation(image)
        return sitk.GetArrayFromImage(sitk.Resample(source, image, displacement_field_transform(field, image), sitk.sitkLabelLinear, 0))

    carried = carry(es, ddf)
    filled = carried.copy()
    filled[0:2] = np.where(carried[2] == 3, 3, 0)[None]  # the LV re-enters both basal slices
    field = through_plane_field(filled, carried, es, ddf)
    np.testing.assert_array_equal(carry(es, field), filled)
    np.testing.assert_allclose(field[0, 1][filled[1] == 3], 1 - RULE_SLICE_MARGIN)  # slice 1 reads slice 2, 0.1 short
    np.testing.assert_allclose(field[0, 0][filled[0] == 3], 2 - 2 * RULE_SLICE_MARGIN)  # slice 0 reads slice 1's point
    assert field_jacobian(field).min() > 0

    ed = np.zeros((6, 24, 24), np.int32)
    ed[1:5, 8:18, 10:18] = 3
    ed[0:3, 2:12, 2:10] = 1  # the RV, widest at the base
    assert base_end(ed) == (0, 1)
    carried = carry(ed, ddf)
    cleared = carried.copy()
    cleared[0][carried[0] == 1] = 0  # the basal RV slice
    cleared[1][carried[1] == 3] = 0  # the LV's basal slice, under slice 0's background
    field = through_plane_field(cleared, carried, ed, ddf)
    np.testing.assert_array_equal(carry(ed, field), cleared)
    assert field_jacobian(field).min() > 0
    under = np.zeros_like(carried, bool)
    under[1] = carried[1] == 1  # the RV of slice 1, mostly under slice 0's RV, which stays
    asked = carried.copy()
    asked[under] = 0
    written = carry(ed, through_plane_field(asked, carried, ed, ddf))
    kept = under & (carried[0] != 0)[None]
    assert kept.sum() > 0.9 * under.sum()
    np.testing.assert_array_equal(written[kept], carried[kept])  # nothing to read there but the RV: left as carried
    np.testing.assert_array_equal(written[under & ~kept], 0)
    np.testing.assert_array_equal(written[~under], carried[~under])


class _ShiftModel(torch.nn.Module):
    """The same in-plane displacement everywhere (0.6 model voxels along rows): a stand-in network."""

    def forward(self, pair):
        return torch.tensor([0.6, 0.0]).view(1, 2, 1, 1).expand(pair.shape[0], 2, *pair.shape[2:]).clone()


def _basal_rv_stack() -> np.ndarray:
    """``(5, 48, 48)`` ACDC-numbered label whose RV ends one slice short of the apex, its base at slice 0."""
    lab = np.zeros((5, 48, 48), np.int32)
    lab[0:4, 12:24, 8:20] = 1  # RV, basal end at slice 0
    lab[0:5, 16:36, 20:36] = 3  # LV
    lab[0:5, 14:38, 18:20] = 2
    return lab


def test_summary_and_jacobian_describe_the_written_field_with_through_plane_motion(tmp_path):
    """A stack whose basal RV slice the rules clear (ED->ES): the field then has a through-plane part. The summary's
    folding and Jacobian range, and ``jacobian.nii.gz``, are those of the field written to ``displacement.nii.gz``
    (its full 3-D determinant), not of the in-plane field before the rules (whose Jacobian is 1 everywhere here)."""
    import SimpleITK as sitk

    import monai_npc
    from monai_npc.apps.registration.through_plane import basal_through_plane
    from monai_npc.functional import jacobian_determinant
    from monai_npc.interop.transforms import read_displacement_field

    lab = _basal_rv_stack()
    image = sitk.GetImageFromArray((lab * 40.0 + 10.0).astype(np.float32))
    image.SetSpacing((1.5, 1.5, 10.0))
    label = sitk.GetImageFromArray(lab.astype(np.int16))
    label.CopyInformation(image)
    reg = monai_npc.register(image, image, model=_ShiftModel(), moving_label=label, field_of_view="image", size=48, threads=1)
    before = dict(reg.summary)
    assert basal_through_plane(reg, "ED->ES") is not None and np.any(reg.ddf_array[0])
    summary = reg.save(tmp_path / "out", overview=False)

    written, _ = read_displacement_field(tmp_path / "out" / "displacement.nii.gz")  # voxels, (3, Z, H, W)
    jac = jacobian_determinant(torch.from_numpy(np.ascontiguousarray(written))[None])[0].numpy()
    folding = 100.0 * float((jac <= 0).mean())
    assert abs(summary["folding_percent"] - folding) <= 0.01
    # the cleared voxels' one-slice jump stretches the written field along the slices: the in-plane field's range does not say so
    assert before["jacobian_max"] == pytest.approx(1.0, abs=1e-6) and summary["jacobian_max"] > 1.4
    assert summary["jacobian_min"] == pytest.approx(float(jac.min()), abs=1e-3)
    assert summary["jacobian_max"] == pytest.approx(float(jac.max()), abs=1e-3)
    written_jac = sitk.GetArrayFromImage(sitk.ReadImage(str(tmp_path / "out" / "jacobian.nii.gz")))
    np.testing.assert_allclose(written_jac, jac, atol=1e-3)
    assert summary["basal_descent"]["cleared_voxels"] > 0


def test_the_basal_rules_read_the_label_in_its_own_numbering():
    """An ED stack labelled as M&Ms does (LV 1, RV 3): the rules clear its basal RV (value 3) as they clear an
    ACDC-numbered one's (value 1), whether the numbering is given or read from what the label prior named
    (``summary["label_prior"]["structures"]``); read as ACDC's, they would clear the LV's base instead."""
    import SimpleITK as sitk

    import monai_npc
    from monai_npc.apps.registration.through_plane import basal_through_plane

    lab = _basal_rv_stack()
    mnms = np.array([0, 3, 2, 1], np.int32)[lab]
    image = sitk.GetImageFromArray((lab * 40.0 + 10.0).astype(np.float32))
    image.SetSpacing((1.5, 1.5, 10.0))

    def ruled(values, structures=None, named=None):
        label = sitk.GetImageFromArray(values.astype(np.int16))
        label.CopyInformation(image)
        reg = monai_npc.register(image, image, model=_ShiftModel(), moving_label=label, field_of_view="image", size=48, threads=1)
        if named is not None:
            reg.summary["label_prior"] = {"structures": named}
        info = basal_through_plane(reg, "ED->ES", structures)
        return info, sitk.GetArrayFromImage(reg.warped_label)

    acdc, carried = ruled(lab)
    assert acdc["cleared_voxels"] > 0 and acdc["structures"] == {"rv": 1, "myo": 2, "lv": 3}
    to_acdc = np.array([0, 3, 2, 1])
    for kwargs in ({"structures": {"lv": 1, "myo": 2, "rv": 3}}, {"named": {"lv": 1, "myo": 2, "rv": 3}}):
        info, other = ruled(mnms, **kwargs)
        assert info["cleared_voxels"] == acdc["cleared_voxels"] and info["structures"] == {"rv": 3, "myo": 2, "lv": 1}
        np.testing.assert_array_equal(to_acdc[other], carried)
    _, misread = ruled(mnms)  # read as ACDC's: the LV (1) loses its basal slice, the RV (3) keeps it
    assert (misread[0] == 1).sum() < (mnms[0] == 1).sum() and (misread[0] == 3).sum() > 0
