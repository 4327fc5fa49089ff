"""The run bar: Start (F5), Pause / Resume (F6), Stop (Shift+F5), Save now, Find LR (Ctrl+L) and, where CUDA is,
Empty CUDA cache in one row.

Each run action is one QAction (:class:`RunBar` builds them on the panel, so their
keys work in the panel alone too); the bar's buttons show and trigger those
actions, and the window's Training menu lists the very same objects, so text,
tooltip, shortcut and enabled state are defined here once.
"""

from __future__ import annotations

from typing import Callable

from PySide6.QtCore import Qt
from PySide6.QtGui import QAction, QKeySequence
from PySide6.QtWidgets import QHBoxLayout, QPushButton, QVBoxLayout, QWidget

from workbench.ui.train.fit_line import FitLine

__all__ = ["RunBar", "RUN_SHORTCUTS", "START_TIP", "FIND_LR_TIP", "PAUSE_TIP", "STOP_TIP", "SAVE_TIP", "CACHE_TIP"]

#: Tooltips of Start and Find LR (a model that cannot be trained puts the reason first).
START_TIP = "Train the model shown with these settings (F5)"
FIND_LR_TIP = ("Learning-rate range test on a copy of the model with these settings; "
               "the model itself is not changed (Ctrl+L)")
PAUSE_TIP = "Pause at the next step boundary; press again to resume (F6)"
STOP_TIP = "Finish the current step, then stop (the model stays consistent) (Shift+F5)"
SAVE_TIP = "Write a checkpoint into the run folder at the next step boundary"
CACHE_TIP = "torch.cuda.empty_cache(): give cached, unused GPU memory back"
#: Shortcut of each run action, by objectName (the tooltips above name them too).
RUN_SHORTCUTS = {"startAction": "F5", "pauseAction": "F6", "stopAction": "Shift+F5", "findLrAction": "Ctrl+L"}


def _action(owner: QWidget, text: str, icon_text: str, name: str, tip: str, slot: Callable[[], object]) -> QAction:
    act = QAction(text, owner, objectName=name)
    act.setIconText(icon_text)  # the button's text; the menu shows ``text``
    act.setShortcut(QKeySequence(RUN_SHORTCUTS[name]))
    act.setShortcutContext(Qt.ShortcutContext.WindowShortcut)
    act.setToolTip(tip)
    act.setStatusTip(tip)
    act.triggered.connect(slot)
    return act


def action_button(action: QAction, name: str) -> QPushButton:
    """A QPushButton that triggers ``action`` and shows it: its icon text, tooltip and enabled state.

    The action is the one owner (a QToolButton's ``setDefaultAction`` in
    push-button form): setting the action's state changes the button, never
    the other way round.
    """
    button = QPushButton(objectName=name)

    def follow() -> None:
        button.setText(action.iconText())
        button.setToolTip(action.toolTip())
        button.setEnabled(action.isEnabled())

    follow()
    action.changed.connect(follow)
    button.clicked.connect(lambda: action.isEnabled() and action.trigger())
    return button


class RunBar(QWidget):
    """The row of run buttons above the settings and plots (objectName ``runBar``): always in view.

    Parameters
    ----------
    owner : QWidget
        Parent of the actions (their keys work wherever it has focus).
    start, pause_or_resume, stop, save, find_lr, empty_cache : callable
        What each action / button does (called with no argument).

    Attributes
    ----------
    start_action, pause_action, stop_action, find_lr_action : QAction
        objectNames ``startAction``, ``pauseAction``, ``stopAction``, ``findLrAction``.
    start_button, pause_button, stop_button, save_button, lr_find_button, cache_button : QPushButton
        objectNames ``startButton``, ``pauseButton``, ``stopButton``, ``saveNowButton``, ``findLrButton``,
        ``emptyCacheButton`` (in the bar, not in a collapsed section: it is for a CUDA run that is going on;
        hidden where CUDA is not, :meth:`show_cuda`).
    fit_line : FitLine
        objectName ``fitLine``, under the buttons: the memory a training step needs against the device's,
        before Start (hidden until the window's memory feed gives it a line).
    """

    def __init__(self, owner: QWidget, start, pause_or_resume, stop, save, find_lr, empty_cache):
        super().__init__(owner, objectName="runBar")
        self.start_action = _action(owner, "&Start", "Start (F5)", "startAction", START_TIP, start)
        self.pause_action = _action(owner, "&Pause", "Pause", "pauseAction", PAUSE_TIP, pause_or_resume)
        self.stop_action = _action(owner, "S&top", "Stop", "stopAction", STOP_TIP, stop)
        self.find_lr_action = _action(owner, "&Find LR…", "Find LR…", "findLrAction", FIND_LR_TIP, find_lr)
        self.start_button = action_button(self.start_action, "startButton")
        self.pause_button = action_button(self.pause_action, "pauseButton")
        self.stop_button = action_button(self.stop_action, "stopButton")
        self.save_button = QPushButton("Save now", objectName="saveNowButton")
        self.save_button.setToolTip(SAVE_TIP)
        self.save_button.clicked.connect(save)
        self.lr_find_button = action_button(self.find_lr_action, "findLrButton")
        self.cache_button = QPushButton("Empty CUDA cache", objectName="emptyCacheButton")
        self.cache_button.setToolTip(CACHE_TIP)
        self.cache_button.clicked.connect(lambda: empty_cache())
        self.cache_button.setVisible(False)
        self.fit_line = FitLine(self)
        rows = QVBoxLayout(self)
        rows.setContentsMargins(0, 0, 0, 2)
        rows.setSpacing(2)
        bar = QHBoxLayout()
        bar.setContentsMargins(0, 0, 0, 0)
        rows.addLayout(bar)
        rows.addWidget(self.fit_line)
        for button in (self.start_button, self.pause_button, self.stop_button, self.save_button,
                       self.lr_find_button):
            bar.addWidget(button)
        bar.addStretch(1)
        bar.addWidget(self.cache_button)

    def show_cuda(self, available: bool) -> None:
        """Show Empty CUDA cache where a CUDA device is (it means nothing elsewhere)."""
        self.cache_button.setVisible(bool(available))

    def run_actions(self) -> list[QAction]:
        """Start, Pause / Resume, Stop and Find LR, in menu order (the Training menu lists them)."""
        return [self.start_action, self.pause_action, self.stop_action, self.find_lr_action]

    def show_state(self, running: bool, paused: bool, untrainable: str | None, read_only: str = "") -> None:
        """Enable what applies: Start and Find LR when idle with a trainable model (else the reason
        leads their tooltips), Pause / Resume, Stop and Save now during a run, unless this window only
        watches it (``read_only``, the reason: another window steers the attached run; it leads their tooltips)."""
        can = not running and untrainable is None
        for action, tip in ((self.start_action, START_TIP), (self.find_lr_action, FIND_LR_TIP)):
            action.setEnabled(can)
            action.setToolTip(tip if untrainable is None or running else f"{untrainable}\n\n{tip}")
        steer = running and not read_only
        self.stop_action.setEnabled(steer)
        self.pause_action.setEnabled(steer)
        self.save_button.setEnabled(steer)
        self.cache_button.setEnabled(not (running and read_only))
        for widget, tip in ((self.stop_action, STOP_TIP), (self.pause_action, PAUSE_TIP),
                            (self.save_button, SAVE_TIP), (self.cache_button, CACHE_TIP)):
            widget.setToolTip(f"{read_only}\n\n{tip}" if running and read_only else tip)
        resume = running and paused
        self.pause_action.setText("&Resume" if resume else "&Pause")
        self.pause_action.setIconText("Resume" if resume else "Pause")
