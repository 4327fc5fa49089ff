"""Closing the window during a run, after Yes, shows no error; neither does Stop before the first step.

Before, a window closed while its training process was still starting showed a
critical box "training process ended unexpectedly (exit code 0)": the process
got the stop message where it waited for its job, and ended.
"""

from __future__ import annotations

import multiprocessing

import pytest
from PySide6.QtCore import Qt

RUN_TIMEOUT_MS = 60_000

pytestmark = pytest.mark.usefixtures("no_dangling_qthreads")


def _start(qtbot, panel, epochs=200) -> None:
    panel.settings.epochs_spin.setValue(epochs)
    with qtbot.waitSignal(panel.runningChanged, timeout=5000):
        qtbot.mouseClick(panel.start_button, Qt.MouseButton.LeftButton)


@pytest.mark.parametrize("when", ["while the process starts", "after the first steps"])
def test_closing_during_a_run_after_yes_shows_no_error(main_window, qtbot, when):
    win, panel = main_window
    assert not panel.in_process()
    _start(qtbot, panel)
    if when == "after the first steps":
        qtbot.waitUntil(lambda: len(panel.plots.steps) >= 2, timeout=RUN_TIMEOUT_MS)
    assert win.close()
    assert win.prompts.count("confirm_stop") == 1
    qtbot.wait(300)  # anything queued by the run's end reaches the window
    assert win.prompts.errors == []
    assert panel.last_reason() == "stopped" and not panel.is_running()
    assert multiprocessing.active_children() == []


def test_stop_before_the_first_step_is_a_stop_not_a_crash(main_window, qtbot):
    win, panel = main_window
    _start(qtbot, panel)
    qtbot.mouseClick(panel.stop_button, Qt.MouseButton.LeftButton)
    qtbot.waitUntil(lambda: not panel.is_running(), timeout=RUN_TIMEOUT_MS)
    assert win.prompts.errors == [] and panel.last_reason() == "stopped"
    assert panel.start_button.isEnabled()
    _start(qtbot, panel, epochs=1)  # the next run trains as usual
    qtbot.waitUntil(lambda: not panel.is_running(), timeout=RUN_TIMEOUT_MS)
    assert panel.last_reason() == "completed" and win.prompts.errors == []
