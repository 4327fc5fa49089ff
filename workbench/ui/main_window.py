"""The main window: docks (Model, Details, Training, Probes), menus, status bar.

File handling lives in ``window_io.py`` and model edits in ``window_edits.py``
(mixins); this file is layout, signals and persistence.
"""

from __future__ import annotations

from pathlib import Path

from PySide6.QtCore import QByteArray, Qt, Signal
from PySide6.QtGui import QAction, QKeySequence, QUndoStack
from PySide6.QtWidgets import QDockWidget, QLabel, QMainWindow, QWidget

from workbench.core.errors import WorkbenchError
from workbench.core.formatting import format_bytes, format_int, format_shape, parse_shape
from workbench.core.model import tree as summary
from workbench.ui.edits import WindowEditsMixin
from workbench.ui.file_actions import WindowIOMixin
from workbench.ui.model.details_panel import DetailsPanel
from workbench.ui.model.tree_model import ModelTreeModel
from workbench.ui.model.tree_view import ModelTreeWidget
from workbench.ui.probe.panel import ProbesPanel
from workbench.ui.qsettings import make_settings
from workbench.ui.train.panel import TrainingPanel


class MainWindow(WindowIOMixin, WindowEditsMixin, QMainWindow):
    """Workbench's main window (objectName ``mainWindow``).

    Parameters
    ----------
    path : str or Path, optional
        A checkpoint to open; without one the built-in demo model is shown.
    arch : ArchSpec or str, optional
        Architecture for ``path`` (no Architecture dialog then).
    trust : bool
        Load pickled code in ``path`` without asking.

    Attributes
    ----------
    model : nn.Module
        The module shown.
    arch_spec : ArchSpec or None
    checkpoint : Checkpoint or None
        The file opened last (None for the demo and new models).
    input_shape : tuple of int or None
        Example input that filled Output shape and FLOPs, e.g. ``(1, 1, 8, 8)``.
    undo_stack : QUndoStack
    tree_model : ModelTreeModel
    training_panel : TrainingPanel
    probes_panel : ProbesPanel or None

    Signals
    -------
    modelChanged()
        A new model is shown (open, new from architecture, head replaced).
    """

    modelChanged = Signal()

    def __init__(self, path=None, arch=None, trust: bool = False, parent: QWidget | None = None):
        super().__init__(parent)
        self.setObjectName("mainWindow")
        self.setWindowTitle("Workbench")
        self.setAcceptDrops(True)
        self.settings = make_settings()
        self.keep_bn_stats_fixed = self.settings.value("keepBnStatsFixed", False, type=bool)
        self.model = None
        self.arch_spec = None
        self.checkpoint = None
        self.input_shape = None
        self._source = ""
        self.undo_stack = QUndoStack(self)
        self.tree_model = ModelTreeModel(None, self.set_trainable, self)
        self.tree_widget = ModelTreeWidget(self, self)
        self.tree_widget.set_model(self.tree_model)
        self.details = DetailsPanel(self)
        self.training_panel = None
        self.probes_panel = None
        self._build_status_bar()
        self._build_docks()
        self._build_menus()
        self._connect()
        self._restore_layout()
        self.open_demo()
        if path is not None:
            self.open_path(path, arch=arch, trust=trust)

    # -- layout ---------------------------------------------------------------------
    def _dock(self, title: str, name: str, widget: QWidget, area) -> QDockWidget:
        dock = QDockWidget(title, self, objectName=name)
        dock.setWidget(widget)
        self.addDockWidget(area, dock)
        return dock

    def _build_docks(self) -> None:
        self.setDockNestingEnabled(True)
        left, right = Qt.DockWidgetArea.LeftDockWidgetArea, Qt.DockWidgetArea.RightDockWidgetArea
        self.model_dock = self._dock("Model", "modelDock", self.tree_widget, left)
        self.details_dock = self._dock("Details", "detailsDock", self.details, left)
        self.splitDockWidget(self.model_dock, self.details_dock, Qt.Orientation.Vertical)
        self.training_panel = TrainingPanel(self)
        self.training_dock = self._dock("Training", "trainingDock", self.training_panel, right)
        self.probes_panel = ProbesPanel(self)
        self.probes_panel.probesChanged.connect(self.tree_model.set_probed)
        self.probes_dock = self._dock("Probes", "probesDock", self.probes_panel, right)
        self.splitDockWidget(self.training_dock, self.probes_dock, Qt.Orientation.Vertical)
        self._default_layout_pending = True

    def _apply_default_dock_sizes(self) -> None:
        """Give the Model dock the room its columns need (first show, when no layout was saved)."""
        width = max(self.width(), 1200)
        model_width = min(960, int(width * 0.58))
        self.resizeDocks([self.model_dock, self.training_dock], [model_width, width - model_width],
                         Qt.Orientation.Horizontal)
        height = self.height()
        self.resizeDocks([self.model_dock, self.details_dock], [int(height * 0.68), int(height * 0.32)],
                         Qt.Orientation.Vertical)
        self.resizeDocks([self.training_dock, self.probes_dock], [int(height * 0.6), int(height * 0.4)],
                         Qt.Orientation.Vertical)

    def showEvent(self, event) -> None:  # noqa: N802 - Qt override
        """On the first show without a saved layout, size the docks."""
        super().showEvent(event)
        if self._default_layout_pending:
            self._default_layout_pending = False
            self._apply_default_dock_sizes()

    def _build_status_bar(self) -> None:
        bar = self.statusBar()
        self.status_file = QLabel(objectName="statusFile")
        self.status_trainable = QLabel(objectName="statusTrainable")
        self.status_size = QLabel(objectName="statusSize")
        self.status_device = QLabel(objectName="statusDevice")
        bar.addWidget(self.status_file)
        for label in (self.status_trainable, self.status_size, self.status_device):
            bar.addPermanentWidget(label)

    def _action(self, menu, text: str, slot, shortcut=None, tip: str = "") -> QAction:
        action = menu.addAction(text)
        action.triggered.connect(slot)
        if shortcut is not None:
            action.setShortcut(QKeySequence(shortcut))
        action.setStatusTip(tip)
        return action

    def _build_menus(self) -> None:
        file_menu = self.menuBar().addMenu("&File")
        self._action(file_menu, "&Open…", self._on_open_triggered, QKeySequence.StandardKey.Open,
                     "Open a checkpoint (.pt, .pth, .ckpt, .safetensors, TorchScript)")
        self.recent_menu = file_menu.addMenu("Open &Recent")
        self._action(file_menu, "&New from architecture…", lambda: self.new_from_architecture(),
                     tip="A freshly initialized torchvision or builtin model")
        self._action(file_menu, "Open &demo model", self._on_demo_triggered)
        file_menu.addSeparator()
        self._action(file_menu, "&Save checkpoint…", self._on_save_triggered, QKeySequence.StandardKey.Save)
        self._action(file_menu, "&Export summary…", self._on_export_triggered, tip="Markdown or CSV")
        file_menu.addSeparator()
        self._action(file_menu, "&Quit", self.close, QKeySequence.StandardKey.Quit)
        edit_menu = self.menuBar().addMenu("&Edit")
        self.undo_action = self.undo_stack.createUndoAction(self, "&Undo")
        self.undo_action.setShortcut(QKeySequence("Ctrl+Z"))
        self.redo_action = self.undo_stack.createRedoAction(self, "&Redo")
        self.redo_action.setShortcuts([QKeySequence("Ctrl+Shift+Z"), QKeySequence("Ctrl+Y")])
        edit_menu.addActions([self.undo_action, self.redo_action])
        edit_menu.addSeparator()
        self.keep_bn_action = self._action(edit_menu, "Keep BatchNorm statistics fixed when frozen",
                                           self.set_keep_bn_stats_fixed)
        self.keep_bn_action.setCheckable(True)
        self.keep_bn_action.setChecked(self.keep_bn_stats_fixed)
        view_menu = self.menuBar().addMenu("&View")
        self._action(view_menu, "&Expand all", self.tree_widget.expand_all)
        self._action(view_menu, "&Collapse all", self.tree_widget.collapse_all)
        view_menu.addSeparator()
        for dock in (self.model_dock, self.details_dock, self.training_dock, self.probes_dock):
            view_menu.addAction(dock.toggleViewAction())
        self._rebuild_recent_menu()

    def _rebuild_recent_menu(self) -> None:
        self.recent_menu.clear()
        for path in self.recent_files():
            self.recent_menu.addAction(Path(path).name, lambda p=path: self.open_path(p)).setStatusTip(path)
        self.recent_menu.setEnabled(bool(self.recent_menu.actions()))

    def _connect(self) -> None:
        self.tree_widget.currentNodeChanged.connect(self._on_current_node_changed)
        self.tree_widget.inputShapeEntered.connect(self._on_input_shape_entered)
        self.tree_model.badgesChanged.connect(self._on_badges_changed)
        panel = self.training_panel
        panel.trainableChanged.connect(self._on_trainer_changed_trainable)
        panel.runningChanged.connect(self._on_running_changed)

    # -- showing a model --------------------------------------------------------------
    def show_model(self, model, spec, checkpoint, input_shape=None, source: str = "") -> None:
        """Show ``model`` (replacing the current one): tree, details, status bar; clears undo history.

        Parameters
        ----------
        model : nn.Module
        spec : ArchSpec or None
        checkpoint : Checkpoint or None
        input_shape : tuple of int, optional
            Fills Output shape and FLOPs (errors go to the status bar).
        source : str
            Shown in the status bar, e.g. ``"resnet18.pt · state_dict"``.
        """
        self.model, self.arch_spec, self.checkpoint = model, spec, checkpoint
        self._source = source
        self.undo_stack.clear()
        self.input_shape = tuple(input_shape) if input_shape else None
        self.tree_widget.input_shape_edit.setText(",".join(map(str, self.input_shape or ())))
        self._rebuild_tree()
        self.setWindowTitle(f"Workbench — {source}" if source else "Workbench")
        self._notify_model_changed()

    def structure_changed(self) -> None:
        """The module tree of ``self.model`` changed (head replaced): rebuild the tree, keep the input shape."""
        current = self.tree_widget.current_node()
        name = getattr(current, "name", None)
        self._rebuild_tree()
        if name is not None:
            self.tree_widget.select_name(name)
        self._notify_model_changed()

    def _rebuild_tree(self) -> None:
        root = summary.build_summary(self.model)
        self.tree_model.set_root(root)
        self._annotate(root)
        self.tree_widget.reset_view()
        self.details.show_node(None)
        self._update_status()

    def _annotate(self, root) -> bool:
        if self.input_shape is None:
            return True
        try:
            summary.annotate_shapes_and_flops(root, self.input_shape, label=self.arch_spec and str(self.arch_spec))
        except (WorkbenchError, ValueError, RuntimeError) as exc:
            self.statusBar().showMessage(f"Input shape {format_shape(self.input_shape)}: {exc}", 15000)
            return False
        return True

    def _notify_model_changed(self) -> None:
        for panel in (self.training_panel, self.probes_panel):
            on_changed = getattr(panel, "on_model_changed", None)
            if callable(on_changed):
                on_changed()
        self.modelChanged.emit()

    def refresh_tree(self) -> None:
        """Re-read ``requires_grad`` and counts from the live model: checkboxes, counters, details."""
        self.tree_model.refresh_trainable()
        self._update_status()
        self._on_current_node_changed(self.tree_widget.current_node())

    def _update_status(self) -> None:
        root = self.tree_model.root
        if root is None:
            return
        self.status_file.setText(self._source)
        self.status_trainable.setText(f"trainable {format_int(root.trainable_params)} / {format_int(root.total_params)}")
        self.status_size.setText(format_bytes(root.total_bytes))
        self.status_size.setToolTip(f"{format_int(root.total_bytes)} bytes (parameters and buffers)")
        first = next(iter(self.model.parameters()), None)
        self.status_device.setText(str(first.device) if first is not None else "cpu")

    # -- handlers ----------------------------------------------------------------
    def _on_current_node_changed(self, obj) -> None:
        name = getattr(obj, "name", None)
        self.details.show_node(obj, self.tree_model.badges(name) if isinstance(name, str) else [])

    def _on_badges_changed(self) -> None:
        self._on_current_node_changed(self.tree_widget.current_node())

    def _on_input_shape_entered(self, text: str) -> None:
        previous = self.input_shape
        try:
            self.input_shape = parse_shape(text) if text.strip() else None
        except ValueError as exc:
            self.statusBar().showMessage(f"Input shape: {exc}", 15000)
            return
        if self.input_shape is None or self._annotate(self.tree_model.root):
            self.tree_model.refresh_all()
            self._on_current_node_changed(self.tree_widget.current_node())
            if self.input_shape is not None:
                flops = self.tree_model.root.flops
                self.statusBar().showMessage(f"Output shapes and FLOPs for input {format_shape(self.input_shape)}"
                                             f" ({format_int(flops)} FLOPs)", 8000)
        else:  # a failed annotation cleared the tree's shapes: put back those of the previous input
            self.input_shape = previous
            if previous is not None:
                summary.annotate_shapes_and_flops(self.tree_model.root, previous,
                                                  label=self.arch_spec and str(self.arch_spec))
            self.tree_model.refresh_all()

    def _on_demo_triggered(self) -> None:
        if not self._refuse_while_training("open the demo"):
            self.open_demo()

    def _on_trainer_changed_trainable(self, _names: list) -> None:
        self.refresh_tree()

    def _on_running_changed(self, running: bool) -> None:
        self.undo_action.setEnabled(not running and self.undo_stack.canUndo())
        self.redo_action.setEnabled(not running and self.undo_stack.canRedo())
        if not running:
            self.refresh_tree()

    # -- drag and drop ----------------------------------------------------------------
    @staticmethod
    def _dropped_file(event) -> str | None:
        mime = event.mimeData()
        if mime is None or not mime.hasUrls():
            return None
        return next((url.toLocalFile() for url in mime.urls() if url.isLocalFile()), None)

    def dragEnterEvent(self, event) -> None:  # noqa: N802 - Qt override
        """Accept a dragged local file."""
        if self._dropped_file(event):
            event.acceptProposedAction()
        else:
            event.ignore()

    def dragMoveEvent(self, event) -> None:  # noqa: N802
        """Keep accepting while a file is dragged over the window."""
        self.dragEnterEvent(event)

    def dropEvent(self, event) -> None:  # noqa: N802
        """Open the dropped file."""
        path = self._dropped_file(event)
        if not path:
            event.ignore()
            return
        event.acceptProposedAction()
        self.open_path(path)

    # -- persistence -----------------------------------------------------------------
    def _restore_layout(self) -> None:
        geometry = self.settings.value("geometry")
        if isinstance(geometry, QByteArray) and not geometry.isEmpty():
            self.restoreGeometry(geometry)
        else:
            self.resize(1500, 900)
        state = self.settings.value("windowState")
        if isinstance(state, QByteArray) and not state.isEmpty() and self.restoreState(state):
            self._default_layout_pending = False

    def save_layout(self) -> None:
        """Persist window geometry and dock layout (QSettings)."""
        self.settings.setValue("geometry", self.saveGeometry())
        self.settings.setValue("windowState", self.saveState())
        self.settings.sync()

    def closeEvent(self, event) -> None:  # noqa: N802
        """Stop a running training first (``training_panel.shutdown``); a refusal cancels the close."""
        if self.training_panel is not None and not self.training_panel.shutdown(ask=True):
            event.ignore()
            return
        if self.probes_panel is not None:
            self.probes_panel.shutdown()
        self.save_layout()
        event.accept()
