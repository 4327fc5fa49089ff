"""On a laptop screen the run's settings fit their inspector, the run buttons stay in view, the tree shows its columns.

The window runs in a child process whose offscreen platform has a 1280x800
screen (as in ``tests/ui/test_window_geometry.py``): the screens of this
process cannot change once the QApplication exists.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from PySide6.QtWidgets import QCheckBox, QWidget

from tests.ui.helpers import RecordingPrompts
from tests.ui.test_window_geometry import LAPTOP
from workbench.ui.main_window import MainWindow
from workbench.ui.train.settings_form import TrainingSettings

#: Opens the window (at argv[1] = [w, h], or its own first size), every inspector section open, and
#: prints what a user would see clipped or scrolled away.
CHILD = """
import json, sys
from PySide6.QtCore import QPoint
from PySide6.QtWidgets import (QAbstractSpinBox, QApplication, QCheckBox, QComboBox, QLabel, QLineEdit,
                               QPushButton, QScrollArea, QTreeView, QWidget)
app = QApplication([])
from workbench.ui.qsettings import set_application_names
set_application_names()
from tests.ui.helpers import RecordingPrompts
from workbench.ui.main_window import MainWindow
from workbench.ui.model.tree_model import COL_FLOPS, COL_PARAMS, COL_TRAINABLE
win = MainWindow(prompts=RecordingPrompts())
size = json.loads(sys.argv[1])
if size:
    win.resize(*size)
win.show()
win.tree_widget.expand_to_depth(1)
panel = win.training_panel
for section in [*panel.settings.sections.values(), panel.run_options]:
    section.set_expanded(True)
for _ in range(10):
    app.processEvents()
scroll = panel.findChild(QScrollArea, "trainingSettingsScroll")
viewport = scroll.viewport()
clipped = []
kinds = (QLabel, QCheckBox, QLineEdit, QComboBox, QAbstractSpinBox, QPushButton)
for w in scroll.widget().findChildren(QWidget):
    if not isinstance(w, kinds) or isinstance(w.parent(), (QComboBox, QAbstractSpinBox)):
        continue
    if not w.isVisibleTo(scroll.widget()) or w.parent() is None or not w.parent().isVisibleTo(scroll.widget()):
        continue
    left = w.mapTo(viewport, QPoint(0, 0)).x()
    short = isinstance(w, (QLabel, QCheckBox)) and w.width() < w.sizeHint().width()
    if short or left < 0 or left + w.width() > viewport.width():
        clipped.append([w.objectName() or type(w).__name__, getattr(w, "text", lambda: "")(), left, w.width(),
                        w.sizeHint().width(), viewport.width()])
buttons = {}
for name in ("startButton", "pauseButton", "stopButton", "saveNowButton", "findLrButton"):
    b = panel.findChild(QPushButton, name)
    top_left = b.mapTo(panel, QPoint(0, 0))
    buttons[name] = {"visible": b.isVisible(), "in_scroll": scroll.isAncestorOf(b),
                     "inside": panel.rect().contains(top_left) and top_left.x() + b.width() <= panel.width()}
view = win.findChild(QTreeView, "modelTree")
header = view.header()
columns = {str(c): [header.sectionViewportPosition(c), header.sectionSize(c)]
           for c in (COL_PARAMS, COL_TRAINABLE, COL_FLOPS)}
print(json.dumps({
    "window": [win.width(), win.height()],
    "hbar": scroll.horizontalScrollBar().isVisible(),
    "inner_min": scroll.widget().minimumSizeHint().width(), "viewport": viewport.width(),
    "inner_width": scroll.widget().width(), "clipped": clipped, "buttons": buttons,
    "tree_viewport": view.viewport().width(), "tree_hscroll": view.horizontalScrollBar().maximum(),
    "columns": columns, "inspector": scroll.width() * scroll.height(), "plots": panel.plots.width() * panel.plots.height(),
}))
win.close()
"""


def _layout_in_child(tmp_path, size) -> dict:
    config = tmp_path / "laptop.json"
    config.write_text(json.dumps({"windowFrameMargins": True, "screens": [LAPTOP]}))
    env = {**os.environ, "QT_QPA_PLATFORM": f"offscreen:configfile={config}"}
    out = subprocess.run([sys.executable, "-c", CHILD, json.dumps(size)], env=env, capture_output=True, text=True,
                         timeout=120, cwd=os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(__file__)))))
    assert out.returncode == 0, out.stderr[-3000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("size", [[1280, 800]], ids=["1280x800"])
def test_on_a_laptop_the_inspector_fits_the_run_buttons_show_and_the_tree_shows_its_columns(tmp_path, size):
    """The form needed a horizontal scroll bar, clipped its labels, and the Start button sat under it."""
    got = _layout_in_child(tmp_path, size)
    if size:
        assert got["window"] == size
    # the settings: no sideways scrolling, every label, box and field whole inside the inspector
    assert not got["hbar"]
    assert got["inner_min"] <= got["viewport"] and got["inner_width"] <= got["viewport"], got
    assert got["clipped"] == []
    # Start / Pause / Stop / Save now / Find LR: shown, in the dock, not under the scrolling settings
    for name, button in got["buttons"].items():
        assert button == {"visible": True, "in_scroll": False, "inside": True}, name
    # the curves get most of the dock (beside the settings or, in a narrow dock, under them)
    assert got["plots"] > got["inspector"]
    # the tree: Params, Trainable and FLOPs inside the viewport, nothing to scroll sideways
    for col, (left, width) in got["columns"].items():
        assert 0 <= left and left + width <= got["tree_viewport"], (col, got)
    assert got["tree_hscroll"] == 0


def test_every_checkbox_of_the_settings_says_what_it_is(qtbot):
    """A checkbox without words sat beside Shuffle (Drop last, its text cut off by the form's edge)."""
    settings = TrainingSettings()
    qtbot.addWidget(settings)
    boxes = settings.findChildren(QCheckBox)
    assert len(boxes) >= 8
    for box in boxes:
        assert box.text().strip() or box.accessibleName().strip(), box.objectName()


def test_the_less_used_sections_start_shut_and_a_click_opens_them(qtbot):
    window = MainWindow(prompts=RecordingPrompts())
    qtbot.addWidget(window)
    panel = window.training_panel
    sections = panel.settings.sections
    assert [name for name, s in sections.items() if s.is_expanded()] == ["data", "optimization", "schedule"]
    loader = sections["loader"]
    assert not loader.content.isVisibleTo(panel)
    loader.toggle.click()
    assert loader.is_expanded() and loader.content.isVisibleTo(panel)
    assert panel.settings.findChild(QCheckBox, "dropLastCheck").isVisibleTo(panel)
    # the widgets keep their names through the new layout
    for name in ("lrSpin", "epochsSpin", "datasetCombo", "deviceCombo", "runDirEdit"):
        assert panel.settings.findChild(QWidget, name) is not None, name
