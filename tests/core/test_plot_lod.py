"""The min/max pyramid the Runs dock draws long curves from (``workbench.core.plot_lod``)."""

from __future__ import annotations

import numpy as np
import pytest

from workbench.core.plot_lod import FACTOR, MinMaxPyramid


@pytest.mark.filterwarnings("ignore:All-NaN slice")
def test_each_level_holds_the_min_and_max_of_its_bins_and_nan_is_skipped():
    rng = np.random.default_rng(0)
    x = np.arange(10_000, dtype=float)
    y = rng.normal(size=10_000)
    y[100:110] = np.nan  # an epoch without validation
    y[99] = 5.0  # its bin of 16 (96-111) also holds the NaNs: its max is 5.0, not NaN
    pyramid = MinMaxPyramid(x, y)
    assert [size for size, _, _ in pyramid.levels][:3] == [FACTOR, FACTOR ** 2, FACTOR ** 3]
    for size, lx, ly in pyramid.levels:
        n = len(lx) // 2
        bins = y[:n * size].reshape(n, size)
        assert np.array_equal(ly[0::2], np.nanmin(bins, axis=1), equal_nan=True)
        assert np.array_equal(ly[1::2], np.nanmax(bins, axis=1), equal_nan=True)
        assert np.array_equal(lx[0::2], x[:n * size:size]) and np.array_equal(lx[1::2], x[size - 1:n * size:size])


def test_a_view_draws_about_two_points_a_pixel_and_keeps_the_extremes_in_view():
    x = np.arange(100_000, dtype=float)
    y = np.sin(x / 500.0)
    y[40_000] = 7.0  # a spike a plain stride would miss
    pyramid = MinMaxPyramid(x, y)
    vx, vy = pyramid.view(0, 99_999, 1000)
    assert 2000 <= len(vx) <= 2 * FACTOR * 1000
    assert vy.max() == 7.0 and vy.min() == pytest.approx(-1.0, abs=1e-6)
    # zoomed in to 1,500 points: the raw points, one beyond each edge
    zx, zy = pyramid.view(10_000, 11_499, 1000)
    assert zx[0] == 9_999 and zx[-1] == 11_500 and np.array_equal(zy, y[9_999:11_501])


def test_x_and_y_of_different_lengths_are_refused():
    with pytest.raises(ValueError, match="1-D of one length"):
        MinMaxPyramid(np.arange(3.0), np.arange(4.0))
