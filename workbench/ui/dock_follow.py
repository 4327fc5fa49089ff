"""A dock that comes forward in its tab group when asked, unless the user pinned another tab of the group.

The Details tab follows the tree's selection this way: selecting a module shows
its tensors, but a Probes, Runs or Graph tab the user clicked stays in front
until the user clicks the Details tab again.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from PySide6.QtCore import QEvent, QObject, Qt
from PySide6.QtWidgets import QDockWidget, QMainWindow, QTabBar

__all__ = ["FollowingDock"]


class FollowingDock(QObject):
    """Raises ``dock`` on :meth:`follow` unless another dock of its tab group is pinned.

    A dock is pinned when the user clicks its tab in the group of ``dock`` (or
    :meth:`pin` names it); clicking the tab of ``dock`` itself unpins. Only the
    window's dock tab bars count: a raise by the program pins nothing.

    Parameters
    ----------
    window : QMainWindow
        Holds the docks (the parent of this object).
    dock : QDockWidget
        The dock that follows (the Details dock).

    Attributes
    ----------
    pinned : QDockWidget or None
        The dock the user chose instead of ``dock``, or None.
    """

    def __init__(self, window: QMainWindow, dock: QDockWidget):
        super().__init__(window)
        self._window = window
        self._dock = dock
        self.pinned: QDockWidget | None = None
        self._held = 0
        for bar in window.findChildren(QTabBar, options=Qt.FindChildOption.FindDirectChildrenOnly):
            self._watch(bar)
        window.installEventFilter(self)  # the dock tab bars the window makes later (ChildPolished)

    def follow(self) -> None:
        """Bring the dock forward, unless the user pinned another tab of its group."""
        if self._held or self.pinned is not None and self.pinned in self._window.tabifiedDockWidgets(self._dock):
            return
        self._dock.raise_()

    def pin(self, dock: QDockWidget | None) -> None:
        """Keep ``dock`` in front of the following one (None, or the following dock itself: unpin)."""
        self.pinned = None if dock is self._dock else dock

    @contextmanager
    def held(self) -> Iterator[None]:
        """No following inside (a selection asked from another tab of the group, which stays in front)."""
        self._held += 1
        try:
            yield
        finally:
            self._held -= 1

    def eventFilter(self, obj: QObject, event: QEvent) -> bool:  # noqa: N802 - Qt override
        """Watch each dock tab bar the window gains."""
        if obj is self._window and event.type() == QEvent.Type.ChildPolished:
            child = event.child()
            if isinstance(child, QTabBar) and child.parent() is self._window:
                self._watch(child)
        return False

    def _watch(self, bar: QTabBar) -> None:
        if not bar.property("followingDockWatched"):
            bar.setProperty("followingDockWatched", True)
            bar.tabBarClicked.connect(self._on_tab_clicked)

    def _on_tab_clicked(self, index: int) -> None:
        """A click on a dock tab: the dock of that tab is the user's choice, when it shares the group."""
        bar = self.sender()
        if not isinstance(bar, QTabBar) or index < 0:
            return
        title = bar.tabText(index)
        group = (self._dock, *self._window.tabifiedDockWidgets(self._dock))
        clicked = next((dock for dock in group if dock.windowTitle() == title), None)
        if clicked is not None:
            self.pin(clicked)
