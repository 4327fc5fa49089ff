"""Bulk gradient norms, update ratios and weight histograms (workbench.core.probe.gradients)."""

from __future__ import annotations

import math

import pytest
import torch
import torchvision
from torch import nn

from workbench.core.model.demo import DigitsCNN
from workbench.core.probe.gradients import (
    UpdateTracker,
    aggregate,
    bulk_norms,
    grad_norms,
    layer_norms,
    weight_histograms,
)


def _backward(model, x, y):
    model.zero_grad(set_to_none=True)
    nn.functional.cross_entropy(model(x), y).backward()


def test_grad_norms_equal_vector_norm_for_every_parameter_of_resnet18():
    model = torchvision.models.resnet18(weights=None, num_classes=5)
    _backward(model, torch.randn(2, 3, 32, 32), torch.tensor([0, 3]))
    norms = grad_norms(model, step=3)
    params = dict(model.named_parameters())
    assert set(norms.params) == set(params) and norms.frozen == [] and norms.step == 3
    for name, p in params.items():
        assert norms.params[name] == pytest.approx(torch.linalg.vector_norm(p.grad).item(), rel=1e-5)
    expected_global = torch.nn.utils.get_total_norm([p.grad for p in params.values()]).item()
    assert norms.global_norm == pytest.approx(expected_global, rel=1e-5)
    # per-module aggregates = sqrt(sum of squares) of the module's parameters
    sub = [torch.linalg.vector_norm(p.grad).item() for p in model.layer1.parameters()]
    assert norms.modules["layer1"] == pytest.approx(math.sqrt(sum(v * v for v in sub)), rel=1e-5)
    own = [torch.linalg.vector_norm(p.grad).item() for p in model.fc.parameters(recurse=False)]
    assert norms.own["fc"] == pytest.approx(math.sqrt(sum(v * v for v in own)), rel=1e-5)
    assert "layer1" not in norms.own  # a container owns no parameters itself


def test_bulk_norms_makes_a_single_host_transfer(monkeypatch):
    calls = []
    real = torch.Tensor.tolist
    monkeypatch.setattr(torch.Tensor, "tolist", lambda self: calls.append(1) or real(self))
    out = bulk_norms([torch.ones(3), torch.ones(4, 4), torch.full((2,), float("nan"))])
    assert len(calls) == 1
    assert out[:2] == pytest.approx([math.sqrt(3), 4.0]) and math.isnan(out[2])


def test_frozen_parameters_are_frozen_not_zero_and_unfreezing_starts_tracking():
    model = DigitsCNN()
    for p in model.features.parameters():
        p.requires_grad_(False)
    x, y = torch.randn(4, 1, 8, 8), torch.tensor([0, 1, 2, 3])
    _backward(model, x, y)
    norms = grad_norms(model, step=0)
    assert set(norms.params) == {"classifier.weight", "classifier.bias"}
    assert "features.0.weight" in norms.frozen and "features.0.weight" not in norms.params
    assert "features" not in norms.modules and "features.0" not in norms.own
    # unfreeze mid-run: the next call tracks it at once
    model.features[0].weight.requires_grad_(True)
    _backward(model, x, y)
    norms = grad_norms(model, step=1)
    assert norms.params["features.0.weight"] > 0
    assert "features.0.weight" not in norms.frozen and "features.0.bias" in norms.frozen


def test_unused_trainable_parameter_is_missing_not_zero():
    model = nn.ModuleDict({"used": nn.Linear(2, 2), "unused": nn.Linear(2, 2)})
    model["used"](torch.randn(1, 2)).sum().backward()
    norms = grad_norms(model)
    assert set(norms.missing) == {"unused.weight", "unused.bias"}
    assert set(norms.params) == {"used.weight", "used.bias"}


def test_aggregate_subtree_and_own():
    vals = {"a.w": 3.0, "a.b.w": 4.0, "c": 12.0}
    sub = aggregate(vals, subtree=True)
    assert sub["a"] == pytest.approx(5.0) and sub["a.b"] == pytest.approx(4.0) and sub[""] == pytest.approx(13.0)
    own = aggregate(vals, subtree=False)
    assert own == pytest.approx({"a": 3.0, "a.b": 4.0, "": 12.0})


def test_update_ratio_over_one_sgd_step():
    model = nn.Linear(4, 3)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    model(torch.randn(5, 4)).pow(2).sum().backward()
    tracker = UpdateTracker()
    tracker.snapshot(model)
    grads = {n: p.grad.clone() for n, p in model.named_parameters()}
    opt.step()
    ratios = tracker.ratios(model)
    for n, p in model.named_parameters():
        expected = (0.1 * grads[n]).norm().item() / p.detach().norm().item()
        assert ratios[n] == pytest.approx(expected, rel=1e-4)
    assert not tracker.has_snapshot and tracker.ratios(model) == {}


def test_weight_histograms():
    model = nn.Linear(10, 10)
    hists = weight_histograms(model, ["weight"], bins=8)
    assert hists["weight"].counts.sum() == 100
    with pytest.raises(KeyError):
        weight_histograms(model, ["nope"])


def test_layer_norms_label_frozen_layers_frozen_not_zero_from_the_measurement():
    model = DigitsCNN()
    model.features[3].weight.requires_grad_(False)  # half of a layer frozen: still a trainable row (its bias)
    for p in model.features[4].parameters():
        p.requires_grad_(False)
    unused = nn.Parameter(torch.ones(2))
    model.register_parameter("unused", unused)  # trainable, never reached by the loss
    _backward(model, torch.randn(4, 1, 8, 8), torch.tensor([0, 1, 2, 3]))
    norms = grad_norms(model, step=5)
    assert norms.order == [n for n, _ in model.named_parameters()]
    rows = layer_norms(norms)
    assert [r.module for r in rows] == ["", "features.0", "features.1", "features.3", "features.4", "features.7",
                                        "classifier"]  # named_parameters() order: the root's own first
    by = {r.module: r for r in rows}
    assert by["features.4"].state == "frozen" and math.isnan(by["features.4"].norm)
    assert by["features.3"].state == "trainable"
    assert by["features.3"].norm == pytest.approx(torch.linalg.vector_norm(model.features[3].bias.grad).item())
    assert by[""].state == "no grad" and math.isnan(by[""].norm)
    for p in model.features[4].parameters():  # unfrozen after the measurement: the rows still say frozen
        p.requires_grad_(True)
    assert {r.module: r.state for r in layer_norms(norms)}["features.4"] == "frozen"
