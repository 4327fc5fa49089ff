"""A window whose steering another window took over watches read-only: its steering controls are disabled, saying
why, and enabled again when it takes the steering back. A run's notices (a failed write) show in the status bar."""

from __future__ import annotations

import pytest
import torch
from PySide6.QtCore import QEvent, QPointF, Qt
from PySide6.QtGui import QMouseEvent
from PySide6.QtWidgets import QStyleOptionViewItem
from torch import nn

import workbench
from tests.ui.helpers import RecordingPrompts
from workbench.ui.main_window import MainWindow
from workbench.ui.model.tree_model import COL_TRAIN
from workbench.ui.train.steering import READ_ONLY_TIP

pytestmark = [pytest.mark.timeout(120), pytest.mark.usefixtures("no_dangling_qthreads")]


def _steering_controls(window) -> list:
    panel = window.training_panel
    return [panel.pause_action, panel.stop_action, panel.save_button, panel.settings.lr_spin]


def _train_cell(window):
    """The Train cell of the model's first row (the root's first child), in the view's (proxy) indexes."""
    view = window.tree_widget.view
    root = view.model().index(0, 0)
    return view.model().index(0, COL_TRAIN, root)


def test_a_window_whose_steering_was_taken_watches_read_only_until_it_takes_it_back(qtbot, tmp_path):
    model = nn.Sequential(nn.Linear(4, 3), nn.ReLU(), nn.Linear(3, 2))
    att = workbench.attach(model, torch.optim.SGD(model.parameters(), lr=0.1), run_dir=tmp_path / "run",
                           name="taken")
    att.step(1.0)
    att.flush()
    window = MainWindow(prompts=RecordingPrompts())
    qtbot.addWidget(window)
    window.show()
    panel, tree = window.training_panel, window.tree_widget
    other = None
    try:
        assert window.attach_to(att.address, att.token)
        assert all(w.isEnabled() for w in _steering_controls(window)) and tree.read_only_reason() == ""

        other = workbench.connect(att.address, att.token, steer="take")  # a second window takes over
        qtbot.waitUntil(lambda: not panel.pause_action.isEnabled(), timeout=30_000)
        assert not any(w.isEnabled() for w in _steering_controls(window))
        assert panel.pause_action.toolTip().startswith(READ_ONLY_TIP) and panel.save_button.toolTip().startswith(
            READ_ONLY_TIP) and panel.settings.lr_spin.toolTip() == READ_ONLY_TIP
        assert tree.read_only_reason() == READ_ONLY_TIP
        cell = _train_cell(window)
        press = QMouseEvent(QEvent.Type.MouseButtonRelease, QPointF(5, 5), QPointF(5, 5), Qt.MouseButton.LeftButton,
                            Qt.MouseButton.LeftButton, Qt.KeyboardModifier.NoModifier)
        before = cell.data(Qt.ItemDataRole.CheckStateRole)
        assert tree._train_cells.editorEvent(press, tree.view.model(), QStyleOptionViewItem(), cell)  # taken
        assert cell.data(Qt.ItemDataRole.CheckStateRole) == before and model[0].weight.requires_grad
        menu = tree.context_menu(tree.view.model().index(0, 0, tree.view.model().index(0, 0)))
        freezes = [a for a in menu.actions() if a.text() in ("Freeze", "Unfreeze")]
        assert freezes and not any(a.isEnabled() for a in freezes) and freezes[0].toolTip() == READ_ONLY_TIP
        menu.deleteLater()

        assert window.detach()  # ...and this window takes the steering back
        qtbot.waitUntil(lambda: not panel.is_running(), timeout=30_000)
        assert window.attach_to(att.address, att.token, steer="take")
        assert all(w.isEnabled() for w in _steering_controls(window)) and tree.read_only_reason() == ""
        assert not panel.pause_action.toolTip().startswith(READ_ONLY_TIP)
        qtbot.waitUntil(lambda: not other.steering, timeout=30_000)
    finally:
        panel.shutdown(ask=False)
        if other is not None:
            other.close()
        att.close()


def test_a_runs_notice_shows_in_the_status_bar(qtbot):
    from workbench.core.train.events import Notice

    window = MainWindow(prompts=RecordingPrompts())
    qtbot.addWidget(window)
    text = "metrics.csv row not written: No space left on device (/r/metrics.csv); free space on /r; training goes on"
    window.training_panel._on_event(Notice("write_failed", text, "/r/metrics.csv"))  # as a run's event arrives
    assert window.statusBar().currentMessage() == text
    assert window.training_panel.steering.reason == ""  # a write's notice changes no steering
