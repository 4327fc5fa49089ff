"""The Runs dock: the run folders under the runs root, their curves overlaid, their settings compared.

:class:`RunsPanel` lists :func:`workbench.core.train.run_index.list_runs` in a
``QTableView`` (:class:`RunsTableModel`, a ``QAbstractTableModel``); selecting
several rows overlays one metric of each (train loss, val loss, val accuracy,
LR; from each folder's ``metrics.csv``) on shared axes (step, epoch or wall
time), one colour per run with a legend by run name, and shows only the
settings that differ (:func:`~workbench.core.train.run_index.config_diff`).
"Export CSV…" writes the selected runs' metrics as one tidy CSV. It reads files
only; nothing here trains or loads a model.

objectNames: ``runsPanel``, ``runsRootEdit``, ``runsRefreshButton``, ``runsTable``,
``runsMetricCombo``, ``runsXCombo``, ``runsPlot``, ``runsConfigDiff``, ``runsExportCsv``.
"""

from __future__ import annotations

import math
import time
from pathlib import Path

import pyqtgraph as pg
from PySide6.QtCore import QAbstractTableModel, QModelIndex, Qt
from PySide6.QtWidgets import (
    QAbstractItemView,
    QComboBox,
    QFileDialog,
    QHBoxLayout,
    QLabel,
    QLineEdit,
    QPlainTextEdit,
    QPushButton,
    QSplitter,
    QTableView,
    QVBoxLayout,
    QWidget,
)

from workbench.core.plot_lod import MinMaxPyramid
from workbench.core.train.run_index import (
    METRICS,
    X_AXES,
    RunSummary,
    config_diff,
    export_metrics,
    list_runs,
    read_metrics,
)

COLUMNS = ("name", "started", "model", "dataset", "epochs", "best val loss", "best val acc", "state")
_COLORS = ["#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22",
           "#17becf"]
_METRIC_TITLES = {"train_loss": "train loss", "val_loss": "val loss", "val_acc": "val accuracy", "lr": "learning rate"}
_X_TITLES = {"step": "step", "epoch": "epoch", "time_s": "wall time (s)"}


#: Curves with at most this many points get a marker per point (epoch rows); longer ones are lines only.
MAX_MARKERS = 200
#: Curves with more points than this are drawn from a precomputed min/max pyramid (``core.plot_lod``).
LOD_POINTS = 8192


def _curve_style(i: int, n: int) -> dict:
    """Pen (and markers for short curves) of the ``i``-th run."""
    color = _COLORS[i % len(_COLORS)]
    # a 2 px pen costs Qt's raster engine about 10x a 1 px one: thin lines for long curves
    style = {"pen": pg.mkPen(color, width=2 if n <= MAX_MARKERS else 1)}
    if n <= MAX_MARKERS:
        style.update(symbol="o", symbolSize=5, symbolBrush=color, symbolPen=None)
    return style


class RunsTableModel(QAbstractTableModel):
    """Rows: :class:`RunSummary`; columns: :data:`COLUMNS`."""

    def __init__(self, parent=None):
        super().__init__(parent)
        self.runs: list[RunSummary] = []

    def set_runs(self, runs: list[RunSummary]) -> None:
        """Show ``runs`` (a model reset)."""
        self.beginResetModel()
        self.runs = list(runs)
        self.endResetModel()

    def rowCount(self, parent=QModelIndex()) -> int:  # noqa: N802 (Qt override)
        return 0 if parent.isValid() else len(self.runs)

    def columnCount(self, parent=QModelIndex()) -> int:  # noqa: N802
        return 0 if parent.isValid() else len(COLUMNS)

    def headerData(self, section, orientation, role=Qt.ItemDataRole.DisplayRole):  # noqa: N802
        if role == Qt.ItemDataRole.DisplayRole and orientation == Qt.Orientation.Horizontal:
            return COLUMNS[section]
        return None

    def data(self, index: QModelIndex, role=Qt.ItemDataRole.DisplayRole):  # noqa: D102
        if not index.isValid() or role not in (Qt.ItemDataRole.DisplayRole, Qt.ItemDataRole.ToolTipRole):
            return None
        r = self.runs[index.row()]
        if role == Qt.ItemDataRole.ToolTipRole:
            return r.path
        col = COLUMNS[index.column()]
        if col == "name":
            return r.name
        if col == "started":
            return "-" if math.isnan(r.started) else time.strftime("%Y-%m-%d %H:%M", time.localtime(r.started))
        if col == "model":
            return r.model or "-"
        if col == "dataset":
            return r.dataset or "-"
        if col == "epochs":
            return f"{r.epochs_done}/{r.epochs}"
        if col == "best val loss":
            return "-" if math.isnan(r.best_val_loss) else f"{r.best_val_loss:.4f}"
        if col == "best val acc":
            return "-" if math.isnan(r.best_val_acc) else f"{r.best_val_acc:.1%}"
        return r.state


class RunsPanel(QWidget):
    """Run folders side by side.

    Parameters
    ----------
    root : str or Path
        The runs folder listed (``default_runs_root()`` in the window).
    parent : QWidget, optional
    """

    def __init__(self, root: str | Path, parent: QWidget | None = None):
        super().__init__(parent)
        self.setObjectName("runsPanel")
        self.curves: dict[str, pg.PlotDataItem] = {}
        #: run name -> the min/max pyramid of a long curve (the view draws its slice of the right level)
        self.pyramids: dict[str, MinMaxPyramid] = {}
        self._drawing = False  # set while curves get data: their own range changes do not redraw them again
        self.root_edit = QLineEdit(str(root), objectName="runsRootEdit")
        self.root_edit.setToolTip("The folder whose run folders are listed")
        self.refresh_button = QPushButton("Refresh", objectName="runsRefreshButton")
        self.table_model = RunsTableModel(self)
        self.table = QTableView(objectName="runsTable")
        self.table.setModel(self.table_model)
        self.table.setSelectionBehavior(QAbstractItemView.SelectionBehavior.SelectRows)
        self.table.setSelectionMode(QAbstractItemView.SelectionMode.ExtendedSelection)
        self.table.verticalHeader().hide()
        self.table.verticalHeader().setDefaultSectionSize(self.table.fontMetrics().height() + 6)
        self.table.setWordWrap(False)
        self.table.horizontalHeader().setStretchLastSection(True)
        self.metric_combo = QComboBox(objectName="runsMetricCombo")
        for m in METRICS:
            self.metric_combo.addItem(_METRIC_TITLES[m], m)
        self.metric_combo.setCurrentIndex(METRICS.index("val_loss"))
        self.x_combo = QComboBox(objectName="runsXCombo")
        for x in X_AXES:
            self.x_combo.addItem(f"x: {_X_TITLES[x]}", x)
        self.export_button = QPushButton("Export CSV…", objectName="runsExportCsv")
        self.export_button.setToolTip("The selected runs' metrics as one tidy CSV: run, step, epoch, metric, value")
        self.plot = pg.PlotWidget(background="w")
        self.plot.setObjectName("runsPlot")
        self.plot.addLegend(offset=(-5, 5))
        self.plot.showGrid(y=True, alpha=0.3)
        self.diff = QPlainTextEdit(objectName="runsConfigDiff", readOnly=True)
        self.diff.setPlaceholderText("Select two or more runs: the settings that differ show here.")
        self.status = QLabel("")

        top = QHBoxLayout()
        top.addWidget(QLabel("Runs in"))
        top.addWidget(self.root_edit, 1)
        top.addWidget(self.refresh_button)
        bar = QHBoxLayout()
        bar.addWidget(self.metric_combo)
        bar.addWidget(self.x_combo)
        bar.addStretch(1)
        bar.addWidget(self.export_button)
        lower = QSplitter(Qt.Orientation.Horizontal)
        lower.addWidget(self.plot)
        lower.addWidget(self.diff)
        lower.setSizes([600, 300])
        split = QSplitter(Qt.Orientation.Vertical)
        split.addWidget(self.table)
        holder = QWidget()
        hv = QVBoxLayout(holder)
        hv.setContentsMargins(0, 0, 0, 0)
        hv.addLayout(bar)
        hv.addWidget(lower, 1)
        split.addWidget(holder)
        split.setSizes([170, 330])
        v = QVBoxLayout(self)
        v.addLayout(top)
        v.addWidget(split, 1)
        v.addWidget(self.status)

        self.refresh_button.clicked.connect(self.refresh)
        self.root_edit.returnPressed.connect(self.refresh)
        self.table.selectionModel().selectionChanged.connect(self.show_selected)
        self.metric_combo.currentIndexChanged.connect(self.show_selected)
        self.x_combo.currentIndexChanged.connect(self.show_selected)
        self.export_button.clicked.connect(self._on_export)
        self.plot.getViewBox().sigXRangeChanged.connect(self._draw_levels)

    def refresh(self) -> None:
        """List the run folders again (a missing folder is said, not raised); the selection is kept by name."""
        keep = [r.name for r in self.selected_runs()]
        try:
            runs = list_runs(self.root_edit.text().strip())
        except FileNotFoundError as exc:
            self.table_model.set_runs([])
            self.status.setText(f"{exc}: train a run first, or choose another folder")
            return
        self.table_model.set_runs(runs)
        self.table.resizeColumnsToContents()
        self.status.setText(f"{len(runs)} run(s)")
        self.select(keep)
        self.show_selected()

    def selected_runs(self) -> list[RunSummary]:
        """The selected rows' runs, in table order."""
        rows = sorted({i.row() for i in self.table.selectionModel().selectedRows()})
        return [self.table_model.runs[r] for r in rows]

    def select(self, names: list[str]) -> None:
        """Select the runs named ``names`` (tests, scripts)."""
        sel = self.table.selectionModel()
        sel.clearSelection()
        for row, run in enumerate(self.table_model.runs):
            if run.name in names:
                sel.select(self.table_model.index(row, 0),
                           sel.SelectionFlag.Select | sel.SelectionFlag.Rows)

    def show_selected(self, *_args) -> None:
        """Overlay the chosen metric of the selected runs and show their differing settings."""
        runs = self.selected_runs()
        metric, x_key = self.metric_combo.currentData(), self.x_combo.currentData()
        series = {}
        for run in runs:
            cols = read_metrics(run.path)
            y, x = cols.get(metric), cols.get(x_key)
            if y is None or x is None:
                continue
            series[run.name] = (x + 1 if x_key == "epoch" else x, y)  # epochs completed, as the Training plots
        self.draw(series)
        self.plot.setLabel("bottom", _X_TITLES[x_key])
        self.plot.setLabel("left", _METRIC_TITLES[metric])
        if len(runs) >= 2:
            rows = config_diff([r.path for r in runs])
            names = [r.name for r in runs]
            lines = [f"{key}: " + ", ".join(f"{n}={v!r}" for n, v in zip(names, values)) for key, values in rows]
            self.diff.setPlainText("\n".join(lines) if lines else "The selected runs have the same settings.")
        else:
            self.diff.clear()

    def draw(self, series: dict) -> None:
        """Show ``{run name: (x, y)}`` curves, one colour each (legend by run name).

        Curves of runs already shown get new data (``setData``); the others are
        added or removed, so switching the metric or the axis redraws without
        rebuilding the plot.
        """
        if list(series) != list(self.curves):
            self.plot.clear()
            self.curves = {}
        self.pyramids = {}
        self._drawing = True
        try:
            self._set_curves(series)
        finally:
            self._drawing = False

    def _set_curves(self, series: dict) -> None:
        for i, (name, (x, y)) in enumerate(series.items()):
            if len(x) > LOD_POINTS:
                # long curves: a min/max pyramid built once; each view change draws its slice (_draw_levels)
                self.pyramids[name] = MinMaxPyramid(x, y)
                x, y = self._level_data(self.pyramids[name])
            curve = self.curves.get(name)
            if curve is None:
                curve = self.plot.plot(x, y, name=name, **_curve_style(i, len(x) if name not in self.pyramids
                                                                       else LOD_POINTS + 1))
                self.curves[name] = curve
            else:
                curve.setData(x, y, **_curve_style(i, len(x) if name not in self.pyramids else LOD_POINTS + 1))

    def _level_data(self, pyramid: MinMaxPyramid):
        """The points of ``pyramid`` for the current x range and plot width, with the curve's first and
        last points kept (off-screen) so that auto-range still sees the whole curve."""
        import numpy as np

        vb = self.plot.getViewBox()
        (x0, x1), _ = vb.viewRange()
        if not self.pyramids or vb.autoRangeEnabled()[0]:
            x0, x1 = pyramid.x[0], pyramid.x[-1]
        x, y = pyramid.view(x0, x1, max(200, int(vb.width())))
        if len(x) and x[0] > pyramid.x[0]:
            x, y = np.concatenate(([pyramid.x[0]], x)), np.concatenate(([pyramid.y[0]], y))
        if len(x) and x[-1] < pyramid.x[-1]:
            x, y = np.concatenate((x, [pyramid.x[-1]])), np.concatenate((y, [pyramid.y[-1]]))
        return x, y

    def _draw_levels(self, *_args) -> None:
        """A pan or zoom: each long curve gets the slice of its pyramid for the new view."""
        if self._drawing:
            return
        self._drawing = True
        try:
            for name, pyramid in self.pyramids.items():
                curve = self.curves.get(name)
                if curve is not None:
                    curve.setData(*self._level_data(pyramid))
        finally:
            self._drawing = False

    def export_csv(self, path: str | Path) -> Path:
        """Write the selected runs' metrics (all runs when none is selected) as tidy CSV; returns the path."""
        runs = self.selected_runs() or self.table_model.runs
        return export_metrics([r.path for r in runs], path)

    def _on_export(self) -> None:
        path, _ = QFileDialog.getSaveFileName(self, "Export runs", "runs.csv", "CSV (*.csv)")
        if not path:
            return
        try:
            self.export_csv(path)
        except OSError as exc:
            self.status.setText(f"Export failed: {exc}")
        else:
            self.status.setText(f"Saved {path}")
