"""The Probes panel (workbench.ui.probe.panel) on a bare Session, with the real Trainer."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from PySide6.QtWidgets import QWidget

from tests.ui.helpers import make_session
from workbench.core.model.demo import DEMO_INPUT_SHAPE, DigitsCNN
from workbench.core.probe.callback import ProbeCallback
from workbench.ui.probe.panel import ProbesPanel


@pytest.fixture
def panel(qtbot):
    p = ProbesPanel(make_session(DigitsCNN(), input_shape=DEMO_INPUT_SHAPE))
    p.badge_calls = []
    p.session.badgesChanged.connect(p.badge_calls.append)
    qtbot.addWidget(p)
    yield p
    p.shutdown()


def test_object_names_and_toggle(panel):
    assert panel.objectName() == "probesPanel"
    for name in ("activationHistogram", "featureMapView", "gradNormPlot", "runProbeButton"):
        assert panel.findChild(QWidget, name) is not None, name
    assert panel.toggle_probe("features.2") is True
    assert panel.toggle_probe("classifier") is True
    assert panel.probed() == ["features.2", "classifier"] and panel.has_probe("classifier")
    assert panel.toggle_probe("features.2") is False
    assert panel.probed() == ["classifier"]
    assert panel.training_callback().probed() == ["classifier"]
    with pytest.raises(KeyError):
        panel.toggle_probe("nope")
    # the panel itself never leaves hooks on the model
    assert all(len(m._forward_hooks) == 0 for m in panel.session.model.modules())


def test_run_probe_batch_shows_histogram_and_feature_maps(panel, qtbot):
    model = panel.session.model
    model.train()
    panel.toggle_probe("features.2")
    panel.toggle_probe("classifier")
    with qtbot.waitSignal(panel.resultsShown, timeout=20000):
        assert panel.run_probe_batch()
    qtbot.waitUntil(lambda: not panel.is_busy(), timeout=10000)
    assert model.training and all(m.training for m in model.modules())  # modes restored
    assert all(len(m._forward_hooks) == 0 for m in model.modules())
    s = panel.current_stats()
    assert s.module == "features.2" and s.shape == (8, 16, 8, 8)
    assert panel.hist_bars.opts["height"].sum() == len(range(0, 8 * 16 * 8 * 8, s.histogram.stride))
    assert np.array_equal(panel.hist_bars.opts["height"], s.histogram.counts)  # shows what core produced
    assert panel.map_image.image is not None and panel.map_image.image.ndim == 2
    assert "features.2" in panel.stats_label.text()
    panel.probed_list.setCurrentRow(1)
    assert panel.current_stats().module == "classifier"
    assert panel.current_stats().image_kind == "heatmap"


def test_probe_batch_errors_are_shown_not_raised(qtbot):
    session = make_session(DigitsCNN(), input_shape=(1, 3, 8, 8))  # wrong channel count
    p = ProbesPanel(session)
    qtbot.addWidget(p)
    p.toggle_probe("classifier")
    assert p.run_probe_batch()
    qtbot.waitUntil(lambda: not p.is_busy(), timeout=20000)
    assert "failed" in p.status.text()
    assert all(len(m._forward_hooks) == 0 for m in session.model.modules())
    session.set_input_shape(None)
    assert not p.run_probe_batch() and "input shape" in p.status.text()


def test_dead_layer_badge_reaches_the_tree(panel, qtbot):
    model = panel.session.model
    with torch.no_grad():
        model.features[7].bias.fill_(-1e4)
    panel.toggle_probe("features.8")
    with qtbot.waitSignal(panel.resultsShown, timeout=20000):
        panel.run_probe_batch()
    badges = panel.badge_calls[-1]
    assert [b.kind for b in badges["features.8"]] == ["dead_units"]
    assert "step" not in badges["features.8"][0].text or "probe batch" in badges["features.8"][0].text


def test_live_reports_from_the_real_trainer(panel, qtbot, tmp_path):
    """The Trainer runs with the panel's callback; reports cross threads as queued signals."""
    from workbench.core.train.config import DataConfig, TrainConfig
    from workbench.core.train.trainer.loop import Trainer

    panel.toggle_probe("features.2")
    cb = panel.training_callback()
    assert isinstance(cb, ProbeCallback)
    # at the default 2 % a 23-step epoch pays for one measurement (step 0); a generous budget gives several,
    # still spaced by the adaptive cadence (its budget law is tested in tests/core/probe)
    cb.budget = 0.5
    cfg = TrainConfig(data=DataConfig(dataset="digits", batch_size=64), epochs=1, run_dir=str(tmp_path / "run"))
    trainer = Trainer(panel.session.model, cfg, panel.training_callbacks())
    assert trainer.fit() == "completed"
    qtbot.waitUntil(lambda: "global" in panel.grads.history, timeout=5000)
    steps = panel.grads.history["global"]["step"]
    # the default cadence adapts to a time budget: spaced measurements, never every step here
    assert cb.auto and len(steps) >= 2 and np.all(np.diff(steps) >= 1)
    assert panel.current_stats() is not None and panel.current_stats().step is not None
    assert panel.grads.bars.opts["height"] is not None and len(panel.grads.bars.opts["height"]) > 0
    assert all(len(m._forward_hooks) == 0 for m in panel.session.model.modules())


def test_frozen_layers_show_as_frozen_in_the_bar_chart(panel, qtbot, tmp_path):
    from workbench.core.train.config import DataConfig, TrainConfig
    from workbench.core.train.trainer.loop import Trainer

    model = panel.session.model
    for p in model.features.parameters():
        p.requires_grad_(False)
    cfg = TrainConfig(data=DataConfig(dataset="digits", batch_size=256), epochs=1, run_dir=str(tmp_path / "r"))
    Trainer(model, cfg, panel.training_callbacks()).fit()
    qtbot.waitUntil(lambda: len(panel.grads.frozen_bars.opts["x"]) > 0, timeout=5000)
    assert len(panel.grads.frozen_bars.opts["x"]) == 5  # 3 convs + 2 BatchNorms, all frozen
    assert len(panel.grads.bars.opts["x"]) == 1  # the classifier
    assert "frozen" in panel.grads.label.text()


def _fit(model, callbacks, tmp_path, batch_size=64):
    from workbench.core.train.config import DataConfig, TrainConfig
    from workbench.core.train.trainer.loop import Trainer

    cfg = TrainConfig(data=DataConfig(dataset="digits", batch_size=batch_size), epochs=1, run_dir=str(tmp_path / "r"))
    return Trainer(model, cfg, callbacks).fit()


def test_weights_tab_offers_the_probed_modules_parameters_and_draws_core_histograms(panel, qtbot):
    from workbench.core.probe.gradients import weight_histograms

    model = panel.session.model
    assert panel.weights.parameters() == [n for n, _ in model.named_parameters()]  # nothing probed: all
    panel.toggle_probe("classifier")
    assert panel.weights.parameters() == ["classifier.weight", "classifier.bias"]
    assert panel.weight_parameter() == "classifier.weight"
    name, hist, step = panel.weights.shown()  # idle: measured by core as soon as it is chosen
    expected = weight_histograms(model, ["classifier.weight"])["classifier.weight"]
    assert name == "classifier.weight" and step is None
    assert np.array_equal(hist.counts, expected.counts) and hist.counts.sum() == 640
    assert np.array_equal(panel.weights.hist_bars.opts["height"], expected.counts)
    assert panel.findChild(QWidget, "weightHistogram") is not None

    assert panel.weights.choose("classifier.bias")
    assert panel.weights.shown()[0] == "classifier.bias" and panel.weights.shown()[1].counts.sum() == 10
    assert panel.training_callback()._weight_hist == ("classifier.bias",)  # the live callback follows

    with torch.no_grad():
        model.classifier.bias.fill_(0.25)  # changed behind the panel's back: the probe batch re-measures it
    with qtbot.waitSignal(panel.resultsShown, timeout=20000):
        panel.run_probe_batch()
    qtbot.waitUntil(lambda: panel.weights.shown() is not None and panel.weights.shown()[1].lo == 0.25, timeout=5000)
    assert panel.weights.shown()[1].hi == 0.25


def test_weight_histogram_updates_live_during_training(panel, qtbot, tmp_path):
    model = panel.session.model
    panel.toggle_probe("features")
    assert panel.choose_weight_parameter("features.7.weight")
    before = panel.weights.shown()[1]
    assert _fit(model, panel.training_callbacks(), tmp_path) == "completed"
    qtbot.waitUntil(lambda: panel.weights.shown()[2] is not None, timeout=5000)
    name, hist, step = panel.weights.shown()
    assert name == "features.7.weight" and step > 0 and hist.counts.sum() == model.features[7].weight.numel()
    assert (hist.lo, hist.hi) != (before.lo, before.hi)  # trained weights moved
    assert np.array_equal(panel.weights.hist_bars.opts["height"], hist.counts)
    assert len(panel.weights.update_bars.opts["x"]) > 0


def test_a_report_measured_while_frozen_stays_frozen_after_a_later_unfreeze(panel):
    """The bar chart labels layers from the measurement, not from the live model."""
    from workbench.core.probe.callback import ProbeReport
    from workbench.core.probe.gradients import grad_norms

    model = panel.session.model
    for p in model.features.parameters():
        p.requires_grad_(False)
    model(torch.randn(4, 1, 8, 8)).sum().backward()
    report = ProbeReport(step=3, grads=grad_norms(model, step=3))
    for p in model.features.parameters():  # unfrozen after the measurement, before the GUI draws it
        p.requires_grad_(True)
    panel._on_reports([report])
    assert len(panel.grads.frozen_bars.opts["x"]) == 5 and len(panel.grads.bars.opts["x"]) == 1
    assert [r.state for r in panel.grads.layers].count("frozen") == 5
    assert not panel.grads.curve_plot.getAxis("left").autoSIPrefix  # no "(x0.001)" over log ticks


def test_an_empty_histogram_reads_zero_to_one(panel):
    """It read -400...400 "(x0.001)" before any probe."""
    panel.show()
    lo, hi = panel.hist_plot.getPlotItem().getViewBox().viewRange()[1]
    assert -0.1 < lo <= 0.0 and 1.0 <= hi < 1.1
    assert panel.hist_plot.getAxis("left").autoSIPrefix is False
