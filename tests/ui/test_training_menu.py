"""Shortcuts of the window, shown in the menus and the buttons' tooltips; the Training menu drives the panel."""

from __future__ import annotations

import pytest
from PySide6.QtCore import Qt

pytestmark = pytest.mark.usefixtures("no_dangling_qthreads")


def _shortcut(window, name: str) -> str:
    action = window.findChild(type(window.reset_layout_action), name)
    assert action is not None, name
    return action.shortcut().toString()


def test_every_shortcut_is_on_its_action_and_named_in_the_button_tooltips(window):
    expected = {"startAction": "F5", "pauseAction": "F6", "stopAction": "Shift+F5", "findLrAction": "Ctrl+L",
                "quitAction": "Ctrl+Q", "documentationAction": "F1"}
    assert {name: _shortcut(window, name) for name in expected} == expected
    menu = window.training_menu.menu
    assert menu.title() == "&Training" and menu in [a.menu() for a in window.menuBar().actions()]
    assert [a.objectName() for a in menu.actions() if a.objectName()] == [
        "startAction", "pauseAction", "stopAction", "findLrAction"]
    panel = window.training_panel
    for button, key in ((panel.start_button, "(F5)"), (panel.pause_button, "(F6)"),
                        (panel.stop_button, "(Shift+F5)"), (panel.lr_find_button, "(Ctrl+L)")):
        assert key in button.toolTip(), button.objectName()
    assert panel.start_button.shortcut().isEmpty()  # F5 is the window's action: one owner, no ambiguity


def test_the_menu_lists_the_panels_own_actions_and_the_buttons_follow_them(window):
    """The menu had QActions of its own that copied the buttons' state through an event filter."""
    panel, menu = window.training_panel, window.training_menu
    assert menu.start_action is panel.start_action and menu.stop_action is panel.stop_action
    assert menu.pause_action is panel.pause_action and menu.find_lr_action is panel.find_lr_action
    assert [a for a in menu.menu.actions() if not a.isSeparator()] == panel.run_actions()
    assert menu.start_action.isEnabled() and menu.find_lr_action.isEnabled()  # the demo trains
    assert not menu.pause_action.isEnabled() and not menu.stop_action.isEnabled()  # nothing runs
    assert panel.start_button.isEnabled() and not panel.stop_button.isEnabled()
    panel.start_action.setEnabled(False)
    assert not panel.start_button.isEnabled()
    panel.stop_action.setEnabled(True)
    assert panel.stop_button.isEnabled()
    panel.start_action.setToolTip("why not (F5)")
    assert panel.start_button.toolTip() == "why not (F5)"  # defined once, on the action


def test_triggering_the_start_action_starts_a_run(window, qtbot, tmp_path):
    panel = window.training_panel
    panel.set_in_process(True, remember=False)
    panel.settings.run_dir_edit.setText(str(tmp_path / "run"))
    panel.settings.epochs_spin.setValue(1)
    with qtbot.waitSignal(panel.runningChanged, timeout=10_000) as started:
        window.training_menu.start_action.trigger()
    assert started.args == [True] and panel.is_running()
    assert not panel.start_action.isEnabled() and not panel.start_button.isEnabled()
    assert panel.stop_action.isEnabled() and panel.stop_button.isEnabled()
    with qtbot.waitSignal(panel.runningChanged, timeout=60_000):
        qtbot.mouseClick(panel.stop_button, Qt.MouseButton.LeftButton)  # the button triggers the same action
    assert not panel.is_running() and panel.start_button.isEnabled()


def test_f5_on_the_training_menu_starts_and_a_disabled_start_ignores_it(window, qtbot, monkeypatch):
    panel = window.training_panel
    calls = []
    monkeypatch.setattr(panel, "start", lambda: calls.append("start") or True)
    monkeypatch.setattr(panel.lr_finder, "start", lambda: calls.append("find lr") or True)
    window.show()
    window.activateWindow()
    qtbot.waitUntil(window.isActiveWindow)  # window shortcuts need the active window
    qtbot.keyClick(window, Qt.Key.Key_F5)
    assert calls == ["start"]
    qtbot.keyClick(window, Qt.Key.Key_L, Qt.KeyboardModifier.ControlModifier)
    assert calls == ["start", "find lr"]
    panel.start_action.setEnabled(False)  # as during a run, or on a weights-only tree
    qtbot.keyClick(window, Qt.Key.Key_F5)
    assert calls == ["start", "find lr"]


def test_f5_f6_shift_f5_start_pause_resume_and_stop_a_real_run(window, qtbot, tmp_path):
    panel, menu = window.training_panel, window.training_menu
    panel.set_in_process(True, remember=False)  # a thread: no training process to start on 2 cores
    panel.settings.run_dir_edit.setText(str(tmp_path / "run"))
    panel.settings.epochs_spin.setValue(50)
    window.show()
    window.activateWindow()
    qtbot.waitUntil(window.isActiveWindow)  # window shortcuts need the active window
    with qtbot.waitSignal(panel.runningChanged, timeout=10_000):
        qtbot.keyClick(window, Qt.Key.Key_F5)
    assert panel.is_running()
    assert not menu.start_action.isEnabled() and menu.pause_action.isEnabled() and menu.stop_action.isEnabled()
    with qtbot.waitSignal(panel.runPaused, timeout=60_000):
        qtbot.keyClick(window, Qt.Key.Key_F6)
    assert panel.is_paused() and menu.pause_action.text() == "&Resume"
    qtbot.keyClick(window, Qt.Key.Key_F6)
    assert not panel.is_paused() and menu.pause_action.text() == "&Pause"
    with qtbot.waitSignal(panel.runningChanged, timeout=60_000) as ended:
        qtbot.keyClick(window, Qt.Key.Key_F5, Qt.KeyboardModifier.ShiftModifier)
    assert ended.args == [False] and panel.last_reason() == "stopped"
    assert menu.start_action.isEnabled() and not menu.stop_action.isEnabled() and not menu.pause_action.isEnabled()
