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
