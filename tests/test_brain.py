"""Brain breadth demo: landmark geometry, augmentation, data loading and the shipped ``brain2d`` model.

Tests reading the real slices skip when ``../shared`` (beside the repository) is absent.
"""


import numpy as np
import pytest
import torch

from monai_npc.extras.brain.augment import augmented_pairs, perturb, random_perturbation
from monai_npc.extras.brain.data import (
    HOLDOUT, SUBJECTS, all_pairs, curve_points, from_model_coords, split_pairs, to_model_coords,
)
from monai_npc.extras.brain.landmarks import hausdorff_distance, mean_symmetric_distance, move_points, sample_field

from .conftest import SHARED

BRAIN = SHARED / "data" / "brain2d"
needs_data = pytest.mark.skipif(not (BRAIN / "r16slice.jpg").is_file(), reason="../shared/data/brain2d not available")


def test_point_geometry():
    a = np.array([[0.0, 0.0], [0.0, 1.0], [0.0, 2.0]])
    assert mean_symmetric_distance(a, a) == 0.0
    assert mean_symmetric_distance(a, a + [3.0, 0.0]) == pytest.approx(3.0)
    assert hausdorff_distance(a, np.vstack([a, [[4.0, 0.0]]])) == pytest.approx(4.0)
    ddf = torch.zeros(2, 16, 16)
    ddf[0] = torch.arange(16.0)[:, None] * 0.5  # row displacement grows with the row
    ddf[1] = 2.0
    pts = np.array([[3.0, 4.0], [7.5, 2.25]])
    np.testing.assert_allclose(sample_field(ddf, pts), [[1.5, 2.0], [3.75, 2.0]], atol=1e-6)
    np.testing.assert_allclose(move_points(pts, ddf), pts + [[1.5, 2.0], [3.75, 2.0]], atol=1e-6)
    native = np.array([[0.0, 255.0], [100.0, 37.0]])
    np.testing.assert_allclose(from_model_coords(to_model_coords(native, 128), 128), native)
    np.testing.assert_allclose(to_model_coords([[0.5, 2.5]], 128), [[0.0, 1.0]])  # model pixel i covers native 2i, 2i + 1
    with pytest.raises(ValueError, match="divide"):
        to_model_coords(native, 100)
    with pytest.raises(ValueError, match="absent"):
        curve_points(np.zeros((4, 4)), 1)


def test_split_and_augmentation():
    assert len(all_pairs()) == 15
    train, test = split_pairs()
    assert len(train) == 11 and len(test) == len(HOLDOUT) and ("r16", "r85") in test
    rng = np.random.default_rng(0)
    field = random_perturbation(rng, 64, rotate_deg=0.0, scale=0.0, translate=0.0, elastic=2.0)
    assert float(field.norm(dim=0).max()) <= 2.0 + 1e-5
    shift = random_perturbation(np.random.default_rng(1), 32, rotate_deg=0.0, scale=0.0, translate=3.0, elastic=0.0)
    assert float(shift.std(dim=(1, 2)).max()) < 1e-5 and float(shift.abs().max()) <= 3.0  # a pure translation
    img = np.zeros((32, 32), np.float32)
    img[8:24, 8:24] = 1.0
    out = perturb(img, np.random.default_rng(2), rotate_deg=0.0, scale=0.0, translate=0.0, elastic=0.0)
    np.testing.assert_allclose(out, img, atol=1e-5)
    slices = {n: img for n in SUBJECTS}
    pairs = augmented_pairs(slices, train[:2], copies=3)
    assert len(pairs) == 2 * 4 and pairs[1]["moving"].shape == (32, 32)


@needs_data
def test_real_slices_and_landmarks():
    from monai_npc.extras.brain.data import check_data_dir, load_landmarks, load_slices

    root = check_data_dir(BRAIN)
    slices = load_slices(root, 128)
    assert set(slices) == set(SUBJECTS) and slices["r16"].shape == (128, 128)
    assert slices["r16"].min() == 0.0 and slices["r16"].max() == 1.0
    lab = load_landmarks(root, "r16")
    assert [int((lab == v).sum()) for v in (1, 2)] == [305, 318]
    with pytest.raises(FileNotFoundError, match="r27sliceLM"):
        load_landmarks(root, "r27")


@needs_data
def test_shipped_brain_model_brings_the_landmark_curves_closer():
    from monai_npc.extras.brain.demo import landmark_metrics
    from monai_npc.networks.nets import load_pretrained

    net = load_pretrained("brain2d")
    assert net.config["num_pairs"] == 128 and net.config["top_k"] == 64 and net.config["num_steps"] == 15
    m = landmark_metrics(net, BRAIN, int(net.meta["input_size"]))
    before, after = m["msd_before"], m["msd_after"]
    assert before == pytest.approx(13.656, abs=0.01)  # the unregistered curves (mm), mean of labels 1 and 2
    assert after == pytest.approx(12.03, abs=0.1)  # measured with the shipped weights (15 ODE steps)
    assert m["r16->r85"]["msd_after"] < m["r16->r85"]["msd_before"]
    assert m["r85->r16"]["msd_after"] < m["r85->r16"]["msd_before"]
