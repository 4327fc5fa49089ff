"""Live reports that land on a hidden Probes tab are kept, not drawn; the tab draws the newest when it is shown.

Drawing the Gradients and Weights tabs on every report while another tab covered
them was a quarter of an attached window's CPU (``benchmarks/bench_attach.py``).
"""

from __future__ import annotations

import pytest
import torch
from PySide6.QtWidgets import QWidget

from workbench.core.model.demo import DigitsCNN
from workbench.core.probe.callback import ProbeReport
from workbench.core.probe.gradients import grad_norms, weight_histograms
from workbench.ui.draw_when_shown import DrawWhenShown
from workbench.ui.probe.weights_view import WeightsView


@pytest.fixture
def panel(shown_panel):
    return shown_panel


def _report(model, step: int) -> ProbeReport:
    """A live report of ``model`` as it is now: grad norms, update ratios, the classifier's weight histogram."""
    model.zero_grad()
    model(torch.randn(4, 1, 8, 8)).sum().backward()
    return ProbeReport(step=step, grads=grad_norms(model, step=step),
                       update_ratios={"classifier.weight": 1e-3 * step, "classifier.bias": 2e-3},
                       weight_histograms=weight_histograms(model, ["classifier.weight"]))


def test_reports_on_hidden_tabs_wait_and_the_newest_is_drawn_when_the_tab_is_shown(panel):
    model = panel.session.model
    panel.toggle_probe("classifier")
    assert panel.weights.current_parameter() == "classifier.weight"
    assert panel.tabs.currentIndex() == 0  # Activations: Gradients and Weights are covered
    assert panel.weights.shown() is None  # the idle histogram measured when it was chosen is held too
    panel._on_reports([_report(model, 10)])
    with torch.no_grad():
        model.classifier.weight.mul_(3.0)  # the newest report's histogram differs from the first one's
    panel._on_reports([_report(model, 20)])

    assert panel.grads.layers == [] and len(panel.grads.bars.opts["x"]) == 0  # nothing drawn behind the tab
    assert panel.grads.curves == {}
    assert "global" in panel.grads.history and len(panel.grads.history["global"]) == 2  # every point kept
    assert panel.weights.shown() is None
    assert sorted(panel.grads._later.held()) == ["curves", "latest"]
    assert sorted(panel.weights._later.held()) == ["histogram", "ratios"]

    panel.tabs.setCurrentWidget(panel.grads)
    assert panel.grads.isVisible()
    assert panel.grads._later.held() == []
    assert panel.grads.label.text().startswith("step 20:")  # the newest, not the first
    assert len(panel.grads.bars.opts["x"]) == len(panel.grads.layers) > 0
    assert list(panel.grads.curves["global"].getData()[0]) == [10.0, 20.0]

    panel.tabs.setCurrentWidget(panel.weights)
    name, hist, step = panel.weights.shown()
    expected = weight_histograms(model, ["classifier.weight"])["classifier.weight"]
    assert (name, step) == ("classifier.weight", 20) and (hist.lo, hist.hi) == (expected.lo, expected.hi)
    assert "Step 20." in panel.weights.update_label.text()

    panel._on_reports([_report(model, 30)])  # the shown tab draws at once, the one now covered waits
    assert panel.weights.shown()[2] == 30 and panel.weights._later.held() == []
    assert sorted(panel.grads._later.held()) == ["curves", "latest"]
    assert panel.grads.label.text().startswith("step 20:")


def test_a_held_histogram_of_a_parameter_no_longer_chosen_is_not_drawn(qtbot):
    host = QWidget()
    qtbot.addWidget(host)
    view = WeightsView(host)
    view.hide()
    host.show()
    view.set_parameters(["classifier.weight", "classifier.bias"])
    model = DigitsCNN()
    assert view.show_histograms(weight_histograms(model, ["classifier.weight"]), step=5)  # held: hidden
    assert view.shown() is None and view._later.held() == ["histogram"]
    assert view.choose("classifier.bias")
    view.show()
    assert view.shown() is None  # the held classifier.weight histogram is not drawn as classifier.bias's
    assert view.show_histograms(weight_histograms(model, ["classifier.bias"]), step=6)
    assert view.shown()[0] == "classifier.bias" and view.shown()[2] == 6


def test_a_cleared_view_forgets_what_it_held(panel):
    panel.toggle_probe("classifier")
    panel._on_reports([_report(panel.session.model, 5)])
    panel.grads.clear()
    panel.weights.clear()
    assert panel.grads._later.held() == [] and panel.weights._later.held() == []
    panel.tabs.setCurrentWidget(panel.grads)
    assert panel.grads.curves == {} and panel.grads.layers == []


def test_a_window_never_shown_draws_at_once(qtbot):
    """Nothing is held for a show that may not come (a window drawn only to be grabbed)."""
    host = QWidget()
    qtbot.addWidget(host)
    view = QWidget(host)
    view.hide()
    later = DrawWhenShown(view)
    drawn = []
    later.draw("x", lambda: drawn.append(1))
    assert drawn == [1] and later.held() == []
    host.show()
    later.draw("x", lambda: drawn.append(2))
    later.draw("x", lambda: drawn.append(3))  # replaces the held 2
    assert drawn == [1] and later.held() == ["x"]
    view.show()
    assert drawn == [1, 3] and later.held() == []
