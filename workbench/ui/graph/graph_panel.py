"""The Graph dock: :class:`GraphPanel`, the dataflow of the model shown, grouped by its modules.

Core captures the graph (:func:`workbench.core.graph.capture_graph`, on a worker
thread, when the dock is first shown for a model and no run owns it) and lays
out each view (:func:`workbench.core.graph.layout.layout` of
:meth:`~workbench.core.graph.model_graph.ModelGraph.collapsed`); this panel
keeps which modules are open, draws (:class:`~workbench.ui.graph.graph_scene.GraphScene`),
and follows the session: the frozen set, the tree's selection, the probes'
per-layer measurements as a colour overlay (scrubbable over the measured
steps), the module a NaN trace named (outlined, and the view moves to it).
It opens with the top-level modules closed.

Signals ``moduleSelected(str)`` and ``expandRequested(str, bool)`` let the
window keep the tree in step (the wings never import each other).
"""

from __future__ import annotations

import math

import numpy as np
import pyqtgraph as pg
from PySide6.QtCore import QEvent, QSize, Qt, QTimer, Signal
from PySide6.QtGui import QColor
from PySide6.QtWidgets import (QComboBox, QFileDialog, QHBoxLayout, QLabel, QLineEdit, QMessageBox, QSlider,
                               QToolButton, QVBoxLayout, QWidget)

from workbench.core.graph import GraphCaptureError, capture_graph
from workbench.core.graph.layout import layout as layout_graph
from workbench.core.model.example_input import example_input
from workbench.core.model.freezing import frozen_modules
from workbench.core.model.skeleton import is_skeleton
from workbench.core.probe.layer_stats import QUANTITIES, QUANTITY_TITLES
from workbench.ui.dock_maximize import MaximizeButton
from workbench.ui.graph import image_file
from workbench.ui.graph.graph_scene import GraphScene, GraphView
from workbench.ui.threading import run_in_background

__all__ = ["GraphPanel", "OVERLAYS"]

#: The colourings offered: key -> title. Static ones come from the tree's counts, live ones from the probes.
OVERLAYS = {"none": "No overlay", "params": "Parameters", "flops": "FLOPs",
            **{q: QUANTITY_TITLES[q] for q in QUANTITIES}, "badges": "Health badges"}
_LOG = {"params", "flops"}
_CMAP = pg.colormap.get("viridis")


class GraphPanel(QWidget):
    """The model's graph, its controls and its overlays (objectName ``graphPanel``).

    Parameters
    ----------
    session : Session

    Signals
    -------
    moduleSelected(str)
        A box was clicked: the module path it stands for.
    expandRequested(str, bool)
        A module was opened (True) or closed (False) here: the tree follows.
    maximizeRequested(bool)
        The Maximize button: the graph wants the whole window (True) or its place back (False).
    """

    moduleSelected = Signal(str)
    expandRequested = Signal(str, bool)
    maximizeRequested = Signal(bool)

    def __init__(self, session, parent=None):
        super().__init__(parent)
        self.setObjectName("graphPanel")
        self.session = session
        self.graph = None
        self.view_graph = None
        self.layout_ = None
        self.expanded: set[str] = {""}
        self._stale = True
        self._generation = 0  # each capture's number: a result for a model no longer shown is dropped
        self._needs_redraw = False
        self._snapshots: list = []
        self.scene = GraphScene(self)
        self.view = GraphView(self.scene, self)
        self._build()
        self.scene.nodeClicked.connect(self._on_node_clicked)
        self.scene.nodeDoubleClicked.connect(self._on_node_double_clicked)
        session.modelChanged.connect(self._on_model_changed)
        session.structureChanged.connect(self._on_model_changed)
        session.trainableChanged.connect(self.refresh_frozen)
        session.weightsChanged.connect(self.refresh_frozen)
        session.selectionChanged.connect(self._on_tree_selection)
        session.probeReports.connect(self._on_probe_reports)
        session.badgesChanged.connect(self._on_badges)
        session.revealRequested.connect(self._on_reveal)
        session.runningChanged.connect(self._on_running_changed)

    def _build(self) -> None:
        self.search = QLineEdit(objectName="graphSearch", placeholderText="Find a module or an operation")
        self.search.setClearButtonEnabled(True)
        self.search.returnPressed.connect(self._on_search)
        fit = QToolButton(text="Fit", objectName="graphFit", toolTip="The whole graph in view")
        fit.clicked.connect(self.fit_all)
        self.maximize_button = MaximizeButton("graphMaximize",
                                              "The graph takes the whole window (again: the other docks back)")
        self.maximize_button.maximizeRequested.connect(self._on_maximize_requested)
        expand = QToolButton(text="Open all", objectName="graphExpandAll", toolTip="Show every operation")
        expand.clicked.connect(lambda: self.set_expanded_set(set(self.graph.module_paths()) if self.graph else {""}))
        collapse = QToolButton(text="Close all", objectName="graphCollapseAll", toolTip="The top-level modules")
        collapse.clicked.connect(lambda: self.set_expanded_set({""}))
        self.overlay_combo = QComboBox(objectName="graphOverlay")
        # as narrow as a short title (the list shows every one whole): the bar's least width is the left column's
        self.overlay_combo.setSizeAdjustPolicy(QComboBox.SizeAdjustPolicy.AdjustToMinimumContentsLengthWithIcon)
        self.overlay_combo.setMinimumContentsLength(10)
        for key, title in OVERLAYS.items():
            self.overlay_combo.addItem(title, key)
        self.overlay_combo.currentIndexChanged.connect(lambda _i: self._recolor())
        export = QToolButton(text="Export…", objectName="graphExport", toolTip="Save the drawing as SVG or PNG")
        export.clicked.connect(self._on_export_clicked)
        self.step_slider = QSlider(Qt.Orientation.Horizontal, objectName="graphStepSlider")
        self.step_slider.setToolTip("The measured step the live overlay shows (right: the latest)")
        self.step_slider.setRange(0, 0)  # one position per measured step (QSlider's default is 0..99)
        self.step_slider.setVisible(False)  # shown once the probes measured a step
        self.step_slider.valueChanged.connect(lambda _v: self._recolor())
        self.status = QLabel(objectName="graphStatus", wordWrap=True)
        self.details_button = QToolButton(text="Details…", objectName="graphDetailsButton",
                                          toolTip="What each capture method said (the full text)")
        self.details_button.clicked.connect(self.show_details)
        self.details_button.setVisible(False)
        self._details = ""
        self.legend = QLabel(objectName="graphLegend")
        bar = QHBoxLayout()
        bar.setContentsMargins(0, 0, 0, 0)
        bar.addWidget(self.search, 2)
        for w in (fit, expand, collapse):
            bar.addWidget(w)
        bar.addWidget(self.overlay_combo, 1)
        bar.addWidget(export)
        bar.addWidget(self.maximize_button)
        scrub = QHBoxLayout()
        scrub.setContentsMargins(0, 0, 0, 0)
        scrub.addWidget(self.legend, 1)
        scrub.addWidget(self.step_slider, 1)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(4, 4, 4, 4)
        layout.addLayout(bar)
        layout.addWidget(self.view, 1)
        layout.addLayout(scrub)
        status_row = QHBoxLayout()
        status_row.setContentsMargins(0, 0, 0, 0)
        status_row.addWidget(self.status, 1)
        status_row.addWidget(self.details_button, 0, Qt.AlignmentFlag.AlignTop)
        layout.addLayout(status_row)

    def sizeHint(self) -> QSize:  # noqa: D102 - Qt override
        return QSize(480, 520)

    def changeEvent(self, event) -> None:  # noqa: N802 - Qt override
        """A new palette (View > Theme): the boxes, lines and text take its colours."""
        super().changeEvent(event)
        if event.type() in (QEvent.Type.PaletteChange, QEvent.Type.ApplicationPaletteChange):
            self.scene.set_palette(self.palette())

    # ------------------------------------------------------------------ capture and views
    def _on_model_changed(self) -> None:
        self.graph = self.view_graph = self.layout_ = None
        self._snapshots = []
        self.step_slider.setRange(0, 0)
        self.step_slider.setVisible(False)
        self.expanded = {""}
        self._stale = True
        self.scene.forget()
        self.scene.clear()
        self.scene.boxes = {}
        if self.isVisible():
            QTimer.singleShot(0, self._refresh_if_stale)

    def showEvent(self, event) -> None:  # noqa: N802 - Qt override
        """Capture when first shown for this model (after the show: the capture waits in a local event loop)."""
        super().showEvent(event)
        if self._stale or self._needs_redraw:
            QTimer.singleShot(0, self._refresh_if_stale)

    def _on_running_changed(self, running: bool) -> None:
        """A run ended: a capture it held off (the tab was shown meanwhile) happens now."""
        if not running and self._stale and self.isVisible():
            QTimer.singleShot(0, self._refresh_if_stale)

    def _refresh_if_stale(self) -> None:
        if self._stale and self.isVisible():
            self.refresh()
        elif self._needs_redraw and self.isVisible():
            self._redraw()

    def refresh(self) -> bool:
        """Capture the graph of the model shown (when it changed) and draw it; False (and a line why) when it cannot."""
        model = self.session.model
        self._stale = False
        self._set_details("")
        if model is None:
            self.status.setText("No model.")
            return False
        if is_skeleton(model):
            self.status.setText("An attached script's model: its graph needs its code, which stays in the script.")
            return False
        if self.session.running:
            self._stale = True
            self.status.setText("The graph is captured when no run owns the model (stop, or open it before Start).")
            return False
        session = self.session
        try:
            example = session.example if session.input_shape is None and session.example is not None else \
                example_input(model, session.input_shape)
            self._generation += 1
            generation = self._generation
            # window-modal at once (show_after_ms=0): no Start, no freeze, no other model while the capture
            # holds the model in eval mode on the worker
            graph = run_in_background(lambda: capture_graph(model, example), "Capturing the graph…", self,
                                      show_after_ms=0)
        except (GraphCaptureError, ValueError, TypeError, RuntimeError) as exc:
            self.graph = None
            self.status.setText(f"Could not capture the dataflow of this model: {capture_reason(exc)}")
            self._set_details(str(exc))
            return False
        if generation != self._generation or model is not self.session.model:
            return False  # another model came meanwhile: its own capture draws
        self.graph = graph
        # the tracers' own words (a fallback's reasons) are behind Details…, not in the caption
        fallback = " (the tracers before it could not follow this model: Details…)" if self.graph.note else ""
        self.status.setText(f"Captured with {_METHOD[self.graph.method]}{fallback}; {len(self.graph.nodes):,} "
                            "operations. Double-click a module to open or close it.")
        self._set_details(self.graph.note or "")
        self._redraw()
        self.view.fit(self.scene.itemsBoundingRect())
        return True

    def _set_details(self, text: str) -> None:
        self._details = text
        self.details_button.setVisible(bool(text))
        self.status.setToolTip(text[:MAX_TOOLTIP_CHARS])

    def details(self) -> str:
        """The full text behind Details…: why the capture failed, or why the tracers before the one used did
        (``""``: nothing to say)."""
        return self._details

    def show_details(self) -> QMessageBox | None:
        """Show :meth:`details` in a box (not modal: the graph stays usable); returns it, None when there is none."""
        if not self._details:
            return None
        box = QMessageBox(QMessageBox.Icon.Information, "Graph capture", self.status.text(),
                          QMessageBox.StandardButton.Close, self)
        box.setObjectName("graphDetailsBox")
        box.setDetailedText(self._details)
        box.setAttribute(Qt.WidgetAttribute.WA_DeleteOnClose)
        box.open()
        return box

    def _redraw(self) -> None:
        if self.graph is None:
            return
        if not self.isVisible():  # the tree opened a module while the Graph tab is hidden: draw when shown
            self._needs_redraw = True
            return
        self._needs_redraw = False
        expanded = set(self.expanded) | {""}
        view_graph = self.graph.collapsed(expanded)
        if len(view_graph.nodes) > 1500:
            lay = run_in_background(lambda: layout_graph(view_graph), "Laying out the graph…", self)
        else:
            lay = layout_graph(view_graph)
        self.view_graph, self.layout_ = view_graph, lay
        self.scene.show_graph(view_graph, lay, expanded)
        self.scene.set_detail(self.view.scale_factor())
        self.refresh_frozen()
        self._recolor()

    def set_expanded(self, path: str, flag: bool, *, tell: bool = False) -> None:
        """Open (``flag``) or close module ``path`` (its descendants close with it); ``tell``: emit
        ``expandRequested`` (a change made here, for the tree)."""
        if flag == (path in self.expanded) or self.graph is None:
            return
        if flag:
            self.expanded.add(path)
        else:
            self.expanded = {p for p in self.expanded if not (p == path or p.startswith(path + "."))} | {""}
        self._redraw()
        if tell:
            self.expandRequested.emit(path, flag)

    def set_expanded_set(self, expanded: set[str]) -> None:
        """Open exactly these modules (``{""}``: the top level)."""
        self.expanded = set(expanded) | {""}
        self._redraw()
        self.view.fit(self.scene.itemsBoundingRect())

    def refresh_frozen(self) -> None:
        """Draw as frozen the modules whose parameters are all frozen."""
        model = self.session.model
        if model is None or not self.scene.boxes or self.session.running and not is_skeleton(model):
            return  # during a run the training thread owns the model: its commands' events refresh this
        self.scene.set_frozen(frozen_modules(model))

    # ------------------------------------------------------------------ selection, search, reveal
    def select_module(self, path: str, center: bool = False) -> bool:
        """Mark the box of module ``path`` (the tree's selection); ``center`` moves the view to it."""
        box = self.scene.select_module(path)
        if box is not None and center:
            self.view.centerOn(box)
        return box is not None

    def _on_tree_selection(self, obj) -> None:
        name = getattr(obj, "name", None)
        if isinstance(name, str) and self.scene.boxes:
            self.select_module(name, center=True)

    def _on_node_clicked(self, name: str, path: str) -> None:
        node = self.view_graph.node(name) if self.view_graph is not None else None
        target = node.module_path if node is not None else path
        self.scene.select_module(target)
        self.moduleSelected.emit(target)

    def _on_node_double_clicked(self, name: str, path: str, kind: str) -> None:
        node = self.view_graph.node(name) if (self.view_graph is not None and name) else None
        if kind == "frame":
            self.set_expanded(path, False, tell=True)
        elif node is not None and node.op == "module":
            self.set_expanded(node.module_path, True, tell=True)

    def _on_search(self) -> None:
        text = self.search.text().strip().lower()
        if not text or self.view_graph is None:
            return
        for node in self.view_graph.nodes:
            if text in node.name.lower() or text in node.module_path.lower() or text in node.module_type.lower() \
                    or text in node.op.lower():
                box = self.scene.boxes.get(node.name)
                if box is not None:
                    self.scene.select_module(node.module_path)
                    self.view.fit(box.sceneBoundingRect())
                    self.moduleSelected.emit(node.module_path)
                    return
        self.status.setText(f"Nothing named {self.search.text().strip()!r} in this view.")

    def fit_all(self) -> None:
        """Fit the whole graph in view, however tall (the Fit button; a module is found with the search field)."""
        self.view.fit(self.scene.itemsBoundingRect(), whole_always=True)

    def set_maximized(self, flag: bool) -> None:
        """Show the Maximize button as ``flag`` (the window's state), without asking the window again."""
        self.maximize_button.set_maximized(flag)

    def _on_maximize_requested(self, flag: bool) -> None:
        self.maximizeRequested.emit(flag)
        QTimer.singleShot(0, self.fit_all)  # the view's new size: the whole graph again

    def _on_reveal(self, name: str, step: int) -> None:
        """A module to show (a heatmap cell, the NaN trace): move the view to it; outline it when a NaN trace
        named it (its ``nonfinite`` badge)."""
        self._outline_nonfinite()
        box = self.scene.box_of(name)
        if box is not None:
            self.view.centerOn(box)

    def _outline_nonfinite(self) -> None:
        badges = self.session.badges or {}
        bad = next((m for m, bs in badges.items() if any(getattr(b, "kind", "") == "nonfinite" for b in bs)), None)
        self.scene.outline(bad)

    # ------------------------------------------------------------------ overlays
    def _on_badges(self, _badges: dict) -> None:
        self._outline_nonfinite()
        if self.overlay() == "badges":
            self._recolor()

    def measured_steps(self) -> list[int]:
        """The training steps the probes measured per layer during the run shown (the slider's positions)."""
        return [int(s.step) for s in self._snapshots]

    def overlay(self) -> str:
        """The overlay chosen (a key of :data:`OVERLAYS`)."""
        return self.overlay_combo.currentData()

    def set_overlay(self, key: str) -> None:
        """Choose an overlay by key.

        Raises
        ------
        KeyError
            Not a key of :data:`OVERLAYS`.
        """
        self.overlay_combo.setCurrentIndex(list(OVERLAYS).index(key))

    def _on_probe_reports(self, reports: list) -> None:
        added = False
        for report in reports:
            snap = getattr(report, "layers", None)
            if snap is not None:
                self._snapshots.append(snap)
                added = True
        if added:
            at_end = self.step_slider.value() >= self.step_slider.maximum()
            self.step_slider.setVisible(True)
            self.step_slider.setMaximum(len(self._snapshots) - 1)
            if at_end:
                self.step_slider.setValue(len(self._snapshots) - 1)
            if self.overlay() in QUANTITIES:
                self._recolor()

    def overlay_values(self) -> dict[str, float]:
        """The chosen overlay's value per module path shown (``{}`` for none)."""
        key = self.overlay()
        if key == "none" or self.view_graph is None:
            return {}
        paths = {n.module_path for n in self.view_graph.nodes if n.module_path and n.op != "input"}
        root = self.session.tree_root
        if key in ("params", "flops") and root is not None:
            out = {}
            for n in root.walk():
                v = n.total_params if key == "params" else n.flops
                if n.name in paths and v:
                    out[n.name] = float(v)
            return out
        if key == "badges":
            badges = self.session.badges or {}
            return {p: float(len(badges[p])) for p in paths if badges.get(p)}
        if key in QUANTITIES and self._snapshots:
            snap = self._snapshots[min(self.step_slider.value(), len(self._snapshots) - 1)]
            return snap.per_module(key, paths)
        return {}

    def _recolor(self) -> None:
        values = self.overlay_values()
        key = self.overlay()
        if not values:
            self.scene.set_colors({})
            self.legend.setText("" if key == "none" else f"{OVERLAYS[key]}: nothing measured yet")
            return
        v = np.array(list(values.values()), dtype=np.float64)
        if key in _LOG:
            v = np.log10(np.maximum(v, 1.0))
        lo, hi = float(np.nanmin(v)), float(np.nanmax(v))
        span = hi - lo if hi > lo else 1.0
        colors = {}
        for path, x in zip(values, v):
            c = _CMAP.map((x - lo) / span, mode="qcolor")
            colors[path] = QColor(c)
        self.scene.set_colors(colors)
        step = ""
        if key in QUANTITIES and self._snapshots:
            step = f" at step {self._snapshots[min(self.step_slider.value(), len(self._snapshots) - 1)].step}"
        scale = " (log10)" if key in _LOG else ""
        self.legend.setText(f"<span style='color:#440154'>■</span> {_fmt(lo)} … "
                            f"<span style='color:#fde725'>■</span> {_fmt(hi)}  {OVERLAYS[key]}{scale}{step}")

    # ------------------------------------------------------------------ export
    def _on_export_clicked(self) -> None:
        path, _ = QFileDialog.getSaveFileName(self, "Export the graph", "graph.svg", "SVG (*.svg);;PNG (*.png)")
        if path:
            self.export(path)

    def export(self, path: str) -> str:
        """Save the drawing as ``.svg`` (vector) or ``.png`` (2x the scene's size, at most 8000 px); the path.

        Written atomically by :func:`workbench.ui.graph.image_file.write_graph_image`, the
        writer ``workbench graph --out`` uses too.

        Raises
        ------
        ValueError
            Another file extension.
        OSError
            The file cannot be written (the previous file, if any, is unchanged).
        """
        if not path.lower().endswith(image_file.IMAGE_SUFFIXES):
            raise ValueError(f"{path}: export as .svg or .png")
        return str(image_file.write_graph_image(path, image_file.scene_svg(self.scene), scale=2.0, max_side=8000))


#: The caption's reason is cut to this many characters (the whole text is behind Details…).
REASON_CHARS = 120
#: The caption's tooltip holds at most this much of the details.
MAX_TOOLTIP_CHARS = 600


def capture_reason(exc: BaseException) -> str:
    """One line of why the graph could not be captured: the last tracer's first line (the forward-hook trace
    runs the model for real, so its error is the model's own), cut to :data:`REASON_CHARS`."""
    reasons = getattr(exc, "reasons", None)
    text = list(reasons.values())[-1] if isinstance(reasons, dict) and reasons else str(exc)
    lines = [line.strip() for line in str(text).splitlines() if line.strip()]
    line = lines[0] if lines else type(exc).__name__
    return line if len(line) <= REASON_CHARS else line[:REASON_CHARS - 1] + "…"


_METHOD = {"export": "torch.export", "fx": "torch.fx symbolic tracing", "hooks": "a forward-hook trace of module calls"}


def _fmt(x: float) -> str:
    if not math.isfinite(x):
        return "-"
    return f"{x:.3g}"
