"""functional.gaussian_filter_nearest: scipy's ``gaussian_filter(mode="nearest")`` without scipy, to the bit."""

import numpy as np
import pytest
from scipy import ndimage

from monai_npc.functional import label_indicators
from monai_npc.functional.gaussian import gaussian_filter_nearest


@pytest.mark.parametrize("sigma", [0.5, 1.0, 1.5, 2.3])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_same_numbers_as_scipy(sigma, dtype):
    rng = np.random.default_rng(int(sigma * 10))
    x = rng.normal(size=(3, 29, 41)).astype(dtype)
    widths = [0.0, sigma, sigma]
    out = gaussian_filter_nearest(x, widths)
    assert out.dtype == dtype
    np.testing.assert_array_equal(out, ndimage.gaussian_filter(x, widths, mode="nearest"))


def test_smooths_and_keeps_the_mean_of_a_constant():
    x = np.zeros((1, 21, 21), np.float32)
    x[0, 10, 10] = 1.0
    out = gaussian_filter_nearest(x, [0, 1.0, 1.0])
    assert out[0, 10, 10] == pytest.approx(1 / (2 * np.pi), rel=0.05)  # peak of a unit 2-D Gaussian, sigma 1
    assert out.sum() == pytest.approx(1.0, abs=1e-6)
    np.testing.assert_allclose(gaussian_filter_nearest(np.full((5, 7), 3.0), [2.0, 2.0]), 3.0)


def test_label_indicators_sum_to_one_without_scipy():
    label = np.zeros((2, 16, 16), np.int32)
    label[:, 4:10, 4:10] = 1
    label[:, 8:14, 8:14] = 3
    values, ind = label_indicators(label, [1, 3], sigma=1.0)
    assert values.tolist() == [0, 1, 3]
    np.testing.assert_allclose(ind.sum(0), 1.0, atol=1e-6)


def test_one_width_per_axis():
    with pytest.raises(ValueError, match="one width per axis"):
        gaussian_filter_nearest(np.zeros((4, 4)), [1.0])
