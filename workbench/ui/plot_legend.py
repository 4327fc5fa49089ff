"""A pyqtgraph legend that never covers data: placed in the plot's title row.

Shared by the wings' plots (the loss plot, the Gradients tab), which may not
import each other.
"""

from __future__ import annotations

import pyqtgraph as pg

__all__ = ["fit_legend_row", "legend_above"]


def legend_above(item: pg.PlotItem, columns: int = 3, row_height: int = 34) -> pg.LegendItem:
    """Put ``item``'s legend where its title would be, above the data; ``item.plot(name=...)`` adds to it.

    Parameters
    ----------
    item : pg.PlotItem
        Its title label is hidden (the legend takes its row).
    columns : int
        Entries per legend row.
    row_height : int
        Height of the title row, in pixels (about 17 per legend row at 8 pt).

    Returns
    -------
    pg.LegendItem
        Also set as ``item.legend``.
    """
    legend = pg.LegendItem(colCount=columns, labelTextSize="8pt", verSpacing=-8)
    item.layout.removeItem(item.titleLabel)
    item.titleLabel.setVisible(False)
    item.layout.addItem(legend, 0, 1)
    item.layout.setRowFixedHeight(0, row_height)
    item.legend = legend
    return legend


def fit_legend_row(item: pg.PlotItem, legend: pg.LegendItem, minimum: int = 20) -> float:
    """Make the title row of ``item`` as tall as ``legend``'s rows, so that it never reaches into the data.

    Parameters
    ----------
    item : pg.PlotItem
        A plot whose legend :func:`legend_above` placed.
    legend : pg.LegendItem
        That legend, after its entries changed.
    minimum : int
        Least height of the row, in pixels (an empty legend keeps it).

    Returns
    -------
    float
        The row's new height, in pixels.
    """
    height = max(float(minimum), legend.boundingRect().height())
    item.layout.setRowFixedHeight(0, height)
    return height
