"""The Runs overlay's legend never covers the curves (issue 25)."""

from __future__ import annotations

import numpy as np

from workbench.ui.runs.runs_panel import RunsPanel


def _legend_and_view_rects(panel):
    item = panel.plot.getPlotItem()
    return item.legend.sceneBoundingRect(), item.getViewBox().sceneBoundingRect()


def test_the_legend_sits_above_the_data_not_over_the_curves(qtbot, tmp_path):
    panel = RunsPanel(tmp_path)
    qtbot.addWidget(panel)
    panel.resize(900, 650)
    panel.show()
    x = np.arange(1, 70, dtype=float)
    # curves that fill the whole view, corners included: any legend inside the view covers some of them
    series = {f"run-{i}-with-a-fairly-long-name": (x, np.linspace(2.0 - 0.3 * i, 0.2 + 0.4 * i, x.size))
              for i in range(5)}
    panel.draw(series)
    qtbot.wait(50)
    legend, view = _legend_and_view_rects(panel)
    assert [label.text for _, label in panel.plot.getPlotItem().legend.items] == list(series)
    assert legend.height() > 0 and view.height() > 100
    assert not legend.intersects(view), (legend, view)
    assert legend.bottom() <= view.top()
    # five names in rows of three: two rows, and the title row grew to hold both
    panel.draw(dict(list(series.items())[:1]))
    qtbot.wait(50)
    legend, view = _legend_and_view_rects(panel)
    assert len(panel.plot.getPlotItem().legend.items) == 1 and not legend.intersects(view)


def test_a_plot_too_short_for_its_legend_hides_it_and_shows_it_again_with_room(qtbot, tmp_path):
    panel = RunsPanel(tmp_path)
    qtbot.addWidget(panel)
    panel.resize(560, 300)  # the Runs dock tabbed in a 1280 x 800 window: a plot about 100 px high
    panel.show()
    x = np.arange(1, 70, dtype=float)
    names = ["lr-1e-3-long-name-run", "lr-1e-2", "lr-3e-3"]
    panel.draw({n: (x, np.linspace(2.0, 0.5 + i, x.size)) for i, n in enumerate(names)})
    qtbot.wait(50)
    item = panel.plot.getPlotItem()
    view = item.getViewBox().sceneBoundingRect()
    legend = panel.legend
    # never a legend over the data, and the data keep most of the plot
    assert not (legend.isVisible() and legend.sceneBoundingRect().intersects(view))
    assert view.height() >= 0.55 * panel.plot.viewport().height()
    if not legend.isVisible():
        assert item.toolTip().splitlines() == names  # the names are still there, on hover
    panel.resize(900, 700)
    qtbot.wait(80)
    assert legend.isVisible() and not legend.sceneBoundingRect().intersects(item.getViewBox().sceneBoundingRect())
