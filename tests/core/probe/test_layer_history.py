"""Every layer over time: layer statistics in a real run, the bounded history, sorting, CSV export."""

from __future__ import annotations

import csv
import math

import numpy as np
import pytest
import torch
import torchvision

from workbench.core.probe.callback import ProbeCallback
from workbench.core.probe.layer_history import LayerHistory
from workbench.core.probe.layer_stats import QUANTITIES, LayerSnapshot, LayerStatsProbe
from workbench.core.train.config import DataConfig, TrainConfig
from workbench.core.train.trainer.hooks import Callback
from workbench.core.train.trainer.loop import Trainer

DIES_AT = 6  # the step after which resnet18's stem ReLU outputs only zeros


class KillStemReLU(Callback):
    """After step DIES_AT, make ``bn1`` output -1e4 everywhere: the ReLU after it is dead from step DIES_AT + 1."""

    def on_step_end(self, trainer, metrics):
        if metrics["step"] == DIES_AT:
            bn = trainer.model.bn1
            with torch.no_grad():
                bn.weight.zero_()
                bn.bias.fill_(-1e4)
            bn.weight.requires_grad_(False)
            bn.bias.requires_grad_(False)


def test_a_dead_relu_shows_as_a_band_of_zeros_from_the_step_it_died(tmp_path):
    reports = []
    probe = ProbeCallback(reports.extend, every=1, flush_ms=0)
    data = DataConfig(dataset="fake", fake_shape=[3, 32, 32], fake_size=240, batch_size=16)
    cfg = TrainConfig(data=data, epochs=1, lr=1e-3, run_dir=str(tmp_path / "run"), tensorboard=False)
    trainer = Trainer(torchvision.models.resnet18(num_classes=10), cfg, [KillStemReLU(), probe])
    assert trainer.fit() == "completed", trainer.error

    history = LayerHistory()
    for r in reports:
        assert r.layers is not None
        history.add(r.layers)
    assert history.names[:3] == ["conv1", "bn1", "relu"]  # execution order
    assert len(history.names) == len([m for m in trainer.model.modules() if not list(m.children())])
    steps = history.steps()
    assert list(steps) == list(range(1, len(steps) + 1))
    zeros = history.matrix("act_zeros")[history.names.index("relu")]
    alive, dead = zeros[steps <= DIES_AT], zeros[steps > DIES_AT]
    assert alive.max() < 0.9 and len(dead) >= 3
    assert np.all(dead == 1.0)
    assert history.since("relu", "act_zeros", lambda z: z > 0.9) == DIES_AT + 1
    # the badge of the last report says since when
    badge = next(b for b in reports[-1].badges["relu"] if b.kind == "dead_units")
    assert badge.since == DIES_AT + 1 and f"since step {DIES_AT + 1}" in badge.text
    # sorted by worst dead share, the dead ReLU leads; the filter keeps only matching layers
    assert history.names[history.order("act_zeros", "worst")[0]] in ("relu", "maxpool")
    assert [history.names[i] for i in history.order("act_zeros", "execution", text="layer4.1.bn")] == [
        "layer4.1.bn1", "layer4.1.bn2"]
    # grad norms: conv1 learns until the ReLU after it dies, then gets exactly zero gradient;
    # the parameter-free ReLU has none; the head's update ratio is an lr-sized step
    grads = history.matrix("grad_norm", log=False)
    conv1 = grads[history.names.index("conv1")]
    assert np.all(conv1[steps <= DIES_AT] > 0) and np.all(conv1[steps > DIES_AT] == 0)
    assert np.all(np.isnan(grads[history.names.index("relu")]))
    ratio = history.matrix("update_ratio", log=False)[history.names.index("fc")]
    assert np.all((ratio > 1e-6) & (ratio < 1.0))


def _snapshot(step: int, names: list[str], value: float) -> LayerSnapshot:
    values = np.full((len(names), len(QUANTITIES)), value, np.float32)
    return LayerSnapshot(step, tuple(names), tuple("Linear" for _ in names), values)


def test_memory_stays_bounded_over_100k_steps():
    names = [f"layer{i}" for i in range(50)]
    history = LayerHistory(recent=64, older=64)
    history.add(_snapshot(0, names, 0.0))
    size = history.nbytes
    for step in range(1, 100_000):
        history.add(_snapshot(step, names, float(step)))
        assert len(history) <= 128
    assert history.nbytes == size  # no allocation grows with the run
    steps = history.steps()
    assert steps[0] == 0 and steps[-1] == 99_999 and np.all(np.diff(steps) > 0)
    assert list(steps[-64:]) == list(range(100_000 - 64, 100_000))  # the latest at full resolution
    m = history.matrix("act_mean", log=False)
    assert m.shape == (50, len(steps))
    # a decimated column holds the mean of the steps it spans (values == step)
    width = steps[1] - steps[0]
    assert width > 1 and m[0, 0] == pytest.approx((width - 1) / 2)


def test_layers_that_appear_later_get_rows_and_csv_is_tidy(tmp_path):
    history = LayerHistory(recent=4, older=4)
    history.add(_snapshot(10, ["a", "b"], 1.0))
    history.add(_snapshot(20, ["a", "b", "c"], 2.0))
    assert history.names == ["a", "b", "c"]
    assert math.isnan(history.matrix("act_std")[2, 0]) and history.matrix("act_std")[2, 1] == 2.0
    path = history.write_csv(tmp_path / "layers.csv", ["act_std", "grad_norm"])
    rows = list(csv.DictReader(open(path)))
    assert rows[0].keys() == {"step", "module", "quantity", "value"}
    assert len(rows) == 2 * 5  # 5 measured cells per quantity
    assert {"step": "20", "module": "c", "quantity": "grad_norm", "value": "2.0"} in rows
    assert history.matrix("grad_norm")[0, 1] == pytest.approx(math.log10(2.0))  # log scale by default
    with pytest.raises(KeyError, match="unknown quantity"):
        history.matrix("loss")


def test_saturation_is_measured_for_bounded_activations_only():
    model = torch.nn.Sequential(torch.nn.Linear(4, 64), torch.nn.Tanh(), torch.nn.Linear(64, 2))
    with torch.no_grad():
        model[0].weight.fill_(10.0)  # tanh(large) = +-1: saturated
    probe = LayerStatsProbe(model)
    probe.attach()
    model(torch.ones(8, 4))
    names, acts = probe.collect()
    assert names == ["0", "1", "2"]
    assert acts[1, 3] == 1.0  # Tanh: every output within 1 % of +-1
    assert math.isnan(acts[0, 3]) and math.isnan(acts[2, 3])  # Linear: no bound, no saturation
    assert not model[1]._forward_hooks  # collect() detached
