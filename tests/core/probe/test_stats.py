"""Tensor statistics and histograms on the device (workbench.core.probe.stats)."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from torch import nn

from workbench.core.probe.stats import (
    N_SCALARS,
    cpu_fast_stats,
    finite_scalars,
    hist_stride,
    histogram,
    histogram_counts,
    stat_dtype,
)


def test_weight_histogram_counts_every_value_over_its_range():
    model = nn.Linear(3, 3)
    h = histogram(model.weight, bins=5)
    assert h.counts.sum() == 9 and h.lo == pytest.approx(model.weight.min().item())
    assert len(h.edges) == 6 and math.isclose(h.edges[-1], model.weight.max().item(), rel_tol=1e-6)
    assert h.stride == 1 and h.counts.dtype == np.float64


def test_histogram_matches_numpy_and_skips_nonfinite_values():
    torch.manual_seed(0)
    x = torch.randn(1000)
    x[::97] = float("nan")
    x[5] = float("inf")
    h = histogram(x, bins=16)
    fin = x[torch.isfinite(x)].double().numpy()
    ref, _ = np.histogram(fin, bins=16, range=(fin.min(), fin.max()))
    assert h.counts.sum() == fin.size
    assert np.abs(h.counts - ref).sum() <= 2  # float32 bin edges may move a boundary value by one bin


def test_histogram_of_a_constant_and_of_no_finite_value():
    h = histogram(torch.full((4,), 2.0), bins=3)
    assert (h.lo, h.hi) == (2.0, 2.0) and h.counts.tolist() == [4.0, 0.0, 0.0]
    assert h.edges[0] == 2.0 and h.edges[-1] == 3.0  # a width of 1 when lo == hi
    h = histogram(torch.full((3,), float("nan")), bins=3)
    assert h.counts.sum() == 0


def test_finite_scalars_are_the_statistics_of_the_finite_values():
    x = torch.tensor([0.0, 1.0, 2.0, float("nan"), 5.0, float("-inf")])
    scalars, finite, x0 = finite_scalars(x)
    assert scalars.shape == (N_SCALARS,)
    count, mean, std, lo, hi, zeros, nonfinite, numel = scalars.tolist()
    fin = torch.tensor([0.0, 1.0, 2.0, 5.0])
    assert (count, zeros, nonfinite, numel) == (4, 1, 2, 6)
    assert mean == pytest.approx(fin.mean().item()) and std == pytest.approx(fin.std().item())
    assert (lo, hi) == (0.0, 5.0)
    assert finite.tolist() == [True, True, True, False, True, False]
    assert x0.tolist() == [0.0, 1.0, 2.0, 0.0, 5.0, 0.0]


def test_histogram_counts_close_the_last_bin_and_leave_out_masked_values():
    x = torch.tensor([0.0, 0.5, 1.0, 1.0, 7.0])
    finite = torch.tensor([True, True, True, True, False])
    counts = histogram_counts(x, finite, torch.tensor(0.0), torch.tensor(1.0), 2)
    assert counts.tolist() == [1.0, 3.0]  # 0.5 opens the second bin; 1.0 (= hi) is in the last


def test_cpu_fast_path_agrees_with_the_masked_path():
    torch.manual_seed(1)
    x = torch.randn(4096)
    x[::7] = 0.0
    fast_scalars, fast_counts = cpu_fast_stats(x, x, 32)
    scalars, finite, x0 = finite_scalars(x)
    counts = histogram_counts(x0, finite, scalars[3], scalars[4], 32)
    assert torch.allclose(fast_scalars.float(), scalars.float(), rtol=1e-5, atol=1e-6)
    assert (fast_counts - counts).abs().sum() <= 2  # torch.histc and the scatter may differ at a bin edge


def test_cpu_fast_path_declines_nonfinite_and_single_values():
    assert cpu_fast_stats(torch.tensor([1.0, float("nan")]), torch.tensor([1.0]), 4) is None
    assert cpu_fast_stats(torch.tensor([1.0]), torch.tensor([1.0]), 4) is None
    scalars, counts = cpu_fast_stats(torch.zeros(3), torch.zeros(3), 4)
    assert counts.tolist() == [3.0, 0.0, 0.0, 0.0] and scalars[5] == 3


@pytest.mark.parametrize(("n", "cap"), [(10, 0), (10, 10), (131_072, 10_000), (4096, 4095), (1 << 20, 1 << 12)])
def test_hist_stride_is_odd_and_keeps_at_most_cap_values(n, cap):
    k = hist_stride(n, cap)
    if cap <= 0 or n <= cap:
        assert k == 1
    else:
        assert k % 2 == 1 and math.ceil(n / k) <= cap


def test_statistics_dtype():
    assert stat_dtype(torch.float64) is torch.float64
    assert stat_dtype(torch.float16) is torch.float32 and stat_dtype(torch.bfloat16) is torch.float32
