"""The Runs dock: the run folders under the runs root, their curves overlaid, their settings compared.

:class:`RunsPanel` lists :func:`workbench.core.train.runs.index.list_runs` in a
``QTableView`` (:class:`RunsTableModel`, a ``QAbstractTableModel``); selecting
several rows overlays one metric of each on shared axes (step, epoch or wall
time), one colour per run with a legend by run name, and shows only the
settings that differ (:func:`~workbench.core.train.runs.index.config_diff`).
The metric picker offers the union of the selected runs' metrics
(:func:`~workbench.core.train.runs.index.metric_names`: every ``metrics.csv``
column, a task's own ``val_r2`` or ``val_f1`` included, and the per-step
curves of ``steps.csv``, which every run that made a step has); a selected run
without the chosen metric is said beside the settings. The table is never
shorter than its first :data:`MIN_ROWS` runs, so every counted run is seen.
"Export CSV…" writes the selected runs' metrics as one tidy CSV. "Open" and
"Resume" ask the window (signals) to open the run's checkpoint, and to resume
it into its own folder; "Rename…" and "Delete" (to the system trash) are
undoable with the dock's own "Undo" (a ``QUndoStack`` apart from the model's
edits). A row's context menu (:meth:`RunsPanel.row_menu`) has these and
"Export…": the run's ``best.pt`` (else ``last.pt``) exported and checked by
:func:`workbench.core.export.api.export` on a worker thread, to a file whose
suffix picks the format (:func:`~workbench.core.export.api.format_for_path`).
Below the table, "On hosts" (:mod:`.remote_runs`) lists the runs on the remembered hosts, with Pull
(into the runs root listed here) and Cancel. Nothing here trains or loads a model.

Every file is read by core's total readers: a run whose files cannot be read is
listed with a warning icon, ``unreadable: <file>: <reason>`` in its state and
tooltip, and the other runs as usual; names and text from the folders are shown
with control characters escaped. A long ``metrics.csv`` (more than
:data:`SYNC_BYTES` to read) is read on a worker thread
(:func:`~workbench.ui.threading.run_in_background`) into a bounded min/max
pyramid (:func:`~workbench.core.train.runs.index.read_curve`) while a progress
bar fills (``runsProgress``), so the window keeps repainting and memory stays
bounded whatever the file's length. Rename and Delete refuse a run that is
training, and say so.

objectNames: ``runsPanel``, ``runsRootEdit``, ``runsRefreshButton``, ``runsTable``,
``runsMetricCombo``, ``runsXCombo``, ``runsPlot``, ``runsConfigDiff``, ``runsExportCsv``,
``runsOpenButton``, ``runsResumeButton``, ``runsRenameButton``, ``runsDeleteButton``, ``runsUndoButton``,
``runsProgress``, ``runsStatus``; the row menu's ``runsExportModelAction``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Callable

import pyqtgraph as pg
from PySide6.QtCore import QModelIndex, Qt, QTimer, Signal
from PySide6.QtGui import QUndoCommand, QUndoStack
from PySide6.QtWidgets import (
    QAbstractItemView, QApplication, QComboBox, QFileDialog, QHBoxLayout, QInputDialog, QLabel, QLineEdit,
    QMainWindow, QMenu, QPlainTextEdit, QProgressBar, QPushButton, QSplitter, QStyle, QTableView, QVBoxLayout,
    QWidget,
)

from workbench.core.errors import WorkbenchError
from workbench.core.plot_lod import MinMaxPyramid
from workbench.core.run_folder.printable import printable
from workbench.core.train.runs.index import (
    METRICS,
    STEP_PREFIX,
    TABLE_COLUMNS,
    X_AXES,
    RunSummary,
    config_diff,
    curve_file,
    export_metrics,
    list_runs,
    metrics_bytes,
    metrics_signature,
    read_curve,
    rename_run,
    run_cell,
    run_checkpoint,
    unread_bytes,
)
from workbench.core.train.runs.trash import TrashedRun, restore_run, trash_run
from workbench.ui.plot_legend import fit_legend_row, legend_above
from workbench.ui.prompts import Prompts
from workbench.ui.runs.remote_runs import RemoteRunsView
from workbench.ui.runs.row_table import RowTableModel
from workbench.ui.threading import run_in_background

COLUMNS = TABLE_COLUMNS
_COLORS = ["#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22",
           "#17becf"]
_METRIC_TITLES = {"train_loss": "train loss", "val_loss": "val loss", "val_acc": "val accuracy", "lr": "learning rate"}
_X_TITLES = {"step": "step", "epoch": "epoch", "time_s": "wall time (s)"}
#: The metric shown when the one chosen is not among the selected runs' (the first of these they have).
_PREFERRED = ("val_loss", "train_loss", STEP_PREFIX + "train_loss")
#: What the row menu's Export… offers, as file-dialog filters (the suffix picks the format: format_for_path).
EXPORT_FILTERS = "ONNX (*.onnx);;torch.export program (*.pt2);;Weights: safetensors (*.safetensors)"
#: How long the window's status bar shows an export's verdict, in milliseconds.
STATUS_MS = 10000
#: The table is at least this many rows tall (fewer runs: as many as there are), so the runs counted are seen.
MIN_ROWS = 4


def metric_title(metric: str) -> str:
    """How the picker and the y axis name a metric: ``val loss``, ``val_r2``, ``train loss per step``."""
    if metric.startswith(STEP_PREFIX):
        return f"{metric_title(metric[len(STEP_PREFIX):])} per step"
    return _METRIC_TITLES.get(metric, metric)


#: Curves with at most this many points get a marker per point (epoch rows); longer ones are lines only.
MAX_MARKERS = 200
#: Curves with more points than this are drawn from a precomputed min/max pyramid (``core.plot_lod``).
LOD_POINTS = 8192
#: Bytes of metrics.csv read on the GUI thread; more are read on a worker thread behind a progress bar.
SYNC_BYTES = 8 * 2**20


def _curve_style(i: int, n: int) -> dict:
    """Pen (and markers for short curves) of the ``i``-th run."""
    color = _COLORS[i % len(_COLORS)]
    # a 2 px pen costs Qt's raster engine about 10x a 1 px one: thin lines for long curves
    style = {"pen": pg.mkPen(color, width=2 if n <= MAX_MARKERS else 1)}
    if n <= MAX_MARKERS:
        style.update(symbol="o", symbolSize=5, symbolBrush=color, symbolPen=None)
    return style


class RunsTableModel(RowTableModel):
    """Rows: :class:`RunSummary`; columns: :data:`COLUMNS`."""

    columns = COLUMNS

    def __init__(self, parent=None):
        super().__init__(parent)
        self._icon = None  # the warning icon of a run whose files cannot all be read (made when first shown)

    @property
    def runs(self) -> list[RunSummary]:
        """The runs shown, in the table's order (:attr:`rows`)."""
        return self.rows

    def set_runs(self, runs: list[RunSummary]) -> None:
        """Show ``runs`` (a model reset)."""
        self.set_rows(runs)

    def cell(self, r: RunSummary, column: str, role: Qt.ItemDataRole):  # noqa: D102
        if role == Qt.ItemDataRole.ToolTipRole:
            return printable(r.path) + (f"\nunreadable: {printable(r.problem)}" if r.problem else "")
        if role == Qt.ItemDataRole.DecorationRole:
            if r.problem and column == COLUMNS[0]:
                return self._warning_icon()
            return None
        if role != Qt.ItemDataRole.DisplayRole:
            return None
        return printable(self._text(r, column))

    def _warning_icon(self):
        if self._icon is None:
            self._icon = QApplication.style().standardIcon(QStyle.StandardPixmap.SP_MessageBoxWarning)
        return self._icon

    @staticmethod
    def _text(r: RunSummary, col: str) -> str:
        """The cell's text (:func:`~workbench.core.train.runs.index.run_cell`: never raises, a time a clock
        cannot show is ``-``)."""
        return run_cell(r, col)


class _RenameRun(QUndoCommand):
    """Rename a run folder (undo: the old name back)."""

    def __init__(self, panel: RunsPanel, path: Path, new_name: str):
        super().__init__(f"rename {path.name} to {new_name}")
        self.panel, self.old, self.new_name = panel, path, new_name
        self.new = path.parent / new_name  # valid once redo() succeeded (rename_run checks the name)
        self.ok = False

    def redo(self) -> None:  # noqa: D102
        self.panel._file_op(lambda: rename_run(self.old, self.new_name), self)

    def undo(self) -> None:  # noqa: D102
        self.panel._file_op(lambda: rename_run(self.new, self.old.name), self)


class _TrashRun(QUndoCommand):
    """Move a run folder to the system trash (undo: put it back)."""

    def __init__(self, panel: RunsPanel, path: Path):
        super().__init__(f"delete {path.name}")
        self.panel, self.path = panel, path
        self.trashed: TrashedRun | None = None
        self.ok = False

    def redo(self) -> None:  # noqa: D102
        def move():
            self.trashed = trash_run(self.path)
        self.panel._file_op(move, self)

    def undo(self) -> None:  # noqa: D102
        if self.trashed is not None:
            self.panel._file_op(lambda: restore_run(self.trashed), self)


class RunsPanel(QWidget):
    """Run folders side by side.

    Parameters
    ----------
    root : str or Path
        The runs folder listed (``default_runs_root()`` in the window).
    parent : QWidget, optional
    prompts : Prompts, optional
        Asks Export…'s file and shows its errors; default the parent's ``prompts``
        (the window's) when it has one, else dialogs of this panel's own.

    Signals
    -------
    openRequested(str)
        Open this checkpoint (the run's ``last.pt``, else ``best.pt``).
    resumeRequested(str, str)
        Open this checkpoint and resume it into this run folder.

    Attributes
    ----------
    undo_stack : QUndoStack
        Renames and deletes of run folders (not the model's edits).
    ask_name : callable
        ``ask_name(current) -> str or None``: the new name of a run (a dialog; tests replace it).
    """

    openRequested = Signal(str)
    resumeRequested = Signal(str, str)

    def __init__(self, root: str | Path, parent: QWidget | None = None, prompts: Prompts | None = None):
        super().__init__(parent)
        self.setObjectName("runsPanel")
        self.prompts = prompts if prompts is not None else getattr(parent, "prompts", None) or Prompts(self)
        self.curves: dict[str, pg.PlotDataItem | pg.PlotCurveItem] = {}
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
        self.table.setContextMenuPolicy(Qt.ContextMenuPolicy.CustomContextMenu)
        self.metric_combo = QComboBox(objectName="runsMetricCombo")
        self.metric_combo.setToolTip("Every metric the selected runs have: metrics.csv's columns (a task's own "
                                     "included) and the per-step curves")
        self._set_metrics(list(METRICS), "val_loss")
        self.x_combo = QComboBox(objectName="runsXCombo")
        for x in X_AXES:
            self.x_combo.addItem(f"x: {_X_TITLES[x]}", x)
        self.export_button = QPushButton("Export CSV…", objectName="runsExportCsv")
        self.export_button.setToolTip("The selected runs' metrics as one tidy CSV: run, step, epoch, metric, value")
        self.plot = pg.PlotWidget()
        self.plot.setObjectName("runsPlot")
        # the legend in the plot's title row, above the data: inside the view it covered the curves' ends
        self.legend = legend_above(self.plot.getPlotItem(), columns=3, row_height=20)
        self.plot.showGrid(y=True, alpha=0.3)
        # grid lines and labels at the major y ticks only: with the minor ones, the left axis
        # (which draws the grid across the plot) cost 10-20 ms of each zoom's repaint here
        self.plot.getAxis("left").setStyle(maxTickLevel=0)
        self.diff = QPlainTextEdit(objectName="runsConfigDiff", readOnly=True)
        self.diff.setPlaceholderText("Select two or more runs: the settings that differ show here.")
        self.status = QLabel("", objectName="runsStatus")
        self.status.setTextFormat(Qt.TextFormat.PlainText)  # names from disk are never rich text
        self.progress = QProgressBar(objectName="runsProgress")
        self.progress.setRange(0, 1000)
        self.progress.setMaximumWidth(220)
        self.progress.hide()
        #: (metrics.csv path, x axis, metric) -> (signature of the file, pyramid or None): the curves shown
        self._curve_cache: dict[tuple, tuple] = {}
        self._loading = False  # a read on a worker thread is under way (the GUI thread waits in an event loop)
        self._again: set[str] = set()  # what was asked meanwhile: "refresh", "show"
        self._failures: list[str] = []  # messages of refused renames / deletes, for the status line
        self.undo_stack = QUndoStack(self)
        self.ask_name = self._ask_name
        self.open_button = QPushButton("Open", objectName="runsOpenButton")
        self.open_button.setToolTip("Open the selected run's checkpoint (last.pt, else best.pt) in the window")
        self.resume_button = QPushButton("Resume", objectName="runsResumeButton")
        self.resume_button.setToolTip("Open the selected run's last.pt and set Training to resume it in its folder")
        self.rename_button = QPushButton("Rename…", objectName="runsRenameButton")
        self.delete_button = QPushButton("Delete", objectName="runsDeleteButton")
        self.delete_button.setToolTip("Move the selected runs to the system trash (Undo puts them back)")
        self.undo_button = QPushButton("Undo", objectName="runsUndoButton")
        self.undo_button.setEnabled(False)

        top = QHBoxLayout()
        top.addWidget(QLabel("Runs in"))
        top.addWidget(self.root_edit, 1)
        top.addWidget(self.refresh_button)
        actions = QHBoxLayout()
        for button in (self.open_button, self.resume_button, self.rename_button, self.delete_button):
            actions.addWidget(button)
        actions.addStretch(1)
        actions.addWidget(self.undo_button)
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
        upper = QWidget()
        uv = QVBoxLayout(upper)
        uv.setContentsMargins(0, 0, 0, 0)
        uv.addWidget(self.table, 1)
        uv.addLayout(actions)
        self.remote = RemoteRunsView(lambda: self.root_edit.text().strip(), self.prompts, self)  # "On hosts"
        self.remote.pulled.connect(lambda name: (self.refresh(), self.select([name])))
        uv.addWidget(self.remote)
        split.addWidget(upper)
        holder = QWidget()
        hv = QVBoxLayout(holder)
        hv.setContentsMargins(0, 0, 0, 0)
        hv.addLayout(bar)
        hv.addWidget(lower, 1)
        split.addWidget(holder)
        split.setSizes([170, 330])
        split.setCollapsible(0, False)  # the runs counted stay in view (_fit_rows)
        v = QVBoxLayout(self)
        v.addLayout(top)
        v.addWidget(split, 1)
        bottom = QHBoxLayout()
        bottom.addWidget(self.status, 1)
        bottom.addWidget(self.progress)
        v.addLayout(bottom)

        self.refresh_button.clicked.connect(self.refresh)
        self.root_edit.returnPressed.connect(self.refresh)
        self.table.selectionModel().selectionChanged.connect(self.show_selected)
        self.metric_combo.currentIndexChanged.connect(self.show_selected)
        self.x_combo.currentIndexChanged.connect(self.show_selected)
        self.export_button.clicked.connect(self._on_export)
        self.open_button.clicked.connect(self.open_selected)
        self.resume_button.clicked.connect(self.resume_selected)
        self.rename_button.clicked.connect(self._on_rename)
        self.delete_button.clicked.connect(self.delete_selected)
        self.undo_button.clicked.connect(self.undo_stack.undo)
        self.undo_stack.canUndoChanged.connect(self.undo_button.setEnabled)
        self.undo_stack.undoTextChanged.connect(
            lambda text: self.undo_button.setText(f"Undo {text}" if text else "Undo"))
        self.table.selectionModel().selectionChanged.connect(self._update_actions)
        self.table.customContextMenuRequested.connect(self._on_row_menu_requested)
        self._update_actions()
        self._fit_rows()
        self.plot.getViewBox().sigXRangeChanged.connect(self._draw_levels)

    def refresh(self) -> None:
        """List the run folders again (a missing folder is said, not raised); the selection is kept by name.

        Runs whose files cannot be read are listed, marked (see the module docstring).
        """
        if self._loading:
            self._again.add("refresh")
            return
        keep = [r.name for r in self.selected_runs()]
        self.remote.refresh()  # the hosts' runs, on a worker thread
        root = self.root_edit.text().strip()
        try:
            runs = self._load(lambda progress: list_runs(root, progress), "Reading the runs' metrics…",
                              unread_bytes(root))
        except FileNotFoundError as exc:
            self.table_model.set_runs([])
            self.status.setText(f"{printable(exc)}: train a run first, or choose another folder")
            return
        except OSError as exc:
            self.table_model.set_runs([])
            self.status.setText(f"{printable(root)}: cannot be listed ({printable(exc.strerror or exc)})")
            return
        self.table_model.set_runs(runs)
        self.table.resizeColumnsToContents()
        self._fit_rows()
        bad = sum(1 for r in runs if r.problem)
        self.status.setText(f"{len(runs)} run(s)" + (f", {bad} with files that cannot be read" if bad else ""))
        self.select(keep)
        self.show_selected()

    def _load(self, work: Callable[[Callable[[float], None] | None], Any], label: str, nbytes: int) -> Any:
        """``work(progress)``: here when it reads at most :data:`SYNC_BYTES`, else on a worker thread while
        the progress bar follows ``progress(fraction)`` and the window keeps repainting."""
        if nbytes <= SYNC_BYTES:
            return work(None)
        done = [0.0]  # written by the worker, read by the timer here

        def tick():
            self.progress.setValue(int(1000 * done[0]))

        timer = QTimer(self)
        timer.timeout.connect(tick)
        timer.start(50)
        self.progress.setValue(0)
        self.progress.show()
        status = self.status.text()
        self.status.setText(f"{label} ({nbytes / 2**20:.0f} MB)")
        self._loading = True
        try:
            return run_in_background(lambda: work(lambda f: done.__setitem__(0, f)), label, self)
        finally:
            self._loading = False
            timer.stop()
            timer.deleteLater()
            self.progress.hide()
            self.status.setText(status)
            again, self._again = self._again, set()
            if again:
                QTimer.singleShot(0, self, self.refresh if "refresh" in again else self.show_selected)

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
        if self._loading:
            self._again.add("show")
            return
        runs = self.selected_runs()
        metric = self._offer_metrics(runs)
        x_key = self.x_combo.currentData()
        curves = self._curves(runs, x_key, metric)
        self.draw({run.name: curves[run.path] for run in runs if curves.get(run.path) is not None})
        self.plot.setLabel("bottom", _X_TITLES[x_key])
        self.plot.setLabel("left", printable(metric_title(metric)))
        lines = [f"{printable(r.name)}: unreadable: {printable(r.problem)}" for r in runs if r.problem]
        lines += [_missing(r, metric) for r in runs if curves.get(r.path) is None]
        if len(runs) >= 2:
            rows = config_diff([r.path for r in runs])
            names = [printable(r.name) for r in runs]
            diff = [printable(f"{key}: ") + ", ".join(f"{n}={printable(repr(v))}" for n, v in zip(names, values))
                    for key, values in rows]
            lines += diff or ["The selected runs have the same settings."]
        self.diff.setPlainText("\n".join(lines))

    def _set_metrics(self, metrics: list[str], current: str) -> None:
        """Fill the picker with ``metrics`` (``current`` chosen), without a signal."""
        combo = self.metric_combo
        combo.blockSignals(True)
        try:
            combo.clear()
            for m in metrics:
                combo.addItem(printable(metric_title(m)), m)
            combo.setCurrentIndex(max(0, combo.findData(current)))
        finally:
            combo.blockSignals(False)

    def _offer_metrics(self, runs: list[RunSummary]) -> str:
        """The picker set to the union of ``runs``' metrics (left as it is with none); the metric chosen:
        the one the user chose when a selected run has it, else the first of :data:`_PREFERRED` they have."""
        union = list(dict.fromkeys(m for r in runs for m in r.metrics))
        current = self.metric_combo.currentData()
        if not union:  # nothing selected (or runs without metrics): the picker stays as it is
            return current
        if current not in union:
            current = next((m for m in _PREFERRED if m in union), union[0])
        if union != [self.metric_combo.itemData(i) for i in range(self.metric_combo.count())]:
            self._set_metrics(union, current)
        elif current != self.metric_combo.currentData():
            self._set_metrics(union, current)
        return current

    def _fit_rows(self) -> None:
        """The table at least as tall as its first :data:`MIN_ROWS` rows (header and scroll bar included): in a
        short dock, the splitter gives the plot what is left rather than hiding runs below a scroll."""
        rows = max(1, min(MIN_ROWS, self.table_model.rowCount()))
        table = self.table
        height = (table.horizontalHeader().sizeHint().height() + rows * table.verticalHeader().defaultSectionSize()
                  + table.horizontalScrollBar().sizeHint().height() + 2 * table.frameWidth() + 2)
        table.setMinimumHeight(height)

    def _curves(self, runs: list[RunSummary], x_key: str, metric: str) -> dict[str, MinMaxPyramid | None]:
        """``{run path: pyramid of metric vs x_key}`` for ``runs``: kept ones whose file did not change, the
        others read (on a worker thread when long). Only the curves shown are kept."""
        wanted = {run.path: (run.path, x_key, metric) for run in runs}
        file = curve_file(metric)
        signatures = {path: metrics_signature(path, file) for path in wanted}
        kept = {key: self._curve_cache[key] for path, key in wanted.items()
                if key in self._curve_cache and self._curve_cache[key][0] == signatures[path]}
        todo = [path for path, key in wanted.items() if key not in kept]
        self._curve_cache = kept  # what is no longer shown is let go before reading more

        def work(progress):
            out = {}
            for i, path in enumerate(todo):
                sub = None if progress is None else (lambda f, i=i: progress((i + f) / len(todo)))
                out[wanted[path]] = (signatures[path], read_curve(path, x_key, metric, sub))
            return out

        if todo:
            label = f"Reading {printable(metric_title(metric))} of {len(todo)} run(s)…"
            self._curve_cache.update(self._load(work, label, sum(metrics_bytes(p, file) for p in todo)))
        return {path: self._curve_cache[key][1] for path, key in wanted.items()}

    def draw(self, series: dict) -> None:
        """Show ``{run name: (x, y) or MinMaxPyramid}`` curves, one colour each (legend by run name, escaped).

        Curves of runs already shown get new data (``setData``); the others are
        added or removed, so switching the metric or the axis redraws without
        rebuilding the plot. Curves longer than :data:`LOD_POINTS` are drawn from
        their pyramid (built here from ``(x, y)``; a pyramid read in bounded
        memory may hold no points, only bins).
        """
        series = {name: _as_curve(v) for name, v in series.items()}
        kinds = [isinstance(v, MinMaxPyramid) for v in series.values()]
        if list(series) != list(self.curves) or kinds != [isinstance(c, pg.PlotCurveItem) for c in self.curves.values()]:
            self.plot.clear()
            self.curves = {}
        self.pyramids = {}
        self._drawing = True
        try:
            self._set_curves(series)
        finally:
            self._drawing = False
        fit_legend_row(self.plot.getPlotItem(), self.legend)

    def _set_curves(self, series: dict) -> None:
        for i, (name, data) in enumerate(series.items()):
            curve = self.curves.get(name)
            if isinstance(data, MinMaxPyramid):
                # long curves: a min/max pyramid built once; each view change draws its slice (_draw_levels)
                self.pyramids[name] = data
                # drawn by a bare PlotCurveItem: PlotDataItem's own downsampling, clipping and bounds work,
                # which the pyramid replaces, cost ~0.3 ms per curve and view change (6 of a 20-run zoom's ms)
                x, y = self._level_data(data)
                pen = _curve_style(i, LOD_POINTS + 1)["pen"]
                if curve is None:
                    curve = self.curves[name] = pg.PlotCurveItem(x, y, name=printable(name), pen=pen)
                    self.plot.addItem(curve)
                else:
                    curve.setData(x, y, pen=pen)
                continue
            x, y = data
            if curve is None:
                self.curves[name] = self.plot.plot(x, y, name=printable(name), **_curve_style(i, len(x)))
            else:
                curve.setData(x, y, **_curve_style(i, len(x)))

    def _level_data(self, pyramid: MinMaxPyramid):
        """The points of ``pyramid`` for the current x range and plot width, with the curve's first and
        last points kept (off-screen) so that auto-range still sees the whole curve."""
        import numpy as np

        vb = self.plot.getViewBox()
        (x0, x1), _ = vb.viewRange()
        (fx, fy), (lx, ly) = pyramid.first, pyramid.last
        if not self.pyramids or vb.autoRangeEnabled()[0]:
            x0, x1 = fx, lx
        x, y = pyramid.view(x0, x1, max(200, int(vb.width())))
        if len(x) and x[0] > fx:
            x, y = np.concatenate(([fx], x)), np.concatenate(([fy], y))
        if len(x) and x[-1] < lx:
            x, y = np.concatenate((x, [lx])), np.concatenate((y, [ly]))
        return x, y

    def _draw_levels(self, *_args) -> None:
        """A pan or zoom: each long curve gets the slice of its pyramid for the new view."""
        if self._drawing:
            return
        self._drawing = True
        # (each setData only queues the y auto-range; the ViewBox computes it once, before the repaint)
        try:
            for name, pyramid in self.pyramids.items():
                curve = self.curves.get(name)
                if curve is not None:
                    curve.setData(*self._level_data(pyramid))
        finally:
            self._drawing = False

    # ------------------------------------------------------------------ run folder actions
    def _update_actions(self, *_args) -> None:
        runs = self.selected_runs()
        one = len(runs) == 1
        ckpt = run_checkpoint(runs[0].path) if one else None
        self.open_button.setEnabled(ckpt is not None)
        self.resume_button.setEnabled(one and (Path(runs[0].path) / "last.pt").is_file())
        self.rename_button.setEnabled(one)
        self.delete_button.setEnabled(bool(runs))

    def open_selected(self) -> bool:
        """Ask the window to open the selected run's checkpoint (``openRequested``); False when there is none."""
        runs = self.selected_runs()
        ckpt = run_checkpoint(runs[0].path) if len(runs) == 1 else None
        if ckpt is None:
            self.status.setText("Select one run that has a checkpoint (last.pt or best.pt).")
            return False
        self.openRequested.emit(str(ckpt))
        return True

    def resume_selected(self) -> bool:
        """Ask the window to open the selected run's ``last.pt`` and resume it into its folder (``resumeRequested``)."""
        runs = self.selected_runs()
        last = Path(runs[0].path) / "last.pt" if len(runs) == 1 else None
        if last is None or not last.is_file():
            self.status.setText("Select one run that has a last.pt to resume.")
            return False
        self.resumeRequested.emit(str(last), runs[0].path)
        return True

    def rename_selected(self, new_name: str) -> bool:
        """Rename the selected run's folder (undoable); False (said in the status line) when it failed."""
        runs = self.selected_runs()
        if len(runs) != 1:
            return False
        new = new_name.strip()
        command = _RenameRun(self, Path(runs[0].path), new)
        self._failures = []
        self.undo_stack.push(command)
        if not command.ok:
            return False
        self.select([new])
        return True

    def delete_selected(self) -> int:
        """Move the selected runs' folders to the system trash (one undoable step); how many went."""
        runs = self.selected_runs()
        if not runs:
            return 0
        self.undo_stack.beginMacro(f"delete {runs[0].name}" if len(runs) == 1 else f"delete {len(runs)} runs")
        commands = [_TrashRun(self, Path(r.path)) for r in runs]
        self._failures = []
        for command in commands:
            self.undo_stack.push(command)
        self.undo_stack.endMacro()
        gone = sum(1 for c in commands if c.ok)
        said = [f"Moved {gone} run(s) to the trash; Undo puts {'it' if gone == 1 else 'them'} back."] if gone else []
        if gone or self._failures:
            self.status.setText(" ".join(said + self._failures))
        return gone

    def _file_op(self, op, command: QUndoCommand) -> None:
        """Run a rename / trash / restore; a failure is said in the status line and the command dropped."""
        try:
            op()
        except (OSError, ValueError) as exc:
            command.ok = False
            self._failures.append(printable(exc))
            self.status.setText(" ".join(self._failures))
            command.setObsolete(True)  # QUndoStack drops it: nothing to undo
        else:
            command.ok = True
            self.refresh()

    # ------------------------------------------------------------------ the row menu and Export…
    def row_menu(self) -> QMenu | None:
        """Build (not show) the selected rows' context menu: Open, Resume, Rename…, Delete, Export…; None when
        no row is selected."""
        runs = self.selected_runs()
        if not runs:
            return None
        menu = QMenu(self)
        for button, slot in ((self.open_button, self.open_selected), (self.resume_button, self.resume_selected),
                             (self.rename_button, self._on_rename), (self.delete_button, self.delete_selected)):
            action = menu.addAction(button.text(), lambda slot=slot: slot())
            action.setEnabled(button.isEnabled())
        menu.addSeparator()
        export = menu.addAction("Export…", self._on_export_model)
        export.setObjectName("runsExportModelAction")
        export.setToolTip("Export the run's best.pt (else last.pt) to ONNX, .pt2 or safetensors, checked on the "
                          "run's validation data")
        export.setEnabled(len(runs) == 1 and _export_checkpoint(runs[0]) is not None)
        return menu

    def _on_row_menu_requested(self, pos) -> None:
        index = self.table.indexAt(pos)
        if index.isValid() and not self.table.selectionModel().isRowSelected(index.row(), QModelIndex()):
            self.table.selectRow(index.row())  # the menu acts on the row clicked
        menu = self.row_menu()
        if menu is not None:
            menu.exec(self.table.viewport().mapToGlobal(pos))
            menu.deleteLater()

    def export_selected(self, path: str | Path) -> bool:
        """Export the selected run's ``best.pt`` (else ``last.pt``) to ``path`` and check it on the run's data.

        :func:`workbench.core.export.api.export` runs on a worker thread; the format
        follows the suffix (:func:`~workbench.core.export.api.format_for_path`). The
        verdict goes to the status line (and the window's status bar); a refused export
        or a failed check to ``prompts.error``, with the report.

        Returns
        -------
        bool
            True when written and every check passed.
        """
        from workbench.core.export.api import export, format_for_path

        runs = self.selected_runs()
        ckpt = _export_checkpoint(runs[0]) if len(runs) == 1 else None
        if ckpt is None:
            self.status.setText("Select one run that has a checkpoint (best.pt or last.pt) to export.")
            return False
        title = f"Export {printable(runs[0].name)}"
        try:
            fmt = format_for_path(path)
            report = run_in_background(lambda: export(ckpt, fmt, path),
                                       f"Exporting {ckpt.name} to {Path(path).name} and checking it…", self)
        except (WorkbenchError, ValueError, OSError, RuntimeError) as exc:
            self.prompts.error(f"{title}: {printable(exc)}")
            return False
        if not report.passed:
            self.prompts.error(f"{title}: the exported model does not answer as {ckpt.name} does.\n\n"
                               + "\n".join(report.lines()))
            return False
        said = f"{title}: {report.summary}"
        self.status.setText(said)
        window = self.window()
        if isinstance(window, QMainWindow):
            window.statusBar().showMessage(said, STATUS_MS)
        return True

    def _on_export_model(self) -> None:
        runs = self.selected_runs()
        if len(runs) != 1:
            return
        default = str(Path(runs[0].path) / f"{runs[0].name}.onnx")
        path = self.prompts.save_path(f"Export {printable(runs[0].name)}", EXPORT_FILTERS, default)
        if path:
            self.export_selected(path)

    def _ask_name(self, current: str) -> str | None:
        text, ok = QInputDialog.getText(self, "Rename run", "New folder name:", text=current)
        return text if ok else None

    def _on_rename(self) -> None:
        runs = self.selected_runs()
        if len(runs) != 1:
            return
        name = self.ask_name(runs[0].name)
        if name and name.strip() != runs[0].name:
            self.rename_selected(name)

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
            self.status.setText(f"Export failed: {printable(exc)}")
        else:
            self.status.setText(f"Saved {path}")


def _export_checkpoint(run: RunSummary) -> Path | None:
    """The checkpoint Export… writes: the run's ``best.pt``, else its ``last.pt``, else None."""
    for name in ("best.pt", "last.pt"):
        path = Path(run.path) / name
        if path.is_file():
            return path
    return None


def _missing(run: RunSummary, metric: str) -> str:
    """The line saying that a selected run has no curve of ``metric`` (and where its steps are, if it has them)."""
    text = f"{printable(run.name)}: no {printable(metric)}"
    step = STEP_PREFIX + "train_loss"
    if run.epochs_done == 0 and step in run.metrics and metric != step:
        text += f" (no epoch ended: its steps are under \"{metric_title(step)}\")"
    return text


def _as_curve(data) -> MinMaxPyramid | tuple:
    """A curve to draw: a pyramid when longer than :data:`LOD_POINTS`, else ``(x, y)``."""
    if isinstance(data, MinMaxPyramid):
        return data if data.n > LOD_POINTS or data.x is None else (data.x, data.y)
    x, y = data
    return MinMaxPyramid(x, y) if len(x) > LOD_POINTS else (x, y)
