"""The Training menu: Start (F5), Pause / Resume (F6), Stop (Shift+F5), Find LR (Ctrl+L).

Each action calls the :class:`~workbench.ui.train.panel.TrainingPanel`'s public
method and is enabled exactly when the panel's button is: an event filter on
the button follows its ``EnabledChange``. The shortcuts live on these actions
(window-wide, so they work with the Training dock closed); the Start button's
own F5 shortcut is cleared here, or Qt would see an ambiguous F5 and do nothing.
"""

from __future__ import annotations

from PySide6.QtCore import QEvent, QObject
from PySide6.QtGui import QAction, QKeySequence
from PySide6.QtWidgets import QAbstractButton, QMenuBar

__all__ = ["SHORTCUTS", "TrainingMenu"]

#: Shortcut of each action, by objectName (the buttons' tooltips name them too).
SHORTCUTS = {"startAction": "F5", "pauseAction": "F6", "stopAction": "Shift+F5", "findLrAction": "Ctrl+L"}


class TrainingMenu(QObject):
    """Adds the "&Training" menu to ``menu_bar`` for ``panel``.

    Parameters
    ----------
    menu_bar : QMenuBar
    panel : TrainingPanel
        Needs ``start()``, ``pause()``, ``resume()``, ``is_paused()``, ``stop()``,
        ``lr_finder.start()`` and the buttons ``start_button``, ``pause_button``,
        ``stop_button``, ``lr_find_button``.

    Attributes
    ----------
    start_action, pause_action, stop_action, find_lr_action : QAction
        objectNames ``startAction``, ``pauseAction``, ``stopAction``, ``findLrAction``.
    """

    def __init__(self, menu_bar: QMenuBar, panel):
        super().__init__(menu_bar)
        self._panel = panel
        self.menu = menu_bar.addMenu("&Training")
        self.menu.setObjectName("trainingMenu")
        self.start_action = self._add("&Start", "startAction", panel.start_button, lambda: panel.start())
        self.pause_action = self._add("&Pause", "pauseAction", panel.pause_button, self._on_pause_triggered)
        self.stop_action = self._add("S&top", "stopAction", panel.stop_button, lambda: panel.stop())
        self.menu.addSeparator()
        self.find_lr_action = self._add("&Find LR…", "findLrAction", panel.lr_find_button,
                                        lambda: panel.lr_finder.start())
        panel.start_button.setShortcut(QKeySequence())  # F5 is the action's now
        self._buttons = {panel.start_button: self.start_action, panel.pause_button: self.pause_action,
                         panel.stop_button: self.stop_action, panel.lr_find_button: self.find_lr_action}
        for button in self._buttons:
            button.installEventFilter(self)
        self.menu.aboutToShow.connect(self.sync)
        panel.runningChanged.connect(self.sync)
        self.sync()

    def _add(self, text: str, name: str, button: QAbstractButton, slot) -> QAction:
        action = self.menu.addAction(text)
        action.setObjectName(name)
        action.setShortcut(QKeySequence(SHORTCUTS[name]))
        action.setStatusTip(button.toolTip().split("\n\n")[-1])
        action.triggered.connect(slot)
        return action

    def sync(self, *_args) -> None:
        """Every action enabled as its button is; Pause reads Resume while the run is paused."""
        for button, action in self._buttons.items():
            action.setEnabled(button.isEnabled())
        self.pause_action.setText("&Resume" if self._panel.is_paused() else "&Pause")

    def eventFilter(self, watched, event) -> bool:  # noqa: N802 - Qt override
        """Follow a button's enabled state (and Pause's label) the moment it changes."""
        if event.type() == QEvent.Type.EnabledChange and watched in self._buttons:
            self._buttons[watched].setEnabled(watched.isEnabled())
            self.pause_action.setText("&Resume" if self._panel.is_paused() else "&Pause")
        return False

    def _on_pause_triggered(self) -> None:
        if self._panel.is_paused():
            self._panel.resume()
        else:
            self._panel.pause()
        self.sync()
