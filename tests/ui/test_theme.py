"""View > Theme: the window and every plot follow the palette, and the choice is remembered."""

from __future__ import annotations

import pyqtgraph as pg
import pytest
from PySide6.QtGui import QPalette
from PySide6.QtWidgets import QApplication

from tests.ui.helpers import RecordingPrompts
from workbench.ui.main_window import MainWindow
from workbench.ui.qsettings import make_settings
from workbench.ui.theme import THEME_KEY, DarkFusion, apply_theme, plot_colors
from workbench.ui.train.lr_find_dialog import LRFindDialog

WINDOW = QPalette.ColorRole.Window


@pytest.fixture(autouse=True)
def _system_theme_after():
    """Later tests get the application as it started (a theme is application-wide)."""
    yield
    apply_theme("system")


def _lightness(view: pg.GraphicsView) -> int:
    return view.backgroundBrush().color().lightness()


def _plots(window) -> list[pg.GraphicsView]:
    plots = window.findChildren(pg.GraphicsView)
    assert len(plots) >= 8  # loss, accuracy, LR, planned LR, the Probes views, the Runs plot
    return plots


def test_dark_makes_the_window_and_every_plot_dark_and_is_remembered(window, qtbot):
    window.show()
    qtbot.waitExposed(window)
    actions = window.theme.actions
    assert [a.objectName() for a in actions.values()] == ["themeSystemAction", "themeLightAction",
                                                          "themeDarkAction"]
    assert actions["system"].isChecked() and actions["system"].actionGroup().isExclusive()
    actions["dark"].trigger()
    assert actions["dark"].isChecked() and not actions["system"].isChecked()
    qtbot.waitUntil(lambda: window.palette().color(WINDOW).lightness() < 80)  # widgets hear of it by an event
    assert QApplication.palette().color(WINDOW).lightness() < 80
    assert isinstance(QApplication.style(), DarkFusion)  # Fusion, with indicator outlines that show
    for plot in _plots(window):
        assert _lightness(plot) < 80, plot.objectName()
    item = window.training_panel.plots.loss_plot.getPlotItem()
    axis = item.getAxis("left")
    assert axis.textPen().color().lightness() > 170 and axis.pen().color().lightness() > 170
    foreground = plot_colors(QApplication.palette())[1].name()
    assert all(foreground in label.item.toHtml() for _sample, label in item.legend.items)  # legend text redrawn
    assert make_settings().value(THEME_KEY) == "dark"
    assert _lightness(LRFindDialog(window).plot) < 80  # a plot made later takes the theme's colors too


def test_the_remembered_theme_applies_to_the_next_window_and_light_and_system_come_back(window, qtbot):
    window.theme.actions["dark"].trigger()
    window.close()
    again = MainWindow(prompts=RecordingPrompts())
    qtbot.addWidget(again)
    assert again.theme.actions["dark"].isChecked()
    assert again.palette().color(WINDOW).lightness() < 80
    assert all(_lightness(plot) < 80 for plot in _plots(again))
    again.theme.actions["light"].trigger()
    qtbot.waitUntil(lambda: again.palette().color(WINDOW).lightness() > 200)
    assert all(_lightness(plot) > 200 for plot in _plots(again))
    assert make_settings().value(THEME_KEY) == "light"
    again.theme.actions["system"].trigger()
    assert make_settings().value(THEME_KEY) == "system"
    # the system palette is offscreen's own (light); plots take its Base color
    base = QApplication.palette().color(QPalette.ColorRole.Base)
    assert all(plot.backgroundBrush().color() == base for plot in _plots(again))


def test_a_dark_screenshot_at_a_laptop_size_from_the_command_line(tmp_path, qtbot):
    """``workbench --screenshot OUT.png --size 1280x800 --theme dark``: the README's pictures in both themes."""
    from PySide6.QtGui import QImage

    from workbench.ui.app import main

    out = tmp_path / "dark.png"
    assert main(["--screenshot", str(out), "--size", "1280x800", "--theme", "dark"]) == 0
    image = QImage(str(out))
    assert (image.width(), image.height()) == (1280, 800)
    corner = image.pixelColor(image.width() - 20, image.height() // 2)  # inside the right-hand docks
    assert corner.lightness() < 80
    assert make_settings().value(THEME_KEY) is None  # a theme for one session is not remembered


def test_an_unticked_check_box_keeps_a_visible_outline_in_dark(qtbot):
    """Fusion outlines a box in a darker Window color: on a dark palette a frozen module's box vanished."""
    from PySide6.QtWidgets import QCheckBox, QStyle, QStyleOptionButton

    apply_theme("dark")
    box = QCheckBox("train")
    qtbot.addWidget(box)
    box.show()
    qtbot.waitExposed(box)
    option = QStyleOptionButton()
    box.initStyleOption(option)
    rect = box.style().subElementRect(QStyle.SubElement.SE_CheckBoxIndicator, option, box)
    image = box.grab().toImage()
    levels = [image.pixelColor(x, y).lightness() for x in range(rect.left(), rect.right() + 1)
              for y in range(rect.top(), rect.bottom() + 1)]
    assert max(levels) - min(levels) >= 30, (min(levels), max(levels))  # Fusion alone: about 15
