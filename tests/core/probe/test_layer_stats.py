"""Layer statistics borrowed from the live activation probe match the ones the layer probe computes itself."""

from __future__ import annotations

import math

import numpy as np
import torch
import torchvision

from workbench.core.probe.activations import ActivationProbe, leaf_modules
from workbench.core.probe.layer_stats import LayerStatsProbe, _count_nonzero


def _rows(model, x, borrow=()):
    act = ActivationProbe(model, images=False)
    act.set_probed(borrow)
    layers = LayerStatsProbe(model)
    layers.attach(borrow=borrow)
    with torch.no_grad():
        model(x)
    stats = act.collect()
    act.close()
    return layers.collect(borrowed=stats)


def test_borrowed_rows_equal_the_rows_the_layer_probe_computes():
    torch.manual_seed(0)
    model = torchvision.models.resnet18(weights=None, num_classes=10).eval()
    x = torch.randn(4, 3, 32, 32)
    # conv1, bn1, relu, maxpool, layer1.0.conv1, ...: the blocks' ReLUs run twice (their last call counts),
    # and each block's bn2 output is changed in place by the residual add after its hooks ran
    borrow = leaf_modules(model)[:12]
    names_own, own = _rows(model, x)
    names_lent, lent = _rows(model, x, borrow=borrow)
    assert names_own == names_lent
    rows = [names_own.index(n) for n in borrow]
    # mean / std: two-pass (probe) vs sum of squares (layer probe) in float32; the zero share is exact
    np.testing.assert_allclose(lent[rows, :2], own[rows, :2], rtol=1e-4, atol=1e-5)
    np.testing.assert_array_equal(lent[rows, 2], own[rows, 2])
    assert np.isnan(lent[rows, 3]).all()  # no bounded activation among them


def test_a_borrowed_row_with_nan_has_nan_mean_and_std_but_a_zero_share():
    model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.Linear(8, 2))
    with torch.no_grad():
        model[0].weight.zero_()
        model[0].bias.zero_()
        model[0].bias[0] = float("nan")
    names, rows = _rows(model, torch.ones(5, 4), borrow=["0"])
    assert names == ["0", "1"]
    assert math.isnan(rows[0, 0]) and math.isnan(rows[0, 1])
    assert rows[0, 2] == np.float32(7 / 8)  # 7 of the 8 features are exactly 0; NaN is not 0


def test_the_cpu_non_zero_count_matches_torch_count_nonzero_with_nan_and_inf():
    x = torch.tensor([0.0, -0.0, 1.5, -2.0, float("nan"), float("inf"), -float("inf"), 0.0, 1e-30])
    assert int(_count_nonzero(x)) == int(torch.count_nonzero(x)) == 6
