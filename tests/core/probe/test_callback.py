"""The training callback of the probes (workbench.core.probe.callback): its cadence, time budget, reports and hooks.

Driven by a minimal loop with the Trainer's hook points, and by the real Trainer on the digits demo.
"""

from __future__ import annotations

import math

import pytest
import torch
from torch import nn

from workbench.core.model.demo import DigitsCNN
from workbench.core.probe.activations import leaf_modules


# -- the training callback, driven by a minimal loop with the Trainer's hook points -----------
class _LoopTrainer:
    """The hook order of core.train.trainer.loop.Trainer: zero_grad, forward, backward, (hook), step, on_step_end."""

    def __init__(self, model, callbacks, after_backward=True):
        self.model, self.callbacks, self.after_backward = model, callbacks, after_backward
        self.opt = torch.optim.SGD(model.parameters(), lr=0.05)

        class _State:
            step = 0

        self.state = _State()

    def fit(self, steps, between=None):
        for cb in self.callbacks:
            cb.on_fit_start(self)
        for i in range(steps):
            if between:
                between(i)
            self.opt.zero_grad(set_to_none=True)
            x, y = torch.randn(8, 1, 8, 8), torch.randint(0, 10, (8,))
            nn.functional.cross_entropy(self.model(x), y).backward()
            if self.after_backward:
                for cb in self.callbacks:
                    cb.on_after_backward(self)
            self.opt.step()
            self.state.step += 1
            for cb in self.callbacks:
                cb.on_step_end(self, {"step": self.state.step, "loss": 0.0})
        for cb in self.callbacks:
            cb.on_fit_end(self, "completed")


@pytest.mark.parametrize("after_backward", [True, False])
def test_probe_callback_cadence_and_cleanup(after_backward):
    from workbench.core.probe.callback import ProbeCallback

    model = DigitsCNN()
    got = []
    cb = ProbeCallback(got.extend, every=5, probed=["features.2", "classifier"], flush_ms=0)
    seen_hooks = []
    _LoopTrainer(model, [cb], after_backward).fit(
        12, between=lambda i: seen_hooks.append(len(model.classifier._forward_hooks))
    )
    assert [r.step for r in got] == [1, 6, 11]
    # hooks only for measured steps: the activation probe's and the layer statistics' one
    assert seen_hooks == [2, 0, 0, 0, 0, 2, 0, 0, 0, 0, 2, 0]
    r = got[0]
    assert set(r.activations) == {"features.2", "classifier"}
    assert r.activations["features.2"].step == 1
    assert r.grads is not None and r.grads.global_norm > 0 and len(r.grads.params) == 12
    assert set(r.update_ratios) == {n for n, _ in model.named_parameters()}
    # conv biases before a BatchNorm get no gradient (ratio 0); zero-init biases get exactly 1
    assert all(0 <= v < 1.001 for v in r.update_ratios.values())
    assert 1e-4 < r.update_ratios["classifier.weight"] < 1
    assert all(len(m._forward_hooks) == 0 for m in model.modules())


def test_probe_callback_unfreezing_mid_run_starts_tracking_and_set_probed():
    from workbench.core.probe.callback import ProbeCallback

    model = DigitsCNN()
    for p in model.features.parameters():
        p.requires_grad_(False)
    got = []
    cb = ProbeCallback(got.extend, every=2, grad_every=1, probed=["classifier"], flush_ms=0)

    def between(i):
        if i == 3:
            model.features[0].weight.requires_grad_(True)
            cb.set_probed(["features.0"])

    _LoopTrainer(model, [cb]).fit(6, between)
    assert len(got) == 6
    assert "features.0.weight" in got[2].grads.frozen
    assert got[3].grads.params["features.0.weight"] > 0  # tracked from the step it was unfrozen
    assert set(got[4].activations) == {"features.0"} and cb.probed() == ["features.0"]


def test_probe_callback_batches_sink_calls_and_reports_badges():
    from workbench.core.probe.callback import ProbeCallback

    model = DigitsCNN()
    with torch.no_grad():
        model.features[7].bias.fill_(-1e4)  # the conv before features.8 (ReLU, no BatchNorm between) -> dead
    calls = []
    cb = ProbeCallback(calls.append, every=1, probed=["features.8"], flush_ms=1e6)
    _LoopTrainer(model, [cb]).fit(4)
    assert len(calls) == 1 and len(calls[0]) == 4  # one flush at the end
    kinds = [b.kind for b in calls[0][-1].badges.get("features.8", [])]
    assert "dead_units" in kinds


def test_a_pause_and_an_epoch_end_hand_over_the_held_reports_at_once():
    """Reports wait up to ``flush_ms`` for company, but never through a pause or a validation."""
    from workbench.core.probe.callback import ProbeCallback

    model = DigitsCNN()
    calls = []
    cb = ProbeCallback(calls.append, every=1, probed=["classifier"], flush_ms=1e6)

    def between(i):
        if i == 2:
            cb.on_pause(trainer)  # the user paused after two steps
            assert [len(c) for c in calls] == [2]
        if i == 3:
            cb.on_epoch_end(trainer, {"val_loss": 1.0})
            assert [len(c) for c in calls] == [2, 1]

    trainer = _LoopTrainer(model, [cb])
    trainer.fit(5, between=between)
    assert [len(c) for c in calls] == [2, 1, 2]  # the last two at the fit's end
    assert [r.step for c in calls for r in c] == [1, 2, 3, 4, 5]


def test_adaptive_cadence_keeps_measurements_within_the_time_budget():
    from workbench.core.probe.callback import AUTO_START_EVERY, _StepCost

    cost = _StepCost()
    assert cost.cadence(0.03, AUTO_START_EVERY) == AUTO_START_EVERY  # nothing measured yet
    cost.plain, cost.measured = 0.010, 0.020  # a measured step costs 10 ms more than a 10 ms step
    n = cost.cadence(0.03, AUTO_START_EVERY)
    assert n == 34  # ceil(0.010 / (0.03 * 0.010))
    assert (cost.measured - cost.plain) / (n * cost.plain) <= 0.03
    cost.plain, cost.measured = 1.0, 1.005  # a heavy model: probing is nearly free
    assert cost.cadence(0.03, AUTO_START_EVERY) == 1
    cost.plain, cost.measured = 0.001, 10.0
    assert cost.cadence(0.03, AUTO_START_EVERY) == 1000  # clamped


def test_adaptive_callback_spaces_measurements_by_its_current_cadence(tmp_path):
    from workbench.core.model.demo import DigitsCNN
    from workbench.core.probe.callback import ProbeCallback
    from workbench.core.train.config import DataConfig, TrainConfig
    from workbench.core.train.trainer.loop import Trainer

    got = []
    after: dict[int, int] = {}  # step index -> the cadence in force after it ended

    class Spy(ProbeCallback):
        def on_step_end(self, trainer, metrics=None):
            index = self._index
            super().on_step_end(trainer, metrics)
            after[index] = self.every

    # a generous budget keeps the cadence short (a measurement costs about one plain step, so every ~2-4th step)
    # and the 90 steps hold several measurements even on a loaded machine; the law tested is the same
    cb = Spy(got.extend, probed=["features.2"], flush_ms=0, budget=0.5)
    cfg = TrainConfig(data=DataConfig(dataset="digits", batch_size=32), epochs=2, run_dir=str(tmp_path / "run"))
    assert Trainer(DigitsCNN(), cfg, [cb]).fit() == "completed"
    act = [r.step - 1 for r in got if r.activations]  # step indices of the measurements
    assert len(act) >= 3 and act[0] == 0
    # the next measurement is the last one plus at least the cadence in force at each step since: it never
    # comes before the cadence known after step b - 1 says so (it may come later, while the measurements so
    # far are paid for: the cumulative budget, tested on the clock below)
    for a, b in zip(act, act[1:]):
        assert a + after[b - 1] <= b, (a, b)


def test_measurements_stay_within_the_budget_counted_from_the_start_of_the_fit():
    """Steps 0 and 10 are measured before the cost is known; later ones wait until those are paid for."""
    from workbench.core.probe.callback import _StepCost

    now = [0.0]
    cost = _StepCost(clock=lambda: now[0])
    plain, extra, budget = 0.010, 0.009, 0.02  # the demo CNN on 2 cores: ~9 ms a measurement, ~10 ms a step
    cost.record(True)  # step 0, measured, untimed (a fit's first step has no start)
    assert cost.steps_until_due(budget) is None  # nothing timed yet: the default cadence decides
    for i in range(1, 11):
        now[0] += plain + (extra if i == 10 else 0.0)
        cost.record(i == 10)
    assert cost.extra == pytest.approx(extra)
    assert cost.spent == pytest.approx(2 * extra)  # step 10 timed, step 0 charged at the same cost
    # one more measurement must wait until 2 % of the time covers three: (3 * 9 ms / 0.02 - elapsed) / 10 ms
    due = cost.steps_until_due(budget)
    assert due == math.ceil((3 * extra - budget * cost.elapsed) / (budget * plain))
    assert due > cost.cadence(budget, 10)  # later than the steady cadence alone (45 steps) would say
    for _ in range(due):
        now[0] += plain
        cost.record(False)
    assert cost.steps_until_due(budget) == 1
    assert (cost.spent + cost.extra) / cost.elapsed <= budget + 1e-9


def test_probe_callback_sends_the_chosen_weight_histograms_on_measured_steps(tmp_path):
    from workbench.core.model.demo import DigitsCNN
    from workbench.core.probe.callback import ProbeCallback
    from workbench.core.train.config import DataConfig, TrainConfig
    from workbench.core.train.trainer.loop import Trainer

    got = []
    cb = ProbeCallback(got.extend, every=5, weight_hist=["classifier.weight"])
    model = DigitsCNN()
    cfg = TrainConfig(data=DataConfig(dataset="digits", batch_size=128), epochs=1, run_dir=str(tmp_path / "r"))
    cb.set_weight_histograms(["classifier.bias", "no.such.param"])  # unknown names are skipped, never raise
    assert Trainer(model, cfg, [cb]).fit() == "completed"
    measured = [r for r in got if r.activations or r.update_ratios or r.weight_histograms]
    assert measured and all(set(r.weight_histograms) == {"classifier.bias"} for r in measured)
    last = measured[-1].weight_histograms["classifier.bias"]
    assert last.counts.sum() == 10
    assert math.isfinite(last.lo) and last.lo < last.hi  # the bias values spread: a real histogram


def test_the_step_cost_leaves_out_the_time_across_an_epoch_end():
    from workbench.core.probe.callback import _StepCost

    now = [0.0]
    cost = _StepCost(clock=lambda: now[0])
    cost.record(False)  # starts the clock
    now[0] += 0.01
    cost.record(False)
    assert cost.plain == pytest.approx(0.01)
    cost.skip()  # an epoch end: validation and checkpoints follow
    now[0] += 5.0
    cost.record(False)  # only restarts the clock
    assert cost.plain == pytest.approx(0.01)
    now[0] += 0.03
    cost.record(False)
    assert cost.plain == pytest.approx(0.01 + _StepCost.ALPHA * 0.02)  # a step's time, not the validation's


def test_the_probes_own_time_is_a_floor_for_a_measurement_cost_hidden_in_step_jitter():
    """A measured step that happens to run as fast as the average plain step still cost the probes' own time."""
    from workbench.core.probe.callback import _StepCost

    now = [0.0]
    cost = _StepCost(clock=lambda: now[0])
    cost.record(True, own_s=0.009)  # step 0: untimed, charged its own 9 ms at once
    assert cost.spent == pytest.approx(0.009) and cost.extra == pytest.approx(0.009)
    for dt in (0.014, 0.006, 0.013, 0.007):  # plain steps of 10 ms on average, +-4 ms
        now[0] += dt
        cost.record(False)
    now[0] += 0.009  # a measured step no slower than the plain average
    cost.record(True, own_s=0.009)
    assert cost.spent == pytest.approx(0.018)  # charged its own time, not max(0, 9 ms - plain)
    assert cost.extra >= 0.009
    due = cost.steps_until_due(0.02)
    assert due == math.ceil((cost.spent + cost.extra - 0.02 * cost.elapsed) / (0.02 * cost.plain)) and due > 50


def test_a_probed_demo_epoch_measures_once_at_the_default_budget(tmp_path):
    """23 steps of ~10 ms pay for the measurement at step 0 and no other (2 % of them is ~5 ms; before the
    cumulative budget and the own-time floor, steps 0, 10 and a burst of noisy ones were measured)."""
    from workbench.core.model.demo import DigitsCNN
    from workbench.core.probe.callback import ProbeCallback
    from workbench.core.train.config import DataConfig, TrainConfig
    from workbench.core.train.trainer.loop import Trainer

    got = []
    model = DigitsCNN()
    cb = ProbeCallback(got.extend, probed=leaf_modules(model)[:10], flush_ms=0)
    cfg = TrainConfig(data=DataConfig(dataset="digits", batch_size=64), epochs=1, run_dir=str(tmp_path / "r"),
                      tensorboard=False, checkpoint_every_epoch=False)
    assert Trainer(model, cfg, [cb]).fit() == "completed"
    measured = [r.step for r in got if r.activations]
    assert measured[0] == 1 and len(measured) <= 2  # a second only if steps ran 4x slower than measuring
    assert cb._cadence.own > 0 and cb._cadence.spent >= cb._cadence.own * 0.5


def test_settings_build_the_same_callback_again_and_listeners_hear_each_change():
    import pickle

    from workbench.core.probe.callback import ProbeCallback
    from workbench.core.probe.health import HealthThresholds

    cb = ProbeCallback(list, every=7, grad_every=2, probed=["fc", "fc", "conv"], weight_hist=["fc.weight"],
                       thresholds=HealthThresholds(), layers=False, flush_ms=10, bins=16)
    settings = pickle.loads(pickle.dumps(cb.settings()))  # plain data: it crosses to a training process
    assert settings["every"] == 7 and settings["probed"] == ["fc", "conv"] and settings["bins"] == 16
    again = ProbeCallback(list, **settings)
    assert again.settings() == settings and again.cadence_setting() == (7, 0.02)
    heard = []

    def listen(method, args):
        heard.append((method, args))

    cb.add_listener(listen)
    cb.set_probed(["conv"])
    cb.set_weight_histograms(["conv.weight"])
    cb.set_cadence(None, 0.05)
    assert heard == [("set_probed", (["conv"],)), ("set_weight_histograms", (["conv.weight"],)),
                     ("set_cadence", (None, 0.05))]
    assert cb.settings()["every"] is None and cb.cadence_setting() == (None, 0.05)
    cb.remove_listener(listen)
    cb.remove_listener(listen)  # no longer there: no error
    cb.set_probed(["fc"])
    assert len(heard) == 3 and cb.probed() == ["fc"]
    with pytest.raises(ValueError, match=r"^probe cadence must be >= 1 step \(every=0, grad_every=None\)$"):
        ProbeCallback(list, every=0)
