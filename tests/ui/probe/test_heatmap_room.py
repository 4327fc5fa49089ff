"""The Layers heatmap can take the window at 1280x800 (Maximize, the plots' room included), and Restore brings
every dock back where it was."""

from __future__ import annotations

from PySide6.QtCore import Qt


def test_maximize_gives_the_heatmap_the_window_and_restore_brings_the_layout_back(shown, qtbot):
    win = shown
    panel = win.probes_panel
    heatmap = panel.layers
    win.probes_dock.raise_()
    panel.tabs.setCurrentWidget(heatmap)
    qtbot.waitUntil(heatmap.plot.isVisible)
    docked, dock_size = heatmap.plot.height(), win.probes_dock.size()
    others = [d for d in win._docks() if d is not win.probes_dock]
    shown_before = [d for d in others if d.isVisible()]
    panel.tabs.setCurrentIndex(0)  # Maximize brings the Layers tab forward

    qtbot.mouseClick(heatmap.maximize_button, Qt.MouseButton.LeftButton)
    qtbot.waitUntil(lambda: heatmap.plot.height() >= 0.45 * win.height())
    assert panel.tabs.currentWidget() is heatmap and heatmap.maximize_button.text() == "Restore"
    assert all(d.isHidden() for d in others) and not win.training_dock.isVisible()
    assert heatmap.plot.height() > docked and not panel.probed_list.isVisible()  # its width goes to the steps
    win.save_layout()  # a close while maximized keeps the docks' own layout for the next start
    assert win.settings.value("windowState") == win.maximizer.state_before

    qtbot.mouseClick(heatmap.maximize_button, Qt.MouseButton.LeftButton)  # Restore
    assert all(d.isVisible() for d in shown_before) and panel.probed_list.isVisible()
    assert heatmap.maximize_button.text() == "Maximize" and win.maximizer.state_before is None
    qtbot.waitUntil(lambda: win.probes_dock.size() == dock_size)
