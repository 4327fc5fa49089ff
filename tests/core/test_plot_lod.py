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


def _pieces(x, y, rng):
    i = 0
    while i < len(x):
        k = int(rng.integers(1, 3000))
        yield x[i:i + k], y[i:i + k]
        i += k


@pytest.mark.parametrize("n", [0, 1, 7, 5_000, 200_003])
@pytest.mark.parametrize("max_points", [64, 4096, 10**6])
def test_a_pyramid_built_piece_by_piece_has_the_levels_of_the_whole_curve(n, max_points):
    from workbench.core.plot_lod import PyramidBuilder

    rng = np.random.default_rng(n)
    x = np.cumsum(rng.random(n))
    y = rng.normal(size=n)
    y[rng.random(n) < 0.1] = np.nan
    whole = MinMaxPyramid(x, y)
    builder = PyramidBuilder(max_points)
    for px, py in _pieces(x, y, rng):
        builder.add(px, py)
    built = builder.finish()
    assert built.n == n
    if n:
        assert built.first == (x[0], y[0]) or np.isnan(y[0])
        assert built.last[0] == x[-1]
    kept = len(built.levels[0][1]) if built.base > 1 else built.n
    assert kept <= max_points  # bounded, whatever n
    if n <= max_points:  # every point kept: the same pyramid
        assert built.base == 1 and np.array_equal(built.x, x) and np.array_equal(built.y, y, equal_nan=True)
    levels = {size: (lx, ly) for size, lx, ly in whole.levels}
    assert [size for size, *_ in built.levels] == [size for size in levels if size >= built.base]
    for size, lx, ly in built.levels:
        assert np.array_equal(lx, levels[size][0]) and np.array_equal(ly, levels[size][1], equal_nan=True)


def test_a_pyramid_without_its_points_draws_its_finest_bins_when_zoomed_in():
    from workbench.core.plot_lod import PyramidBuilder

    x = np.arange(100_000, dtype=float)
    y = np.zeros(100_000)
    y[70_001] = 9.0
    builder = PyramidBuilder(4096)
    builder.add(x, y)
    pyramid = builder.finish()
    assert pyramid.base == 64 and pyramid.x is None
    vx, vy = pyramid.view(0, 99_999, 500)
    assert vy.max() == 9.0 and len(vx) <= 2 * 2 * 500
    zx, zy = pyramid.view(70_000, 70_010, 500)  # finer than a bin: the bins around it, the spike kept
    assert zx[0] <= 70_000 and zx[-1] >= 70_010 and zy.max() == 9.0 and len(zx) <= 8
