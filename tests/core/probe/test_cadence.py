"""The probes' cadence: measured at the first step, every epoch end and the last step; a plan that says when
the next full measurement is due and why; a cadence the user changes mid-run; sparse series drawn as markers."""

from __future__ import annotations

import numpy as np
import pytest

from workbench.core.model.demo import DigitsCNN
from workbench.core.probe.activations import leaf_modules
from workbench.core.probe.cadence import CadencePlan, describe_plan, describe_setting, sparse
from workbench.core.probe.callback import ProbeCallback, ProbeReport, _StepCost
from workbench.core.train.config import DataConfig, TrainConfig
from workbench.core.train.events import Sink
from workbench.core.train.trainer.hooks import Callback
from workbench.core.train.trainer.loop import Trainer


def _digits(tmp_path, epochs=3, batch_size=64, **kw):
    return TrainConfig(data=DataConfig(dataset="digits", batch_size=batch_size), epochs=epochs,
                       run_dir=str(tmp_path / "run"), tensorboard=False, checkpoint_every_epoch=False, **kw)


def test_a_short_run_has_gradient_norms_at_the_first_step_every_epoch_end_and_the_last(tmp_path):
    """At the default 2 % a 69-step demo run measured step 1 and nothing else: no curve at all."""
    got = []
    model = DigitsCNN()
    cb = ProbeCallback(got.extend, probed=leaf_modules(model)[:10], flush_ms=0)
    trainer = Trainer(model, _digits(tmp_path), [cb])
    assert trainer.fit() == "completed"
    n = trainer.steps_per_epoch
    grads = [r.step for r in got if r.grads is not None]
    assert {1, n, 2 * n, 3 * n} <= set(grads), grads
    assert grads[-1] == trainer.step == 3 * n  # the last step
    assert got[0].activations and got[0].layers is not None  # the first step is a full measurement
    for r in got:
        assert r.grads.global_norm > 0 and r.grads.step == r.step
        assert r.cadence is not None and r.cadence.step == r.step and r.cadence.next_step > r.step
        assert r.cadence.last_step == 3 * n and r.cadence.epoch_end_step is not None
    # the epoch ends cost one bulk reduction each: charged to the budget like any measurement
    assert cb._cadence.spent >= cb._cadence.own * 0.5


def test_a_stopped_run_measures_the_step_it_stopped_after(tmp_path):
    class StopAt(Callback):
        def on_step_end(self, trainer, metrics):
            if metrics["step"] == 7:
                trainer.request_stop()

    got = []
    cb = ProbeCallback(got.extend, every=100, flush_ms=0)  # no other full measurement on a fast machine
    trainer = Trainer(DigitsCNN(), _digits(tmp_path), [StopAt(), cb])
    assert trainer.fit() == "stopped" and trainer.step == 7
    assert [r.step for r in got if r.grads is not None] == [1, 7]


def test_a_fixed_cadence_is_kept_and_its_plan_says_so(tmp_path):
    got = []
    cb = ProbeCallback(got.extend, every=5, probed=["classifier"], flush_ms=0)
    trainer = Trainer(DigitsCNN(), _digits(tmp_path, epochs=1), [cb])
    assert trainer.fit() == "completed"
    n = trainer.steps_per_epoch
    assert [r.step for r in got if r.activations] == list(range(1, n + 1, 5))
    assert [r.step for r in got if r.grads is not None and not r.activations] == [n]  # the epoch end
    plan = got[0].cadence
    assert (plan.mode, plan.every, plan.next_step) == ("fixed", 5, 6)
    assert describe_plan(plan).startswith("next at step 6: every 5 steps, as set")


def test_the_cadence_changes_mid_run_and_a_report_says_so_at_once(tmp_path):
    """The Probes panel's cadence control calls set_cadence from the GUI thread while the trainer runs."""
    got = []
    # a fixed start (every 100 steps: step 1 only before the change), so no timing decides what steps 2-3 measure
    cb = ProbeCallback(got.extend, every=100, probed=["classifier"], flush_ms=0)
    calls = []
    cb.add_listener(lambda method, args: calls.append((method, args)))

    class Steer(Callback):
        def on_step_end(self, trainer, metrics):
            if metrics["step"] == 4:
                cb.set_cadence(3)

    trainer = Trainer(DigitsCNN(), _digits(tmp_path, epochs=1), [Steer(), cb])
    assert trainer.fit() == "completed"
    assert calls == [("set_cadence", (3, 0.02))]  # what a training process's copy is told
    notice = next(r for r in got if r.step == 4)
    assert not notice.activations and notice.grads is None and notice.cadence.mode == "fixed"
    assert notice.cadence.next_step == 5  # the last measurement was step 1: 1 + 3 is past, so the next step
    acts = [r.step for r in got if r.activations]
    assert acts[:4] == [1, 5, 8, 11]
    assert cb.settings()["every"] == 3 and cb.cadence_setting() == (3, 0.02)
    cb.set_cadence(None, 0.05)  # back to the budget, a larger one
    assert cb.settings()["every"] is None and cb.settings()["budget"] == 0.05 and cb.auto


@pytest.mark.parametrize("every, budget", [(0, None), (None, 0.0), (None, 1.5)])
def test_set_cadence_refuses_what_cannot_be(every, budget):
    with pytest.raises(ValueError):
        ProbeCallback(lambda r: None).set_cadence(every, budget)


def test_the_step_cost_charges_work_outside_a_measured_step():
    cost = _StepCost(clock=lambda: 0.0)
    cost.charge(0.002)
    cost.charge(-1.0)  # never a credit
    assert cost.spent == pytest.approx(0.002)


def test_the_plan_in_words():
    plan = CadencePlan(step=100, next_step=140, every=40, mode="budget", budget=0.02, measure_ms=18.2, step_ms=7.3,
                       last_step=2000, epoch_end_step=115)
    assert describe_plan(plan) == ("next at step ~140: every ~40 steps keeps probes within the 2 % budget "
                                   "(a measurement ~18 ms, a step ~7.3 ms); gradient norms also at epoch ends and "
                                   "the last step")
    learning = CadencePlan(step=1, next_step=11, every=10, mode="learning", budget=0.005)
    assert describe_plan(learning) == ("next at step ~11: every 10 steps until a measurement's cost is known "
                                       "(0.5 % budget)")
    late = CadencePlan(step=1, next_step=258, every=45, mode="budget", budget=0.02, measure_ms=18, step_ms=7,
                       last_step=69, epoch_end_step=23)
    assert describe_plan(late) == ("no other full measurement before the run ends at step 69: the 2 % budget is "
                                   "used up until step ~258 (a measurement ~18 ms, a step ~7 ms); raise it or "
                                   "choose every N steps; gradient norms also at epoch ends and the last step")
    assert describe_setting(None, 0.02).startswith("Live during training: the first step, then as often as 2 %")
    assert "every 25 steps" in describe_setting(25, 0.02)


def test_sparse_samples_are_few_or_far_apart():
    assert sparse(np.array([1.0, 46.0]))  # two samples: a line between them reads as a trend
    assert sparse(np.arange(19.0))
    assert not sparse(np.arange(0.0, 2000.0, 40.0))  # an even cadence over the run: a line
    uneven = np.concatenate([np.arange(0.0, 30.0), [1000.0]])  # 31 points, one gap of 97 % of the extent
    assert sparse(uneven)
    assert not sparse(np.concatenate([np.arange(25.0), [np.nan]]))  # non-finite positions do not count


def test_a_plan_only_report_is_plain_data():
    import pickle

    plan = CadencePlan(step=3, next_step=9, every=6, mode="fixed", budget=0.02, measure_ms=1.5, step_ms=4.0)
    report = ProbeReport(step=3, cadence=plan)
    back = pickle.loads(pickle.dumps(report))  # crosses to the window from a training process
    assert back.cadence == report.cadence and back.grads is None and back.activations == {}


def test_the_cadence_reaches_a_training_process_before_and_during_the_run(tmp_path):
    """The window's copy is built again in the process from settings(); set_cadence crosses as a callback call."""
    from tests.core.train.launch.test_training_process import _run
    from workbench.core.train.launch.training_process import RemoteControl, make_job

    window_copy = ProbeCallback(lambda r: None, probed=["classifier"])
    window_copy.set_cadence(4)  # chosen before Start
    job = make_job(DigitsCNN(), _digits(tmp_path, epochs=30, batch_size=32), callbacks=[window_copy])
    sent, seen = [], []

    def steer(proc, event):
        if not isinstance(event, Sink):
            return
        reports = event.data
        if not sent and any(r.step >= 9 for r in reports):
            sent.append(True)
            RemoteControl(proc).call_callback(0, "set_cadence", 2, 0.02)
        else:
            seen.extend(r.step for r in reports if r.activations and r.cadence and r.cadence.every == 2)
            if len(seen) >= 3:
                RemoteControl(proc).request_stop()

    reason, events = _run(job, steer)
    assert reason == "stopped"
    reports = [r for e in events["Sink"] if e.index == 0 for r in e.data]
    acts = [r.step for r in reports if r.activations]
    assert acts[:3] == [1, 5, 9]
    plans = [r.cadence for r in reports if r.cadence is not None]
    assert plans[0].mode == "fixed" and plans[0].every == 4
    assert plans[-1].mode == "fixed" and plans[-1].every == 2
    assert seen[1] - seen[0] == 2 and seen[2] - seen[1] == 2  # the new cadence, in the process
