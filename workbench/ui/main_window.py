"""The main window: docks (Model, Details, Training, Probes, Runs), menus, status bar.

Composed, not mixed in: the opened model lives in a
:class:`~workbench.ui.session.Session`; File actions in
:class:`~workbench.ui.file_actions.FileActions`; tree edits in
:class:`~workbench.ui.edits.ModelEdits`; every dialog in
:class:`~workbench.ui.prompts.Prompts`. This file is layout, signals and
persistence, plus thin delegates that scripts and tests drive (``open_path``,
``set_trainable``, ``reinitialize``, ``replace_head``, ... see docs/API.md).
"""

from __future__ import annotations

import time
from pathlib import Path

from PySide6.QtCore import QByteArray, Qt, QTimer, Signal
from PySide6.QtGui import QAction, QKeySequence, QUndoStack
from PySide6.QtWidgets import QDockWidget, QMainWindow, QWidget

from workbench.core.errors import WorkbenchError
from workbench.core.formatting import format_bytes, format_int, format_shape, parse_shape
from workbench.core.model import tree as core_tree
from workbench.core.model.edits import last_layer
from workbench.core.model.skeleton import is_skeleton
from workbench.core.train.runs.folder import default_runs_root
from workbench.ui.attaching import attach_on_host, attach_remote_window, attach_window
from workbench.ui.dock_follow import FollowingDock
from workbench.ui.edits import ModelEdits
from workbench.ui.file_actions import FileActions
from workbench.ui.dock_maximize import DockMaximizer
from workbench.ui.graph.graph_panel import GraphPanel
from workbench.ui.help_menu import HelpMenu
from workbench.ui.memory_feed import MemoryFeed
from workbench.ui.model.details_panel import DetailsPanel
from workbench.ui.model.tree_model import ModelTreeModel
from workbench.ui.model.tree_view import ModelTreeWidget
from workbench.ui.probe.panel import ProbesPanel
from workbench.ui.prompts import Prompts
from workbench.ui.qsettings import make_settings
from workbench.ui.runs.runs_panel import RunsPanel
from workbench.ui.session import Session
from workbench.ui.status_line import StatusLine, human_source
from workbench.ui.theme import ThemeChooser, apply_theme, remembered_theme
from workbench.ui.threading import run_in_background
from workbench.ui.train.panel import TrainingPanel
from workbench.ui.train.samples_view import SamplesView
from workbench.ui.training_menu import TrainingMenu
from workbench.ui.wheel_guard import WheelGuard
from workbench.ui.window_geometry import is_on_screen, place_on_screen


#: Longest wait for the window to be shown before a file given on the command line opens anyway, s.
SHOW_WAIT_S = 5.0
#: The model tree's share of the left column's height by default (Details / Probes / Runs tabs below). Half:
#: at 1152x696 the tree (566x325) stays smaller than the loss plots (572x339); 0.58 had relied on the Runs
#: dock's minimum height to hold the tabs at 282 px, and the tree grew past the plots when that minimum fell.
MODEL_SHARE = 0.5
#: The Model dock's share of the window's width by default when the Training dock keeps its settings beside the
#: plots with it (a 1920 px window: the tree's names whole; 0.3 had cut "word_embeddings" there).
MODEL_WIDTH_SHARE = 0.4
#: The most of its wanted width the tree's Name column gives up so that the Training dock keeps its settings
#: beside the plots, px: the demo's tree fits beside them in the 1152x696 window of a 1280x800 laptop, a MiniLM
#: folder's (columns wanting 673 px) at 1280x800; in a narrower window the settings stand above the plots
#: rather than the names being cut to nothing (28 px for MiniLM at 1152 px).
NAME_SQUEEZE_PX = 90


class MainWindow(QMainWindow):
    """Workbench's main window (objectName ``mainWindow``).

    Parameters
    ----------
    path : str or Path, optional
        A checkpoint to open; without one the built-in demo model is shown.
    arch : ArchSpec or str, optional
        Architecture for ``path`` (no Architecture dialog then).
    trust : bool
        Load pickled code in ``path`` without asking.
    prompts : Prompts, optional
        The dialogs; tests pass an object that answers at once.

    Attributes
    ----------
    session : Session
        The opened model and its state (``model``, ``arch_spec``, ``checkpoint``,
        ``input_shape`` are read-only shortcuts to it).
    prompts : Prompts
    file_actions : FileActions
    edits : ModelEdits
    undo_stack : QUndoStack
    tree_model : ModelTreeModel
    training_panel : TrainingPanel
    probes_panel : ProbesPanel
    training_menu : TrainingMenu
        Start (F5), Pause / Resume (F6), Stop (Shift+F5), Find LR (Ctrl+L).
    theme : ThemeChooser
        View > Theme (System / Light / Dark).
    help_menu : HelpMenu
        Help > Documentation (F1), About Workbench.

    Signals
    -------
    modelChanged()
        A new model is shown (open, new from architecture, head replaced).
    """

    modelChanged = Signal()

    def __init__(self, path=None, arch=None, trust: bool = False, parent: QWidget | None = None,
                 prompts=None):
        super().__init__(parent)
        self.setObjectName("mainWindow")
        self.setWindowTitle("Workbench")
        self.setAcceptDrops(True)
        WheelGuard.install()  # (ui.app installs it first; a window built by a test or script needs it too)
        self.settings = make_settings()
        apply_theme(remembered_theme(self.settings))  # before any plot exists: plots take its colors
        self.session = Session(self)
        self.prompts = prompts if prompts is not None else Prompts(self)
        self.undo_stack = QUndoStack(self)
        self.file_actions = FileActions(self.session, self.prompts, self.settings, self)
        self.edits = ModelEdits(self.session, self.prompts, self.undo_stack, self.settings)
        self.tree_model = ModelTreeModel(None, self.edits.set_trainable, self)
        self.tree_widget = ModelTreeWidget(self.edits, self)
        self.tree_widget.set_model(self.tree_model)
        self.details = DetailsPanel(self)
        self.training_panel = TrainingPanel(self.session, self.prompts, self)
        self.probes_panel = ProbesPanel(self.session, self)
        self.runs_panel = RunsPanel(default_runs_root(), self, prompts=self.prompts)
        self.graph_panel = GraphPanel(self.session, self)
        self.samples_view = SamplesView(self)  # a causal LM's completions at each evaluation (samples.jsonl)
        self._build_status_bar()
        self._build_docks()
        self._build_menus()
        self._connect()
        self._default_state = self.saveState()  # View > Reset layout puts this back
        self._restore_layout()
        self.open_demo()
        if path is not None:
            self.open_path(path, arch=arch, trust=trust)

    # -- the automation surface (docs/API.md): delegates ------------------------------
    @property
    def model(self):
        """The module shown (``session.model``)."""
        return self.session.model

    @property
    def arch_spec(self):
        """``session.arch_spec``."""
        return self.session.arch_spec

    @property
    def checkpoint(self):
        """``session.checkpoint``: the file opened last (None for the demo and new models)."""
        return self.session.checkpoint

    @property
    def input_shape(self):
        """``session.input_shape``, e.g. ``(1, 1, 8, 8)``."""
        return self.session.input_shape

    @property
    def keep_bn_stats_fixed(self) -> bool:
        """``session.keep_bn_stats_fixed``."""
        return self.session.keep_bn_stats_fixed

    def open_path(self, path, arch=None, trust: bool = False) -> bool:
        """Open a checkpoint file (:meth:`FileActions.open_path`); True when a model is shown."""
        return self.file_actions.open_path(path, arch=arch, trust=trust)

    def open_demo(self) -> None:
        """Show the built-in demo model."""
        self.file_actions.open_demo()

    def change_architecture(self) -> bool:
        """Edit > Change architecture…: reopen the file shown, choosing its architecture (:meth:`FileActions.change_architecture`)."""
        return self.file_actions.change_architecture()

    def open_when_shown(self, path, arch=None, trust: bool = False, then=None) -> None:
        """Open ``path`` once the window is on screen and painted (``workbench PATH``).

        A question about the file (trust, architecture, a partial fit) then appears
        over the window, never over a black screen. ``then(opened: bool)`` runs after.
        """
        deadline = time.monotonic() + SHOW_WAIT_S

        def attempt() -> None:
            handle = self.windowHandle()
            exposed = self.isVisible() and handle is not None and handle.isExposed()
            if not exposed and time.monotonic() < deadline:
                QTimer.singleShot(20, attempt)
                return
            self.repaint()  # painted now, before any dialog
            opened = self.open_path(path, arch=arch, trust=trust)
            if then is not None:
                then(opened)

        QTimer.singleShot(0, attempt)

    def new_from_architecture(self, spec=None) -> bool:
        """A freshly initialized model (:meth:`FileActions.new_from_architecture`)."""
        return self.file_actions.new_from_architecture(spec)

    def save_checkpoint(self, path) -> bool:
        """Save the model (:meth:`FileActions.save_checkpoint`)."""
        return self.file_actions.save_checkpoint(path)

    def export_summary(self, path) -> bool:
        """Export the module tree (:meth:`FileActions.export_summary`)."""
        return self.file_actions.export_summary(path)

    def recent_files(self) -> list[str]:
        """Recently opened / saved files, newest first."""
        return self.file_actions.recent_files()

    def set_trainable(self, path_or_names, flag: bool) -> None:
        """Freeze / unfreeze by qualified name (:meth:`ModelEdits.set_trainable`)."""
        self.edits.set_trainable(path_or_names, flag)

    def freeze_all_except(self, path: str) -> None:
        """:meth:`ModelEdits.freeze_all_except`."""
        self.edits.freeze_all_except(path)

    def freeze_before(self, path: str) -> None:
        """:meth:`ModelEdits.freeze_before`."""
        self.edits.freeze_before(path)

    def freeze_first_blocks(self, n: int | None = None) -> bool:
        """:meth:`ModelEdits.freeze_first_blocks`."""
        return self.edits.freeze_first_blocks(n)

    def reinitialize(self, path: str, method: str = "reset_parameters", value: float | None = None) -> bool:
        """Re-initialize the parameters under ``path`` (:meth:`ModelEdits.reinitialize`)."""
        return self.edits.reinitialize(path, method, value)

    def replace_head(self, path: str, num_outputs: int | None = None) -> bool:
        """Replace the head at ``path`` (:meth:`ModelEdits.replace_head`)."""
        return self.edits.replace_head(path, num_outputs)

    def set_keep_bn_stats_fixed(self, flag: bool) -> None:
        """Keep BatchNorm statistics fixed for fully frozen BatchNorm layers while training."""
        self.edits.set_keep_bn_stats_fixed(flag)

    def is_training(self) -> bool:
        """True while a run owns the model."""
        return self.session.running

    # -- layout ---------------------------------------------------------------------
    def _dock(self, title: str, name: str, widget: QWidget, area) -> QDockWidget:
        dock = QDockWidget(title, self, objectName=name)
        dock.setWidget(widget)
        self.addDockWidget(area, dock)
        return dock

    def _build_docks(self) -> None:
        """The default arrangement: the curves get the room.

        Left, the module tree over one tab group (Details, Probes, Runs, Graph; Probes in
        front); right, at full height, the Training dock: its run buttons,
        settings inspector and the loss / val / LR plots. Sizes are set on the
        first show (:meth:`apply_default_dock_sizes`) when no layout was saved.
        """
        self.setDockNestingEnabled(True)
        left, right = Qt.DockWidgetArea.LeftDockWidgetArea, Qt.DockWidgetArea.RightDockWidgetArea
        self.model_dock = self._dock("Model", "modelDock", self.tree_widget, left)
        self.details_dock = self._dock("Details", "detailsDock", self.details, left)
        self.splitDockWidget(self.model_dock, self.details_dock, Qt.Orientation.Vertical)
        self.training_dock = self._dock("Training", "trainingDock", self.training_panel, right)
        self.probes_dock = self._dock("Probes", "probesDock", self.probes_panel, left)
        self.tabifyDockWidget(self.details_dock, self.probes_dock)
        self.runs_dock = self._dock("Runs", "runsDock", self.runs_panel, left)
        self.tabifyDockWidget(self.probes_dock, self.runs_dock)
        self.graph_dock = self._dock("Graph", "graphDock", self.graph_panel, left)
        self.tabifyDockWidget(self.runs_dock, self.graph_dock)  # under the tree, in step with it; the plots keep
        self.samples_dock = self._dock("Samples", "samplesDock", self.samples_view, left)  # their height (a tab
        self.tabifyDockWidget(self.graph_dock, self.samples_dock)  # bar beside them took ~25 px at 1152x696)
        self.probes_dock.raise_()
        self.details_follower = FollowingDock(self, self.details_dock)  # a selection brings Details forward
        self.runs_dock.visibilityChanged.connect(lambda shown: shown and self.runs_panel.refresh())
        self._default_layout_pending = True
        self.maximizer = DockMaximizer(self, self._docks)  # the Graph's and the heatmap's Maximize
        self.maximizer.changed.connect(self._on_maximized)

    def apply_default_dock_sizes(self) -> None:
        """The left column as wide as the tree's columns need (half the window at most), the Training dock the rest.

        The tree takes :data:`MODEL_SHARE` of the left column's height, the
        Details / Probes / Runs tabs the rest. First show, when no layout was
        saved, and View > Reset layout.
        """
        width = self.width()
        frame = max(0, self.model_dock.width() - self.tree_widget.width())
        model_width = self._model_dock_width(self.tree_widget.columns_width() + frame, int(width * MODEL_WIDTH_SHARE))
        self.resizeDocks([self.model_dock, self.training_dock], [model_width, width - model_width],
                         Qt.Orientation.Horizontal)
        height = self.height()
        self.resizeDocks([self.model_dock, self.probes_dock],
                         [int(height * MODEL_SHARE), int(height * (1.0 - MODEL_SHARE))], Qt.Orientation.Vertical)

    def _fit_tree_columns(self) -> None:
        """Number columns as wide as this model's totals, and the Model dock wide enough for them (half the window
        at most): a larger model's counts are not cut."""
        if not self.tree_widget.fit_number_columns():
            return
        frame = max(0, self.model_dock.width() - self.tree_widget.width())
        need = self.tree_widget.columns_width() + frame
        if self.model_dock.isVisible() and not self.model_dock.isFloating() and self.model_dock.width() < need:
            width = self._model_dock_width(need, self.model_dock.width())
            self.resizeDocks([self.model_dock, self.training_dock], [width, self.width() - width],
                             Qt.Orientation.Horizontal)

    def _model_dock_width(self, need: int, least: int) -> int:
        """The Model dock's width, px: ``need`` (the tree's columns) or ``least``, whichever is wider, up to half
        the window, and no wider than leaves the Training dock its settings beside the plots while the tree's Name
        column loses at most :data:`NAME_SQUEEZE_PX` of what it wants.

        The tree's Name column takes what the other columns leave and elides names in the middle, so a tree
        narrower than its columns cuts no leaf or index; the curves keep their height (a MiniLM folder's columns
        took 616 px at 1280x800 and stacked the settings above a loss plot of 23 % of the window).
        """
        width = self.width()
        beside = width - self.training_panel.side_by_side_width() - self.style().pixelMetric(
            self.style().PixelMetric.PM_DockWidgetSeparatorExtent, None, self)
        cap = max(beside, need - NAME_SQUEEZE_PX)
        return min(max(need, least), cap, width // 2)

    def showEvent(self, event) -> None:  # noqa: N802 - Qt override
        """On the first show without a saved layout, size the docks."""
        super().showEvent(event)
        if self._default_layout_pending:
            self._default_layout_pending = False
            self.apply_default_dock_sizes()

    def _build_status_bar(self) -> None:
        self.status_line = StatusLine(self.statusBar())
        line = self.status_line
        self.status_file, self.status_trainable, self.status_size, self.status_device = (
            line.file, line.trainable, line.size, line.device)

    def _action(self, menu, text: str, slot, shortcut=None, tip: str = "") -> QAction:
        action = menu.addAction(text)
        action.triggered.connect(slot)
        if shortcut is not None:
            action.setShortcut(QKeySequence(shortcut))
        action.setStatusTip(tip)
        return action

    def _build_menus(self) -> None:
        file_menu = self.menuBar().addMenu("&File")
        files = self.file_actions
        self._action(file_menu, "&Open…", files.on_open_triggered, QKeySequence.StandardKey.Open,
                     "Open a checkpoint (.pt, .pth, .ckpt, .safetensors, TorchScript)")
        self._action(file_menu, "Open model &folder…", files.on_open_folder_triggered,
                     tip="A Hugging Face save_pretrained folder or a timm hub folder (config.json + safetensors)"
                     ).setObjectName("openFolderAction")
        self.recent_menu = file_menu.addMenu("Open &Recent")
        self._action(file_menu, "&New from architecture…", lambda: self.new_from_architecture(),
                     tip="A freshly initialized torchvision or builtin model")
        self.new_table_model_action = self._action(
            file_menu, "New &Tabular MLP for the table", files.new_table_model,
            tip="A Tabular MLP sized for the CSV table chosen in Training (its features in, its classes or targets out)")
        self.new_table_model_action.setObjectName("newTableModelAction")
        self._action(file_menu, "Open &demo model", self._on_demo_triggered)
        file_menu.addSeparator()
        self.attach_action = self._action(
            file_menu, "A&ttach to a running script…", self.on_attach_triggered,
            tip="Watch and steer a training script that called workbench.attach(model, optimizer)")
        self.attach_action.setObjectName("attachAction")
        self.attach_host_action = self._action(file_menu, "Attach to a run on a &host…", lambda: attach_on_host(self))
        self.attach_host_action.setObjectName("attachHostAction")
        self.detach_action = self._action(file_menu, "&Detach from the script", self.detach,
                                          tip="Let go of the attached script: it trains on as it is")
        self.detach_action.setObjectName("detachAction")
        self.detach_action.setEnabled(False)
        file_menu.addSeparator()
        self._action(file_menu, "&Save checkpoint…", files.on_save_triggered, QKeySequence.StandardKey.Save)
        self._action(file_menu, "Save as &model folder…", files.on_save_folder_triggered,
                     tip="A save_pretrained folder (config with the labels, weights, tokenizer) that transformers "
                         "loads back; LoRA adapters merged")
        self._action(file_menu, "Export &model…", files.on_export_model_triggered,
                     tip="ONNX, torch.export (.pt2) or safetensors, checked on a batch against this model")
        self._action(file_menu, "&Export summary…", files.on_export_triggered, tip="Markdown or CSV")
        self._action(file_menu, "&Compare with checkpoint…", files.on_compare_triggered,
                     tip="Per-module relative change ||a - b|| / ||a|| against another checkpoint of this architecture")
        self._action(file_menu, "C&lear comparison", lambda: self.session.set_comparison(None))
        file_menu.addSeparator()
        quit_action = self._action(file_menu, "&Quit", self.close, "Ctrl+Q")
        quit_action.setObjectName("quitAction")
        quit_action.setMenuRole(QAction.MenuRole.QuitRole)
        edit_menu = self.menuBar().addMenu("&Edit")
        self.undo_action = self.undo_stack.createUndoAction(self, "&Undo")
        self.undo_action.setShortcut(QKeySequence("Ctrl+Z"))
        self.redo_action = self.undo_stack.createRedoAction(self, "&Redo")
        self.redo_action.setShortcuts([QKeySequence("Ctrl+Shift+Z"), QKeySequence("Ctrl+Y")])
        edit_menu.addActions([self.undo_action, self.redo_action])
        edit_menu.addSeparator()
        self.change_arch_action = self._action(
            edit_menu, "Change &architecture…", self.change_architecture,
            tip="Open the file shown again in another architecture (or as weights only)")
        self.change_arch_action.setObjectName("changeArchitectureAction")
        self.change_arch_action.setEnabled(False)
        edit_menu.addSeparator()
        self.keep_bn_action = self._action(edit_menu, "Keep BatchNorm statistics fixed when frozen",
                                           self.set_keep_bn_stats_fixed)
        self.keep_bn_action.setCheckable(True)
        self.keep_bn_action.setChecked(self.session.keep_bn_stats_fixed)
        view_menu = self.menuBar().addMenu("&View")
        self._action(view_menu, "&Expand all", self.tree_widget.expand_all)
        self._action(view_menu, "&Collapse all", self.tree_widget.collapse_all)
        self.shapes_from_data_action = self._action(view_menu, "&Shapes from the training data",
                                                    self.shapes_from_data)
        self.shapes_from_data_action.setObjectName("shapesFromDataAction")
        self.shapes_from_data_action.setToolTip("Output shapes and FLOPs in the tree for a real batch of the "
                                                "dataset chosen in Training (token ids, dicts, tables...)")
        view_menu.addSeparator()
        for dock in self._docks():
            view_menu.addAction(dock.toggleViewAction())
        self.reset_layout_action = self._action(view_menu, "&Reset layout", self.reset_layout,
                                                tip="Every dock back in its place, the window at its first size")
        self.reset_layout_action.setObjectName("resetLayoutAction")
        view_menu.addSeparator()
        self.theme = ThemeChooser(view_menu, self.settings, self)
        self.training_menu = TrainingMenu(self.menuBar(), self.training_panel)
        self.help_menu = HelpMenu(self.menuBar(), self)
        self._rebuild_recent_menu()

    def _docks(self) -> tuple[QDockWidget, ...]:
        return (self.model_dock, self.details_dock, self.training_dock, self.probes_dock, self.runs_dock,
                self.graph_dock, self.samples_dock)

    def _rebuild_recent_menu(self) -> None:
        self.recent_menu.clear()
        for path in self.file_actions.recent_files():
            self.recent_menu.addAction(Path(path).name, lambda p=path: self.open_path(p)).setStatusTip(path)
        self.recent_menu.setEnabled(bool(self.recent_menu.actions()))

    def _connect(self) -> None:
        session = self.session
        self.tree_widget.currentNodeChanged.connect(self._on_selection_changed)
        self.tree_widget.inputShapeEntered.connect(self._on_input_shape_entered)
        self.training_panel.steeringChanged.connect(self.tree_widget.set_read_only)  # another window took over
        self.tree_model.badgesChanged.connect(self._on_badges_changed)
        self.runs_panel.openRequested.connect(lambda path: self.open_path(path))
        self.runs_panel.resumeRequested.connect(self.resume_run)
        self.training_panel.remoteSubmitted.connect(self.runs_panel.remote.add_submitted)  # Run on a host
        self.runs_panel.remote.set_attach(lambda run: attach_remote_window(self, run))  # On hosts › Attach
        # the Samples tab follows the run ("Sample now" is queued on it) and compares with runs under the Runs root
        self.samples_view.follow(self.training_panel.run, lambda: self.runs_panel.root_edit.text().strip() or None)
        # the graph and the tree stay in step: a box clicked selects the module, a module opened opens the row
        self.graph_panel.moduleSelected.connect(self._on_graph_module_selected)
        self.graph_panel.maximizeRequested.connect(self.maximize_graph)
        self.probes_panel.heatmapMaximizeRequested.connect(self.maximize_heatmap)
        self.graph_panel.expandRequested.connect(self.tree_widget.set_expanded)
        self.tree_widget.moduleExpanded.connect(self.graph_panel.set_expanded)
        session.modelChanged.connect(self._on_model_changed)
        session.structureChanged.connect(self.structure_changed)
        session.trainableChanged.connect(self.refresh_tree)
        session.weightsChanged.connect(self.refresh_tree)
        session.runningChanged.connect(self._on_running_changed)
        session.badgesChanged.connect(self.tree_model.set_badges)
        session.probedChanged.connect(self.tree_model.set_probed)
        session.statusMessage.connect(self._on_status_message)
        session.revealRequested.connect(self._on_reveal_requested)
        session.comparisonChanged.connect(self._on_comparison_changed)
        session.replaceHeadRequested.connect(self._on_replace_head_requested)
        session.keepBnStatsFixedChanged.connect(self.keep_bn_action.setChecked)
        session.keepBnStatsFixedChanged.connect(self.tree_model.set_bn_stats_fixed)
        self.tree_model.set_bn_stats_fixed(session.keep_bn_stats_fixed)
        self.file_actions.recentFilesChanged.connect(self._rebuild_recent_menu)
        self.memory_feed = MemoryFeed(session, self.training_panel.settings, self.tree_model,
                                      self.training_panel.run_bar.fit_line, self.tree_widget)

    # -- showing a model --------------------------------------------------------------
    def _on_model_changed(self) -> None:
        """A new model in the session: tree, details, status bar, title; clears undo history."""
        session = self.session
        self.undo_stack.clear()
        self.tree_widget.input_shape_edit.setText(",".join(map(str, session.input_shape or ())))
        self._rebuild_tree()
        self.setWindowTitle(f"Workbench — {self._shown_source()}" if session.source else "Workbench")
        self._update_change_arch_action()
        self.modelChanged.emit()

    def structure_changed(self) -> None:
        """The module tree of the model changed (head replaced): rebuild the tree, keep the input shape."""
        current = self.tree_widget.current_node()
        name = getattr(current, "name", None)
        self._rebuild_tree()
        if name is not None:
            with self.details_follower.held():  # the same module again: the tabs stay as they are
                self.tree_widget.select_name(name)
        self.modelChanged.emit()

    def _rebuild_tree(self) -> None:
        root = core_tree.build_summary(self.model)
        self.session.tree_root = root
        self.tree_model.set_root(root)
        self._annotate(root)
        self.tree_widget.reset_view()
        self._fit_tree_columns()
        self.details.show_node(None)
        self._update_status()

    def _annotate(self, root) -> bool:
        example = self.session.example
        if self.input_shape is None and example is None:
            return True
        try:
            if self.input_shape is None:  # the opened file's own example input (a Hugging Face config's)
                core_tree.annotate_shapes_and_flops(root, example=example, label=self.arch_spec and str(self.arch_spec))
                return True
            core_tree.annotate_shapes_and_flops(root, self.input_shape, label=self.arch_spec and str(self.arch_spec))
        except (WorkbenchError, ValueError, RuntimeError) as exc:
            self.statusBar().showMessage(f"Input shape {format_shape(self.input_shape)}: {exc}", 15000)
            return False
        return True

    def shapes_from_data(self) -> bool:
        """Fill the tree's output shapes and FLOPs from a real batch of the Training settings' dataset.

        The batch (two validation samples, collated as the run collates them) is
        read on a worker thread (:func:`workbench.core.train.data.example_batch.example_batch`);
        the model is called with its input part
        (:func:`workbench.core.model.example_input.from_batch`). Returns whether the
        tree shows them; a failure is said in the status bar and the shapes stay.
        """
        from workbench.core.model.example_input import from_batch
        from workbench.core.train.config import TrainConfig
        from workbench.core.train.data.example_batch import example_batch

        root = self.tree_model.root
        try:
            data_cfg = self.session.data_config()
        except ValueError as exc:
            self.statusBar().showMessage(f"Shapes from the data: the training settings: {exc}", 15000)
            return False
        if root is None or data_cfg is None:
            return False
        try:
            batch = run_in_background(lambda: example_batch(TrainConfig(data=data_cfg), 2),
                                      f"Reading a batch of {data_cfg.dataset}…", self)
            example = from_batch(batch, self.model)
            core_tree.annotate_shapes_and_flops(root, example=example, label=self.arch_spec and str(self.arch_spec))
        except (WorkbenchError, ValueError, RuntimeError, TypeError) as exc:
            self.statusBar().showMessage(f"Shapes from the data ({data_cfg.dataset}): {exc}", 15000)
            return False
        self.tree_model.refresh_all()
        self._on_current_node_changed(self.tree_widget.current_node())
        self.statusBar().showMessage(f"Output shapes and FLOPs for a batch of {data_cfg.dataset}: "
                                     f"{example.describe()} ({format_int(root.flops)} FLOPs)", 10000)
        return True

    def refresh_tree(self) -> None:
        """Re-read ``requires_grad`` and counts from the live model: checkboxes, counters, details."""
        self.tree_model.refresh_trainable()
        self._update_status()
        self._on_current_node_changed(self.tree_widget.current_node())

    def _shown_source(self) -> str:
        """What is open, its format by its human name ("model · Hugging Face folder")."""
        ckpt = self.session.checkpoint
        return human_source(self.session.source, ckpt.metadata.format if ckpt is not None else None)

    def _update_status(self) -> None:
        root = self.tree_model.root
        if root is None:
            return
        self.status_file.setText(self._shown_source())
        self.status_trainable.setText(f"trainable {format_int(root.trainable_params)} / {format_int(root.total_params)}")
        self.status_size.setText(format_bytes(root.total_bytes))
        self.status_size.setToolTip(f"{format_int(root.total_bytes)} bytes (parameters and buffers)")
        first = next(iter(self.model.parameters()), None)
        device = str(first.device) if first is not None else "cpu"
        self.status_device.setText("in the script" if is_skeleton(self.model) else device)

    # -- handlers ----------------------------------------------------------------
    def _on_current_node_changed(self, obj) -> None:
        name = getattr(obj, "name", None)
        self.details.show_node(obj, self.tree_model.badges(name) if isinstance(name, str) else [])
        self.session.select(obj)

    def _on_selection_changed(self, obj) -> None:
        """A row selected in the tree: its details, in front unless the user pinned another tab of their group."""
        self._on_current_node_changed(obj)
        if obj is not None:
            self.details_follower.follow()

    def maximize_graph(self, flag: bool) -> None:
        """The Graph dock alone in the window (``flag``), or every dock back where it was (the Graph's Maximize)."""
        self.maximizer.set(self.graph_dock, flag)

    def maximize_heatmap(self, flag: bool) -> None:
        """The Probes dock alone in the window, its Layers heatmap in front (``flag``), or every dock back (the
        heatmap's Maximize)."""
        self.maximizer.set(self.probes_dock, flag)

    def _on_maximized(self, dock) -> None:
        self.graph_panel.set_maximized(dock is self.graph_dock)
        self.probes_panel.set_heatmap_maximized(dock is self.probes_dock)

    def _on_graph_module_selected(self, name: str) -> None:
        """A box clicked in the Graph tab: the module selected in the tree, the Graph staying in front."""
        with self.details_follower.held():
            self.tree_widget.select_name(name)

    def _on_comparison_changed(self, changes) -> None:
        self.tree_model.set_comparison(changes)
        self.tree_widget.show_change_column(changes is not None)

    def compare_with(self, path) -> list:
        """Compare the shown model with the checkpoint at ``path`` (:meth:`FileActions.compare_with`)."""
        return self.file_actions.compare_with(path)

    def _on_reveal_requested(self, name: str, step: int) -> None:
        """A module was named elsewhere (a heatmap cell, the NaN trace): select it in the tree (the Probes
        tab, which shows it too, stays in front of Details)."""
        with self.details_follower.held():
            selected = self.tree_widget.select_name(name)
        if selected:
            self.model_dock.raise_()

    def _on_status_message(self, text: str, ms: int) -> None:
        self.statusBar().showMessage(text, ms)

    def _on_badges_changed(self) -> None:
        self._on_current_node_changed(self.tree_widget.current_node())

    def _on_input_shape_entered(self, text: str) -> None:
        previous = self.input_shape
        try:
            self.session.set_input_shape(parse_shape(text) if text.strip() else None)
        except ValueError as exc:
            self.statusBar().showMessage(f"Input shape: {exc}", 15000)
            return
        if self.input_shape is None or self._annotate(self.tree_model.root):
            self.tree_model.refresh_all()
            self._fit_tree_columns()
            self._on_current_node_changed(self.tree_widget.current_node())
            if self.input_shape is not None:
                flops = self.tree_model.root.flops
                self.statusBar().showMessage(f"Output shapes and FLOPs for input {format_shape(self.input_shape)}"
                                             f" ({format_int(flops)} FLOPs)", 8000)
        else:  # a failed annotation cleared the tree's shapes: put back those of the previous input
            self.session.set_input_shape(previous)
            if previous is not None:
                core_tree.annotate_shapes_and_flops(self.tree_model.root, previous,
                                                  label=self.arch_spec and str(self.arch_spec))
            self.tree_model.refresh_all()

    def _on_demo_triggered(self) -> None:
        if not self.session.refuse_while_running("open the demo"):
            self.open_demo()

    def _on_replace_head_requested(self, num_outputs: int) -> None:
        path = last_layer(self.model)
        if path is not None and self.replace_head(path, num_outputs):
            self.statusBar().showMessage(f"Replaced {path} with {num_outputs} outputs: press Start again "
                                         "(Ctrl+Z puts the old head back)", 10000)

    def resume_run(self, checkpoint: str, run_dir: str) -> bool:
        """Open a run's ``last.pt`` and set Training to resume it into ``run_dir`` (the Runs dock's Resume).

        The settings come from the run's run.toml (as for any opened checkpoint); the
        user presses Start. False when the file did not open or a run is active.
        """
        panel = self.training_panel
        if panel.is_running():
            self.statusBar().showMessage("A run is active: stop it before resuming another.", 8000)
            return False
        if not self.open_path(checkpoint):
            return False
        if not panel.resume_check.isEnabled():
            self.statusBar().showMessage(f"{checkpoint} holds no optimizer state: it opened, but cannot resume.",
                                         10000)
            return False
        panel.resume_check.setChecked(True)
        panel.settings.run_dir_edit.setText(run_dir)
        self.statusBar().showMessage(f"Ready to resume {Path(run_dir).name}: press Start (F5).", 10000)
        return True

    # -- attaching to a script ----------------------------------------------------------
    def on_attach_triggered(self) -> None:
        """File > Attach to a running script…"""
        target = self.prompts.attach_target()
        if target:
            self.attach_to(*target)

    def attach_to(self, address: str, token: str, steer: bool = True) -> bool:
        """Attach to a script that called ``workbench.attach``: its model tree, curves, probes and controls.

        Returns
        -------
        bool
            True when attached; False after saying why not in one line (a run is going, nothing
            listens there, a wrong token, a welcome that fails its check, a structure that cannot
            be shown, the busy dialog's Cancel); see :func:`workbench.ui.attaching.attach_window`.
        """
        return attach_window(self, address, token, steer)

    def detach(self) -> bool:
        """Let go of the attached script (it trains on as it is); False when none is attached."""
        return self.training_panel.detach()

    def _update_change_arch_action(self) -> None:
        """Edit > Change architecture… applies to weights opened from a file (a state_dict), when idle."""
        ckpt = self.session.checkpoint
        self.change_arch_action.setEnabled(ckpt is not None and ckpt.module is None and not self.session.running)

    def _on_running_changed(self, running: bool) -> None:
        self._update_change_arch_action()
        self.detach_action.setEnabled(running and self.training_panel.is_attached())
        self.attach_action.setEnabled(not running)
        self.attach_host_action.setEnabled(not running)
        if not running and self.runs_dock.isVisible():
            self.runs_panel.refresh()  # the run that just ended joins the list
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
        """The last geometry and dock layout (QSettings); the first time, a size that fits the screen."""
        geometry = self.settings.value("geometry")
        restored = isinstance(geometry, QByteArray) and not geometry.isEmpty() and self.restoreGeometry(geometry)
        if not restored or not is_on_screen(self.frameGeometry()):  # first launch, or its monitor is gone
            place_on_screen(self)
        state = self.settings.value("windowState")
        if isinstance(state, QByteArray) and not state.isEmpty() and self.restoreState(state):
            self._default_layout_pending = False

    def reset_layout(self) -> None:
        """View > Reset layout: every dock docked and shown where it starts, the window at its first size.

        A maximized or full-screen window keeps its size; the docks get their default shares.
        """
        self.maximizer.forget()
        self.restoreState(self._default_state)
        for dock in self._docks():
            dock.setFloating(False)
            dock.show()
        self.probes_dock.raise_()
        if not (self.isMaximized() or self.isFullScreen()):
            place_on_screen(self, self.screen())
        self.apply_default_dock_sizes()
        QTimer.singleShot(0, self.apply_default_dock_sizes)  # again once the new size is laid out

    def save_layout(self) -> None:
        """Persist window geometry and dock layout (QSettings)."""
        self.settings.setValue("geometry", self.saveGeometry())
        maximized = self.maximizer.state_before  # a close with a dock maximized keeps the docks' layout
        self.settings.setValue("windowState", maximized if maximized is not None else self.saveState())
        self.settings.sync()

    def closeEvent(self, event) -> None:  # noqa: N802
        """Stop a running training first (``training_panel.shutdown``); a refusal cancels the close."""
        if self.training_panel is not None and not self.training_panel.shutdown(ask=True):
            event.ignore()
            return
        if self.probes_panel is not None:
            self.probes_panel.shutdown()
        if getattr(self, "memory_feed", None) is not None:
            self.memory_feed.shutdown()  # an estimate under way ends before its thread is torn down
        self.save_layout()
        event.accept()
