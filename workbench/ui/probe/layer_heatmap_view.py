"""The Probes panel's Layers tab: every leaf module over time, one heatmap per quantity.

:class:`LayerHeatmapView` draws a :class:`~workbench.core.probe.layer_history.LayerHistory`
(filled from the live :class:`~workbench.core.probe.callback.ProbeCallback`'s
layer snapshots): layers in execution order on the vertical axis, measurements on
the horizontal one (labelled with their steps), one pyqtgraph ``ImageItem`` per
quantity with the chosen one shown. Hovering names the module, step and value;
clicking a cell asks the session to reveal the module (tree selection, probes).
The filter box keeps the layers whose name or type contains the text; the sort
box orders them by execution, name or worst latest value (the core decides).

objectNames: ``layerHeatmap`` (the plot), ``heatmapQuantityCombo``, ``heatmapSortCombo``,
``heatmapFilter``, ``heatmapHover``, ``heatmapExportPng``, ``heatmapExportCsv``, ``heatmapMaximize`` (the
heatmap takes the whole window: ``maximizeRequested``; the window answers with :meth:`set_maximized`).
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pyqtgraph as pg
from PySide6.QtCore import QPointF, Qt, QTimer, Signal
from PySide6.QtGui import QFontMetricsF
from PySide6.QtWidgets import (QComboBox, QFileDialog, QHBoxLayout, QLabel, QLineEdit, QSizePolicy, QToolButton,
                               QVBoxLayout, QWidget)

from workbench.core.probe.layer_history import SORT_KEYS, LayerHistory, display_levels
from workbench.core.probe.layer_stats import LOG_QUANTITIES, QUANTITIES, QUANTITY_TITLES, LayerSnapshot
from workbench.ui.axis_fit import ELLIPSIS, axis_font
from workbench.ui.dock_maximize import MaximizeButton
from workbench.ui.probe.module_label import elide_module_name

#: Redraw at most this often while reports arrive, ms.
REDRAW_MS = 250
#: At most this many layer names label the vertical axis.
MAX_LAYER_TICKS = 30
#: Vertical pixels per layer-name label.
LABEL_PX = 15
#: Longest layer name on the vertical axis, in characters (shortened around its index; hovering names it whole).
MAX_NAME_CHARS = 22

_SORT_TITLES = {"execution": "execution order", "name": "name", "worst": "worst latest value"}
_COLORMAPS = {"update_ratio": "CET-D1"}  # diverging: the 1e-3 reference is the middle colour


#: At most this many step labels on the horizontal axis.
MAX_STEP_TICKS = 8


class _StepAxis(pg.AxisItem):
    """Bottom axis of column indices, labelled at column centres with the training step of each column
    (columns are measurements: the adaptive cadence and the decimation space them unevenly in steps)."""

    def __init__(self):
        super().__init__("bottom")
        self.steps = np.zeros(0, np.int64)

    def set_steps(self, steps: np.ndarray) -> None:
        """Label up to :data:`MAX_STEP_TICKS` evenly chosen columns with their steps."""
        self.steps = steps
        n = len(steps)
        picks = sorted({int(round(i)) for i in np.linspace(0, n - 1, min(n, MAX_STEP_TICKS))}) if n else []
        self.setTicks([[(i + 0.5, f"{int(steps[i]):,}") for i in picks], []])


class LayerHeatmapView(QWidget):
    """Layer x time heatmaps of a :class:`LayerHistory`.

    Parameters
    ----------
    history : LayerHistory, optional
        The data (a new one, 1,024 + 1,024 columns, by default).
    parent : QWidget, optional

    Signals
    -------
    cellClicked(str, int)
        Module name and step of a clicked cell.
    maximizeRequested(bool)
        The Maximize button: the heatmap wants the whole window (True) or its place back (False).
    """

    cellClicked = Signal(str, int)
    maximizeRequested = Signal(bool)

    def __init__(self, history: LayerHistory | None = None, parent: QWidget | None = None):
        super().__init__(parent)
        self.history = history if history is not None else LayerHistory()
        self.rows: list[int] = []  # history row of each image row, top to bottom
        self._matrix = np.zeros((0, 0), np.float32)
        self._stale = False  # measurements arrived since the last refresh
        self._ticks: list | None = None  # the layer axis ticks and the title last set (unchanged: not set again)
        self._title = ""
        self._shown_title = ""  # the title as shown (shortened to the plot's width)
        self._title_px: float | None = None  # the whole title's width, px (None: not measured yet)
        self._colorbar_for = ""  # the quantity whose colour map the colour bar shows
        self.quantity_combo = QComboBox(objectName="heatmapQuantityCombo")
        for q in QUANTITIES:
            self.quantity_combo.addItem(QUANTITY_TITLES[q], q)
        self.sort_combo = QComboBox(objectName="heatmapSortCombo")
        for key in SORT_KEYS:
            self.sort_combo.addItem(f"sort: {_SORT_TITLES[key]}", key)
        self.filter_edit = QLineEdit(objectName="heatmapFilter", placeholderText="filter layers (name or type)")
        self.filter_edit.setClearButtonEnabled(True)
        self.png_button = QToolButton(text="PNG…", objectName="heatmapExportPng")
        self.png_button.setToolTip("Save this heatmap as a PNG image")
        self.csv_button = QToolButton(text="CSV…", objectName="heatmapExportCsv")
        self.csv_button.setToolTip("Save every layer's measurements as tidy CSV (step, module, quantity, value)")
        self.maximize_button = MaximizeButton("heatmapMaximize", "The heatmap takes the whole window, the plots' "
                                              "room included (again: every dock back)")
        self.maximize_button.maximizeRequested.connect(self.maximizeRequested)

        self.axis = _StepAxis()
        self.plot = pg.PlotWidget(axisItems={"bottom": self.axis})
        self.plot.setObjectName("layerHeatmap")
        self.plot.invertY(True)
        self.plot.setLabel("bottom", "step")
        self.plot.setMouseEnabled(x=True, y=True)
        self.plot.getPlotItem().hideButtons()
        self.images: dict[str, pg.ImageItem] = {}
        for q in QUANTITIES:
            item = pg.ImageItem(axisOrder="row-major")
            item.setColorMap(pg.colormap.get(_COLORMAPS.get(q, "viridis")))
            item.setVisible(False)
            self.plot.addItem(item)
            self.images[q] = item
        self.colorbar = pg.ColorBarItem(interactive=False, width=12)
        self.plot.getPlotItem().layout.addItem(self.colorbar, 2, 5)
        self.hover = QLabel(objectName="heatmapHover", textFormat=Qt.TextFormat.PlainText)
        self.hover.setText("Every layer's statistics draw here live during training.")

        bar = QHBoxLayout()
        for w in (self.quantity_combo, self.sort_combo):
            # as narrow as a short title (the lists show theirs whole): a tool row wider than the Probes dock's
            # Layers tab scrolled the heatmap sideways (550 px in ~460 at 1280x800)
            w.setSizeAdjustPolicy(QComboBox.SizeAdjustPolicy.AdjustToMinimumContentsLengthWithIcon)
            w.setMinimumContentsLength(10)
            bar.addWidget(w)
        bar.addWidget(self.filter_edit, 1)
        # the buttons under the plot, beside the hover line, which gives up its width: with them in the tool row
        # the row was wider than the docked Layers tab at 1280x800 and Maximize scrolled out of sight
        self.hover.setSizePolicy(QSizePolicy.Policy.Ignored, QSizePolicy.Policy.Preferred)
        foot = QHBoxLayout()
        foot.addWidget(self.hover, 1)
        for button in (self.png_button, self.csv_button, self.maximize_button):
            foot.addWidget(button)
        v = QVBoxLayout(self)
        v.setContentsMargins(0, 0, 0, 0)
        v.addLayout(bar)
        v.addWidget(self.plot, 1)
        v.addLayout(foot)

        self._timer = QTimer(self, singleShot=True, interval=REDRAW_MS)
        self._timer.timeout.connect(self.refresh)
        self.quantity_combo.currentIndexChanged.connect(self.refresh)
        self.sort_combo.currentIndexChanged.connect(self.refresh)
        self.filter_edit.textChanged.connect(self.refresh)
        self.png_button.clicked.connect(self._on_export_png)
        self.csv_button.clicked.connect(self._on_export_csv)
        scene = self.plot.scene()
        self.plot.getPlotItem().vb.sigResized.connect(self._set_layer_ticks)
        self.plot.getPlotItem().vb.sigResized.connect(self._fit_title)
        scene.sigMouseMoved.connect(self._on_mouse_moved)
        scene.sigMouseClicked.connect(self._on_mouse_clicked)

    def set_maximized(self, flag: bool) -> None:
        """Show the Maximize button as ``flag`` (the window's state), without asking the window again."""
        self.maximize_button.set_maximized(flag)

    # ------------------------------------------------------------------ data
    @property
    def quantity(self) -> str:
        """The quantity shown."""
        return self.quantity_combo.currentData()

    def set_quantity(self, quantity: str) -> None:
        """Show ``quantity`` (one of :data:`QUANTITIES`)."""
        self.quantity_combo.setCurrentIndex(self.quantity_combo.findData(quantity))

    def add(self, snapshots: list[LayerSnapshot]) -> None:
        """Append measurements; the picture redraws within :data:`REDRAW_MS` when shown (else when next shown)."""
        for snap in snapshots:
            self.history.add(snap)
        if snapshots:
            self._stale = True
            if self.isVisible() and not self._timer.isActive():
                self._timer.start()

    def showEvent(self, event) -> None:  # noqa: N802 (Qt override): a hidden tab redraws when it is shown
        super().showEvent(event)
        if self._stale:
            self.refresh()

    def clear(self) -> None:
        """Forget every measurement (a new model)."""
        self.history.clear()
        self.refresh()

    def refresh(self) -> None:
        """Redraw the shown quantity now."""
        self._stale = False
        q = self.quantity
        h = self.history
        self.rows = h.order(q, self.sort_combo.currentData(), self.filter_edit.text()) if len(h) else []
        full = h.matrix(q) if len(h) else np.zeros((0, 0), np.float32)
        if self.rows == list(range(len(full))):
            self._matrix = full  # every layer in execution order: no copy
        else:
            self._matrix = full[self.rows] if self.rows else np.zeros((0, full.shape[1] if full.ndim == 2 else 0))
        for name, item in self.images.items():
            item.setVisible(name == q)
        image = self.images[q]
        self.axis.set_steps(h.steps() if len(h) else np.zeros(0, np.int64))
        if self._matrix.size:
            low, high = display_levels(q, self._matrix)
            image.setImage(self._matrix, levels=(low, high), autoLevels=False)
            image.setRect(0, 0, self._matrix.shape[1], self._matrix.shape[0])
            if self._colorbar_for != q:  # each quantity's image keeps its colour map
                self._colorbar_for = q
                self.colorbar.setColorMap(image.getColorMap())
            self.colorbar.setLevels((low, high))
        else:
            image.clear()
        names = [h.names[i] for i in self.rows]
        self._set_layer_ticks()
        unit = " (log10)" if q in LOG_QUANTITIES else ""
        title = (f"{QUANTITY_TITLES[q].replace(' (log10)', '')}{unit}: {len(names)} layers x "
                 f"{self._matrix.shape[1] if self._matrix.ndim == 2 else 0} measurements")
        if title != self._title:
            self._title, self._title_px = title, None
            self._fit_title()

    def _fit_title(self, *_args) -> None:
        """The title, shortened at its end to the width beside the layer names and the colour bar.

        A title sets the plot's least width: whole beside BERT's 22-character layer names, it pushed the colour
        bar's labels past the widget's right edge.
        """
        item = self.plot.getPlotItem()
        if self._title_px is None:  # a new title: its whole width, measured once
            item.setTitle(self._title)
            self._shown_title, self._title_px = self._title, item.titleLabel.itemRect().width()
        room = self.plot.width() - item.getAxis("left").width() - self.colorbar.width() - 16
        text = self._title
        if room > 0 and self._title_px > room:
            text = text[:max(3, int(len(text) * room / self._title_px) - 1)].rstrip() + ELLIPSIS
        if text != self._shown_title:
            self._shown_title = text
            item.setTitle(text)

    def _set_layer_ticks(self, *_args) -> None:
        """Label as many layers as fit the plot's height (every k-th), their names shortened around their index
        (:func:`~workbench.ui.probe.module_label.elide_module_name`: ``…layer.5…self.value``).

        Called at each refresh and when the plot is resized: a tab first drawn small labels more layers
        once it grows.
        """
        names = [self.history.names[i] for i in self.rows]
        axis = self.plot.getAxis("left")
        label_px = max(LABEL_PX, QFontMetricsF(axis_font(axis)).height())
        fit = max(1, int(self.plot.getPlotItem().vb.height() / label_px))  # labels that fit without overlapping
        every = max(1, math.ceil(len(names) / min(MAX_LAYER_TICKS, fit)))
        ticks = [[(i + 0.5, elide_module_name(n, MAX_NAME_CHARS)) for i, n in enumerate(names) if i % every == 0], []]
        if ticks != self._ticks:  # new ticks re-measure every label (~8 ms for 500 layers): only when they change
            self._ticks = ticks
            axis.setTicks(ticks)

    # ------------------------------------------------------------------ cells
    def cell_at(self, scene_pos: QPointF) -> tuple[str, int, float] | None:
        """(module, step, raw value) under a scene position, or None outside the picture."""
        if not self._matrix.size:
            return None
        p = self.plot.getPlotItem().vb.mapSceneToView(scene_pos)
        row, col = int(math.floor(p.y())), int(math.floor(p.x()))
        if not (0 <= row < self._matrix.shape[0] and 0 <= col < self._matrix.shape[1]):
            return None
        value = float(self._matrix[row, col])
        if self.quantity in LOG_QUANTITIES and math.isfinite(value):
            value = 10.0 ** value
        return self.history.names[self.rows[row]], int(self.axis.steps[col]), value

    def cell_center(self, module: str, step: int) -> QPointF:
        """Scene position of the centre of the cell of ``module`` at the column of ``step`` (tests, tours)."""
        row = [self.history.names[i] for i in self.rows].index(module)
        col = int(np.flatnonzero(self.axis.steps == step)[0])
        return self.plot.getPlotItem().vb.mapViewToScene(QPointF(col + 0.5, row + 0.5))

    def describe(self, module: str, step: int, value: float) -> str:
        """The hover line: ``layer3.1.bn2 (BatchNorm2d) · step 1,204 · gradient norm 0.0312``."""
        kind = self.history.types[self.history.names.index(module)]
        title = QUANTITY_TITLES[self.quantity].replace(" (log10)", "")
        shown = "not measured" if math.isnan(value) else f"{value:.4g}"
        return f"{module} ({kind}) · step {step:,} · {title} {shown}"

    def _on_mouse_moved(self, pos) -> None:
        cell = self.cell_at(pos)
        if cell is not None:
            self.hover.setText(self.describe(*cell))
            self.plot.setToolTip(cell[0])  # the full module name (the axis may show it shortened)

    def _on_mouse_clicked(self, event) -> None:
        cell = self.cell_at(event.scenePos())
        if cell is not None and event.button() == Qt.MouseButton.LeftButton:
            self.cellClicked.emit(cell[0], cell[1])

    # ------------------------------------------------------------------ export
    def export_png(self, path: str | Path) -> Path:
        """Save the plot as shown (PNG) to ``path``; returns the path."""
        path = Path(path)
        if not self.plot.grab().save(str(path), "PNG"):
            raise OSError(f"could not write {path}: check the folder exists and is writable")
        return path

    def export_csv(self, path: str | Path) -> Path:
        """Write every layer's measurements of every quantity as tidy CSV (atomic); returns the path."""
        return Path(self.history.write_csv(path))

    def _on_export_png(self) -> None:
        path, _ = QFileDialog.getSaveFileName(self, "Save heatmap", f"layers_{self.quantity}.png", "PNG (*.png)")
        if path:
            self._export(self.export_png, path)

    def _on_export_csv(self, *_) -> None:
        path, _ = QFileDialog.getSaveFileName(self, "Save layer measurements", "layers.csv", "CSV (*.csv)")
        if path:
            self._export(self.export_csv, path)

    def _export(self, write, path: str) -> None:
        try:
            write(path)
        except OSError as exc:
            self.hover.setText(f"Export failed: {exc}")
        else:
            self.hover.setText(f"Saved {path}")
