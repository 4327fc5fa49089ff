"""The default layout on a laptop: every tree column shows, the settings never scroll sideways, the curves are the biggest thing.

The window runs in a child process whose offscreen platform has a 1280x800
screen (as in ``tests/ui/test_window_geometry.py``): the screens of this process
cannot change once the QApplication exists. 1152x696 is the first window there
(``QScreen.availableGeometry()`` less a panel, nine tenths of it).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from PySide6.QtCore import Qt

from tests.ui.helpers import RecordingPrompts
from tests.ui.test_window_geometry import LAPTOP
from workbench.ui.main_window import MainWindow

pytestmark = pytest.mark.usefixtures("no_dangling_qthreads")

#: Opens the window at argv[1] = [w, h] with the default layout and prints what a user sees.
CHILD = """
import json, sys
from PySide6.QtCore import Qt
from PySide6.QtWidgets import QApplication, QScrollArea
app = QApplication([])
from workbench.ui.qsettings import set_application_names
set_application_names()
from tests.ui.helpers import RecordingPrompts
from workbench.ui.main_window import MainWindow
win = MainWindow(prompts=RecordingPrompts())
win.resize(*json.loads(sys.argv[1]))
win.show()
win.tree_widget.expand_to_depth(1)
for _ in range(20):
    app.processEvents()
view = win.tree_widget.view
header = view.header()
model = view.model()
columns = {model.headerData(c, Qt.Orientation.Horizontal): header.sectionViewportPosition(c) + header.sectionSize(c)
           for c in range(header.count()) if not view.isColumnHidden(c)}
panel = win.training_panel
scroll = panel.findChild(QScrollArea, "trainingSettingsScroll")
docks = {d.objectName(): [d.width(), d.height(), d.isVisible() and not d.visibleRegion().isEmpty()]
         for d in (win.model_dock, win.details_dock, win.training_dock, win.probes_dock, win.runs_dock)}
print(json.dumps({
    "window": [win.width(), win.height()], "columns": columns, "tree_viewport": view.viewport().width(),
    "tree_hscroll": view.horizontalScrollBar().maximum(),
    "settings_hbar": scroll.horizontalScrollBar().isVisible(), "settings_hmax": scroll.horizontalScrollBar().maximum(),
    "training_min": win.training_dock.minimumSizeHint().width(), "probes_min": win.probes_dock.minimumSizeHint().width(),
    "plots": [panel.plots.width(), panel.plots.height()], "docks": docks,
}))
win.close()
"""


def _open_in_child(tmp_path, size) -> dict:
    config = tmp_path / "laptop.json"
    config.write_text(json.dumps({"windowFrameMargins": True, "screens": [LAPTOP]}))
    # its own settings folder: the module-scoped fixture runs before conftest's per-test one, and the child's
    # close saves its layout, which the next run would otherwise restore from the user's settings
    env = {**os.environ, "QT_QPA_PLATFORM": f"offscreen:configfile={config}", "WORKBENCH_START_AHEAD": "0",
           "WORKBENCH_SETTINGS_DIR": str(tmp_path / "settings")}
    out = subprocess.run([sys.executable, "-c", CHILD, json.dumps(size)], env=env, capture_output=True, text=True,
                         timeout=120, cwd=os.path.dirname(os.path.dirname(os.path.dirname(__file__))))
    assert out.returncode == 0, out.stderr[-3000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


@pytest.fixture(scope="module")
def laptop(tmp_path_factory) -> dict:
    """What the first window on a 1280x800 laptop (1152x696) shows."""
    return _open_in_child(tmp_path_factory.mktemp("laptop"), [1152, 696])


def test_at_1152x696_every_tree_column_shows_and_the_settings_do_not_scroll_sideways(laptop):
    """The Probes (678 px) and Training (681 px) docks' minimum widths squeezed the tree: FLOPs was cut."""
    assert laptop["window"] == [1152, 696]
    names = set(laptop["columns"])
    assert {"Name", "Train", "Type", "Output shape", "Params", "Trainable", "FLOPs"} <= names, names
    for name, right_edge in laptop["columns"].items():
        assert right_edge <= laptop["tree_viewport"], (name, laptop)
    assert laptop["tree_hscroll"] == 0
    assert not laptop["settings_hbar"] and laptop["settings_hmax"] == 0
    assert laptop["training_min"] <= 480 and laptop["probes_min"] <= 480, laptop


def test_at_1152x696_the_curves_are_the_biggest_thing(laptop):
    """The Probes dock took ~40 % of the height under a squeezed loss plot."""
    plot_w, plot_h = laptop["plots"]
    shown = {name: (w, h) for name, (w, h, visible) in laptop["docks"].items() if visible and name != "trainingDock"}
    assert "probesDock" in shown and "detailsDock" not in shown  # Details and Runs: tabs behind Probes
    for name, (w, h) in shown.items():
        assert plot_w * plot_h > w * h, (name, laptop)
        if name != "modelDock":  # the tree keeps the left column's top
            assert plot_h > h, (name, laptop)


@pytest.mark.qt_log_ignore("This plugin does not support raise")
def test_the_default_arrangement_comes_back_with_reset_layout(qtbot):
    win = MainWindow(prompts=RecordingPrompts())
    qtbot.addWidget(win)
    win.show()
    qtbot.waitExposed(win)
    left, right = Qt.DockWidgetArea.LeftDockWidgetArea, Qt.DockWidgetArea.RightDockWidgetArea
    assert win.dockWidgetArea(win.training_dock) == right
    tabs = (win.model_dock, win.details_dock, win.probes_dock, win.runs_dock, win.graph_dock, win.samples_dock)
    assert {win.dockWidgetArea(d) for d in tabs} == {left}
    assert set(win.tabifiedDockWidgets(win.probes_dock)) == {win.details_dock, win.runs_dock, win.graph_dock,
                                                             win.samples_dock}
    win.addDockWidget(right, win.probes_dock)  # the user moves Probes under the curves...
    assert win.dockWidgetArea(win.probes_dock) == right
    win.reset_layout()  # ...and takes the default back
    assert win.dockWidgetArea(win.probes_dock) == left
    assert set(win.tabifiedDockWidgets(win.probes_dock)) == {win.details_dock, win.runs_dock, win.graph_dock,
                                                             win.samples_dock}
    qtbot.waitUntil(lambda: not win.probes_dock.visibleRegion().isEmpty())  # Probes is the tab in front



def test_a_larger_models_counts_are_not_cut(main_window, qtbot):
    """resnet18's 11,689,512 parameters and 3.6 G FLOPs were elided in columns sized for the demo."""
    import torchvision

    from workbench.core.formatting import format_int
    from workbench.core.model.spec import ArchSpec
    from workbench.ui.model.tree_model import COL_FLOPS, COL_PARAMS

    win, _ = main_window
    win.session.set_model(torchvision.models.resnet18(), ArchSpec("resnet18"), None, (1, 3, 224, 224),
                          source="resnet18")
    root, view = win.tree_model.root, win.tree_widget.view
    header, metrics = view.header(), view.fontMetrics()
    for col, value in ((COL_PARAMS, root.total_params), (COL_FLOPS, root.flops)):
        assert header.sectionSize(col) >= metrics.horizontalAdvance(format_int(value)), col
    right = header.sectionViewportPosition(COL_FLOPS) + header.sectionSize(COL_FLOPS)
    # the Model dock grew with its columns (at the next layout pass): nothing cut or scrolled away
    qtbot.waitUntil(lambda: right <= view.viewport().width(), timeout=3000)
