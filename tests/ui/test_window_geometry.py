"""The window opens at a size that fits the screen, comes back on screen, and View > Reset layout restores the docks.

The laptop checks run the window in a child process whose offscreen platform has
the screens of the test (``QT_QPA_PLATFORM=offscreen:configfile=...``): the
screens of this process cannot change once the QApplication exists.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from PySide6.QtCore import QRect, QSize, Qt
from PySide6.QtGui import QGuiApplication

from tests.ui.helpers import RecordingPrompts
from workbench.ui.main_window import MainWindow
from workbench.ui.window_geometry import fit_rect, is_on_screen

LAPTOP = {"name": "laptop", "x": 0, "y": 0, "width": 1280, "height": 800, "logicalDpi": 96, "dpr": 1}
MONITOR = {"name": "monitor", "x": 1280, "y": 0, "width": 1920, "height": 1080, "logicalDpi": 96, "dpr": 1}

#: Opens the window as ``workbench`` does, optionally moves it to (x, y) and saves the layout, prints its frame.
CHILD = """
import json, sys
from PySide6.QtWidgets import QApplication
from PySide6.QtGui import QGuiApplication
app = QApplication([])
from workbench.ui.qsettings import set_application_names
set_application_names()
from tests.ui.helpers import RecordingPrompts
from workbench.ui.main_window import MainWindow
win = MainWindow(prompts=RecordingPrompts())
win.show()
for _ in range(10):
    app.processEvents()
move = json.loads(sys.argv[1])
if move:
    win.move(*move)
    for _ in range(10):
        app.processEvents()
frame = win.frameGeometry()
available = [s.availableGeometry() for s in QGuiApplication.screens()]
print(json.dumps({"frame": [frame.x(), frame.y(), frame.width(), frame.height()],
                  "available": [[a.x(), a.y(), a.width(), a.height()] for a in available]}))
win.close()  # saves the layout, as quitting does
"""


def _open_in_child(tmp_path, screens: list[dict], move=None) -> dict:
    config = tmp_path / f"screens{len(screens)}.json"
    config.write_text(json.dumps({"windowFrameMargins": True, "screens": screens}))
    env = {**os.environ, "QT_QPA_PLATFORM": f"offscreen:configfile={config}"}
    out = subprocess.run([sys.executable, "-c", CHILD, json.dumps(move)], env=env, capture_output=True, text=True,
                         timeout=120, cwd=os.path.dirname(os.path.dirname(os.path.dirname(__file__))))
    assert out.returncode == 0, out.stderr[-3000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_fit_rect_takes_at_most_nine_tenths_of_a_laptop_screen_and_centres():
    laptop = QRect(0, 30, 1280, 770)  # 1280x800 less a 30 px top panel
    rect = fit_rect(laptop)
    assert laptop.contains(rect)
    assert (rect.width(), rect.height()) == (1152, 693)
    assert abs(rect.center().x() - laptop.center().x()) <= 1 and abs(rect.center().y() - laptop.center().y()) <= 1
    big = QRect(1920, 0, 2560, 1400)  # a second, larger monitor right of the first
    rect = fit_rect(big)
    assert rect.size() == QSize(1500, 900) and big.contains(rect)


def test_the_first_window_fits_a_laptop_screen_and_a_window_left_on_a_gone_monitor_comes_back(tmp_path):
    """It always opened at 1500x900, off a 1280x800 screen."""
    first = _open_in_child(tmp_path, [LAPTOP, MONITOR], move=[2000, 200])  # then moved to the monitor
    laptop = QRect(*first["available"][0])
    frame = QRect(*first["frame"])
    assert frame.x() >= 2000 - 4 and QRect(*first["available"][1]).contains(frame)  # it was on the monitor...
    again = _open_in_child(tmp_path, [LAPTOP, MONITOR])
    assert QRect(*again["frame"]) == frame  # ...and comes back there while the monitor is plugged in
    alone = _open_in_child(tmp_path, [LAPTOP])  # unplugged: on the laptop again
    assert laptop.contains(QRect(*alone["frame"])), alone
    import shutil

    shutil.rmtree(os.environ["WORKBENCH_SETTINGS_DIR"])  # a first launch on the laptop
    fresh = QRect(*_open_in_child(tmp_path, [LAPTOP])["frame"])
    assert laptop.contains(fresh), fresh
    fit = fit_rect(laptop)  # 1152x720 in the middle: nine tenths of the screen
    assert fit.adjusted(-4, -4, 4, 4).contains(fresh) and fresh.width() >= 1148 and fresh.height() >= 690, fresh


def test_a_first_window_on_a_screen_smaller_than_its_docks_need_keeps_its_title_bar_on_screen(qtbot):
    available = QGuiApplication.primaryScreen().availableGeometry()  # offscreen's: 800 px wide
    win = MainWindow(prompts=RecordingPrompts())
    qtbot.addWidget(win)
    win.show()
    qtbot.waitExposed(win)
    least = win.minimumSizeHint()
    assert win.width() == max(fit_rect(available).width(), least.width())
    assert available.contains(win.frameGeometry().topLeft())


def test_a_saved_geometry_off_every_screen_is_pulled_back_on_screen(qtbot):
    win = MainWindow(prompts=RecordingPrompts())
    qtbot.addWidget(win)
    win.show()
    qtbot.waitExposed(win)
    far = QGuiApplication.primaryScreen().virtualGeometry().bottomRight()
    win.move(far.x() + 4000, far.y() + 3000)
    qtbot.waitUntil(lambda: win.x() > far.x())
    win.save_layout()
    again = MainWindow(prompts=RecordingPrompts())
    qtbot.addWidget(again)
    assert is_on_screen(again.frameGeometry())


@pytest.mark.qt_log_ignore("This plugin does not support raise")  # offscreen, on the floating dock's window
def test_reset_layout_shows_and_docks_every_dock_again(qtbot):
    win = MainWindow(prompts=RecordingPrompts())
    qtbot.addWidget(win)
    win.show()
    qtbot.waitExposed(win)
    first_size = win.size()
    win.details_dock.hide()
    win.training_dock.setFloating(True)
    win.resize(first_size.width() + 300, first_size.height() + 200)
    win.close()  # saves the layout
    win = MainWindow(prompts=RecordingPrompts())  # the damaged layout is remembered...
    qtbot.addWidget(win)
    win.show()
    qtbot.waitExposed(win)
    assert not win.details_dock.isVisible() and win.training_dock.isFloating()
    assert win.size() != first_size
    action = win.findChild(type(win.reset_layout_action), "resetLayoutAction")
    assert action is win.reset_layout_action and action.text().replace("&", "") == "Reset layout"
    action.trigger()  # ...until Reset layout
    docks = (win.model_dock, win.details_dock, win.training_dock, win.probes_dock, win.runs_dock, win.graph_dock,
             win.samples_dock)
    qtbot.waitUntil(lambda: win.details_dock.isVisible() and win.training_dock.isVisible())
    assert not any(d.isFloating() for d in docks)
    tabs_behind = (win.details_dock, win.runs_dock, win.graph_dock, win.samples_dock)  # tabs behind Probes
    assert all(d.isVisible() for d in docks if d not in tabs_behind)
    left, right = Qt.DockWidgetArea.LeftDockWidgetArea, Qt.DockWidgetArea.RightDockWidgetArea
    assert [win.dockWidgetArea(d) for d in docks] == [left, left, right, left, left, left, left]
    assert set(win.tabifiedDockWidgets(win.probes_dock)) == {win.details_dock, win.runs_dock, win.graph_dock,
                                                             win.samples_dock}
    fit, frame = fit_rect(win.screen().availableGeometry()), win.frameGeometry()
    least = win.minimumSizeHint()  # offscreen's screen is narrower than the docks need
    assert win.width() == max(fit.width(), least.width()) < first_size.width() + 300
    assert win.height() == max(fit.height() - (frame.height() - win.height()), least.height())
    qtbot.waitUntil(lambda: win.model_dock.height() > win.probes_dock.height())  # the default shares
