"""find_nonfinite: every NaN / Inf found, no false alarm from an overflowing sum, cheap on resnet50."""

from __future__ import annotations

import math
import time

import pytest
import torch
import torchvision
from torch import nn

from workbench.core.model.health_check import find_nonfinite, nonfinite_summary


def test_finds_nan_and_inf_by_name_module_and_count():
    model = torchvision.models.resnet18()
    with torch.no_grad():
        model.layer1[0].conv1.weight[0, 0, 0, :2] = float("nan")
        model.fc.bias[3] = float("inf")
        model.fc.weight[1, 1] = -float("inf")
        model.bn1.running_var[0] = float("nan")  # a buffer
    found = find_nonfinite(model)
    assert [(f.name, f.module, f.count) for f in found] == [
        ("layer1.0.conv1.weight", "layer1.0.conv1", 2), ("fc.weight", "fc", 1), ("fc.bias", "fc", 1),
        ("bn1.running_var", "bn1", 1)]
    assert found[2].fraction == pytest.approx(1 / 1000)
    assert nonfinite_summary(found) == ("4 tensors hold NaN/Inf: layer1.0.conv1.weight, fc.weight, fc.bias "
                                        "and 1 more")
    assert nonfinite_summary(found[:1]) == "1 tensor holds NaN/Inf: layer1.0.conv1.weight"
    assert nonfinite_summary([]) == ""


def test_a_sum_that_overflows_is_no_false_alarm():
    model = nn.Linear(4, 4)
    half = nn.Linear(64, 64).half()
    with torch.no_grad():
        model.weight.fill_(3e38)  # finite values whose float32 sum is inf
        half.weight.fill_(60000.0)  # finite float16 values whose float16 sum would overflow
    assert find_nonfinite(model) == [] and find_nonfinite(half) == []
    with torch.no_grad():
        half.weight[0, 0] = float("nan")
    assert [f.name for f in find_nonfinite(half)] == ["weight"]


def test_integer_buffers_meta_tensors_and_tied_weights():
    model = nn.Sequential(nn.Embedding(5, 3), nn.Linear(3, 5, bias=False), nn.BatchNorm1d(5))
    tied = nn.Module()
    tied.a = nn.Linear(3, 3)
    tied.b = nn.Linear(3, 3)
    tied.b.weight = tied.a.weight
    with torch.no_grad():
        tied.a.weight[0, 0] = math.nan
    assert [f.name for f in find_nonfinite(tied)] == ["a.weight"]  # once, not twice
    assert find_nonfinite(model) == []  # num_batches_tracked (int64) is skipped
    assert find_nonfinite(nn.Linear(3, 3, device="meta")) == []


def test_cost_on_resnet50_is_a_fraction_of_a_second():
    """The pass runs at every open: on resnet50 (25.6 M values) it stays well under a second."""
    model = torchvision.models.resnet50()
    find_nonfinite(model)
    t0 = time.perf_counter()
    assert find_nonfinite(model) == []
    elapsed = time.perf_counter() - t0
    print(f"find_nonfinite(resnet50): {elapsed * 1000:.1f} ms")
    assert elapsed < 1.0
