"""The ETA is a moving estimate that says "estimating…" until 10 steps were timed.

Before, the first ETA of a 2-minute run read "ETA 31:23": steps divided by the
wall time since Start, which counts the process start and the first step's
one-off costs.
"""

from __future__ import annotations

import time

import numpy as np
import pytest

from tests.ui.helpers import panel_host
from workbench.core.model.demo import DigitsCNN
from workbench.ui.train.progress_eta import EtaEstimator, format_duration


def test_estimating_until_ten_steps_then_the_rate_of_the_recent_steps():
    eta = EtaEstimator()
    eta.add(20.0, 1)  # a slow first step (kernel creation): the baseline, never part of the rate
    assert eta.text(1200) == "ETA estimating…" and eta.seconds_left(1200) is None
    for step in range(2, 11):
        eta.add(20.0 + 0.1 * (step - 1), step)
    assert eta.text(1200) == "ETA estimating…"  # 9 steps timed
    eta.add(21.0, 11)
    assert eta.seconds_left(1200) == pytest.approx((1200 - 11) * 0.1)
    assert eta.text(1200) == "ETA 1:59"


def test_the_estimate_moves_with_the_speed():
    eta = EtaEstimator(window_s=5.0)
    t = 0.0
    for step in range(1, 101):  # 10 steps/s
        t += 0.1
        eta.add(t, step)
    assert eta.steps_per_s() == pytest.approx(10.0)
    for step in range(101, 201):  # then 2 steps/s: the window forgets the fast part
        t += 0.5
        eta.add(t, step)
    assert eta.steps_per_s() == pytest.approx(2.0)
    assert eta.seconds_left(300) == pytest.approx(50.0)


def test_slow_steps_still_get_an_estimate_and_a_pause_keeps_the_last_rate():
    eta = EtaEstimator(window_s=30.0)
    for step in range(1, 13):  # 5 s per step: the window keeps 10 steps though they span 50 s
        eta.add(5.0 * step, step)
    assert eta.steps_per_s() == pytest.approx(0.2)
    eta.restart_window()  # paused for a minute: that minute is not step time
    eta.add(120.0, 13)
    assert eta.steps_per_s() == pytest.approx(0.2) and eta.seconds_left(23) == pytest.approx(50.0)
    assert format_duration(3725.0) == "1:02:05" and format_duration(float("nan")) == "–"


def test_the_progress_bar_says_estimating_at_the_first_step_of_a_two_minute_run(qtbot):
    """The panel's slots fed as a run's metrics arrive: 20 s of start-up, then 0.1 s per step, 1,200 steps."""
    win = panel_host(DigitsCNN())
    qtbot.addWidget(win)
    panel = win.panel
    panel.run_progress.begin(2, "cpu")
    panel.run_progress.set_plan({"steps_per_epoch": 600})
    panel.view.feed.t0 = time.perf_counter() - 20.0  # Start was pressed 20 s ago (process start, pre-flight)

    def metrics(steps, times):
        m = {"step": np.array(steps, float), "loss": np.ones(len(steps)), "time": np.array(times, float),
             "epoch_float": np.array(steps, float) / 600, "samples": np.array(steps, float) * 64}
        panel.view.add_metrics(m)
        panel.run_progress.show_metrics(m)
        return panel.progress.format()

    text = metrics([1], [19.5])
    assert "step 1/1200" in text and text.endswith("ETA estimating…")
    text = metrics(list(range(2, 12)), [19.5 + 0.1 * i for i in range(1, 11)])
    assert "step 11/1200" in text and text.endswith("ETA 1:59")
