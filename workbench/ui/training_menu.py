"""The Training menu: Start (F5), Pause / Resume (F6), Stop (Shift+F5), Find LR (Ctrl+L).

The actions are the :class:`~workbench.ui.train.panel.TrainingPanel`'s own
(``panel.run_actions()``): the run bar's buttons show and trigger the very same
QAction objects, so text, tooltip, shortcut and enabled state are defined once,
in :mod:`workbench.ui.train.run_bar`. The shortcuts are window-wide (they work with the Training dock
closed, through the menu bar).
"""

from __future__ import annotations

from PySide6.QtCore import QObject
from PySide6.QtWidgets import QMenuBar

from workbench.ui.train.run_bar import RUN_SHORTCUTS as SHORTCUTS

__all__ = ["SHORTCUTS", "TrainingMenu"]


class TrainingMenu(QObject):
    """Adds the "&Training" menu to ``menu_bar`` listing ``panel``'s run actions.

    Parameters
    ----------
    menu_bar : QMenuBar
    panel : TrainingPanel
        Needs ``start_action``, ``pause_action``, ``stop_action`` and ``find_lr_action``.

    Attributes
    ----------
    start_action, pause_action, stop_action, find_lr_action : QAction
        The panel's actions (objectNames ``startAction``, ``pauseAction``, ``stopAction``, ``findLrAction``).
    """

    def __init__(self, menu_bar: QMenuBar, panel):
        super().__init__(menu_bar)
        self.menu = menu_bar.addMenu("&Training")
        self.menu.setObjectName("trainingMenu")
        self.start_action = panel.start_action
        self.pause_action = panel.pause_action
        self.stop_action = panel.stop_action
        self.find_lr_action = panel.find_lr_action
        self.menu.addActions([self.start_action, self.pause_action, self.stop_action])
        self.menu.addSeparator()
        self.menu.addAction(self.find_lr_action)
