"""One dock alone in the window, then every dock back: the Graph's and the Layers heatmap's Maximize / Restore.

:class:`MaximizeButton` is the button a panel shows (checkable, "Maximize" /
"Restore", ``maximizeRequested(bool)``); :class:`DockMaximizer` is what the
window does with the request: keep ``saveState()``, hide every other dock, and
on Restore put the kept state back. A close while a dock is maximized saves the
kept layout (:attr:`DockMaximizer.state_before`), so the next start shows every
dock.
"""

from __future__ import annotations

from typing import Callable

from PySide6.QtCore import QByteArray, QObject, Signal
from PySide6.QtWidgets import QDockWidget, QMainWindow, QToolButton

__all__ = ["DockMaximizer", "MaximizeButton"]


class MaximizeButton(QToolButton):
    """A checkable "Maximize" tool button that reads "Restore" while its dock has the window.

    Signals
    -------
    maximizeRequested(bool)
        The user pressed it: the dock wants the whole window (True) or its place back (False).
    """

    maximizeRequested = Signal(bool)

    def __init__(self, object_name: str, tool_tip: str, parent=None):
        super().__init__(parent, text="Maximize", objectName=object_name, checkable=True, toolTip=tool_tip)
        self.toggled.connect(self._on_toggled)

    def set_maximized(self, flag: bool) -> None:
        """Show ``flag`` (the window's state) without asking the window again."""
        self.blockSignals(True)
        self.setChecked(flag)
        self.blockSignals(False)
        self.setText("Restore" if flag else "Maximize")

    def _on_toggled(self, flag: bool) -> None:
        self.setText("Restore" if flag else "Maximize")
        self.maximizeRequested.emit(flag)


class DockMaximizer(QObject):
    """Gives one dock of ``window`` the whole window, and puts the layout back.

    Parameters
    ----------
    window : QMainWindow
    docks : callable
        ``docks()``: every dock of the window (those hidden while one is maximized).

    Signals
    -------
    changed(object)
        The dock that now has the window, or None (every dock back): the panels' buttons follow.
    """

    changed = Signal(object)

    def __init__(self, window: QMainWindow, docks: Callable[[], list[QDockWidget]]):
        super().__init__(window)
        self._window = window
        self._docks = docks
        #: the layout put aside while a dock is maximized (None: none is)
        self.state_before: QByteArray | None = None
        #: the dock maximized, or None
        self.maximized: QDockWidget | None = None

    def set(self, dock: QDockWidget, flag: bool) -> None:
        """``dock`` alone in the window (``flag``), or every dock back where it was (``not flag``)."""
        if flag and self.state_before is None:
            self.state_before = self._window.saveState()
            for other in self._docks():
                if other is not dock:
                    other.hide()
            dock.setFloating(False)
            dock.show()
            dock.raise_()
            self.maximized = dock
        elif not flag and self.state_before is not None:
            state, self.state_before, self.maximized = self.state_before, None, None
            self._window.restoreState(state)
        self.changed.emit(self.maximized)

    def forget(self) -> None:
        """No dock maximized any more, the layout put aside dropped (View > Reset layout sets its own)."""
        self.state_before = self.maximized = None
        self.changed.emit(None)
