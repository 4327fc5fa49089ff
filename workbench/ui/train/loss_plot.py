"""Live training plots: loss per step (raw + EMA), validation per epoch, learning rate.

One :class:`TrainingPlots` widget holds three pyqtgraph plots:

* ``lossPlot`` (the one tests and users look at): the raw training loss per step,
  its EMA (smoothing slider), the validation loss per epoch and a marker on the best
  epoch (lowest validation loss). Each freeze change applied by the trainer is a
  vertical line with a label.
* ``accuracyPlot``: one validation metric per epoch, picked in ``valMetricCombo`` from
  every ``val_*`` / ``train_*`` metric the run reports (accuracy by default, R² for a
  regression), and the run's best epoch (its ``best`` flag) as a vertical line.
* ``lrPlot``: learning rate per step.

Data arrive as numpy arrays / floats (never tensors) through :meth:`add_steps` and
:meth:`add_epoch`; they go into :class:`~workbench.ui.plot_buffer.PlotBuffer` columns,
and :meth:`refresh` hands ``x[:n], y[:n]`` views to curves created once. The panel
calls :meth:`refresh` on its redraw timer (2 Hz during a run), not per step or batch. Auto peak
downsampling and clip-to-view keep a million points fast; NaN / Inf losses are
skipped by the curves' finite check.
"""

from __future__ import annotations

import io
import math
from pathlib import Path

import numpy as np
import pyqtgraph as pg
from PySide6.QtCore import QBuffer, QIODevice, Qt, Signal
from PySide6.QtWidgets import (
    QComboBox,
    QHBoxLayout,
    QLabel,
    QMenu,
    QToolButton,
    QSlider,
    QSplitter,
    QVBoxLayout,
    QWidget,
)
from scipy.signal import lfilter

from workbench.core import csv_cells
from workbench.core.files import atomic_write_bytes, atomic_write_text
from workbench.core.probe.cadence import SPARSE_POINTS
from workbench.ui.curve_colors import CURVE_COLORS as _C
from workbench.ui.plot_buffer import PlotBuffer
from workbench.ui.plot_legend import legend_above
from workbench.ui.train.epoch_metrics import EpochMetrics, is_unit_metric, metric_keys, metric_label, preferred_metric
from workbench.ui.train.follow_range import FollowRange
from workbench.ui.train.grad_norm_overlay import GradNormOverlay

#: x-axis modes: combo text -> buffer column.
#: The x axes, by their titles in the combo ("Time (s)", not "Wall time (s)": the combo's width is part of the
#: plots' least width, and so of the Training dock's side-by-side width).
X_MODES = {"Step": "step", "Epoch": "epoch", "Time (s)": "time"}

STEP_COLUMNS = ("step", "epoch", "time", "loss", "ema", "lr")
#: Step curves of fewer points than this draw a marker on each (a short run's few steps are not a trend line).
SPARSE_STEPS = SPARSE_POINTS
EPOCH_COLUMNS = ("step", "epoch", "time", "val_loss", "val_acc", "train_loss")
#: Room above the small plots' views, pixels: their top tick label ("1.0", "0.0015") is centred on the
#: view's top edge, and half of it was cut off by the widget's edge.
TOP_PAD_PX = 8
#: The best-epoch label keeps this many pixels from the edges of its view: a box flush with an edge came out
#: a rounding error outside it (and was clipped by a hair).
LABEL_INSET_PX = 1.0


def _forward_fill(y: np.ndarray, start: float) -> np.ndarray:
    """Replace non-finite entries by the previous finite value (``start`` before any)."""
    finite = np.isfinite(y)
    if finite.all():
        return y
    idx = np.where(finite, np.arange(y.shape[0]), -1)
    np.maximum.accumulate(idx, out=idx)
    filled = np.where(idx >= 0, y[np.maximum(idx, 0)], start)
    return filled


def _fit_anchor(preferred: float, at: float, low: float, high: float, size: float) -> float:
    """The anchor nearest ``preferred`` (0: a box of ``size`` px starts at ``at``; 1: it ends there) that keeps
    the box within ``low..high`` (pixels along one axis); a box larger than that room starts at ``low``."""
    if size <= 0:
        return preferred
    most, least = (at - low) / size, 1.0 - (high - at) / size  # the box starting at low, ending at high
    return max(min(preferred, most), min(least, most))


class EmaFilter:
    """Debiased exponential moving average (the TensorBoard smoothing formula).

    ``s_t = a * s_{t-1} + (1 - a) * x_t`` with ``s_{-1} = 0``, reported as
    ``s_t / (1 - a**(t+1))`` so the first values are not pulled towards zero.
    Non-finite inputs are skipped (the previous finite value is repeated).

    Parameters
    ----------
    alpha : float
        Smoothing weight in ``[0, 1)``; 0 = no smoothing.
    """

    def __init__(self, alpha: float = 0.9):
        self.alpha = float(alpha)
        self.reset()

    def reset(self) -> None:
        """Forget the state (start of a new series)."""
        self._state = 0.0
        self._count = 0
        self._last_finite = float("nan")

    def __call__(self, x: np.ndarray) -> np.ndarray:
        """Smooth the next chunk ``x`` (1-D) and return the debiased EMA of the same length."""
        x = np.asarray(x, dtype=np.float64)
        if x.size == 0:
            return x
        a = self.alpha
        first = x[np.isfinite(x)]
        start = self._last_finite if math.isfinite(self._last_finite) else (first[0] if first.size else 0.0)
        x = _forward_fill(x, start)
        self._last_finite = float(x[-1])
        if a <= 0.0:
            self._count += x.size
            return x.copy()
        raw, zf = lfilter([1.0 - a], [1.0, -a], x, zi=[a * self._state])
        self._state = float(zf[0]) / a
        t = np.arange(self._count + 1, self._count + 1 + x.size, dtype=np.float64)
        self._count += x.size
        return raw / (1.0 - a**t)


def _plot(name: str, left: str, bottom: str) -> pg.PlotWidget:
    widget = pg.PlotWidget()
    widget.setObjectName(name)
    item = widget.getPlotItem()
    item.setDownsampling(auto=True, mode="peak")
    item.setClipToView(True)
    # no grid: AxisItem grids are drawn through a translucent QPicture and cost
    # ~6 ms per repaint, the largest share of a live plot's GUI time
    item.setLabel("left", left)
    item.setLabel("bottom", bottom)
    item.getAxis("left").enableAutoSIPrefix(False)
    widget.setMinimumHeight(110)
    return widget


class TrainingPlots(QWidget):
    """Loss, validation and learning-rate plots fed from the training worker.

    Parameters
    ----------
    parent : QWidget, optional
    prompts : Prompts, optional
        Asks where CSV / PNG exports go (the file dialog adds the extension of the chosen type).
        Owner widget.

    Attributes
    ----------
    loss_plot : pg.PlotWidget
        objectName ``lossPlot``; data items in order: train loss (raw), train loss
        (EMA), val loss, best epoch marker.
    accuracy_plot, lr_plot : pg.PlotWidget
        objectNames ``accuracyPlot`` and ``lrPlot``.
    steps, epochs : PlotBuffer
        The data: columns :data:`STEP_COLUMNS` and :data:`EPOCH_COLUMNS`.
    """

    xModeChanged = Signal(str)

    def __init__(self, parent: QWidget | None = None, prompts=None):
        super().__init__(parent)
        self.prompts = prompts
        self.setObjectName("trainingPlots")
        self.steps = PlotBuffer(STEP_COLUMNS, capacity=4096)
        self.epochs = PlotBuffer(EPOCH_COLUMNS, capacity=64)
        #: every named epoch metric (``val_r2``, a user step's ``train_tokens``...), aligned with :attr:`epochs`
        self.metrics = EpochMetrics()
        self._metric = "val_acc"  # shown on the accuracy plot
        self._metric_pinned = False  # the user picked it: new names do not change it
        self._filling_combo = False
        self._ema = EmaFilter(0.6)
        self._markers: list[tuple[float, float, float, str, pg.InfiniteLine]] = []
        self._dirty = False
        self._epochs_pending: list[str] = []  # plots whose epoch curves wait for a redraw
        self._lr_skip = 0
        self._lr_dirty = False
        self._step_markers: dict[int, bool] = {}  # id(curve) -> drawn with a marker per point now
        #: the learning-rate curve is redrawn every this many refreshes (1 = each time)
        self.lr_every = 5
        self._x = "step"
        self._build_plots()
        self._build_controls()
        self._layout()

    # ------------------------------------------------------------------ build
    def _build_plots(self) -> None:
        self.loss_plot = _plot("lossPlot", "loss", "step")
        item = self.loss_plot.getPlotItem()
        legend_above(item)  # in the plot's title row: it never covers a curve
        self.loss_curve = item.plot(name="train loss", pen=pg.mkPen(_C["train_loss"], width=1))
        # 1-px pens: Qt's raster engine strokes wide polylines far slower, and the
        # step curves repaint during the run (wide EMA pen: 0.80-0.90x train
        # throughput in benchmarks/bench_training.py, 1 px: 0.91-0.92x)
        # "smoothed" (the EMA of the "smoothing" slider): the widest entry sets the legend's columns, and
        # "train loss (EMA)" left the plot beside the settings at 1280x800 a five-row legend over its curves
        self.ema_curve = item.plot(name="smoothed", pen=pg.mkPen(_C["train_loss_ema"], width=1))
        self.val_loss_curve = item.plot(
            name="val loss", pen=pg.mkPen(_C["val_loss"], width=2), symbol="o", symbolSize=6,
            symbolBrush=_C["val_loss"], symbolPen=None,
        )
        self.best_marker = item.plot(
            name="best epoch", pen=None, symbol="star", symbolSize=16,
            symbolBrush=(230, 180, 0), symbolPen=pg.mkPen((120, 90, 0)),
        )
        for curve in (self.loss_curve, self.ema_curve, self.val_loss_curve, self.best_marker):
            curve.setSkipFiniteCheck(False)

        self.accuracy_plot = _plot("accuracyPlot", "val accuracy", "step")
        self.acc_curve = self.accuracy_plot.getPlotItem().plot(
            name="val accuracy", pen=pg.mkPen(_C["val_acc"], width=2), symbol="o", symbolSize=6,
            symbolBrush=_C["val_acc"], symbolPen=None,
        )
        self.acc_curve.setSkipFiniteCheck(False)
        self.accuracy_plot.getPlotItem().setYRange(0.0, 1.0, padding=0.02)
        self.accuracy_plot.getPlotItem().enableAutoRange(axis="y", enable=False)
        self._y_range = (0.0, 1.0)
        self.best_line = pg.InfiniteLine(
            angle=90, movable=False, pen=pg.mkPen(_C["best"], width=1, style=Qt.PenStyle.DashLine),
            label="best", labelOpts={"position": 0.1, "color": _C["best"]},
        )
        self.best_line.setVisible(False)
        self.accuracy_plot.addItem(self.best_line, ignoreBounds=True)
        view = self.accuracy_plot.getPlotItem().getViewBox()
        view.sigXRangeChanged.connect(self._anchor_best_label)
        view.sigResized.connect(self._anchor_best_label)  # same range, fewer pixels: the label may no longer fit

        self.grad_norm = GradNormOverlay(self.loss_plot)

        self.lr_plot = _plot("lrPlot", "learning rate", "step")
        self.lr_curve = self.lr_plot.getPlotItem().plot(name="lr", pen=pg.mkPen(_C["lr"], width=1))
        self.lr_curve.setSkipFiniteCheck(False)
        for plot in (self.accuracy_plot, self.lr_plot):  # the top tick label whole (the loss plot has its legend)
            left, _, right, bottom = plot.getPlotItem().layout.getContentsMargins()
            plot.getPlotItem().layout.setContentsMargins(left, TOP_PAD_PX, right, bottom)
        # the step plots' views move in steps, not at every refresh (see follow_range.py)
        self.loss_range = FollowRange(self.loss_plot)
        self.lr_range = FollowRange(self.lr_plot)
        self.accuracy_range = FollowRange(self.accuracy_plot, follow_y=False)  # its y is 0..1
        self._y_bounds = (math.inf, -math.inf)
        self._lr_max = 0.0

    def _build_controls(self) -> None:
        self.x_combo = QComboBox()
        self.x_combo.setObjectName("xAxisCombo")
        self.x_combo.addItems(list(X_MODES))
        self.x_combo.setToolTip("x axis of every plot")
        self.x_combo.currentTextChanged.connect(self._on_x_mode)
        self.smoothing_slider = QSlider(Qt.Orientation.Horizontal)
        self.smoothing_slider.setObjectName("smoothingSlider")
        self.smoothing_slider.setRange(0, 99)
        self.smoothing_slider.setMinimumWidth(50)
        self.smoothing_slider.setMaximumWidth(200)
        self.smoothing_slider.setValue(60)
        self.smoothing_slider.setToolTip("EMA smoothing weight of the training loss (0 = raw)")
        self.smoothing_slider.valueChanged.connect(self._on_smoothing)
        self.smoothing_label = QLabel("0.60")
        self.export_button = QToolButton(text="Export", objectName="exportPlotsButton",
                                         toolTip="Save the curves as CSV or the plots as a PNG image")
        self.export_button.setPopupMode(QToolButton.ToolButtonPopupMode.InstantPopup)
        menu = QMenu(self.export_button)
        self.export_csv_action = menu.addAction("Curves as CSV…", self._on_export_csv)
        self.export_csv_action.setObjectName("exportCsvAction")
        self.export_png_action = menu.addAction("Plots as PNG…", self._on_export_png)
        self.export_png_action.setObjectName("exportPngAction")
        self.export_button.setMenu(menu)
        self.export_button.setMaximumHeight(self.x_combo.sizeHint().height())  # its arrow made the row taller
        self.metric_combo = QComboBox()
        self.metric_combo.setObjectName("valMetricCombo")
        self.metric_combo.setToolTip("The metric of the lower-left plot, per epoch: every val_* and train_* "
                                     "metric the run reports (as in metrics.csv)")
        self.metric_combo.setSizeAdjustPolicy(QComboBox.SizeAdjustPolicy.AdjustToContents)
        self.metric_combo.addItem(self._metric, self._metric)
        self.metric_combo.currentIndexChanged.connect(self._on_metric_changed)

    def _layout(self) -> None:
        controls = QHBoxLayout()
        controls.addWidget(QLabel("x:"))
        controls.addWidget(self.x_combo)
        controls.addSpacing(8)
        controls.addWidget(QLabel("smoothing:"))
        controls.addWidget(self.smoothing_slider, 1)
        controls.addWidget(self.smoothing_label)
        controls.addStretch(1)
        controls.addWidget(self.export_button)
        lower = QSplitter(Qt.Orientation.Horizontal)
        lower.addWidget(self._metric_pane())
        lower.addWidget(self.lr_plot)
        split = QSplitter(Qt.Orientation.Vertical)
        split.addWidget(self.loss_plot)
        split.addWidget(lower)
        split.setStretchFactor(0, 3)
        split.setStretchFactor(1, 2)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.addLayout(controls)
        layout.addWidget(split, 1)

    def _metric_pane(self) -> QWidget:
        """The accuracy plot under its metric picker (``valMetricPane``)."""
        pane = QWidget(objectName="valMetricPane")
        row = QHBoxLayout()
        row.setContentsMargins(4, 0, 0, 0)
        row.addWidget(QLabel("per epoch:"))
        row.addWidget(self.metric_combo)
        row.addStretch(1)
        column = QVBoxLayout(pane)
        column.setContentsMargins(0, 0, 0, 0)
        column.setSpacing(0)
        column.addLayout(row)
        column.addWidget(self.accuracy_plot, 1)
        return pane

    # ------------------------------------------------------------------ data
    def clear(self) -> None:
        """Forget all data and markers (a new run starts)."""
        self.steps.clear()
        self.epochs.clear()
        self.metrics.clear()
        self._fill_metric_combo()
        self._ema.reset()
        for *_, line in self._markers:
            self.loss_plot.removeItem(line)
        self._markers.clear()
        self.best_line.setVisible(False)
        self.grad_norm.clear()
        self._y_bounds = (math.inf, -math.inf)
        self._lr_max = 0.0
        for follower in (self.loss_range, self.lr_range, self.accuracy_range):
            follower.reset()
        self.refresh(force=True)

    def add_steps(self, step, loss, lr=None, epoch=None, time=None) -> None:
        """Append per-step values (1-D arrays of equal length; floats for one step).

        Parameters
        ----------
        step : array_like of int
            Global optimizer step of each value.
        loss : array_like of float
            Training loss; NaN / Inf are kept in the data and skipped when drawn.
        lr : array_like of float, optional
            Learning rate of the first param group.
        epoch : array_like of float, optional
            Fractional epoch (``epoch + batch / batches_per_epoch``).
        time : array_like of float, optional
            Wall time since the run started, seconds.
        """
        loss = np.atleast_1d(np.asarray(loss, dtype=np.float64))
        cols = {"step": step, "loss": loss, "ema": self._ema(loss)}
        self._grow_y(loss)
        if lr is not None:
            lr_arr = np.atleast_1d(np.asarray(lr, dtype=np.float64))
            lr_arr = lr_arr[np.isfinite(lr_arr)]
            if lr_arr.size:
                self._lr_max = max(self._lr_max, float(lr_arr.max()))
        for name, value in (("lr", lr), ("epoch", epoch), ("time", time)):
            if value is not None:
                cols[name] = value
        self.steps.append_many({k: np.atleast_1d(v) for k, v in cols.items()})
        self._dirty = True

    def add_epoch(self, epoch, step, val_loss=None, val_acc=None, train_loss=None, time=None,
                  metrics: dict | None = None, best: bool | None = None) -> None:
        """Append one epoch's validation metrics (``epoch`` = epochs completed, e.g. 1.0).

        Parameters
        ----------
        metrics : dict, optional
            Every other number of the epoch (``val_r2``, ``train_tokens``...; only ``val_*`` and
            ``train_*`` keys are kept): each becomes a choice of ``valMetricCombo`` when it first arrives.
        best : bool, optional
            The run's own ``best`` flag of this epoch (its monitor metric improved); the "best" marks
            follow it. Without it (None on every row) the best epoch is the lowest validation loss.
        """
        nan = float("nan")
        values = metric_keys(metrics or {})
        if val_acc is not None:
            values.setdefault("val_acc", float(val_acc))
        if self.metrics.add_row(values, best):
            self._fill_metric_combo()
        self.epochs.append(
            epoch=epoch, step=step, time=nan if time is None else time,
            val_loss=nan if val_loss is None else val_loss,
            val_acc=nan if val_acc is None else val_acc,
            train_loss=nan if train_loss is None else train_loss,
        )
        if val_loss is not None:
            self._grow_y(np.array([val_loss], dtype=np.float64))
        # a part still waiting keeps its turn: epochs ending faster than the passes (an attached run's
        # history, short epochs) reset the list to the loss plot first, and the accuracy plot stayed empty
        self._epochs_pending += [p for p in ("loss", "accuracy") if p not in self._epochs_pending]

    def expect_extent(self, steps: float, epochs: float) -> None:
        """The run's planned end (``total_steps``, ``epochs``): the step and epoch views span it from the start,
        so they need not move while the curves fill them (wall time still grows in 1-2-5 steps)."""
        end = {"step": steps, "epoch": epochs}.get(self._x, math.nan)
        for follower in (self.loss_range, self.lr_range, self.accuracy_range):
            follower.expect_x(0.0, float(end))

    def _grow_y(self, values: np.ndarray) -> None:
        """Widen the finite y bounds of the loss plot's data (what its view follows)."""
        finite = values[np.isfinite(values)]
        if finite.size:
            lo, hi = self._y_bounds
            self._y_bounds = (min(lo, float(finite.min())), max(hi, float(finite.max())))

    def mark_freeze(self, step: float, text: str, epoch: float | None = None, time: float | None = None) -> pg.InfiniteLine:
        """Draw a labelled vertical line where a freeze change was applied (at ``step``)."""
        line = pg.InfiniteLine(
            angle=90, movable=False, pen=pg.mkPen(_C["freeze"], width=1, style=Qt.PenStyle.DashLine),
            # labels of successive markers step down the plot, so two close markers never overlap
            label=text, labelOpts={"position": 0.95 - 0.13 * (len(self._markers) % 4), "color": _C["freeze"],
                                   "anchors": [(0, 0), (0, 0)], "fill": (255, 255, 255, 200)},
        )
        line.setToolTip(text)
        nan = float("nan")
        entry = (float(step), nan if epoch is None else float(epoch), nan if time is None else float(time), text, line)
        self._markers.append(entry)
        self.loss_plot.addItem(line, ignoreBounds=True)
        self._place_marker(entry)
        return line

    def freeze_markers(self) -> list[pg.InfiniteLine]:
        """The vertical freeze-change lines on the loss plot, oldest first."""
        return [entry[-1] for entry in self._markers]

    def best_epoch(self) -> int | None:
        """Row of the best epoch: the last the run flagged ``best``, else the lowest finite validation loss; or None."""
        if self.metrics.says_best():
            return self.metrics.last_best()
        v = self.epochs["val_loss"]
        finite = np.isfinite(v)
        return int(np.argmin(np.where(finite, v, np.inf))) if finite.any() else None

    def best_epoch_number(self) -> int | None:
        """The run's own number (1-based) of the best epoch, or None.

        The ``epoch`` column holds epochs completed, so after a resume at epoch 2
        the first row is epoch 3, not 1 (:meth:`best_epoch` is only the row index).
        """
        best = self.best_epoch()
        if best is None:
            return None
        completed = self.epochs["epoch"][best]
        return int(round(completed)) if np.isfinite(completed) else best + 1

    # ------------------------------------------------------------------ the picked metric
    def shown_metric(self) -> str:
        """The metric the accuracy plot shows (``"val_acc"``, ``"val_r2"``...)."""
        return self._metric

    def metric_names(self) -> list[str]:
        """The choices of ``valMetricCombo``, in order."""
        return [self.metric_combo.itemData(i) for i in range(self.metric_combo.count())]

    def set_metric(self, name: str) -> None:
        """Show ``name`` on the accuracy plot (as choosing it in ``valMetricCombo`` does); a name the run has
        not reported yet is added to the choices and drawn once it arrives."""
        index = self.metric_combo.findData(name)
        if index < 0:
            self.metric_combo.addItem(name, name)
            index = self.metric_combo.count() - 1
        self.metric_combo.setCurrentIndex(index)

    def metric_values(self) -> np.ndarray:
        """The picked metric per epoch row (NaN where the run did not report it)."""
        return self.metrics[self._metric]

    def _fill_metric_combo(self) -> None:
        """The combo lists every metric seen (the picked one kept); unpinned, it shows :func:`preferred_metric`."""
        names = self.metrics.names()
        if not self._metric_pinned:
            self._metric = preferred_metric(names, self.metrics.has_value) or self._metric
        shown = [n for n in names if self.metrics.has_value(n) or n == self._metric]
        if self._metric not in shown:
            shown.insert(0, self._metric)
        if shown == self.metric_names():
            return
        self._filling_combo = True
        try:
            self.metric_combo.clear()
            for name in shown:
                self.metric_combo.addItem(name, name)
            self.metric_combo.setCurrentIndex(shown.index(self._metric))
        finally:
            self._filling_combo = False
        self._on_metric_shown()

    def _on_metric_changed(self, index: int) -> None:
        if self._filling_combo or index < 0:
            return
        self._metric = self.metric_combo.itemData(index)
        self._metric_pinned = True
        self._on_metric_shown()
        self.refresh_epochs()  # also after a run, when no redraw tick runs

    def _on_metric_shown(self) -> None:
        self.accuracy_plot.getPlotItem().setLabel("left", metric_label(self._metric))
        self._epochs_pending = list(dict.fromkeys([*self._epochs_pending, "accuracy"]))

    def _fit_metric_y(self, y: np.ndarray) -> None:
        """y of the accuracy plot: 0..1 for accuracy-like metrics, else the data with 10 % room (set per epoch,
        so a still view between epochs)."""
        finite = y[np.isfinite(y)]
        if is_unit_metric(self._metric) or not finite.size:
            lo, hi = 0.0, 1.0
        else:
            lo, hi = float(finite.min()), float(finite.max())
            span = max(hi - lo, abs(hi) * 0.1, 1e-6)
            lo, hi = lo - 0.1 * span, hi + 0.1 * span
        if (lo, hi) != self._y_range:
            self._y_range = (lo, hi)
            self.accuracy_plot.getPlotItem().setYRange(lo, hi, padding=0.02)

    # ------------------------------------------------------------------ drawing
    def refresh(self, force: bool = False) -> None:
        """Hand the buffers to the curves (``x[:n], y[:n]`` views); only what changed is touched.

        Step curves (loss, EMA) are updated when steps arrived, the learning-rate
        curve at most every :attr:`lr_every` refreshes (its plot is small and mostly
        flat), and the per-epoch curves only when an epoch ended: every ``setData``
        repaints its plot, and painting is the GUI thread's main cost during a run.
        :meth:`refresh_steps` and :meth:`refresh_epochs` do each half on its own.
        """
        self.refresh_steps(force)
        self.refresh_epochs(force)

    def refresh_epochs(self, force: bool = False, one_plot: bool = False) -> None:
        """The per-epoch curves, the best-epoch marks and the views, when an epoch ended (or ``force``).

        Parameters
        ----------
        force : bool
            Redraw them even when no epoch ended.
        one_plot : bool
            Redraw only one plot's part per call: the loss plot's (validation loss,
            best-epoch star) first, the accuracy plot's (accuracy, best-epoch line) at
            the next call. A live panel calls it so on the passes between
            :meth:`refresh_steps`: an epoch's end then repaints in short passes
            (each part costs 4-5 ms of repaint on the 2-core reference machine when idle,
            about twice that while training; together they made the late ticks of a run).
        """
        if force:
            self._epochs_pending = ["loss", "accuracy"]
        if not self._epochs_pending:
            return
        self._follow()
        parts = self._epochs_pending[:1] if one_plot else list(self._epochs_pending)
        self._epochs_pending = [p for p in self._epochs_pending if p not in parts]
        xe = self.epochs[self._x]
        best = self.best_epoch()
        if "loss" in parts:
            self.val_loss_curve.setData(xe, self.epochs["val_loss"])
            if best is None:
                self.best_marker.setData([], [])
            else:
                self.best_marker.setData([xe[best]], [self.epochs["val_loss"][best]])
        if "accuracy" in parts:
            y = self.metric_values()
            if np.isfinite(y).any():
                self.acc_curve.setData(xe, y)
            else:  # a run that reports no such metric (an attached script's epochs with only val_loss)
                self.acc_curve.setData([], [])  # all-NaN points made the symbols' bounds warn on each redraw
            self._fit_metric_y(y)
            if best is None:
                self.best_line.setVisible(False)
            else:
                self.best_line.setPos(xe[best])
                text = f"best: epoch {self.best_epoch_number()}"
                self.best_line.label.format = text  # the label resets its text to this when the line moves
                self.best_line.label.setText(text)
                self.best_line.setVisible(bool(np.isfinite(xe[best])))
                self._anchor_best_label()

    def _anchor_best_label(self, *_args) -> None:
        """Turn the "best: epoch N" label to the wider side of its line, standing near the bottom (where the
        accuracy of the best epoch seldom is), and shift it along so its whole box lies inside the view.

        pyqtgraph centres it on the line, so a best epoch at the view's right edge (the last
        one, the usual case) had half its label cut off; and in the narrow panel (a view of ~120 px for a
        ~90 px label) neither side of a line near the middle has room for it: it then straddles the line.
        """
        if not self.best_line.isVisible():
            return
        vb = self.accuracy_plot.getPlotItem().getViewBox()
        (x0, x1), _ = vb.viewRange()
        label = self.best_line.label
        box = label.textItem.boundingRect()  # pixels: the label does not scale with the view
        view = vb.sceneBoundingRect().adjusted(LABEL_INSET_PX, LABEL_INSET_PX, -LABEL_INSET_PX, -LABEL_INSET_PX)
        at_x = vb.mapViewToScene(pg.Point(self.best_line.value(), 0.0)).x()
        at_y = view.bottom() - label.orthoPos * view.height()  # position 0 is the view's bottom
        wider = 1.0 if self.best_line.value() > (x0 + x1) / 2 else 0.0
        anchor = (_fit_anchor(wider, at_x, view.left(), view.right(), box.width()),
                  _fit_anchor(1.0, at_y, view.top(), view.bottom(), box.height()))
        if label.anchors != [anchor, anchor]:
            label.anchors = [anchor, anchor]
            label.updatePosition()

    def refresh_steps(self, force: bool = False) -> None:
        """The step curves (loss, EMA, learning rate, grad-norm overlay) and the views, when steps arrived."""
        self.grad_norm.refresh(self.steps, self._x, force=force)
        steps_dirty = self._dirty or force
        self._lr_skip += 1
        lr_due = self._lr_dirty and (force or self._lr_skip >= self.lr_every)
        if not (steps_dirty or lr_due):
            return
        xs = self.steps[self._x]
        if steps_dirty:
            self._dirty = False
            self._lr_dirty = True
            self._set_step_data(self.loss_curve, xs, self.steps["loss"])
            self._set_step_data(self.ema_curve, xs, self.steps["ema"])
        if self._lr_dirty and (force or self._lr_skip >= self.lr_every):
            self._lr_skip = 0
            self._lr_dirty = False
            self._set_step_data(self.lr_curve, xs, self.steps["lr"])
        if steps_dirty:
            self._follow()

    def _set_step_data(self, curve: pg.PlotDataItem, x: np.ndarray, y: np.ndarray) -> None:
        """``curve.setData(x, y)``, with a marker on each point while there are fewer than :data:`SPARSE_STEPS`.

        The style changes only when the curve crosses that count (a new style costs a full redraw).
        """
        markers = len(x) < SPARSE_STEPS
        if self._step_markers.get(id(curve)) == markers:
            curve.setData(x, y)
            return
        self._step_markers[id(curve)] = markers
        color = curve.opts["pen"].color() if curve.opts["pen"] is not None else None
        style = ({"symbol": "o", "symbolSize": 5, "symbolBrush": color, "symbolPen": None} if markers
                 else {"symbol": None})
        curve.setData(x, y, **style)

    def _follow(self) -> None:
        """Move the loss and lr views only when the data leave them (:class:`FollowRange`)."""
        xs = [a[np.isfinite(a)] for a in (self.steps[self._x][-1:], self.epochs[self._x][-1:])]
        xs = [a for a in xs if a.size]
        if not xs:
            return
        first = [a[np.isfinite(a)][:1] for a in (self.steps[self._x][:1], self.epochs[self._x][:1])]
        first = [a for a in first if a.size]
        x_lo = min(0.0, min(float(a[0]) for a in first)) if first else 0.0
        x_hi = max(float(a[-1]) for a in xs)
        lo, hi = self._y_bounds
        self.loss_range.update(x_lo, x_hi, lo if math.isfinite(lo) else math.nan, hi if math.isfinite(hi) else math.nan)
        # the lr plot starts at 0 and tops at 1.5x the largest lr so far (a constant lr sits at 2/3 height)
        lr_top = 1.5 * self._lr_max / 1.08 if self._lr_max > 0 else math.nan
        self.lr_range.update(x_lo, x_hi, 0.0, lr_top)
        self.accuracy_range.update(x_lo, x_hi)

    def _place_marker(self, entry) -> None:
        step, epoch, time, _, line = entry
        pos = {"step": step, "epoch": epoch, "time": time}[self._x]
        line.setVisible(math.isfinite(pos))
        if math.isfinite(pos):
            line.setPos(pos)

    def x_mode(self) -> str:
        """Current x column: ``"step"``, ``"epoch"`` or ``"time"``."""
        return self._x

    def set_x_mode(self, column: str) -> None:
        """Switch every plot's x axis to ``"step"``, ``"epoch"`` or ``"time"``."""
        for text, col in X_MODES.items():
            if col == column:
                self.x_combo.setCurrentText(text)
                return
        raise ValueError(f"unknown x-axis mode {column!r}; expected one of {list(X_MODES.values())}")

    def _on_x_mode(self, text: str) -> None:
        self._x = X_MODES[text]
        for plot in (self.loss_plot, self.accuracy_plot, self.lr_plot):
            plot.getPlotItem().setLabel("bottom", text.lower())
        for entry in self._markers:
            self._place_marker(entry)
        for follower in (self.loss_range, self.lr_range, self.accuracy_range):
            follower.reset()  # a new x unit: the views follow the data again
        self.refresh(force=True)
        self.xModeChanged.emit(self._x)

    def set_smoothing(self, alpha: float) -> None:
        """Set the EMA weight in ``[0, 0.99]`` and recompute the smoothed curve."""
        self.smoothing_slider.setValue(int(round(alpha * 100)))

    def _on_smoothing(self, value: int) -> None:
        self._ema = EmaFilter(value / 100.0)
        self.smoothing_label.setText(f"{value / 100:.2f}")
        n = len(self.steps)
        if n:
            self.steps._data[STEP_COLUMNS.index("ema"), :n] = self._ema(self.steps["loss"])
        self.refresh(force=True)

    # ------------------------------------------------------------------ export
    def export_csv(self, path) -> Path:
        """Write every curve to ``path`` as CSV: one row per step, then one per epoch.

        Columns: ``kind`` (``step`` | ``epoch``), step, epoch, time_s, loss, loss_ema,
        lr, val_loss, val_acc, then every other epoch metric the run reported (``val_r2``,
        ``train_tokens``...) in the order they arrived. Returns the path written.
        """
        path = Path(path)
        header = ["kind", "step", "epoch", "time_s", "loss", "loss_ema", "lr", "val_loss", "val_acc"]
        extra = [n for n in self.metrics.names() if n not in header]
        header += extra
        s, e = self.steps, self.epochs
        buf = io.StringIO()
        out = csv_cells.writer(buf)
        out.writerow(header)
        for i in range(len(s)):
            out.writerow(["step", *(_fmt(s[c][i]) for c in ("step", "epoch", "time", "loss", "ema", "lr")), "", "",
                          *([""] * len(extra))])
        columns = [self.metrics[n] for n in extra]
        for i in range(len(e)):
            out.writerow(["epoch", *(_fmt(e[c][i]) for c in ("step", "epoch", "time", "train_loss")), "", "",
                          _fmt(e["val_loss"][i]), _fmt(e["val_acc"][i]), *(_fmt(c[i]) for c in columns)])
        return atomic_write_text(path, buf.getvalue())

    def export_png(self, path) -> Path:
        """Save the three plots (as shown) to ``path`` as PNG; returns the path."""
        path = Path(path)
        buf = QBuffer()
        buf.open(QIODevice.OpenModeFlag.WriteOnly)
        if not self.grab().save(buf, "PNG"):
            raise OSError(f"could not render the plots for {path}")
        return atomic_write_bytes(path, bytes(buf.data()))

    def _export(self, caption: str, name_filter: str, default: str, write) -> None:
        if self.prompts is None:
            return
        path = self.prompts.save_path(caption, name_filter, default)
        if not path:
            return
        try:
            write(path)
        except OSError as exc:
            self.prompts.error(f"Could not write {path}: {exc}")

    def _on_export_csv(self) -> None:
        self._export("Export curves as CSV", "CSV files (*.csv)", "curves.csv", self.export_csv)

    def _on_export_png(self) -> None:
        self._export("Export plots as PNG", "PNG images (*.png)", "plots.png", self.export_png)


def _fmt(v: float) -> str:
    return "" if math.isnan(v) else repr(float(v))
