"""The Graph tab can take the window (Maximize, then Restore) and Fit shows the whole graph, not the selection."""

from __future__ import annotations

from PySide6.QtCore import Qt
from PySide6.QtWidgets import QToolButton


def test_maximize_gives_the_graph_the_window_and_fit_shows_all_of_it(shown, qtbot):
    win = shown
    win.graph_dock.raise_()
    panel = win.graph_panel
    qtbot.waitUntil(lambda: panel.graph is not None, timeout=30_000)
    before = win.graph_dock.size()
    qtbot.mouseClick(panel.maximize_button, Qt.MouseButton.LeftButton)
    others = [d for d in win._docks() if d is not win.graph_dock]
    qtbot.waitUntil(lambda: win.graph_dock.height() >= 0.85 * win.height() and win.graph_dock.width() >= 0.95 * win.width())
    assert all(d.isHidden() for d in others) and panel.maximize_button.text() == "Restore"
    assert win.graph_dock.width() > before.width() and win.graph_dock.height() > before.height()
    win.save_layout()  # a close while maximized keeps the docks' own layout for the next start
    assert win.settings.value("windowState") == win.maximizer.state_before

    # Fit: the whole graph, even with a module selected
    name = next(n.name for n in panel.view_graph.nodes if n.op == "module")
    panel.select_module(name, center=True)
    panel.view.zoom_by(4.0)
    qtbot.mouseClick(panel.findChild(QToolButton, "graphFit"), Qt.MouseButton.LeftButton)
    shown_rect = panel.view.mapFromScene(panel.scene.itemsBoundingRect()).boundingRect()
    assert panel.view.viewport().rect().contains(shown_rect), (shown_rect, panel.view.viewport().rect())

    qtbot.mouseClick(panel.maximize_button, Qt.MouseButton.LeftButton)  # Restore: every dock back
    assert not any(d.isHidden() for d in others)
    assert win.model_dock.isVisible() and panel.maximize_button.text() == "Maximize"
    qtbot.waitUntil(lambda: win.graph_dock.size() == before)
