"""The clinical input path (issue 24): label-free localisation, the heart window pasted back on the
whole fixed grid, slices registered independently, and the same result whatever form the images
come in (file path, SimpleITK, nibabel, MONAI ``LoadImage`` MetaTensor with or without channel)."""

import math
import warnings
from pathlib import Path

import nibabel as nib
import numpy as np
import pytest
import SimpleITK as sitk
import torch
from torch import nn

import monai_npc
from monai_npc.apps.registration.localize import motion_centre
from monai_npc.apps.registration.models import PREPROCESSING, ModelProfile, model_profile
from monai_npc.apps.registration.grids import heart_grid
from monai_npc.apps.registration.pipeline import run_pipeline
from monai_npc.functional.taper import taper_window
from monai_npc.data.phantoms import cardiac_pair
from monai_npc.functional import jacobian_determinant
from monai_npc.networks.nets import NPCNet
from tests.conftest import SHARED


class ConstantShift(nn.Module):
    """``(B, 2, h, w) -> (B, 2, h, w)``: the same displacement everywhere (model voxels)."""

    def __init__(self, shift=(2.0, -3.0)):
        super().__init__()
        self.register_buffer("shift", torch.tensor(shift).view(1, 2, 1, 1))

    def forward(self, image):
        return self.shift.expand(image.shape[0], 2, *image.shape[2:]).clone()


def _stack_image(slices, spacing=(1.5, 1.5, 10.0), origin=(10.0, -20.0, 5.0), angle=0.3):
    image = sitk.GetImageFromArray(np.asarray(slices, dtype=np.float32))
    c, s = math.cos(angle), math.sin(angle)
    image.SetSpacing(spacing)
    image.SetOrigin(origin)
    image.SetDirection((c, -s, 0, s, c, 0, 0, 0, 1))
    return image


def _beating_stack(size=200, centre=(120, 80), slices=3, seed=0):
    """A textured static background and a disc at ``centre`` (row, col) whose radius changes between frames."""
    rng = np.random.default_rng(seed)
    base = rng.uniform(0.2, 0.4, (size, size)).astype(np.float32)
    rows, cols = np.indices((size, size))
    r = np.hypot(rows - centre[0], cols - centre[1])
    ed = np.stack([np.where(r < 22, 1.0, base) for _ in range(slices)])
    es = np.stack([np.where(r < 14, 1.0, base) for _ in range(slices)])
    return ed, es


def test_motion_centre_finds_the_beating_region_without_labels():
    ed, es = _beating_stack(centre=(120, 80))
    row, col = motion_centre(ed, es, (1.5, 1.5))
    assert abs(row - 120) < 3 and abs(col - 80) < 3
    # no motion: the grid's centre
    assert motion_centre(ed, ed, (1.5, 1.5)) == pytest.approx(((200 - 1) / 2, (200 - 1) / 2))


def test_motion_centre_holds_when_one_frame_is_contrast_inverted():
    ed, es = _beating_stack(centre=(120, 80))
    inverted = es.max() - es
    # compared like with like: the same centre as the frames of one contrast
    assert motion_centre(ed, inverted, (1.5, 1.5)) == pytest.approx(motion_centre(ed, es, (1.5, 1.5)), abs=0.5)


def test_register_carries_a_label_as_well_onto_a_contrast_inverted_fixed_frame():
    """End to end (window, network, refinement; the grid mostly padding): the inverted fixed frame gets the label
    about as well as the original one (0.958 / 0.957 measured; 0.65 without the contrast vote, no registration 0.48)."""
    import monai_npc
    from monai_npc.data.phantom_cine import cardiac_cine

    c = cardiac_cine(frames=4, size=64, levels=(0.4,), spacing=(8.0, 2.0, 2.0), seed=1)
    ed, es, lab, es_lab = c["image"][0], c["image"][2], c["label"][0], c["label"][2]

    def dice(fixed, opposite):
        reg = monai_npc.register(ed, fixed, moving_label=lab, label_guidance=0, label_prior=0, spacing=c["spacing"], threads=1)
        assert reg.summary["opposite_contrast_slices"] == opposite  # the summary says what was matched
        carried = sitk.GetArrayFromImage(reg.warped_label)
        return float(np.mean([2 * ((carried == v) & (es_lab == v)).sum() / ((carried == v).sum() + (es_lab == v).sum()) for v in (1, 2, 3)]))

    plain, inverted = dice(es, []), dice((es.max() - es).astype(np.float32), [0])
    assert plain > 0.9 and abs(inverted - plain) < 0.02, (plain, inverted)


def test_taper_window_is_one_inside_zero_at_the_edge_and_gentle():
    w = taper_window((64, 48), 12)
    assert w.shape == (64, 48)
    assert float(w[12:-12, 12:-12].min()) == 1.0
    assert float(w[0].max()) == 0.0 and float(w[:, -1].max()) == 0.0
    slope = float(w.diff(dim=0).abs().max())
    assert slope <= math.pi / (2 * 12) + 1e-9  # raised cosine: at most pi / (2 margin) per voxel


def test_heart_grid_keeps_native_voxels_and_clamps_spacing():
    fixed = _stack_image(np.zeros((3, 200, 180)))
    grid = heart_grid(fixed, (100.3, 60.8), 64, (1.3, 1.9))
    assert grid.GetSize() == (64, 64, 3) and grid.GetSpacing() == pytest.approx(fixed.GetSpacing())
    assert grid.GetDirection() == pytest.approx(fixed.GetDirection())
    # native spacing: the window's voxel 0 is a fixed voxel (no interpolation) ...
    index = fixed.TransformPhysicalPointToContinuousIndex(grid.GetOrigin())
    assert index == pytest.approx([round(v) for v in index], abs=1e-6)
    # ... and the window is centred on the requested point (within half a voxel)
    centre = grid.TransformContinuousIndexToPhysicalPoint([31.5, 31.5, 0])
    assert fixed.TransformPhysicalPointToContinuousIndex(centre)[:2] == pytest.approx([60.8, 100.3], abs=0.51)
    # a high-resolution image (0.7 mm) is seen at the spacing the model was trained at
    fine = _stack_image(np.zeros((2, 300, 300)), spacing=(0.7, 0.7, 8.0))
    assert heart_grid(fine, (150, 150), 64, (1.3, 1.9)).GetSpacing()[:2] == pytest.approx((1.3, 1.3))


def test_heart_window_field_is_pasted_back_with_identity_outside_and_no_fold():
    ed, es = _beating_stack(size=200, centre=(120, 80))
    fixed, moving = _stack_image(es), _stack_image(ed)
    profile = ModelProfile(input_size=96, field_of_view="heart", spacing_mm=(1.3, 1.9), taper=16)
    result = run_pipeline(ConstantShift((2.0, -3.0)), moving, fixed, profile)
    ddf = result.ddf  # (3, Z, H, W): through-plane 0, then rows, cols
    assert ddf.shape == (3, 3, 200, 200) and np.abs(ddf[0]).max() == 0
    row, col = (int(round(v)) for v in result.centre)
    assert ddf[1, :, row, col] == pytest.approx(2.0) and ddf[2, :, row, col] == pytest.approx(-3.0)
    assert np.abs(ddf[1:, :, :, :20]).max() == 0 and np.abs(ddf[1:, :, :20]).max() == 0  # far from the heart: identity
    jac = jacobian_determinant(torch.from_numpy(ddf[1:]).permute(1, 0, 2, 3))
    assert float(jac.min()) > 0.5  # the taper adds no fold


def test_a_given_heart_centre_places_the_window_and_bad_ones_are_named():
    """``register(heart_centre=)``: the window goes where the caller says (one centre for all slices or
    one per slice) instead of where the frames differ; a centre of the wrong shape is a clear error."""
    ed, es = _beating_stack(size=200, centre=(120, 80))
    fixed, moving = _stack_image(es), _stack_image(ed)
    kw = dict(model=ConstantShift((2.0, -3.0)), field_of_view="heart", size=96, threads=1)
    found = monai_npc.register(moving, fixed, **kw)
    assert found.summary["model_grid"]["centre_voxel"] == pytest.approx([120, 80], abs=3)
    given = monai_npc.register(moving, fixed, heart_centre=(60.0, 130.0), **kw)
    assert given.summary["model_grid"]["centre_voxel"] == pytest.approx([60.0, 130.0])
    ddf = given.ddf.numpy()
    assert ddf[1, :, 60, 130] == pytest.approx(2.0) and np.abs(ddf[1:, :, 150:, :40]).max() == 0  # identity far from it
    # the overview's last panel outlines the window on the whole fixed slice
    from monai_npc.apps.registration.result import _window_outline

    whole, outline = _window_outline(given.fixed, *given._figure["window"])
    assert whole.shape == (200, 200) and outline.shape == (4, 2)
    assert outline.mean(0) == pytest.approx([60.0, 130.0], abs=1.0) and np.ptp(outline, 0) == pytest.approx([95.0, 95.0])
    per_slice = monai_npc.register(moving, fixed, heart_centre=[(60.0, 130.0)] * 3, **kw)
    assert torch.equal(per_slice.ddf, given.ddf)
    with pytest.raises(ValueError, match="heart_centre"):
        monai_npc.register(moving, fixed, heart_centre=[(60.0, 130.0)] * 2, **kw)
    with pytest.raises(ValueError, match="outside the fixed image's 200 x 200"):
        monai_npc.register(moving, fixed, heart_centre=(60.0, 250.0), **kw)


def test_transform_and_warped_images_are_built_on_first_use():
    """A caller that needs only the field (tracking) does not pay for the ITK transform and the
    resampled images; built on demand they are what ``sitk.Resample`` gives."""
    ed, es = _beating_stack(size=120, centre=(60, 60))
    fixed, moving = _stack_image(es), _stack_image(ed)
    label = sitk.Cast(moving > 0.9, sitk.sitkUInt8)
    reg = monai_npc.register(moving, fixed, model=ConstantShift((2.0, -3.0)), moving_label=label, field_of_view="image", size=64, threads=1)
    assert set(reg._lazy) <= {"jacobian"}  # nothing resampled yet (the Jacobian is the summary's)
    warped = sitk.GetArrayFromImage(reg.warped)
    expect = sitk.Resample(moving, fixed, reg.transform, sitk.sitkLinear, 0.0, sitk.sitkFloat32)
    assert np.array_equal(warped, sitk.GetArrayFromImage(expect))
    lab = sitk.GetArrayFromImage(reg.warped_label)
    assert lab.sum() > 0 and np.array_equal(lab, sitk.GetArrayFromImage(
        sitk.Resample(label, fixed, reg.transform, sitk.sitkLabelLinear, 0, sitk.sitkInt32)))
    assert reg.warped is reg.warped  # kept


def test_label_sigma_smooths_the_carried_label_and_is_acdc_default():
    """``label_sigma`` > 0: ``warped_label`` is :func:`resample_label` of the label smoothed in-plane
    (recorded in the summary); the ``acdc`` weights' register setting is 1 voxel, others' 0."""
    from monai_npc.apps.registration.models import register_settings
    from monai_npc.interop.label_resample import resample_label
    from monai_npc.networks.nets.pretrained import load_pretrained

    ed, es = _beating_stack(size=120, centre=(60, 60))
    fixed, moving = _stack_image(es), _stack_image(ed)
    label = sitk.Cast(moving > 0.9, sitk.sitkUInt8) + sitk.Cast(moving > 0.95, sitk.sitkUInt8)
    kw = dict(model=ConstantShift((2.0, -3.0)), moving_label=label, field_of_view="image", size=64, threads=1)
    plain = monai_npc.register(moving, fixed, **kw)
    smooth = monai_npc.register(moving, fixed, label_sigma=1.0, **kw)
    assert plain.summary["label_sigma"] == 0.0 and smooth.summary["label_sigma"] == 1.0
    a, b = sitk.GetArrayFromImage(plain.warped_label), sitk.GetArrayFromImage(smooth.warped_label)
    np.testing.assert_array_equal(b, sitk.GetArrayFromImage(resample_label(label, fixed, smooth.transform, 1.0)))
    assert 0 < (a != b).sum() < 0.1 * (a > 0).sum()  # the outline moves, the label stays
    with pytest.raises(ValueError, match="label_sigma"):
        monai_npc.register(moving, fixed, label_sigma=-0.5, **kw)
    assert register_settings(load_pretrained("acdc"))["label_sigma"] == register_settings(load_pretrained("camus"))["label_sigma"] == 1.0
    assert "label_sigma" not in register_settings(load_pretrained("brain2d"))


def test_shipped_cardiac_model_uses_the_heart_window_and_others_the_whole_image():
    from monai_npc.networks.nets.pretrained import load_pretrained

    assert model_profile(load_pretrained("acdc")).field_of_view == "heart"
    bundle = Path(__file__).resolve().parents[1] / "bundles" / "npc_acdc"  # the same weights loaded from the bundle
    assert model_profile(load_pretrained(bundle / "models" / "model.pt")) == model_profile(load_pretrained("acdc"))
    assert model_profile(load_pretrained("camus")).field_of_view == "image"
    assert model_profile(nn.Identity()).field_of_view == "image"
    assert model_profile(nn.Identity(), field_of_view="heart").field_of_view == "heart"
    with pytest.raises(ValueError, match="field_of_view"):
        model_profile(nn.Identity(), field_of_view="chest")
    net = nn.Identity()
    net.meta = {"preprocessing": "unheard-of"}
    with pytest.raises(ValueError, match="unheard-of"):
        model_profile(net)
    assert isinstance(PREPROCESSING["minmax"], type(taper_window))


def test_a_size_other_than_the_trained_one_warns():
    """The acdc weights' filter grid and positional encoding are tied to their 128 x 128 inputs."""
    import warnings

    from monai_npc.networks.nets import load_pretrained

    net = load_pretrained("acdc")
    with pytest.warns(RuntimeWarning, match="trained on 128 x 128"):
        assert model_profile(net, size=144).input_size == 144
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert model_profile(net).input_size == model_profile(net, size=128).input_size == 128
        assert model_profile(nn.Identity(), size=48).input_size == 48  # no trained size: nothing to warn about


def test_a_slice_gives_the_same_field_inside_its_stack_as_alone():
    """Slices are independent pairs, refinement included (its loss is a sum of per-slice losses), and
    with the heart window each slice gets its own window, found from its own pair."""
    torch.manual_seed(0)
    net = NPCNet(kernel_size=8, stride=4, num_pairs=8, top_k=4, gate_dim=8, hidden_dim=8, num_pe=8, num_steps=2,
                 refine_iterations=10).eval()
    slices = [cardiac_pair(size=64, seed=s) for s in range(3)]
    moving = _stack_image([p["moving"] for p in slices])
    fixed = _stack_image([p["fixed"] for p in slices])
    for fov in ("image", "heart"):  # the heart window too: each slice is localised on its own pair
        kw = dict(model=net, threads=1, field_of_view=fov, size=48)
        stack = monai_npc.register(moving, fixed, **kw).ddf  # (3, Z, H, W)
        assert float(stack.abs().max()) > 0.1
        for z in range(3):
            alone = monai_npc.register(moving[:, :, z : z + 1], fixed[:, :, z : z + 1], **kw).ddf
            assert float((stack[:, z] - alone[:, 0]).abs().max()) < 0.01, (fov, z)


@pytest.fixture(scope="module")
def rotated_files(tmp_path_factory):
    folder = tmp_path_factory.mktemp("geometry")
    paths = []
    for key in ("moving", "fixed"):
        p = cardiac_pair(size=64, seed=1)[key]
        image = _stack_image(np.stack([p, 0.9 * p, 1.1 * p]) * 300, spacing=(1.6, 1.4, 8.0))
        paths.append(str(folder / f"{key}.nii.gz"))
        sitk.WriteImage(image, paths[-1])
    return paths


def test_every_input_kind_gives_the_same_registration(rotated_files):
    from monai.transforms import LoadImage

    kinds = {
        "path": lambda p: p,
        "SimpleITK": sitk.ReadImage,
        "nibabel": nib.load,
        "MetaTensor": LoadImage(image_only=True),
        "MetaTensor channel-first": LoadImage(image_only=True, ensure_channel_first=True),
    }
    results = {k: monai_npc.register(conv(rotated_files[0]), conv(rotated_files[1]), model="phase-correlation") for k, conv in kinds.items()}
    ref = results["path"].warped
    assert ref.GetSize() == (64, 64, 3)
    for kind, r in results.items():
        for a, b in ((r.warped.GetSpacing(), ref.GetSpacing()), (r.warped.GetOrigin(), ref.GetOrigin()),
                     (r.warped.GetDirection(), ref.GetDirection())):
            assert np.asarray(a) == pytest.approx(np.asarray(b), abs=1e-6), kind
        assert np.abs(sitk.GetArrayFromImage(r.warped) - sitk.GetArrayFromImage(ref)).max() < 1e-4, kind
        assert float((r.ddf - results["path"].ddf).abs().max()) < 1e-5, kind


def test_nibabel_follows_itk_when_the_sform_scales_disagree_with_pixdim(tmp_path):
    """The official ACDC files: sform with 1 mm scales, pixdim the real 1.5625 mm (ITK uses the latter)."""
    data = np.random.default_rng(0).uniform(size=(40, 36, 4)).astype(np.float32)
    img = nib.Nifti1Image(data, np.diag([-1.0, -1.0, 1.0, 1.0]))
    img.header.set_zooms((1.5625, 1.5625, 10.0))
    img.header.set_sform(np.diag([-1.0, -1.0, 1.0, 1.0]), code=2)
    img.header.set_qform(None, code=0)
    path = tmp_path / "acdc_like.nii.gz"
    nib.save(img, str(path))
    from monai_npc.interop.images import nibabel_to_sitk

    itk = sitk.ReadImage(str(path))
    ours = nibabel_to_sitk(nib.load(str(path)))
    assert ours.GetSpacing() == pytest.approx(itk.GetSpacing(), abs=1e-5)
    assert ours.GetOrigin() == pytest.approx(itk.GetOrigin(), abs=1e-5)
    assert ours.GetDirection() == pytest.approx(itk.GetDirection(), abs=1e-6)
    assert np.array_equal(sitk.GetArrayFromImage(ours), sitk.GetArrayFromImage(itk))


@pytest.mark.skipif(not (SHARED / "data" / "acdc_official_test").is_dir(), reason="../shared/data/acdc_official_test is absent")
def test_unlabelled_official_stack_registers_on_its_own_grid():
    """A real held-out stack, no label anywhere: the field lives on the fixed file's grid, identity far from the heart."""
    folder = SHARED / "data" / "acdc_official_test" / "testing" / "patient101"
    ed, es = sorted(str(p) for p in folder.glob("patient101_frame??.nii.gz"))
    r = monai_npc.register(ed, es, model="acdc", refine_iterations=0, threads=1)
    fixed = sitk.ReadImage(es)
    assert r.warped.GetSize() == fixed.GetSize() and r.warped.GetSpacing() == pytest.approx(fixed.GetSpacing())
    assert r.summary["model_grid"]["field_of_view"] == "heart-stack"  # register's setting for acdc pairs
    assert r.summary["model_grid"]["spacing_mm"][:2] == pytest.approx(fixed.GetSpacing()[:2])
    ddf = r.ddf.numpy()
    assert np.abs(ddf[:, :, :8]).max() == 0 and np.abs(ddf[:, :, :, :8]).max() == 0  # image border: identity
    assert np.abs(ddf).max() > 0.5 and r.summary["folding_percent"] < 0.5


def test_a_volume_seen_through_plane_is_warned_about_by_name():
    """Slices of index axes 0-1 that are coarser than the slice axis: the 2-D model would register reformats."""
    p = cardiac_pair(size=48, seed=2)
    stack = np.stack([p["moving"]] * 4) * 100
    good = _stack_image(stack, spacing=(1.5, 1.5, 8.0))
    sideways = _stack_image(stack, spacing=(4.0, 1.0, 0.8))
    with pytest.warns(RuntimeWarning, match=r"fixed image <in-memory Image>.*4 x 1 mm.*0\.8 mm"):
        monai_npc.register(good, sideways, model="phase-correlation")
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        monai_npc.register(good, good, model="phase-correlation")


def test_reliability_and_guidance_describe_what_the_network_did():
    """With a heart window the reliability map is 0 outside it: its mean in the summary is over the
    window (coverage recorded), not the whole field of view; label_guidance records the weight that
    acted (0 without refinement); MetaTensor inputs are named by their file."""
    ed, es = _beating_stack(size=200, centre=(120, 80))
    fixed, moving = _stack_image(es), _stack_image(ed)
    label = sitk.GetImageFromArray((ed > 0.9).astype(np.int16))
    label.CopyInformation(moving)
    reg = monai_npc.register(moving, fixed, model="acdc", moving_label=label, refine_iterations=2, threads=1)
    rel = sitk.GetArrayFromImage(reg.reliability)
    cover = reg.summary["reliability_coverage_percent"]
    assert 20.0 < cover < 60.0 and cover == pytest.approx(100.0 * (rel > 0).mean(), abs=2.0)  # a 128 x 128 window of 200 x 200
    assert reg.summary["reliability_mean"] == pytest.approx(rel[rel > 0].mean(), abs=0.02) and reg.summary["reliability_mean"] > 2 * rel.mean()
    assert reg.summary["label_guidance"] == 0.05
    alone = monai_npc.register(moving, fixed, model="acdc", moving_label=label, refine_iterations=0, threads=1)
    assert alone.summary["label_guidance"] == 0.0  # the term lives in the refinement
    phase = monai_npc.register(moving, fixed, model="phase-correlation", moving_label=label, label_guidance=0.2)
    assert phase.summary["label_guidance"] == 0.0 and "reliability_mean" not in phase.summary


def test_metatensor_inputs_are_named_by_their_file_and_a_frame_selection_is_explained(rotated_files):
    from monai.transforms import LoadImage

    reg = monai_npc.register(LoadImage(image_only=True)(rotated_files[0]), rotated_files[1], model="phase-correlation")
    assert reg.summary["moving"] == f"<in-memory MetaTensor of {rotated_files[0]}>"
    with pytest.raises(ValueError, match=r"has one \(moving_select / --moving-select 'frame=1' took one slice of it"):
        monai_npc.register(rotated_files[0], rotated_files[1], model="phase-correlation", moving_select="frame=1")


def test_an_image_given_as_label_is_warned_about(rotated_files):
    """An intensity image passed as the moving label (integer voxels, hundreds of values) gets a warning naming it."""
    image = sitk.ReadImage(rotated_files[0])
    as_label = sitk.Cast(sitk.Clamp(image, lowerBound=0, upperBound=250), sitk.sitkUInt8)
    with pytest.warns(RuntimeWarning, match=r"moving label .* has \d+ label values .*: is it an intensity image"):
        reg = monai_npc.register(rotated_files[0], rotated_files[1], model="phase-correlation", moving_label=as_label)
    assert any("intensity image" in w for w in reg.summary["warnings"])


def test_warnings_for_what_registers_badly_without_an_error():
    """Half-slice offsets between stacks, a moving image covering little of the fixed field of view, label
    smoothing wider than 3 mm, fixed slices the moving stack does not reach: each named; an image with a large
    intensity offset is not taken for a constant one."""
    ed, es = _beating_stack(size=64, centre=(32, 32), slices=4)
    fixed = _stack_image(es, spacing=(1.5, 1.5, 10.0))

    def run(moving, **kw):
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            reg = monai_npc.register(moving, fixed, model="phase-correlation", **kw)
        return reg, " ".join(str(w.message) for w in caught)

    _, text = run(_stack_image(ed, spacing=(1.5, 1.5, 10.0), origin=(10.0, -20.0, 15.0)))  # one whole slice apart: fine
    assert "do not coincide" not in text
    _, text = run(_stack_image(ed, spacing=(1.5, 1.5, 10.0), origin=(10.0, -20.0, 10.0)))
    assert "a fixed slice lies 5.0 mm from the nearest moving slice (10.0 mm apart)" in text
    small = _stack_image(ed[:, 16:48, 16:48], spacing=(1.5, 1.5, 10.0), origin=(10.0, -20.0, 5.0))  # a corner-free crop
    small.SetOrigin(fixed.TransformIndexToPhysicalPoint((16, 16, 0)))
    reg, text = run(small)
    assert "covers only 25.0 % of fixed image" in text and "overlap by only" not in text
    coarse = _stack_image(ed, spacing=(5.0, 5.0, 10.0))
    label = sitk.GetImageFromArray((ed > 0.9).astype(np.int16))
    label.CopyInformation(coarse)
    _, text = run(coarse, moving_label=label, label_sigma=1.0)
    assert "smoothing of 1 voxel(s) before it is carried is 5.0 mm" in text
    short = _stack_image(ed[1:], spacing=(1.5, 1.5, 10.0), origin=(10.0, -20.0, 15.0))  # no moving slice at the fixed's first
    reg, text = run(short)
    assert "fixed slice(s) [0] lie outside the moving image" in text and "constant" not in text
    reg, text = run(_stack_image(ed * 241.0 + 1e6, spacing=(1.5, 1.5, 10.0)))  # 241 grey levels on top of 1e6
    assert reg.summary["identity_slices"] == [] and "constant" not in text
