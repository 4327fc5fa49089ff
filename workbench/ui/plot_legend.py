"""A pyqtgraph legend that never covers data: placed in the plot's title row.

Shared by the wings' plots (the loss plot, the Gradients tab, the Runs overlay),
which may not import each other. The legend takes as many columns as the plot's
width holds (at most the number asked for), and the title row grows to its rows:
a legend wider than its plot used to widen the plot past its widget, which cut
off the right axis.
"""

from __future__ import annotations

import math

import pyqtgraph as pg
from PySide6.QtCore import QEvent, QObject

__all__ = ["MAX_HEIGHT_SHARE", "fit_legend_row", "legend_above"]

#: Pixels kept free beside the legend's columns.
_SLACK_PX = 12
#: Largest share of the view's height the legend may take; in a shorter plot it is hidden (its names
#: go to the plot's tooltip) rather than leaving the data a sliver.
MAX_HEIGHT_SHARE = 0.4


def legend_above(item: pg.PlotItem, columns: int = 3, row_height: int = 34) -> pg.LegendItem:
    """Put ``item``'s legend where its title would be, above the data; ``item.plot(name=...)`` adds to it.

    Parameters
    ----------
    item : pg.PlotItem
        Its title label is hidden (the legend takes its row).
    columns : int
        Most entries per legend row (fewer when the plot is too narrow for them).
    row_height : int
        Least height of the title row, in pixels (about 17 per legend row at 8 pt).

    Returns
    -------
    pg.LegendItem
        Also set as ``item.legend``.
    """
    legend = pg.LegendItem(colCount=columns, labelTextSize="8pt", verSpacing=-8)
    legend.max_columns = columns
    legend.min_row_height = row_height
    item.layout.removeItem(item.titleLabel)
    item.titleLabel.setVisible(False)
    item.layout.addItem(legend, 0, 1)
    item.layout.setRowFixedHeight(0, row_height)
    item.legend = legend
    scene = item.scene()
    for view in scene.views() if scene is not None else []:
        _RefitOnResize(item, legend, view)
    return legend


def fit_legend_row(item: pg.PlotItem, legend: pg.LegendItem, minimum: int | None = None,
                   view_width: float | None = None, view_height: float | None = None) -> float:
    """Fit ``legend`` to the plot's width (columns) and the title row of ``item`` to its rows.

    Call it after the legend's entries changed; a resize of the plot's view calls it by itself.

    Parameters
    ----------
    item : pg.PlotItem
        A plot whose legend :func:`legend_above` placed.
    legend : pg.LegendItem
        That legend.
    minimum : int, optional
        Least height of the row, in pixels (default: the ``row_height`` given to :func:`legend_above`).
    view_width, view_height : float, optional
        Size of the view the plot is drawn in (default: its viewport's size now). A legend
        taller than :data:`MAX_HEIGHT_SHARE` of that height is hidden, its names in the plot's tooltip.

    Returns
    -------
    float
        The row's new height, in pixels.
    """
    columns = _columns_that_fit(item, legend, view_width)
    if columns != legend.columnCount:
        legend.setColumnCount(columns)
    if minimum is None:
        minimum = getattr(legend, "min_row_height", 20)
    height = max(float(minimum), legend.boundingRect().height())
    if view_height is None:
        scene = item.scene()
        views = scene.views() if scene is not None else []
        view_height = views[0].viewport().height() if views else 0
    fits = view_height <= 1 or not legend.items or height <= MAX_HEIGHT_SHARE * view_height
    if fits != legend.isVisible():
        # a hidden item still takes its room in a QGraphicsLayout: out of the layout while hidden
        if fits:
            item.layout.addItem(legend, 0, 1)
        else:
            item.layout.removeItem(legend)
        legend.setVisible(fits)
    item.setToolTip("" if fits else "\n".join(label.text for _, label in legend.items))
    if not fits:
        height = 4.0
    item.layout.setRowFixedHeight(0, height)
    return height


def _columns_that_fit(item: pg.PlotItem, legend: pg.LegendItem, view_width: float | None) -> int:
    """As many columns as the widest entry allows across the plot's data width (1 at least)."""
    most = max(1, int(getattr(legend, "max_columns", legend.columnCount)))
    if not legend.items:
        return most
    # the label's text, not the LabelItem (which the legend's layout stretches to its column's width)
    entry = max(sample.boundingRect().width() + label.item.boundingRect().width() + 12
                for sample, label in legend.items)
    width = _data_width(item, view_width)
    if width is None:
        return most
    return max(1, min(most, math.floor((width - _SLACK_PX) / max(entry, 1.0))))


def _data_width(item: pg.PlotItem, view_width: float | None) -> float | None:
    """Width of the plot's data column: the view's width less the axes beside it (None before it is shown)."""
    if view_width is None:
        scene = item.scene()
        views = scene.views() if scene is not None else []
        view_width = views[0].viewport().width() if views else 0
    if view_width <= 1:
        return None
    others = sum(item.getAxis(side).width() for side in ("left", "right") if item.getAxis(side).isVisible())
    # the view's width, not the plot's: a plot widened by its legend is wider than its view, and during a
    # resize the plot still has its old width (a plot in a one-column GraphicsLayout is only its margins narrower)
    return float(view_width) - others


class _RefitOnResize(QObject):
    """Refits the legend whenever the view it is drawn in is resized (an event filter, owned by the view)."""

    def __init__(self, item: pg.PlotItem, legend: pg.LegendItem, view):
        super().__init__(view)
        self._item, self._legend = item, legend
        view.installEventFilter(self)

    def eventFilter(self, obj, event) -> bool:  # noqa: N802 - Qt override
        """Refit after a resize; never consumes the event."""
        if event.type() == QEvent.Type.Resize and self._item.legend is self._legend:
            size = event.size()
            fit_legend_row(self._item, self._legend, view_width=size.width(), view_height=size.height())
        return False
