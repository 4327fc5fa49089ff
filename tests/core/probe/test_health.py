"""Health badges (workbench.core.probe.health) on real models."""

from __future__ import annotations

import math

import torch
from torch import nn

from workbench.core.probe.activations import probe_batch
from workbench.core.probe.gradients import grad_norms
from workbench.core.probe.health import Badge, HealthThresholds, activation_badges, check_health, grad_badges


def _mlp():
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(8, 32), nn.ReLU(), nn.Linear(32, 32), nn.ReLU(), nn.Linear(32, 2))


def test_badge_is_the_api_contract_dataclass():
    b = Badge("dead_units", 0.95, 3, "x")
    assert (b.kind, b.value, b.step, b.text) == ("dead_units", 0.95, 3, "x")


def test_dead_layer_gets_dead_units_badge():
    model = _mlp()
    with torch.no_grad():
        model[2].bias.fill_(-10.0)  # pre-activations all very negative -> ReLU outputs exactly 0
    stats = probe_batch(model, torch.randn(64, 8), ["1", "3"])
    badges = activation_badges(stats)
    assert [b.kind for b in badges["3"]] == ["dead_units"]
    assert "1" not in badges
    b = badges["3"][0]
    assert b.value > 0.9 and "100.0%" in b.text and b.step == -1


def test_exploding_gradient_badge():
    model = _mlp()
    with torch.no_grad():
        for p in model.parameters():
            p.mul_(1e3)
    nn.functional.cross_entropy(model(torch.randn(16, 8)), torch.zeros(16, dtype=torch.long)).backward()
    norms = grad_norms(model, step=12)
    badges = grad_badges(norms)
    assert any(b.kind == "exploding_grad" for bs in badges.values() for b in bs)
    b = next(b for bs in badges.values() for b in bs if b.kind == "exploding_grad")
    assert b.value > 1e3 and b.step == 12 and "step 12" in b.text and f"{b.value:.3g}" in b.text


def test_exploding_with_scaled_loss_and_configurable_threshold():
    model = _mlp()
    (model(torch.randn(16, 8)).pow(2).mean() * 1e6).backward()
    norms = grad_norms(model, step=1)
    assert any(b.kind == "exploding_grad" for bs in grad_badges(norms).values() for b in bs)
    high = HealthThresholds(exploding=1e30)
    assert not any(b.kind == "exploding_grad" for bs in grad_badges(norms, high).values() for b in bs)


def test_vanishing_gradient_badge():
    model = _mlp()
    with torch.no_grad():
        model[4].weight.mul_(1e-9)  # the head passes (almost) nothing back
    nn.functional.cross_entropy(model(torch.randn(16, 8)), torch.zeros(16, dtype=torch.long)).backward()
    badges = grad_badges(grad_norms(model, step=5))
    assert [b.kind for b in badges["0"]] == ["vanishing_grad"]
    assert "4" not in badges  # the head itself still learns


def test_nonfinite_badges():
    model = _mlp()
    x = torch.randn(4, 8)
    x[0, 0] = float("nan")
    stats = probe_batch(model, x, ["0"])
    assert [b.kind for b in activation_badges(stats)["0"]] == ["nonfinite"]
    model(x).sum().backward()
    norms = grad_norms(model, step=2)
    assert math.isnan(norms.global_norm)
    badges = check_health(stats, norms)
    assert any(b.kind == "nonfinite" for b in badges["0"])


def test_healthy_model_has_no_badges():
    model = _mlp()
    stats = probe_batch(model, torch.randn(64, 8), ["0", "2", "4"])
    nn.functional.cross_entropy(model(torch.randn(16, 8)), torch.zeros(16, dtype=torch.long)).backward()
    assert check_health(stats, grad_norms(model)) == {}
