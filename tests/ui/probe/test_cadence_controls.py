"""The Probes panel's cadence: the user chooses a budget or every N steps by typing, the panel says when the
next measurement is due and why, and sparse measurements are drawn as markers."""

from __future__ import annotations

import pytest
import torch
from PySide6.QtCore import Qt
from PySide6.QtWidgets import QComboBox, QDoubleSpinBox, QLabel, QSpinBox

from workbench.core.model.demo import DigitsCNN
from workbench.core.probe.cadence import CadencePlan
from workbench.core.probe.callback import ProbeReport
from workbench.core.probe.gradients import grad_norms


@pytest.fixture
def panel(shown_panel):
    return shown_panel


def _type(qtbot, spin, text):
    """Select the field's text as a user does (Ctrl+A), type ``text``, press Enter."""
    edit = spin.lineEdit()
    edit.setFocus()
    qtbot.keyClick(edit, Qt.Key.Key_A, Qt.KeyboardModifier.ControlModifier)
    qtbot.keyClicks(edit, text)
    qtbot.keyClick(edit, Qt.Key.Key_Return)


def test_the_cadence_is_chosen_by_typing_and_reaches_the_live_callback(panel, qtbot):
    combo = panel.findChild(QComboBox, "probeCadenceCombo")
    budget = panel.findChild(QDoubleSpinBox, "probeBudgetSpin")
    every = panel.findChild(QSpinBox, "probeEverySpin")
    label = panel.findChild(QLabel, "probeCadenceLabel")
    assert combo.currentText() == "Time budget" and budget.value() == 2.0 and budget.isVisible()
    assert not every.isVisible()
    assert label.text().startswith("Live during training: the first step, then as often as 2 % of the training")
    _type(qtbot, budget, "5")
    assert panel.training_callback().cadence_setting() == (None, 0.05)
    assert "as often as 5 % of the training time" in label.text()

    combo.setFocus()
    qtbot.keyClick(combo, Qt.Key.Key_Down)  # the next choice: every N steps
    assert combo.currentText() == "Every N steps" and every.isVisible() and not budget.isVisible()
    _type(qtbot, every, "25")
    cb = panel.training_callback()
    assert cb.cadence_setting() == (25, 0.05)
    assert cb.settings()["every"] == 25  # what a training process builds its copy from
    assert "every 25 steps" in label.text()


def test_the_plan_of_a_running_run_is_shown_and_cleared_when_it_ends(panel):
    grads_model = DigitsCNN()
    grads_model(torch.zeros(2, 1, 8, 8)).sum().backward()
    plan = CadencePlan(step=1, next_step=258, every=45, mode="budget", budget=0.02, measure_ms=18.0, step_ms=7.0,
                       last_step=69, epoch_end_step=23)
    panel.session.set_running(True)
    panel._on_reports([ProbeReport(step=1, grads=grad_norms(grads_model, step=1), cadence=plan)])
    text = panel.cadence_text()
    assert text.startswith("No other full measurement before the run ends at step 69: the 2 % budget is used up "
                           "until step ~258 (a measurement ~18 ms, a step ~7 ms); raise it or choose every N steps")
    plan = CadencePlan(step=30, next_step=140, every=40, mode="budget", budget=0.02, measure_ms=9.0, step_ms=10.0,
                       last_step=2000, epoch_end_step=46)
    panel._on_reports([ProbeReport(step=30, cadence=plan)])  # a plan alone (the cadence changed): no data
    assert panel.cadence_text().startswith("Next at step ~140: every ~40 steps keeps probes within the 2 % budget")
    assert "global" in panel.grads.history and len(panel.grads.history["global"]) == 1
    panel.session.set_running(False)
    assert panel.cadence_text().startswith("Live during training")


def test_sparse_grad_norm_curves_are_markers_dense_ones_lines(panel):
    model = DigitsCNN()
    model(torch.zeros(2, 1, 8, 8)).sum().backward()
    panel.toggle_probe("classifier")
    panel.tabs.setCurrentWidget(panel.grads)  # a hidden tab draws when it is shown
    panel._on_reports([ProbeReport(step=s, grads=grad_norms(model, step=s)) for s in (1, 46)])
    curve = panel.grads.curves["global"]
    assert panel.grads.drawn_as_markers("global")
    assert curve.opts["pen"] is None and curve.opts["symbol"] == "o"
    assert list(curve.getData()[0]) == [1.0, 46.0]
    panel._on_reports([ProbeReport(step=s, grads=grad_norms(model, step=s)) for s in range(50, 1000, 20)])
    assert not panel.grads.drawn_as_markers("global") and curve.opts["symbol"] is None
    assert curve.opts["pen"] is not None


def test_the_grad_norm_legend_sits_above_the_data_and_log_ticks_do_not_crowd(panel, qtbot):
    """The legend covered the latest points at the top right; under a decade every tick 0.4 ... 0.9 was labelled."""
    import math

    model = DigitsCNN()
    model(torch.zeros(2, 1, 8, 8)).sum().backward()
    panel.toggle_probe("classifier")
    panel.tabs.setCurrentWidget(panel.grads)
    panel._on_reports([ProbeReport(step=s, grads=grad_norms(model, step=s)) for s in (1, 23, 46, 69)])
    qtbot.wait(50)  # the layout settles in the event loop, as on screen
    plot = panel.grads.curve_plot
    legend_rect = panel.grads.legend.sceneBoundingRect()
    assert legend_rect.height() > 0 and not legend_rect.intersects(plot.vb.sceneBoundingRect())
    ticks = plot.getAxis("left").tickValues(math.log10(0.35), math.log10(2.2), 150)
    labelled = sorted(round(10 ** v, 6) for _, values in ticks for v in values)
    assert labelled == [0.5, 1.0, 2.0]
