"""``register`` with a stack network: the whole heart-window stack in one
call, the network's through-plane channel written into the transform, its 3-D field refined when the network has a
refinement (with the label-guided term), no flip ensemble and no basal rule on top of it."""

from __future__ import annotations

from typing import List, Tuple

import numpy as np
import pytest
import SimpleITK as sitk
import torch
from torch import nn

from monai_npc.apps.registration.models import is_stack_network
from monai_npc.apps.registration.result import field_jacobian
from monai_npc.apps.registration.through_plane import basal_through_plane
from monai_npc.data.phantom_cine import cardiac_cine
from monai_npc.functional import warp_stack_slices
from monai_npc.networks.blocks import InstanceRefinement
from monai_npc.networks.nets import SliceContextNPC, load_pretrained
from monai_npc import register

SPACING = (8.0, 1.5, 1.5)  # (slice, row, col) mm


class ShiftStack(nn.Module):
    """A stack network test double: a constant through-plane displacement of ``+1`` slice, no in-plane motion."""

    stack_network = True

    def __init__(self) -> None:
        super().__init__()
        self.meta = {"field_of_view": "heart-stack", "input_size": 32, "taper": 4}
        self.calls: List[Tuple[int, ...]] = []

    def forward(self, stack: torch.Tensor) -> torch.Tensor:
        """``(Z, 2, h, w)`` -> ``(Z, 3, h, w)``: channel 0 = 1 slice, channels 1-2 = 0."""
        self.calls.append(tuple(stack.shape))
        ddf = stack.new_zeros((stack.shape[0], 3) + tuple(stack.shape[2:]))
        ddf[:, 0] = 1.0
        return ddf


def _smooth_stack(z: int = 8, size: int = 64, seed: int = 0) -> Tuple[np.ndarray, np.ndarray]:
    """``(moving, fixed)`` ``(z, size, size)`` float32: smooth random slices, each unlike its neighbours; the fixed
    stack has a bright blob in its centre (what the heart window centres on)."""
    rng = np.random.default_rng(seed)
    noise = torch.from_numpy(rng.random((z, 1, size, size)).astype(np.float32))
    smooth = torch.nn.functional.avg_pool2d(torch.nn.functional.avg_pool2d(noise, 7, 1, 3), 7, 1, 3)[:, 0].numpy()
    moving = (smooth - smooth.min()) / (smooth.max() - smooth.min())
    yy, xx = np.mgrid[:size, :size]
    blob = np.exp(-((yy - size / 2) ** 2 + (xx - size / 2) ** 2) / (2 * 6.0**2)).astype(np.float32)
    return moving.astype(np.float32), (moving + 0.5 * blob[None]).astype(np.float32)


def test_a_stack_network_is_fed_the_window_stack_once_and_its_through_plane_field_is_written(tmp_path):
    moving, fixed = _smooth_stack()
    net = ShiftStack()
    reg = register(moving, fixed, model=net, spacing=SPACING)
    assert net.calls == [(8, 2, 32, 32)]  # one call, every slice of the window stack in order
    ddf = reg.ddf_array
    assert ddf.shape == (3, 8, 64, 64) and not np.any(ddf[1:])
    inside = np.isclose(ddf[0], 1.0, rtol=0, atol=1e-9)  # the window's interior, where the taper is 1
    assert inside[0].sum() >= 200 and np.all(ddf[0] >= -1e-12) and np.all(ddf[0] <= 1 + 1e-12)
    assert not inside[:, 0].any() and not inside[:, :, 0].any()  # identity outside the window, tapered to it
    warped = sitk.GetArrayFromImage(reg.warped)
    for z in range(7):  # the warped image is the moving stack one slice on, in the interior of the heart window
        np.testing.assert_allclose(warped[z][inside[z]], moving[z + 1][inside[z]], rtol=0, atol=1e-4)
    assert np.abs(warped[3][inside[3]] - moving[3][inside[3]]).max() > 0.1  # (a shift that is visible)
    # the written transform says the same (transform.h5 read back and applied with ITK) ...
    summary = reg.save(tmp_path, overview=False)
    written = sitk.ReadTransform(str(tmp_path / summary["outputs"]["transform"]))
    by_file = sitk.GetArrayFromImage(sitk.Resample(reg.moving, reg.fixed, written, sitk.sitkLinear, 0.0, sitk.sitkFloat32))
    np.testing.assert_allclose(by_file[:7][inside[:7]], warped[:7][inside[:7]], rtol=0, atol=1e-5)
    # ... and the summary's folding is the written field's (det J of the 3-D field, and ITK's of the displacement in mm)
    det = field_jacobian(ddf)
    assert summary["folding_percent"] == float(100.0 * (det <= 0).mean())
    disp = sitk.DisplacementFieldTransform(reg.transform).GetDisplacementField()  # LPS mm on the fixed grid
    itk_det = sitk.GetArrayFromImage(sitk.DisplacementFieldJacobianDeterminant(disp))
    assert abs(summary["folding_percent"] - float(100.0 * (itk_det <= 0).mean())) < 1e-9
    assert summary["stack_network"]["through_plane"] == "network" and summary["label_guidance"] == 0.0
    assert set(summary["stack_network"]["not_applied"]) == {"refinement", "label_guidance", "label_prior", "flip_ensemble", "basal_rules"}
    assert summary["stack_network"]["refined_3d"] is False


def test_a_stack_network_with_a_moving_label_carries_it_through_the_plane_and_no_basal_rule_applies():
    moving, fixed = _smooth_stack()
    label = np.zeros(moving.shape, np.uint8)
    label[:, 28:36, 28:36] = np.arange(1, 9, dtype=np.uint8)[:, None, None] % 3 + 1  # each slice its own value
    reg = register(moving, fixed, model=ShiftStack(), moving_label=label, spacing=SPACING, label_sigma=0.0)
    warped_label = sitk.GetArrayFromImage(reg.warped_label)
    assert (warped_label[:7, 30:34, 30:34] == label[1:8, 30:34, 30:34]).all()  # the label one slice on, as transform.h5 does
    before = reg.ddf_array.copy()
    info = basal_through_plane(reg, "ED->ES")  # what the stack pipeline's descend_registration calls
    assert info == reg.summary["basal_descent"] and info["applied"] is False and "through the plane" in info["reason"]
    assert np.array_equal(reg.ddf_array, before)


def test_the_stack_pipeline_does_not_apply_the_basal_rules_with_a_stack_network():
    from monai_npc.apps.stacks.pairs import descend_registration

    moving, fixed = _smooth_stack()
    label = np.zeros(moving.shape, np.uint8)
    label[:3, 20:44, 20:44] = 1  # a base that the ED->ES rules would clear
    reg = register(moving, fixed, model=ShiftStack(), moving_label=label, spacing=SPACING)

    class _Pair:  # the fields of a StudyPair that descend_registration reads
        direction = "ED->ES"

        class moving:  # noqa: N801
            label = "ED_gt.nii.gz"

    before = reg.ddf_array.copy()
    descend_registration(_Pair(), reg)
    assert reg.summary["basal_descent"]["applied"] is False and np.array_equal(reg.ddf_array, before)


def _phantom_pair():
    cine = cardiac_cine(frames=5, size=96, levels=(0.2, 0.35, 0.5, 0.65, 0.8), seed=1)
    return cine["image"][cine["ed"]], cine["image"][cine["es"]], tuple(float(s) for s in cine["spacing"])


def test_slice_context_from_the_acdc_weights_registers_a_phantom_stack_like_its_2d_network():
    npc = load_pretrained("acdc", refine_iterations=0)
    net = SliceContextNPC.from_npc(npc).eval()
    assert is_stack_network(net) and not is_stack_network(npc)
    ed, es, spacing = _phantom_pair()
    reg = register(ed, es, model=net, spacing=spacing, field_of_view="heart-stack")
    ref = register(ed, es, model=npc, spacing=spacing, field_of_view="heart-stack")  # the 2-D network's own field, 1 call
    ddf, ddf_2d = reg.ddf_array, ref.ddf_array
    assert ddf.shape == ddf_2d.shape == (3,) + ed.shape
    assert not np.any(ddf[0]) and not np.any(ddf_2d[0])  # exactly 0 through the plane: the heads start at zero
    assert float(np.abs(ddf_2d[1:]).max()) > 0.5  # the phantom moves
    # in-plane: the 2-D network's field up to the float rounding of the 3-D warp (~1e-7, amplified by the soft top-K)
    assert float(np.abs(ddf[1:] - ddf_2d[1:]).max()) < 2e-3
    assert reg.summary["stack_network"]["through_plane"] == "network" and reg.summary["steps"]["refine_iterations"] == 0
    assert reg.summary["folding_percent"] == ref.summary["folding_percent"]


def _through_plane_stack(z: int = 8, size: int = 64, shift: float = 0.4, amp: float = 2.0):
    """``(moving, fixed, u)``: a smooth stack ``(z, 1, size, size)`` whose slices change through the plane, the fixed
    stack the moving one warped in 3-D by ``u`` ``(z, 3, size, size)``: ``shift`` of a slice through the plane and a
    smooth in-plane deformation of up to ``amp`` voxels (so ``fixed(x) = moving(x + u(x))`` exactly)."""
    gen = torch.Generator().manual_seed(0)

    def smooth() -> torch.Tensor:
        x = torch.rand(1, 1, size, size, generator=gen)
        for _ in range(3):
            x = torch.nn.functional.avg_pool2d(x, 7, 1, 3, count_include_pad=False)
        return (x - x.mean()) / x.std()

    k = torch.arange(z, dtype=torch.float32).view(z, 1, 1, 1) * 0.9
    moving = smooth() * torch.cos(k) + smooth() * torch.sin(k)
    moving = (moving - moving.min()) / (moving.max() - moving.min())
    yy, xx = torch.meshgrid(torch.arange(size, dtype=torch.float32), torch.arange(size, dtype=torch.float32), indexing="ij")
    u = torch.zeros(z, 3, size, size)
    u[:, 0] = shift
    u[:, 1] = amp * torch.sin(2 * torch.pi * xx / size)
    u[:, 2] = amp * torch.cos(2 * torch.pi * yy / size)
    return moving, warp_stack_slices(moving, u, torch.zeros(z, dtype=torch.int64), 1), u


def _errors(ddf: torch.Tensor, u: torch.Tensor) -> Tuple[float, float]:
    """(mean |through-plane error| in slices, mean in-plane end-point error in voxels) on the inner slices and pixels (the
    last slice's shift points past the stack, where the warp replicates it)."""
    d = (ddf - u)[1:-1, :, 8:-8, 8:-8]
    return float(d[:, 0].abs().mean()), float(d[:, 1:].norm(dim=1).mean())


def test_the_3d_refinement_recovers_a_through_plane_shift_and_an_in_plane_deformation():
    moving, fixed, u = _through_plane_stack()
    refiner = InstanceRefinement(40, grid_stride=8)  # the acdc register settings' steps and residual grid
    zero = torch.zeros_like(u)
    assert _errors(zero, u) == pytest.approx((0.4, 1.924), abs=1e-3)
    # from zero: 0.4 slice -> 0.035, 1.92 voxels -> 0.13 (measured)
    through, in_plane = _errors(refiner.refine_stack(moving, fixed, zero, through_plane=True), u)
    assert through < 0.07 and in_plane < 0.25
    # from the in-plane motion alone (what a 2-D network finds): 0.4 slice -> 0.014, in-plane stays at 0.05
    in_plane_only = torch.cat([zero[:, :1], u[:, 1:]], 1)
    through, in_plane = _errors(refiner.refine_stack(moving, fixed, in_plane_only, through_plane=True), u)
    assert through < 0.03 and in_plane < 0.1
    # the through-plane channel held (in-plane refinement only, the default): the shift cannot be found, the in-plane field
    # goes astray
    through, in_plane = _errors(refiner.refine_stack(moving, fixed, in_plane_only), u)
    assert through == pytest.approx(0.4, abs=1e-5) and in_plane > 0.5
    assert torch.equal(InstanceRefinement(0).refine_stack(moving, fixed, zero), zero)


class ZeroStack(nn.Module):
    """A stack network test double whose field is 0, with the acdc register settings' test-time refinement."""

    stack_network = True

    def __init__(self, size: int) -> None:
        super().__init__()
        self.meta = {"field_of_view": "image", "input_size": size}
        self.refiner = InstanceRefinement(40, grid_stride=8)

    def forward(self, stack: torch.Tensor) -> torch.Tensor:
        return stack.new_zeros((stack.shape[0], 3) + tuple(stack.shape[2:]))


def _mean_dice(a: np.ndarray, b: np.ndarray) -> float:
    return float(np.mean([2 * ((a == v) & (b == v)).sum() / max(int((a == v).sum() + (b == v).sum()), 1) for v in (1, 2, 3)]))


def test_the_label_term_closes_shrinking_cavities_in_a_stack():
    """The 2-D test's shrinking cavity (tests/test_label_intensity.py) on every slice of a stack: with a strong
    smoothness weight the images alone under-contract (measured: 1668 voxels carried for 508), the label term brings
    the carried area to the fixed one (454) with the default in-plane refinement; the through-plane channel stays 0."""
    from .test_label_intensity import _disc

    moving = torch.cat([_disc(r)[0] for r in (14, 13, 12, 11)])
    fixed, fixed_label = (torch.cat(x) for x in zip(*[_disc(r) for r in (7, 7, 6, 6)]))
    label = torch.cat([_disc(r)[1] for r in (14, 13, 12, 11)]).float()
    group = torch.zeros(4, dtype=torch.int64)
    refiner = InstanceRefinement(30, window=9, lambda_reg=0.5)
    zero = torch.zeros(4, 3, 64, 64)

    def area(ddf: torch.Tensor) -> float:
        return float((warp_stack_slices((label == 3).float(), ddf, group, 1) > 0.5).sum())

    target = float((fixed_label > 0).sum())
    plain, guided = refiner.refine_stack(moving, fixed, zero), refiner.refine_stack(moving, fixed, zero, label, 0.5)
    assert area(plain) > 2.5 * target and abs(area(guided) - target) < 0.2 * target, (area(plain), area(guided), target)
    assert float(guided[:, 0].abs().max()) == 0.0


def test_register_refines_a_stack_network_field_with_the_label_term():
    cine = cardiac_cine(frames=5, size=64, levels=(0.2, 0.35, 0.5, 0.65, 0.8), seed=1)
    ed, es = cine["image"][cine["ed"]], cine["image"][cine["es"]]
    ed_label, es_label = cine["label"][cine["ed"]], cine["label"][cine["es"]]
    spacing = tuple(float(s) for s in cine["spacing"])
    kw = dict(model=ZeroStack(64), moving_label=ed_label, spacing=spacing, label_sigma=0.0)
    images = register(ed, es, label_guidance=0.0, **kw)
    guided = register(ed, es, **kw)  # LABEL_GUIDANCE
    by_images = _mean_dice(sitk.GetArrayFromImage(images.warped_label), es_label)
    assert by_images > _mean_dice(ed_label, es_label) + 0.3  # 0.49 -> 0.86: the 3-D refinement from a zero field
    # the label moves the in-plane channels; the through-plane one stays the network's (here 0)
    assert not np.any(guided.ddf_array[0]) and not np.array_equal(guided.ddf_array, images.ddf_array)
    record = guided.summary["stack_network"]
    assert record["refined_3d"] is True and set(record["not_applied"]) == {"flip_ensemble", "basal_rules"}
    assert record["refined_channels"].startswith("in-plane")
    assert guided.summary["label_guidance"] == 0.05 and images.summary["label_guidance"] == 0.0


class ReadAbove(ShiftStack):
    """A test double whose field reads ``dz`` slices through the plane (no in-plane motion)."""

    def __init__(self, dz: float) -> None:
        super().__init__()
        self.dz = dz

    def forward(self, stack: torch.Tensor) -> torch.Tensor:
        return super().forward(stack) * self.dz


@pytest.mark.parametrize("dz", [-0.3, -0.7, 1.4])
def test_the_written_transform_carries_labels_through_the_plane_as_training_scores_them(dz):
    """The label the written transform carries (ITK, nearest neighbour: the end slice within half a slice of the
    stack, background beyond) is what the whole-stack training's validation carries (``warp_stack_slices``, nearest,
    ``through_padding="zeros"``), slice for slice, for a field reading above or below the stack's ends."""
    moving, fixed = _smooth_stack()
    label = np.zeros(moving.shape, np.int16)
    label[:, 20:44, 20:44] = np.arange(1, moving.shape[0] + 1)[:, None, None] % 4 + 1  # slice-specific values
    reg = register(moving, fixed, model=ReadAbove(dz), spacing=SPACING)
    moving_label = sitk.GetImageFromArray(label)
    moving_label.SetSpacing(SPACING[::-1])
    moving_label.CopyInformation(reg.fixed)
    written = sitk.GetArrayFromImage(sitk.Resample(moving_label, reg.fixed, reg.transform, sitk.sitkNearestNeighbor, 0))
    ddf = reg.ddf.permute(1, 0, 2, 3).float()  # (Z, 3, H, W): channel 0 through the plane, in slices
    group = torch.zeros(moving.shape[0], dtype=torch.int64)
    scored = warp_stack_slices(torch.from_numpy(label[:, None].astype(np.float32)), ddf, group, 1, "nearest", "zeros")
    inside = (slice(None), slice(24, 40), slice(24, 40))  # well inside the labelled square and the heart window
    assert np.array_equal(written[inside], scored[:, 0].numpy().astype(np.int16)[inside])
    assert (written[inside] == 0).any() == (dz < -0.5 or dz > 0.5)  # past half a slice an end slice is background


def test_the_gpu_benchmark_times_a_stack_network_with_its_refinement():
    """benchmarks/bench_stack_gpu.py times what register computes: for a stack network, its field and then the 3-D
    refinement (with the label when guided), the same field as the registration pipeline's."""
    import importlib.util
    from pathlib import Path

    from monai_npc.apps.registration.pipeline import _predict_stack

    path = Path(__file__).resolve().parents[1] / "benchmarks" / "bench_stack_gpu.py"
    spec = importlib.util.spec_from_file_location("bench_stack_gpu", path)
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    net = ShiftStack()
    net.refiner = InstanceRefinement(iterations=5, grid_stride=4, window=5)
    cine = cardiac_cine(frames=3, size=32, levels=(0.2, 0.4, 0.6, 0.8), seed=0)
    stack = {"moving": torch.from_numpy(cine["image"][0]).float()[:, None],
             "fixed": torch.from_numpy(cine["image"][1]).float()[:, None],
             "moving_label": torch.from_numpy(cine["label"][0]).float()[:, None]}
    with torch.inference_mode():
        for guided in (False, True):
            got = bench.stack_call(net, guided, 0.5)(stack)
            label = stack["moving_label"] if guided else None
            want = _predict_stack(net, stack["moving"], stack["fixed"], np.zeros(4, bool), label, 0.5 if guided else 0.0)[0]
            torch.testing.assert_close(got, want)
            assert float((got[:, 1:] - net(torch.cat([stack["moving"], stack["fixed"]], 1))[:, 1:]).abs().max()) > 1e-3
