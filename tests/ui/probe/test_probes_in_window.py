"""Probes in the real MainWindow: the tree's Probe action, badges in tree and Details, freezing mid-run."""

from __future__ import annotations

import pytest
import torch
from PySide6.QtCore import Qt

pytestmark = pytest.mark.usefixtures("no_dangling_qthreads")
RUN_TIMEOUT_MS = 60_000


def _probe_from_tree(win, name: str) -> None:
    """What a user does: select the row, open its context menu, trigger "Probe"."""
    tree = win.tree_widget
    assert tree.select_name(name)
    menu = tree.context_menu(tree.view.currentIndex())
    action = next(a for a in menu.actions() if a.text() == "Probe")
    action.trigger()
    menu.deleteLater()


def _look_at(win, view) -> None:
    """What a user does to see a Probes tab: raise the Probes dock, click the tab (hidden tabs draw when shown)."""
    win.probes_dock.raise_()
    win.probes_panel.tabs.setCurrentWidget(view)
    assert view.isVisible()


def _start(qtbot, panel, epochs: int) -> None:
    panel.settings.epochs_spin.setValue(epochs)
    with qtbot.waitSignal(panel.runningChanged, timeout=5000):
        assert panel.start()


def _stop(qtbot, panel) -> None:
    if panel.is_running():
        with qtbot.waitSignal(panel.runningChanged, timeout=RUN_TIMEOUT_MS):
            panel.stop()


def test_dead_units_badge_in_tree_icon_tooltip_and_details(main_window, qtbot):
    win, _ = main_window
    probes = win.probes_panel
    with torch.no_grad():
        win.model.features[7].bias.fill_(-1e4)  # every unit after the next ReLU is dead
    _probe_from_tree(win, "features.8")
    assert probes.probed() == ["features.8"]
    with qtbot.waitSignal(probes.resultsShown, timeout=20_000):
        assert probes.run_probe_batch()
    qtbot.waitUntil(lambda: not probes.is_busy(), timeout=10_000)

    idx = win.tree_model.index_for_name("features.8")
    assert win.tree_model.data(idx, Qt.ItemDataRole.DecorationRole) is not None
    assert "dead units" in win.tree_model.data(idx, Qt.ItemDataRole.ToolTipRole)
    assert win.tree_widget.select_name("features.8")
    label = win.details.badges_label
    assert label.isVisible()
    assert "dead units" in label.text() and "100.0% exact zeros" in label.text() and "probe batch" in label.text()
    assert "step -1" not in label.text()
    assert win.tree_widget.select_name("features.5")  # a healthy module: no badge lines
    assert not label.isVisible() and label.text() == ""


def test_exploding_badge_in_details_names_value_and_step(main_window, qtbot):
    win, panel = main_window
    with torch.no_grad():
        for p in win.model.classifier.parameters():
            p.mul_(1e5)  # the loss gradient reaching the backbone is scaled up by 1e5
    assert win.tree_widget.select_name("features.7")
    _start(qtbot, panel, epochs=50)
    qtbot.waitUntil(lambda: any(b.kind == "exploding_grad" for b in win.tree_model.badges("features.7")),
                    timeout=RUN_TIMEOUT_MS)
    _stop(qtbot, panel)
    badge = next(b for b in win.tree_model.badges("features.7") if b.kind == "exploding_grad")
    text = win.details.badges_label.text()
    assert win.details.badges_label.isVisible()
    assert "exploding gradient" in text and f"step {badge.step}" in text and f"{badge.value:.3g}" in text
    assert badge.step >= 0


def test_frozen_then_unfrozen_through_the_training_panel(main_window, qtbot):
    """Freeze the backbone in the window, train, unfreeze it mid-run: the probes track it from then on."""
    win, panel = main_window
    probes = win.probes_panel
    _probe_from_tree(win, "features")
    win.set_trainable("features", False)
    _look_at(win, probes.grads)
    _start(qtbot, panel, epochs=200)
    grads = probes.grads

    def states():
        return {r.module: r.state for r in grads.layers}

    qtbot.waitUntil(lambda: states().get("features.0") == "frozen", timeout=RUN_TIMEOUT_MS)
    st = states()
    assert [m for m, s in st.items() if s == "frozen"] == ["features.0", "features.1", "features.3",
                                                          "features.4", "features.7"]
    assert st["classifier"] == "trainable"
    assert len(grads.frozen_bars.opts["x"]) == 5 and len(grads.bars.opts["x"]) == 1  # frozen, not 0
    assert "features" not in grads.history  # no norm while frozen: no point, never a 0
    assert "5 frozen" not in grads.label.text() and "10 frozen" in grads.label.text()  # 10 parameters

    win.set_trainable("features", True)  # queued on the trainer: applied at the next step boundary
    qtbot.waitUntil(lambda: states().get("features.0") == "trainable", timeout=RUN_TIMEOUT_MS)
    assert all(s == "trainable" for s in states().values())
    assert len(grads.frozen_bars.opts["x"]) == 0 and len(grads.bars.opts["x"]) == 6
    qtbot.waitUntil(lambda: "features" in grads.history, timeout=RUN_TIMEOUT_MS)
    assert grads.history["features"]["norm"][0] > 0
    _stop(qtbot, panel)
    assert all(len(m._forward_hooks) == 0 for m in win.model.modules())


def test_a_parameter_row_selected_in_the_tree_is_the_weight_histograms_parameter(main_window, qtbot):
    win, _ = main_window
    probes = win.probes_panel
    _probe_from_tree(win, "classifier")
    assert probes.weight_parameter() == "classifier.weight"
    win.tree_widget.view.expandAll()
    assert win.tree_widget.select_name("features.3.weight")
    assert probes.weight_parameter() == "features.3.weight"
    _look_at(win, probes.weights)
    assert probes.weights.shown()[0] == "features.3.weight"
    assert "features.3.weight" in probes.weights.parameters()


def test_probed_modules_are_marked_in_the_tree(qtbot):
    """Probing from the panel marks the tree row (bold name + tooltip line); unprobing clears it."""
    from PySide6.QtCore import Qt

    from workbench.ui.main_window import MainWindow

    win = MainWindow()
    qtbot.addWidget(win)
    tree = win.tree_model
    idx = tree.index_for_name("features.2")
    assert idx.isValid()
    assert tree.data(idx, Qt.ItemDataRole.FontRole.value) is None
    with qtbot.waitSignal(tree.dataChanged, timeout=2000):
        win.probes_panel.toggle_probe("features.2")
    font = tree.data(idx, Qt.ItemDataRole.FontRole.value)
    assert font is not None and font.bold()
    assert "probed" in tree.data(idx, Qt.ItemDataRole.ToolTipRole.value)
    win.probes_panel.toggle_probe("features.2")
    assert tree.data(idx, Qt.ItemDataRole.FontRole.value) is None


def _hover(widget, pos) -> None:
    """A real mouse-move event (QTest.mouseMove only moves the cursor, which sends none offscreen)."""
    from PySide6.QtCore import QEvent, QPointF
    from PySide6.QtGui import QMouseEvent
    from PySide6.QtWidgets import QApplication

    local = QPointF(pos)
    event = QMouseEvent(QEvent.Type.MouseMove, local, widget.mapToGlobal(local), Qt.MouseButton.NoButton,
                        Qt.MouseButton.NoButton, Qt.KeyboardModifier.NoModifier)
    QApplication.sendEvent(widget, event)


def test_layer_heatmaps_fill_during_a_run_and_a_cell_click_selects_the_module(main_window, qtbot, tmp_path):
    """The Layers tab: every leaf of the demo over the run; hover names the cell; a click selects it in the tree."""
    from PySide6.QtGui import QImage

    win, panel = main_window
    view = win.probes_panel.layers
    # every 10th of the demo's 92 steps: ~10 columns whatever the machine's load (a time budget gave fewer than 2
    # on a loaded machine; the cadence's budget law is tested in tests/core/probe)
    win.probes_panel.training_callback().set_cadence(10)
    _start(qtbot, panel, epochs=4)
    qtbot.waitUntil(lambda: not panel.is_running(), timeout=RUN_TIMEOUT_MS)
    qtbot.waitUntil(lambda: len(view.history) >= 2, timeout=10_000)
    win.probes_panel.tabs.setCurrentWidget(view)
    view.refresh()
    assert view.history.names == ["features.0", "features.1", "features.2", "features.3", "features.4",
                                  "features.5", "features.6", "features.7", "features.8", "features.9",
                                  "features.10", "classifier"]  # execution order
    step = int(view.history.steps()[-1])
    pos = view.plot.mapFromScene(view.cell_center("features.3", step))
    _hover(view.plot.viewport(), pos)
    assert view.hover.text().startswith(f"features.3 (Conv2d) · step {step:,} · activation mean ")
    qtbot.mouseClick(view.plot.viewport(), Qt.MouseButton.LeftButton, pos=pos)
    assert win.tree_widget.current_node().name == "features.3"
    assert win.probes_panel.probed() == ["features.3"]

    view.set_quantity("act_zeros")
    view.filter_edit.setText("relu")
    assert [view.history.names[i] for i in view.rows] == ["features.2", "features.5", "features.8"]
    png = view.export_png(tmp_path / "zeros.png")
    image = QImage(str(png))
    assert image.width() > 200 and image.height() > 100
    csv_path = view.export_csv(tmp_path / "layers.csv")
    lines = csv_path.read_text().splitlines()
    assert lines[0] == "step,module,quantity,value" and len(lines) > 12 * 3


def test_at_1280x800_the_activation_histogram_keeps_its_height_and_the_page_scrolls(window, qtbot):
    """The histogram was squashed to ~40 px (its count ticks 100/200/300 overlapped) beside tiny feature maps."""
    from PySide6.QtWidgets import QBoxLayout, QTabWidget

    from workbench.ui.probe.panel import MIN_MAP_HEIGHT, MIN_PLOT_HEIGHT

    win = window
    win.resize(1280, 800)
    win.show()
    qtbot.waitExposed(win)
    win.apply_default_dock_sizes()
    win.probes_dock.raise_()
    probes = win.probes_panel
    probes.tabs.setCurrentIndex(0)
    qtbot.wait(50)
    assert (win.width(), win.height()) == (1280, 800)
    page = probes.tabs.widget(0)
    scroll = QTabWidget.widget(probes.tabs, 0)  # the page's scroll area (ScrollingTabs.widget gives the page)
    assert probes.hist_plot.height() >= max(120, MIN_PLOT_HEIGHT)
    assert probes.map_plot.height() >= MIN_MAP_HEIGHT
    # the tab is narrow: the feature maps go under the histogram, and the page scrolls to them
    assert page.width() < 560 and page.layout().itemAt(0).layout().direction() == QBoxLayout.Direction.TopToBottom
    assert probes.map_plot.y() >= probes.hist_plot.y() + probes.hist_plot.height()
    assert scroll.verticalScrollBar().maximum() > 0
    # a wide tab puts them side by side again
    page.resize(900, page.height())
    assert probes.map_plot.parentWidget() is page
    qtbot.waitUntil(lambda: page.layout().itemAt(0).layout().direction() == QBoxLayout.Direction.LeftToRight)
