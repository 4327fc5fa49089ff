"""Forward-hook activation probes (workbench.core.probe.activations)."""

from __future__ import annotations

import gc
import math
import weakref

import numpy as np
import pytest
import torch
from torch import nn

from workbench.core.model.demo import DigitsCNN
from workbench.core.probe.activations import (
    ActivationProbe,
    iter_tensor_leaves,
    leaf_modules,
    probe_batch,
    random_input,
)


def _reference(t: torch.Tensor, bins: int):
    x = t.detach().double().reshape(-1)
    fin = x[torch.isfinite(x)]
    counts, _ = np.histogram(fin.numpy(), bins=bins, range=(fin.min().item(), fin.max().item()))
    return {
        "mean": fin.mean().item(),
        "std": fin.std().item(),
        "min": fin.min().item(),
        "max": fin.max().item(),
        "zero_fraction": (x == 0).double().mean().item(),
        "nonfinite_fraction": (~torch.isfinite(x)).double().mean().item(),
        "counts": counts,
    }


def _capture(module: nn.Module):
    seen = {}
    handle = module.register_forward_hook(lambda m, a, out: seen.__setitem__("out", out.detach().clone()))
    return seen, handle


def test_hook_statistics_equal_direct_statistics():
    model = DigitsCNN()
    names = ["features.0", "features.2", "features.10", "classifier"]
    probe = ActivationProbe(model, bins=32, hist_max_values=0)  # 0: histogram of every value
    refs = {}
    for n in names:
        probe.add(n)
        refs[n] = _capture(model.get_submodule(n))
    x = torch.randn(8, 1, 8, 8)
    model(x)
    stats = probe.collect(step=7)
    assert list(stats) == names
    for n in names:
        seen, handle = refs[n]
        handle.remove()
        out, s, ref = seen["out"], stats[n], _reference(seen["out"], 32)
        assert s.shape == tuple(out.shape) and s.step == 7 and s.dtype == "float32"
        for key in ("mean", "std", "min", "max", "zero_fraction", "nonfinite_fraction"):
            assert getattr(s, key) == pytest.approx(ref[key], rel=1e-5, abs=1e-6), (n, key)
        assert s.histogram.counts.sum() == out.numel()
        # floating-point bin edges may move a value by one bin; the shape must agree
        assert np.abs(s.histogram.counts - ref["counts"]).sum() <= 2
    probe.close()


def test_relu_zero_fraction_and_nonfinite_values():
    model = nn.Sequential(nn.Identity())
    x = torch.tensor([[0.0, 1.0, float("nan"), float("inf"), -2.0, 0.0, 3.0, 0.0]])
    with ActivationProbe(model) as probe:
        probe.add("0")
        model(x)
        s = probe.collect()["0"]
    assert s.zero_fraction == pytest.approx(3 / 8)
    assert s.nonfinite_fraction == pytest.approx(2 / 8)
    assert (s.min, s.max) == (-2.0, 3.0)
    assert s.mean == pytest.approx(2 / 6)
    assert s.histogram.counts.sum() == 6


def test_feature_map_grid_and_heatmaps():
    model = nn.Sequential(nn.Conv2d(3, 20, 3, padding=1), nn.Flatten(), nn.Linear(20 * 64 * 64, 4))
    stats = probe_batch(model, torch.randn(2, 3, 64, 64), ["0", "2"], max_channels=9, max_side=16)
    conv = stats["0"]
    assert conv.image_kind == "channels"
    assert conv.image.shape == (3 * 17 - 1, 3 * 17 - 1)  # 9 channels -> 3x3 tiles of 16 px, 1 px gaps
    assert np.nanmin(conv.image) >= 0 and np.nanmax(conv.image) <= 1
    assert np.isnan(conv.image[16, 0])  # a gap row
    lin = stats["2"]
    assert lin.image_kind == "heatmap" and lin.image.shape == (2, 4)


def test_tuple_outputs_are_probed_per_leaf():
    mha = nn.MultiheadAttention(16, 4, batch_first=True)
    lstm = nn.LSTM(16, 8, batch_first=True)

    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.attn, self.lstm = mha, lstm

        def forward(self, x):
            y, _ = self.attn(x, x, x)
            return self.lstm(y)[0]

    stats = probe_batch(Net(), torch.randn(2, 5, 16), ["attn", "lstm"])
    assert {"attn[0]", "attn[1]", "lstm[0]", "lstm[1.0]", "lstm[1.1]"} <= set(stats)
    assert stats["attn[1]"].shape == (2, 5, 5)  # averaged attention weights
    assert stats["lstm[1.0]"].shape == (1, 2, 8)  # h_n
    assert stats["attn[0]"].image_kind == "heatmap" and stats["attn[0]"].image.shape == (5, 16)
    leaves = list(iter_tensor_leaves({"a": (torch.ones(1), None, 3, torch.ones(2, dtype=torch.long))}))
    assert [k for k, _ in leaves] == ["a.0"]


def test_inplace_relu_is_measured_before_and_after_without_breaking_backward():
    lin = nn.Linear(4, 6)
    model = nn.Sequential(lin, nn.ReLU(inplace=True), nn.Linear(6, 1))
    with ActivationProbe(model) as probe:
        probe.set_probed(["0", "1"])
        x = torch.randn(32, 4)
        model(x).sum().backward()  # training forward with grad: hooks must not break autograd
        stats = probe.collect()
    pre = lin(x).detach()
    assert stats["0"].min == pytest.approx(pre.min().item())  # read before the in-place ReLU ran
    assert stats["0"].min < 0 and stats["1"].min == 0.0
    assert lin.weight.grad is not None


def test_hook_keeps_no_reference_to_the_output():
    model = nn.Sequential(nn.Linear(8, 8), nn.ReLU())
    with ActivationProbe(model) as probe:
        probe.set_probed(["0", "1", ""])
        out = model(torch.randn(4, 8, requires_grad=True))
        ref = weakref.ref(out)
        del out
        gc.collect()
        assert ref() is None
        assert len(probe.collect()) == 3


def test_probe_on_off_100_times_leaves_no_hooks():
    model = DigitsCNN()
    before = {n: dict(m._forward_hooks) for n, m in model.named_modules()}
    probe = ActivationProbe(model)
    names = leaf_modules(model)
    for i in range(100):
        probe.toggle(names[i % len(names)])
        if i % 7 == 0:
            probe.set_probed(names[:3])
    probe.set_probed([])
    assert probe.names == []
    for n, m in model.named_modules():
        assert dict(m._forward_hooks) == before[n]
    probe.add("classifier")
    probe.close()
    assert len(model.classifier._forward_hooks) == 0


def test_unknown_module_raises_key_error():
    probe = ActivationProbe(DigitsCNN())
    with pytest.raises(KeyError, match="nope"):
        probe.add("nope")
    with pytest.raises(KeyError):
        probe.set_probed(["classifier", "nope"])
    assert probe.names == []


def test_probe_batch_restores_train_eval_modes():
    model = DigitsCNN()
    model.train()
    model.features[1].eval()  # a frozen BatchNorm kept in eval
    modes = {n: m.training for n, m in model.named_modules()}
    seen = {}
    model.features[1].register_forward_hook(lambda m, a, o: seen.update(training=m.training))
    stats = probe_batch(model, random_input((4, 1, 8, 8)), ["features.1"])
    assert seen["training"] is False  # the forward ran in eval()
    assert {n: m.training for n, m in model.named_modules()} == modes
    assert stats["features.1"].shape == (4, 16, 8, 8)
    assert all(len(m._forward_hooks) == 1 for m in [model.features[1]])  # only the test's own hook


def test_disabled_probe_collects_nothing():
    model = nn.Linear(3, 3)
    with ActivationProbe(model) as probe:
        probe.add("")
        probe.enabled = False
        model(torch.randn(2, 3))
        assert probe.collect() == {}


def test_random_input_rejects_bad_shapes():
    with pytest.raises(ValueError):
        random_input((0, 3))


def test_random_input_for_an_embedding_model_is_token_ids_and_the_probe_runs():
    class Mean(nn.Module):
        def forward(self, x):
            return x.mean(dim=1)

    model = nn.Sequential(nn.Embedding(100, 32), nn.TransformerEncoderLayer(32, 4, 64, batch_first=True),
                          Mean(), nn.Linear(32, 3))
    x = random_input((4, 16), model=model)
    assert x.dtype == torch.int64 and tuple(x.shape) == (4, 16) and 0 <= int(x.min()) and int(x.max()) < 100
    assert random_input((4, 16), model=nn.Linear(16, 2)).dtype == torch.float32
    stats = probe_batch(model, x, ["0", "3"])
    assert stats["0"].shape == (4, 16, 32) and stats["3"].shape == (4, 3)


def test_constant_and_all_nonfinite_outputs():
    model = nn.Identity()
    with ActivationProbe(model) as probe:
        probe.add("")
        model(torch.zeros(3, 5))
        s = probe.collect()[""]
        assert s.zero_fraction == 1.0 and s.histogram.counts[0] == 15 and (s.min, s.max) == (0.0, 0.0)
        model(torch.full((2, 2), float("nan")))
        s = probe.collect()[""]
        assert s.nonfinite_fraction == 1.0 and math.isnan(s.mean) and s.histogram.counts.sum() == 0


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


def test_large_outputs_histogram_a_strided_subsample_but_exact_moments():
    model = nn.Identity()
    x = torch.randn(4, 8, 64, 64)  # 131,072 values
    with ActivationProbe(model, hist_max_values=10_000) as probe:
        probe.add("")
        model(x)
        s = probe.collect()[""]
    assert s.histogram.stride > 1 and s.histogram.stride % 2 == 1
    assert s.histogram.counts.sum() == x.reshape(-1)[:: s.histogram.stride].numel()
    assert s.mean == pytest.approx(x.mean().item(), abs=1e-6) and s.std == pytest.approx(x.std().item(), rel=1e-5)
    assert (s.min, s.max) == (x.min().item(), x.max().item())


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


def test_a_user_dataset_of_token_id_dicts_feeds_a_probe_batch():
    """The Probes' "Training dataset" source with a user's dataset: its dict batches, the label left out."""
    import importlib.util
    from pathlib import Path

    from workbench.core.probe.activations import dataset_batch, probe_batch
    from workbench.core.train.config import DataConfig

    folder = Path(__file__).resolve().parents[3] / "examples" / "text"
    spec = importlib.util.spec_from_file_location("text_task_probe_test", folder / "text_task.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    model = module.TinyTextClassifier()
    batch = dataset_batch(DataConfig(dataset=f"{folder}/text_task.py:make_dataset", kwargs={"n": 40}), 4, model=model)
    assert set(batch.kwargs) == {"input_ids"} and batch.kwargs["input_ids"].shape == (4, 24)
    stats = probe_batch(model, batch, ["embed", "head"])
    assert stats["head"].shape == (4, 2) and stats["embed"].shape == (4, 24, 32)
