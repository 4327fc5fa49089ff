"""The Probes panel's Weights tab: a per-parameter weight histogram and the update ratios.

``WeightsView`` only draws what core produced: :class:`~workbench.core.probe.stats.Histogram`
objects from :func:`workbench.core.probe.gradients.weight_histograms` (live through
``ProbeCallback(weight_hist=...)``, after a probe batch on the probe worker, or
on demand when idle) and the ``||dw|| / ||w||`` ratios of
:class:`~workbench.core.probe.gradients.UpdateTracker`.

objectNames: ``weightsView``, ``weightParamCombo``, ``weightHistogram``,
``weightStats``, ``updateRatioPlot``.
"""

from __future__ import annotations

import math

import numpy as np
import pyqtgraph as pg
from PySide6.QtCore import Qt, Signal
from PySide6.QtWidgets import QComboBox, QHBoxLayout, QLabel, QVBoxLayout, QWidget

from workbench.core.probe.stats import Histogram
from workbench.ui.draw_when_shown import DrawWhenShown

#: Horizontal room one character of an axis label takes, in pixels (to space the tick labels).
CHAR_PX = 6.5


def _fmt(v: float) -> str:
    return "nan" if not math.isfinite(v) else f"{v:.4g}"


def tick_labels(names: list[str], width_px: float) -> list[tuple[float, str]]:
    """Every k-th name as an axis tick so the labels do not overlap on a ``width_px`` wide axis.

    Long names are shortened to their last two dotted parts (``layer1.0.conv1.weight`` ->
    ``conv1.weight``); the full names are in the plot's tooltip.
    """
    if not names:
        return []
    short = [".".join(n.split(".")[-2:]) for n in names]
    label_px = (max(len(s) for s in short) + 2) * CHAR_PX
    every = max(1, math.ceil(len(names) * label_px / max(width_px - 60.0, 1.0)))
    return [(float(i), short[i]) for i in range(0, len(names), every)]


class WeightsView(QWidget):
    """Parameter chooser, weight histogram of the chosen parameter, update-ratio bars.

    Signals
    -------
    parameterChanged(str)
        The user (or :meth:`set_parameters`) chose another parameter (qualified name; ``""`` = none).
    """

    parameterChanged = Signal(str)

    def __init__(self, parent: QWidget | None = None):
        super().__init__(parent)
        self.setObjectName("weightsView")
        self._shown: tuple[str, Histogram, int | None] | None = None
        self._later = DrawWhenShown(self)  # live drawings wait while another tab covers this one
        self.param_combo = QComboBox(objectName="weightParamCombo")
        self.param_combo.setToolTip("Parameter whose weight histogram is drawn (the probed modules' parameters)")
        self.param_combo.setMinimumContentsLength(12)
        self.param_combo.setSizeAdjustPolicy(QComboBox.SizeAdjustPolicy.AdjustToMinimumContentsLengthWithIcon)
        self.param_combo.currentTextChanged.connect(self._on_param_changed)

        self.hist_plot = pg.PlotWidget(title="Weight histogram")
        self.hist_plot.setObjectName("weightHistogram")
        self.hist_plot.setLabel("bottom", "weight value")
        self.hist_plot.setLabel("left", "count")
        self.hist_bars = pg.BarGraphItem(x0=[0], x1=[1], height=[0], brush="#8c564b", pen=None)
        self.hist_plot.addItem(self.hist_bars)
        self.stats_label = QLabel(objectName="weightStats", wordWrap=True)

        self.update_plot = pg.PlotWidget(title="Update ratio ‖Δw‖/‖w‖")
        self.update_plot.setObjectName("updateRatioPlot")
        self.update_plot.setLabel("left", "log10 ratio")
        self.update_plot.addLine(y=-3, pen=pg.mkPen("#888", style=Qt.PenStyle.DashLine))  # the ~1e-3 convention
        self.update_bars = pg.BarGraphItem(x=[0], height=[0], width=0.8, brush="#9467bd", pen=None)
        self.update_plot.addItem(self.update_bars)
        self.update_label = QLabel(
            "Dashed line: 1e-3, the usual rule of thumb (Karpathy); measured live during training.", wordWrap=True
        )
        self.update_label.setObjectName("updateRatioLabel")

        row = QHBoxLayout()
        row.addWidget(QLabel("Parameter"))
        row.addWidget(self.param_combo, 1)
        left = QVBoxLayout()
        left.addLayout(row)
        left.addWidget(self.hist_plot, 1)
        left.addWidget(self.stats_label)
        right = QVBoxLayout()
        right.addWidget(self.update_plot, 1)
        right.addWidget(self.update_label)
        layout = QHBoxLayout(self)
        layout.addLayout(left, 1)
        layout.addLayout(right, 1)
        self.clear()

    # ------------------------------------------------------------------ parameters
    def set_parameters(self, names: list[str], prefer: str | None = None) -> None:
        """Offer ``names`` (parameter qualified names) in the chooser.

        Keeps the current choice when it is still offered, else chooses ``prefer``
        (when offered) or the first name; emits ``parameterChanged`` only when the
        chosen name changes.
        """
        keep = prefer if prefer in names else self.current_parameter()
        if keep not in names:
            keep = names[0] if names else ""
        before = self.current_parameter()
        self.param_combo.blockSignals(True)
        self.param_combo.clear()
        self.param_combo.addItems(names)
        self.param_combo.setCurrentText(keep)
        self.param_combo.blockSignals(False)
        if keep != before:
            self._on_param_changed(keep)

    def choose(self, name: str) -> bool:
        """Choose parameter ``name`` if it is offered; True when it is the current one afterwards."""
        if self.param_combo.findText(name) < 0:
            return False
        self.param_combo.setCurrentText(name)
        return True

    def parameters(self) -> list[str]:
        """The parameter names offered."""
        return [self.param_combo.itemText(i) for i in range(self.param_combo.count())]

    def current_parameter(self) -> str:
        """The chosen parameter's qualified name (``""`` when none)."""
        return self.param_combo.currentText()

    # ------------------------------------------------------------------ drawing
    def show_histograms(self, hists: dict[str, Histogram], step: int | None = None) -> bool:
        """Draw the chosen parameter's histogram when ``hists`` holds it; True when it does.

        While the view is hidden the newest histogram waits for it to be shown (:class:`DrawWhenShown`).

        Parameters
        ----------
        hists : dict of str to Histogram
            Parameter name -> histogram of its values (from core).
        step : int or None
            Training step of the measurement (None: measured outside training).
        """
        name = self.current_parameter()
        h = hists.get(name)
        if h is None:
            return False
        self._later.draw("histogram", lambda: self._draw_histogram(name, h, step))
        return True

    def _draw_histogram(self, name: str, h: Histogram, step: int | None) -> None:
        if name != self.current_parameter():  # held while hidden, and another parameter was chosen since
            return
        self._shown = (name, h, step)
        edges = h.edges if math.isfinite(h.lo) else np.arange(len(h.counts) + 1, dtype=float)
        self.hist_bars.setOpts(x0=edges[:-1], x1=edges[1:], height=h.counts)
        self.hist_plot.setXRange(float(edges[0]), float(edges[-1]))  # explicit: a hidden tab defers auto-range
        self.hist_plot.setYRange(0.0, float(max(h.counts.max(initial=0.0), 1.0)))
        where = "now" if step is None else f"step {step}"
        self.hist_plot.setTitle("Weight histogram")  # a long title widens the plot past its widget (clipped)
        self.stats_label.setText(
            f"{name}: {int(h.counts.sum()):,} values in [{_fmt(h.lo)}, {_fmt(h.hi)}], {len(h.counts)} bins, {where}"
        )

    def shown(self) -> tuple[str, Histogram, int | None] | None:
        """``(parameter, histogram, step)`` drawn last, or None."""
        return self._shown

    def clear(self) -> None:
        """Forget the drawn histogram and ratios (and any drawing held for a show)."""
        self._later.discard()
        self._shown = None
        self.hist_bars.setOpts(x0=[0], x1=[1], height=[0])
        self.hist_plot.setTitle("Weight histogram")
        self.stats_label.setText(
            "Choose a parameter; its histogram updates live during training and after a probe batch."
        )
        self.update_bars.setOpts(x=[], y0=[], height=[], width=0.8)

    def show_update_ratios(self, ratios: dict[str, float], step: int | None = None) -> None:
        """Bars of ``log10(||dw|| / ||w||)`` per parameter (ratios from core's ``UpdateTracker``).

        While the view is hidden the newest ratios wait for it to be shown.
        """
        self._later.draw("ratios", lambda: self._draw_update_ratios(ratios, step))

    def _draw_update_ratios(self, ratios: dict[str, float], step: int | None) -> None:
        names = list(ratios)
        vals = np.array([ratios[n] for n in names], dtype=float)
        with np.errstate(divide="ignore", invalid="ignore"):
            logs = np.where(vals > 0, np.log10(vals), np.nan)
        ok = np.isfinite(logs)
        lo = min(-6.0, float(np.nanmin(logs)) - 0.5) if ok.any() else -6.0
        x = np.arange(len(names), dtype=float)
        self.update_bars.setOpts(x=x[ok], y0=np.full(ok.sum(), lo), height=logs[ok] - lo, width=0.8)
        self.update_plot.getAxis("bottom").setTicks([tick_labels(names, self.update_plot.width())])
        self.update_plot.setXRange(-0.6, max(len(names) - 0.4, 0.6), padding=0)
        self.update_plot.setYRange(lo, max(0.0, float(np.nanmax(logs)) + 0.3) if ok.any() else 0.0)
        self.update_plot.setToolTip("\n".join(f"{i}: {n} {_fmt(v)}" for i, (n, v) in enumerate(ratios.items())))
        self.update_label.setText(f"{'' if step is None else f'Step {step}. '}Dashed line: 1e-3, the usual rule "
                                  "of thumb (Karpathy); measured live during training.")

    # ------------------------------------------------------------------ slots
    def _on_param_changed(self, name: str) -> None:
        if self._shown is not None and self._shown[0] != name:
            self._shown = None
            self.hist_bars.setOpts(x0=[0], x1=[1], height=[0])
            self.stats_label.setText("waiting for the next measurement…" if name else "")
        self.parameterChanged.emit(name)
