"""The Probes panel's Gradients tab: grad norm over steps and the latest step per layer.

``GradNormsView`` draws :class:`~workbench.core.probe.gradients.GradNorms` that the
live :class:`~workbench.core.probe.callback.ProbeCallback` measured; the per-layer
rows (trainable / frozen / no grad) come from :func:`workbench.core.probe.gradients.layer_norms`,
so a frozen layer is drawn as a grey "frozen" bar, never as a norm of 0, and a
layer unfrozen mid-run gets its green bar and its curve points from the first
measurement after the unfreeze. A curve of few or far-apart measurements
(:func:`workbench.core.probe.cadence.sparse`) is drawn as markers only: a line
between step 1 and step 46 would read as a trend nobody measured.

objectNames: ``gradNormPlot`` (the plots), ``gradNormLabel``.
"""

from __future__ import annotations

import math

import numpy as np
import pyqtgraph as pg
from PySide6.QtWidgets import QLabel, QVBoxLayout, QWidget

from workbench.core.probe.cadence import sparse
from workbench.core.probe.gradients import GradNorms, layer_norms
from workbench.ui.axis_fit import axis_font, category_ticks, fit_axis_title
from workbench.ui.probe.module_label import elide_module_name
from workbench.ui.draw_when_shown import DrawWhenShown
from workbench.ui.log_axis import LogTicks
from workbench.ui.plot_buffer import PlotBuffer
from workbench.ui.plot_legend import legend_above

_PENS = ["#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#17becf"]
_FROZEN_BRUSH = pg.mkBrush(180, 180, 180, 110)
#: At most this many layer names label the bar chart's axis.
MAX_TICKS = 10
#: Longest layer name under a bar, in characters (longer ones are shortened in the middle; the tooltip has them whole).
MAX_NAME_CHARS = 16
#: Axis titles, longest first: the longest that fits the plot's height is shown.
CURVE_TITLES = ("grad norm (L2)", "grad norm", "norm")
BAR_TITLES = ("log10 grad norm", "log10 norm", "log10")


def _fmt(v: float) -> str:
    return "nan" if not math.isfinite(v) else f"{v:.4g}"


class GradNormsView(QWidget):
    """Curves of the global and probed modules' grad norms (log y) over a bar chart of the latest step."""

    def __init__(self, parent: QWidget | None = None):
        super().__init__(parent)
        self.history: dict[str, PlotBuffer] = {}
        self.curves: dict[str, pg.PlotDataItem] = {}
        self._markers: dict[str, bool] = {}  # label -> drawn as markers (sparse) now
        self.layers: list = []  # the LayerNorm rows drawn last
        self._later = DrawWhenShown(self)  # live drawings wait while another tab covers this one
        self.plots = pg.GraphicsLayoutWidget()
        self.plots.setObjectName("gradNormPlot")
        self.curve_plot = self.plots.addPlot(row=0, col=0, axisItems={"left": LogTicks("left")})
        self.curve_plot.setLogMode(y=True)
        self.curve_plot.getAxis("left").enableAutoSIPrefix(False)  # "(x0.001)" over log ticks misleads
        self.curve_plot.setLabel("bottom", "step")
        self.curve_plot.setLabel("left", CURVE_TITLES[0])
        self.legend = legend_above(self.curve_plot, columns=4, row_height=20)  # never over the latest points
        self.curve_plot.showGrid(y=True, alpha=0.3)
        self.bars_plot = self.plots.addPlot(row=1, col=0, title="Latest step, per layer (grey: frozen)")
        self.bars_plot.setLabel("left", BAR_TITLES[0])
        self.bars = pg.BarGraphItem(x=[], y0=[], height=[], width=0.8, brush="#2ca02c", pen=None)
        self.frozen_bars = pg.BarGraphItem(x=[], y0=[], height=[], width=0.8, brush=_FROZEN_BRUSH, pen=None)
        self.bars_plot.addItem(self.frozen_bars)
        self.bars_plot.addItem(self.bars)
        self.label = QLabel(objectName="gradNormLabel", wordWrap=True)
        self.label.setText("Gradient norms draw live during training.")
        v = QVBoxLayout(self)
        v.setContentsMargins(0, 0, 0, 0)
        v.addWidget(self.plots, 1)
        v.addWidget(self.label)
        self._tick_names: list[str] = []  # the bars' full names, left to right
        self._ticks: list | None = None  # the bottom axis's ticks last set
        self.bars_plot.getViewBox().sigResized.connect(self._fit_axes)
        self.curve_plot.getViewBox().sigResized.connect(self._fit_axes)
        self.plots.scene().sigMouseMoved.connect(self._on_mouse_moved)

    def clear(self) -> None:
        """Forget history, curves and bars (a new model)."""
        self._later.discard()
        self.history.clear()
        for curve in self.curves.values():
            self.curve_plot.removeItem(curve)
        self.curves.clear()
        self._markers.clear()
        self.layers = []
        self.bars.setOpts(x=[], y0=[], height=[])
        self.frozen_bars.setOpts(x=[], y0=[], height=[])
        self.label.setText("Gradient norms draw live during training.")

    def append(self, step: int, grads: GradNorms, probed: list[str]) -> None:
        """Add one measurement's global norm and the probed modules' subtree norms to the history.

        A probed module without a norm at this step (frozen, or no parameters) gets no point.
        """
        for name, label in {"": "global", **{n: n for n in probed}}.items():
            value = grads.modules.get(name)
            if value is not None:
                buf = self.history.setdefault(label, PlotBuffer(("step", "norm"), capacity=256))
                buf.append(step=step, norm=value)

    def refresh_curves(self) -> None:
        """Hand the history to the curves (created once per label): markers while sparse, else lines.

        While the view is hidden this waits for it to be shown (the history keeps every point meanwhile).
        """
        self._later.draw("curves", self._draw_curves)

    def _draw_curves(self) -> None:
        for i, (label, buf) in enumerate(self.history.items()):
            curve = self.curves.get(label)
            if curve is None:
                curve = self.curve_plot.plot(name=label)
                self.curves[label] = curve
                self._fit_legend_row()
            y = buf["norm"]
            ok = np.isfinite(y) & (y > 0)  # a log axis cannot show 0 / NaN
            x = buf["step"][ok]
            markers = sparse(x)
            if self._markers.get(label) != markers:
                self._markers[label] = markers
                curve.setData(x, y[ok], **_style(_PENS[i % len(_PENS)], label == "global", markers))
            else:
                curve.setData(x, y[ok])

    def _fit_legend_row(self) -> None:
        """The title row as tall as the legend's rows (4 names a row), so that it never reaches into the data."""
        self.curve_plot.layout.setRowFixedHeight(0, max(20.0, self.legend.boundingRect().height()))

    def _fit_axes(self, *_args) -> None:
        """Bar names that do not overlap (shortened, every k-th) and axis titles that fit the plots' heights."""
        axis = self.bars_plot.getAxis("bottom")
        vb = self.bars_plot.getViewBox()
        names = self._tick_names
        # the first bar's centre lies 0.6 bar slots inside the view (the x range is -0.6 .. n - 0.4)
        lead = vb.mapRectToScene(vb.boundingRect()).left() + 0.6 * vb.width() / max(len(names) + 0.2, 1.0)
        ticks = category_ticks([elide_module_name(n, MAX_NAME_CHARS) for n in names], vb.width(), axis_font(axis), max_chars=MAX_NAME_CHARS, lead_px=lead)
        if len(ticks) > MAX_TICKS:
            ticks = ticks[::math.ceil(len(ticks) / MAX_TICKS)]
        if ticks != self._ticks:
            self._ticks = ticks
            axis.setTicks([ticks])
        fit_axis_title(self.curve_plot, "left", CURVE_TITLES)
        fit_axis_title(self.bars_plot, "left", BAR_TITLES)

    def bar_at(self, scene_pos) -> int | None:
        """Index of the bar under a scene position (None outside the bar chart)."""
        vb = self.bars_plot.getViewBox()
        if not self.layers or not vb.sceneBoundingRect().contains(scene_pos):
            return None
        i = int(round(vb.mapSceneToView(scene_pos).x()))
        return i if 0 <= i < len(self.layers) else None

    def _all_bars_text(self) -> str:
        return "\n".join(f"{r.module or '(model)'}: {_fmt(r.norm) if r.state == 'trainable' else r.state}"
                         for r in self.layers[:60])

    def _on_mouse_moved(self, pos) -> None:
        """The tooltip names the bar under the mouse in full (the axis may show it shortened, or not at all)."""
        i = self.bar_at(pos)
        if i is None:
            self.bars_plot.setToolTip(self._all_bars_text())
            return
        r = self.layers[i]
        self.bars_plot.setToolTip(f"{r.module or '(model)'}: {_fmt(r.norm) if r.state == 'trainable' else r.state}")

    def drawn_as_markers(self, label: str) -> bool:
        """True when the curve of ``label`` shows its measurements as markers without a line."""
        return bool(self._markers.get(label))

    def show_latest(self, step: int, grads: GradNorms, probed: list[str]) -> None:
        """Bars of the latest measurement: green log10 norms, grey full-height bars for frozen layers.

        While the view is hidden the newest measurement waits for it to be shown.
        """
        probed = list(probed)  # the panel's list changes in place
        self._later.draw("latest", lambda: self._draw_latest(step, grads, probed))

    def _draw_latest(self, step: int, grads: GradNorms, probed: list[str]) -> None:
        rows = layer_norms(grads)
        self.layers = rows
        x = np.arange(len(rows), dtype=float)
        vals = np.array([r.norm for r in rows], dtype=float)
        with np.errstate(divide="ignore", invalid="ignore"):
            logs = np.where(vals > 0, np.log10(vals), np.nan)
        ok = np.isfinite(logs)
        lo = float(np.nanmin(logs)) - 1 if ok.any() else -8.0
        hi = float(np.nanmax(logs)) + 0.5 if ok.any() else 1.0
        self.bars.setOpts(x=x[ok], y0=np.full(ok.sum(), lo), height=logs[ok] - lo, width=0.8)
        fz = np.array([r.state == "frozen" for r in rows], dtype=bool)
        self.frozen_bars.setOpts(x=x[fz], y0=np.full(fz.sum(), lo), height=np.full(fz.sum(), hi - lo), width=0.8)
        self._tick_names = [(r.module or "(model)") + (" (frozen)" if fz[i] else "") for i, r in enumerate(rows)]
        self._fit_axes()
        self.bars_plot.setXRange(-0.6, max(len(rows) - 0.4, 0.6), padding=0)
        self.bars_plot.setYRange(lo, hi)
        self.bars_plot.setToolTip(self._all_bars_text())
        text = (f"step {step}: global grad norm {_fmt(grads.global_norm)}; "
                f"{len(grads.params)} parameters with gradients, {len(grads.frozen)} frozen")
        no_curve = [n or "(model)" for n in probed if n not in grads.modules]
        if no_curve:
            text += f"; no gradient (frozen or no parameters): {', '.join(no_curve)}"
        self.label.setText(text)


def _style(color: str, wide: bool, markers: bool) -> dict:
    """A curve's look: a line (2 px for the global norm), or markers alone for sparse measurements."""
    if markers:
        return {"pen": None, "symbol": "o", "symbolSize": 7 if wide else 5, "symbolBrush": pg.mkBrush(color),
                "symbolPen": None}
    return {"pen": pg.mkPen(color, width=2 if wide else 1), "symbol": None}
