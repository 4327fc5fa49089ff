"""The global gradient norm drawn on the training loss plot (right-hand log axis).

The values come from the probes' :class:`~workbench.core.probe.callback.ProbeReport`
batches (``grads.global_norm``, measured at the probes' cadence on the training
thread: the first step, every epoch end, the last step and as the budget allows);
this widget only draws them. While the measurements are few or far apart
(:func:`workbench.core.probe.cadence.sparse`) they are drawn as markers without a
line: two samples joined across the plot read as a trend nobody measured.
"""

from __future__ import annotations

import math

import numpy as np
import pyqtgraph as pg

from workbench.core.probe.cadence import sparse
from workbench.ui.curve_colors import CURVE_COLORS
from workbench.ui.log_axis import LogTicks
from workbench.ui.plot_buffer import PlotBuffer

_COLOR = CURVE_COLORS["grad_norm"]
#: A line for many measurements, markers alone for sparse ones.
_LINE = {"pen": pg.mkPen(_COLOR, width=1, style=pg.QtCore.Qt.PenStyle.DotLine), "symbol": None}
_MARKERS = {"pen": None, "symbol": "d", "symbolSize": 7, "symbolBrush": pg.mkBrush(*_COLOR), "symbolPen": None}


class GradNormOverlay:
    """A second ViewBox on a PlotWidget with the global grad norm over steps.

    Parameters
    ----------
    plot_widget : pg.PlotWidget
        The loss plot. Its right axis becomes "grad norm" (log scale) and its
        legend gets a "grad norm" entry (the global norm: the per-layer ones are the Probes' Gradients tab).

    Attributes
    ----------
    curve : pg.PlotDataItem
        The drawn curve; x = step (or the loss plot's current x column), y = log10(norm).
    markers : bool
        True while the values are drawn as markers alone (sparse), False for a dotted line.
    data : PlotBuffer
        Columns ``step`` and ``norm`` (L2 norm over every trainable parameter's gradient).
    """

    def __init__(self, plot_widget: pg.PlotWidget):
        item = plot_widget.getPlotItem()
        self._item = item
        self.view = pg.ViewBox()
        # 1-2-5 ticks only: pyqtgraph's 0.3, 0.4, ... 0.9 were written over each other on a short plot
        item.setAxisItems({"right": LogTicks("right")})
        item.showAxis("right")
        item.scene().addItem(self.view)
        axis = item.getAxis("right")
        axis.linkToView(self.view)
        axis.setLabel("grad norm")
        axis.setLogMode(False, True)
        axis.enableAutoSIPrefix(False)  # log ticks already read 10^k
        self.view.setXLink(item)
        self.markers = True
        self.curve = pg.PlotDataItem(**_MARKERS)
        self.view.addItem(self.curve)
        if item.legend is not None:
            # "grad norm", not "grad norm (global)": the widest entry sets the legend's columns, and at 1280x800
            # the longer one left the loss plot a five-row legend over its curves
            item.legend.addItem(self.curve, "grad norm")
        item.vb.sigResized.connect(self._sync_geometry)
        self.data = PlotBuffer(("step", "norm"), capacity=1024)
        self._dirty = False
        self._sync_geometry()

    def _sync_geometry(self) -> None:
        self.view.setGeometry(self._item.vb.sceneBoundingRect())
        self.view.linkedViewChanged(self._item.vb, self.view.XAxis)

    def clear(self) -> None:
        """Forget every value (a new run starts)."""
        self.data.clear()
        self.markers = True
        self.curve.setData([], [], **_MARKERS)

    def add(self, step: int, norm: float) -> None:
        """Append one measurement; non-finite norms are kept out of the log plot."""
        if norm is None or not math.isfinite(norm) or norm <= 0:
            return
        self.data.append(step=float(step), norm=float(norm))
        self._dirty = True

    def refresh(self, steps: PlotBuffer, x_column: str, force: bool = False) -> None:
        """Redraw when new values arrived, mapping step to the loss plot's x column.

        Parameters
        ----------
        steps : PlotBuffer
            The loss plot's per-step buffer (columns ``step`` and ``x_column``).
        x_column : str
            ``"step"``, ``"epoch"`` or ``"time"``.
        force : bool
            Redraw even when nothing new arrived.
        """
        if not (self._dirty or force):
            return
        self._dirty = False
        s = self.data["step"]
        if len(s) == 0:
            self.curve.setData([], [])
            return
        x = s
        if x_column != "step" and len(steps):
            x = np.interp(s, steps["step"], steps[x_column])
        markers = sparse(s)
        style = {} if markers == self.markers else (_MARKERS if markers else _LINE)
        self.markers = markers
        self.curve.setData(x, np.log10(self.data["norm"]), **style)
        self.view.enableAutoRange(axis=pg.ViewBox.YAxis)
