"""The Graph tab follows View > Theme: dark boxes, lines and text on a dark palette (white boxes stayed), and the
plots' backgrounds with them, when the theme is switched in a running window."""

from __future__ import annotations

import pyqtgraph as pg
import pytest
from PySide6.QtGui import QColor

from workbench.ui.graph.graph_scene import COLORS
from workbench.ui.theme import apply_theme


@pytest.fixture(autouse=True)
def _system_theme_after():
    """Later tests get the application as it started (a theme is application-wide)."""
    yield
    apply_theme("system")


def luminance(color: QColor) -> float:
    """WCAG relative luminance of ``color`` (0 black .. 1 white)."""
    def channel(c: float) -> float:
        return c / 12.92 if c <= 0.04045 else ((c + 0.055) / 1.055) ** 2.4
    return 0.2126 * channel(color.redF()) + 0.7152 * channel(color.greenF()) + 0.0722 * channel(color.blueF())


def test_switching_to_dark_makes_the_graph_boxes_and_the_plots_dark_and_light_brings_them_back(shown, qtbot):
    win = shown
    win.theme.set_theme("light", remember=False)
    win.graph_dock.raise_()
    panel = win.graph_panel
    qtbot.waitUntil(lambda: panel.graph is not None and bool(panel.scene.boxes), timeout=30_000)
    name, box = next((n, b) for n, b in panel.scene.boxes.items() if panel.view_graph.node(n).op == "module")
    label = panel.scene.box_labels[name]
    plot = win.training_panel.plots.loss_plot
    assert luminance(box.brush().color()) > 0.6 and luminance(plot.backgroundBrush().color()) > 0.6

    win.theme.actions["dark"].trigger()  # View > Theme > Dark, in this process
    qtbot.waitUntil(lambda: luminance(box.brush().color()) < 0.1)
    assert box.brush().color() == QColor(COLORS["module"][1])
    assert luminance(label.brush().color()) > 0.8  # the box's text stays readable
    assert all(luminance(edge.pen().color()) > 0.2 for edge in panel.scene.edges)  # lines show on the dark view
    assert luminance(panel.view.palette().base().color()) < 0.05  # the view behind the boxes is dark too
    views = win.findChildren(pg.GraphicsView)
    assert plot in views and all(luminance(v.backgroundBrush().color()) < 0.05 for v in views)

    win.theme.actions["light"].trigger()
    qtbot.waitUntil(lambda: luminance(box.brush().color()) > 0.6)
    assert luminance(label.brush().color()) < 0.05 and luminance(plot.backgroundBrush().color()) > 0.6
