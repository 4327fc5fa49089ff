"""The probes' cadence in the real window: typed in the Probes panel, followed by a run in its training process,
changed mid-run, and said in the panel while the run goes."""

from __future__ import annotations

import numpy as np
import pytest
from PySide6.QtCore import Qt
from PySide6.QtWidgets import QPushButton

from tests.ui.probe.test_cadence_controls import _type
from tests.ui.probe.test_probes_in_window import RUN_TIMEOUT_MS, _probe_from_tree, _stop

pytestmark = pytest.mark.usefixtures("no_dangling_qthreads")


def test_every_n_steps_typed_in_the_panel_drives_the_run_and_changes_mid_run(main_window, qtbot):
    win, panel = main_window
    probes = win.probes_panel
    _probe_from_tree(win, "classifier")
    probes.cadence_combo.setFocus()
    qtbot.keyClick(probes.cadence_combo, Qt.Key.Key_Down)  # "Every N steps"
    _type(qtbot, probes.every_spin, "4")
    panel.settings.epochs_spin.setValue(50)
    with qtbot.waitSignal(panel.runningChanged, timeout=5000):
        qtbot.mouseClick(win.findChild(QPushButton, "startButton"), Qt.MouseButton.LeftButton)
    # while the run goes, the panel says when the next measurement is due and why
    qtbot.waitUntil(lambda: probes.cadence_text().startswith("Next at step "), timeout=RUN_TIMEOUT_MS)
    assert "every 4 steps, as set; gradient norms also at epoch ends and the last step" in probes.cadence_text()
    history = probes.layers.history
    qtbot.waitUntil(lambda: history.steps().size and history.steps()[-1] > 30, timeout=RUN_TIMEOUT_MS)
    typed_at = int(history.steps()[-1])  # the last measurement the window had when the user typed
    _type(qtbot, probes.every_spin, "2")  # mid-run: reaches the training process's copy at the next step
    qtbot.waitUntil(lambda: "every 2 steps, as set" in probes.cadence_text(), timeout=RUN_TIMEOUT_MS)
    changed_at = probes._plan.step
    qtbot.waitUntil(lambda: history.steps()[-1] > changed_at + 6, timeout=RUN_TIMEOUT_MS)
    _stop(qtbot, panel)
    steps = np.asarray(history.steps(), dtype=int)  # one column per full measurement
    assert list(steps[:4]) == [1, 5, 9, 13]
    # every 4 steps, then every 2 from the step the change reached the process (the panel's plan may say so
    # a report later than that step, so the switch is found in the steps themselves)
    gaps = np.diff(steps)
    switch = int(np.argmax(gaps != 4))
    # the switch comes after what the window had seen when the user typed (the plan's step is read from a later
    # report, and under load it lagged the measured switch by more than one interval: not compared)
    assert gaps[switch] != 4 and switch >= 3 and int(steps[switch]) >= typed_at, (steps, typed_at, changed_at)
    assert gaps[switch] in (1, 2, 3) and len(gaps[switch + 1:]) >= 3 and set(gaps[switch + 1:]) == {2}
    grads = set(np.asarray(probes.grads.history["global"]["step"], dtype=int))
    assert set(steps) <= grads  # every full measurement has its gradient norms
    epoch_ends = {int(v) for v in panel.plots.epochs["step"]}  # the steps the loss plot's epochs ended at
    assert epoch_ends and epoch_ends <= grads  # gradient norms at every epoch end, whatever the cadence
    assert probes.cadence_text().startswith("Live during training: the first step, then every 2 steps")
