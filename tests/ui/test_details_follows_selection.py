"""Selecting a module brings the Details tab forward, unless the user clicked another tab of its group
(``ui.dock_follow.FollowingDock``)."""

from __future__ import annotations

from PySide6.QtCore import Qt
from PySide6.QtWidgets import QTabBar


def _tabs(win) -> QTabBar:
    """The window's tab bar of the Details group."""
    bars = [bar for bar in win.findChildren(QTabBar, options=Qt.FindChildOption.FindDirectChildrenOnly)
            if bar.isVisible() and "Details" in [bar.tabText(i) for i in range(bar.count())]]
    assert len(bars) == 1, bars
    return bars[0]


def _front(win) -> str:
    bar = _tabs(win)
    return bar.tabText(bar.currentIndex())


def _click_tab(qtbot, win, title: str) -> None:
    bar = _tabs(win)
    index = next(i for i in range(bar.count()) if bar.tabText(i) == title)
    qtbot.mouseClick(bar, Qt.MouseButton.LeftButton, pos=bar.tabRect(index).center())
    assert _front(win) == title


def _click_row(qtbot, win, name: str) -> None:
    """A user's click on the tree row of module ``name``."""
    view = win.tree_widget.view
    index = win.tree_widget.proxy.mapFromSource(win.tree_model.index_for_name(name))
    view.scrollTo(index)
    qtbot.mouseClick(view.viewport(), Qt.MouseButton.LeftButton, pos=view.visualRect(index).center())
    assert win.tree_widget.current_node().name == name


def test_a_selection_brings_details_forward_until_another_tab_is_clicked(shown, qtbot):
    assert _front(shown) == "Probes"  # the default layout: no selection yet
    _click_row(qtbot, shown, "features.0")
    assert _front(shown) == "Details" and shown.details_dock.visibleRegion().isEmpty() is False
    _click_tab(qtbot, shown, "Runs")  # the user's choice: pinned
    _click_row(qtbot, shown, "features.3")
    assert _front(shown) == "Runs"
    assert "features.3" in shown.details.heading.text()  # shown there all the same, for when it comes back
    shown.tree_widget.select_name("features.0")
    assert _front(shown) == "Runs"
    _click_tab(qtbot, shown, "Details")  # unpinned
    shown.probes_dock.raise_()  # a raise by the program pins nothing
    assert _front(shown) == "Probes"
    _click_row(qtbot, shown, "features.3")
    assert _front(shown) == "Details"


def test_a_module_revealed_from_the_probes_keeps_the_probes_in_front(shown):
    """A heatmap cell asks the session to reveal its module: the tree selects it, the Probes tab stays."""
    assert _front(shown) == "Probes"
    shown.session.reveal("features.0")
    assert shown.tree_widget.current_node().name == "features.0"
    assert _front(shown) == "Probes"
    shown.tree_widget.select_name("features.3")  # the next selection in the tree: Details
    assert _front(shown) == "Details"
