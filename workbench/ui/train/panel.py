"""The Training dock: settings, Start / Pause / Stop, progress and the live plots.

``TrainingPanel(session, prompts)`` trains ``session.model`` with the settings of
its form. Where the run trains (a training process started ahead, torchrun's ranks, or a
thread of this process) is the :class:`~workbench.core.train.launch.RunLauncher`'s
choice; whichever it is, the panel holds one
:class:`~workbench.ui.train.run_controller.RunController` that drives its
:class:`~workbench.core.train.handle.RunHandle`. While a run is active the
panel only queues commands (freeze / unfreeze, save now, pause, stop) and draws
the typed events that arrive (:mod:`workbench.core.train.events`); the window's
model gets the trained weights whenever a run in another process pauses, saves
or ends (``StateSynced``). Commands from elsewhere in the window reach it as
``session.commandRequested``.

Dialogs go through the prompts (``confirm_stop``, ``training_error``,
``nonfinite``), so tests pass prompts that answer at once.
"""

from __future__ import annotations

import math
from pathlib import Path

from PySide6.QtCore import QCoreApplication, Qt, QTimer, Signal, Slot
from PySide6.QtGui import QAction, QKeySequence
from PySide6.QtWidgets import (
    QCheckBox,
    QGridLayout,
    QHBoxLayout,
    QLabel,
    QPushButton,
    QScrollArea,
    QSplitter,
    QVBoxLayout,
    QWidget,
)

from workbench.core.model.architectures import WeightsOnlyModule
from workbench.core.probe.health import Badge
from workbench.core.train.devices import cuda_memory
from workbench.core.train.events import (
    ClassCountDiffers, CommandApplied, CudaMemory, EpochEnded, ExtrasReady, Finished, FitStarted, Metrics, NonFinite,
    Paused, ProgressText, RanksLine, RunError, StateSynced, apply_state,
)
from workbench.core.train.launch import ModelNotPortable, RunLauncher, RunRequest
from workbench.core.model.skeleton import is_skeleton
from workbench.core.train.trainer.commands import EmptyCudaCache, SaveNow, SetLR, SetTrainable
from workbench.core.train.trainer.control import NONFINITE_ACTIONS
from workbench.core.train.trainer.nan_trace import NonFiniteTrace
from workbench.ui.qsettings import make_settings
from workbench.ui.session import Session
from workbench.ui.train.code_confirm import confirm_file_code
from workbench.ui.train.collapsible import CollapsibleSection, compact_form
from workbench.ui.train.loss_plot import TrainingPlots
from workbench.ui.train.lr_find_dialog import LRFinder
from workbench.ui.train.run_progress import RunProgress
from workbench.ui.train.plot_feed import PlotFeed, trainable_change
from workbench.ui.train.run_controller import RunController
from workbench.ui.train.settings_form import TrainingSettings
from workbench.ui.train.settings_memory import SettingsMemory

#: Tooltips of Start and Find LR (a model that cannot be trained puts the reason first).
START_TIP = "Train the model shown with these settings (F5)"
FIND_LR_TIP = ("Learning-rate range test on a copy of the model with these settings; "
               "the model itself is not changed (Ctrl+L)")
PAUSE_TIP = "Pause at the next step boundary; press again to resume (F6)"
STOP_TIP = "Finish the current step, then stop (the model stays consistent) (Shift+F5)"
#: Shown above the settings during a run.
LIVE_NOTE = ("<b>During this run</b> the learning rate (type it, then Enter) and freezing (the Model tree's "
             "Train boxes) change live, from the next step. The other settings are fixed for this run: stop to "
             "change them.")
#: The note above the settings while a script is attached (its own settings are the script's).
ATTACHED_NOTE = ("<b>Attached to {name}</b>: the learning rate (type it, then Enter), freezing (the Model tree's "
                 "Train boxes), Pause, Save now and Stop steer the script at its next <code>wb.step</code>. "
                 "The settings below are for runs started here. File › Detach lets the script train on "
                 "(a pause stays until a window resumes it).")
#: Shortcut of each run action, by objectName (the tooltips above name them too).
RUN_SHORTCUTS = {"startAction": "F5", "pauseAction": "F6", "stopAction": "Shift+F5", "findLrAction": "Ctrl+L"}
#: QSettings key: train on a QThread in the window's process instead of a training process.
IN_PROCESS_KEY = "training/in_process"
#: How long :meth:`TrainingPanel.shutdown` waits for the run to stop, ms.
SHUTDOWN_TIMEOUT_MS = 15000
#: After Stop, how long a step may take to return before the panel offers to end the training process, ms.
STOP_TIMEOUT_MS = 10000
#: Plot redraw interval during a run, ms (metrics arrive every METRICS_MS and are only
#: appended to the buffers; the curves are redrawn at most this often). Every
#: repaint is CPU the training process does not get: on 2 cores, 200 ms gave a GUI
#: p99 of 19 ms (5 pairs, median) and 500 ms 15.6 ms, at the same training speed.
REDRAW_MS = 500
#: The trainer's ``emit_every_ms`` for runs started here: every step's loss still arrives, in
#: batches 4x a second instead of 25x (the curves redraw at 2 Hz anyway). Each batch wakes the
#: window's relay thread and GUI thread; on 2 cores that CPU is taken from training
#: (5 interleaved pairs: 0.87 vs 0.81 of the plain loop, GUI p99 20.3 vs 25.5 ms).
METRICS_MS = REDRAW_MS // 2
#: The settings inspector's first width beside the plots, px (the plots get the rest of the dock).
INSPECTOR_WIDTH = 320
#: The inspector's share of the height when it stands above the plots (a narrow dock); the curves get the rest.
STACKED_INSPECTOR_SHARE = 0.36


class TrainingPanel(QWidget):
    """Training settings, controls and live plots for ``session.model``.

    Parameters
    ----------
    session : Session
        The model to train (``model``, ``arch_spec``, ``checkpoint``, ``edits``,
        ``keep_bn_stats_fixed``); the panel reports ``running`` and status lines to it.
    prompts : Prompts
        ``confirm_stop()``, ``training_error(text)``, ``nonfinite(step, loss, can_rollback)``.
    parent : QWidget, optional

    Signals
    -------
    runningChanged(bool)
        A run started (True) / its thread finished (False).
    trainableChanged(list)
        Names of parameters whose ``requires_grad`` the trainer changed at a step boundary.
    runEvent(object)
        Every typed event of the run (:mod:`workbench.core.train.events`), on the GUI thread, in order,
        after the panel handled it (``Finished`` last).
    """

    runEvent = Signal(object)
    runningChanged = Signal(bool)
    trainableChanged = Signal(list)
    runPaused = Signal(int)
    weightsSynced = Signal()

    def __init__(self, session: Session, prompts, parent: QWidget | None = None):
        super().__init__(parent)
        self.session = session
        self.prompts = prompts
        self.setObjectName("trainingPanel")
        self._run = RunController(self)
        self._run.event.connect(self._on_event)
        self._run.event.connect(self.runEvent)
        self._run.ended.connect(self._on_thread_finished)
        self._launcher = RunLauncher()
        #: what each event of a run does here (one entry per event type the window shows)
        self._handlers = {
            FitStarted: lambda e: self._on_fit_started(e.info),
            Metrics: lambda e: self._on_metrics(e.values),
            EpochEnded: lambda e: self._on_epoch_ended(e.metrics),
            CommandApplied: self._on_command_applied,
            NonFinite: lambda e: self._on_nonfinite(e.step, e.loss, e.trace),
            ClassCountDiffers: lambda e: self._on_class_count_mismatch(e.data_classes, e.model_outputs, e.message),
            ProgressText: lambda e: self.run_progress.show_starting(e.text),
            RunError: lambda e: self._on_error(e.text),
            ExtrasReady: lambda e: self._on_extras(e.extras),
            Paused: lambda e: self.runPaused.emit(e.step),
            StateSynced: lambda e: self._on_state_synced(e.state),
            CudaMemory: lambda e: self._on_cuda_memory(e.allocated, e.reserved),
            RanksLine: lambda e: self.run_progress.show_ranks(e.text),
            Finished: lambda e: self._on_finished(e.reason),
        }
        self._last_reason: str | None = None
        self._last_error: str | None = None
        self._run_dir: str | None = None
        self._remember_mode = True
        self._last_samples: float | None = None
        self._last_epoch_metrics: dict = {}
        self._trained = False  # a run changed the weights since the model was opened
        self._cuda_mem: tuple[float, float] | None = None
        self._paused = False
        self._config = None
        self._attached_lr = math.nan  # the LR of an attached script's first param group, as last known here
        self._build()
        self._status_timer = QTimer(self)
        self._status_timer.setInterval(500)
        self._status_timer.timeout.connect(self._on_status_tick)
        self._redraw_timer = QTimer(self)
        self._redraw_timer.setInterval(REDRAW_MS // 2)  # plots and progress take turns
        self._redraw_phase = 0
        self._redraw_timer.timeout.connect(self._on_redraw_tick)
        self._stop_timer = QTimer(self)
        self._stop_timer.setSingleShot(True)
        self._stop_timer.setInterval(STOP_TIMEOUT_MS)
        self._stop_timer.timeout.connect(self._on_stop_timeout)
        self._last_metrics = None
        self._head_request: int | None = None
        session.modelChanged.connect(self.on_model_changed)
        session.commandRequested.connect(self._on_command_requested)
        session.probeReports.connect(self._on_probe_reports, Qt.ConnectionType.QueuedConnection)
        session.set_data_config_source(lambda: self.settings.config().data)
        self._qsettings = make_settings()
        self.memory = SettingsMemory(self.settings, self._qsettings)
        self.memory.restore()
        self.settings.lr_spin.editingFinished.connect(self._on_lr_edited)
        self.settings.lr_spin.outOfRange.connect(lambda text: self._status(f"Learning rate: {text}", 8000))
        self.in_process_check.setChecked(_as_bool(self._qsettings.value(IN_PROCESS_KEY, False)))
        self.in_process_check.toggled.connect(self._on_in_process_toggled)
        self._update_buttons()
        self.on_model_changed()
        self.start_ahead()

    # ------------------------------------------------------------------ layout
    def _build(self) -> None:
        self.settings = TrainingSettings(self)
        self.plots = TrainingPlots(self, prompts=self.prompts)
        self.feed = PlotFeed(self.plots)
        self._build_run_actions()
        self.start_button = self._action_button(self.start_action, "startButton")
        self.pause_button = self._action_button(self.pause_action, "pauseButton")
        self.stop_button = self._action_button(self.stop_action, "stopButton")
        self.save_button = QPushButton("Save now")
        self.save_button.setObjectName("saveNowButton")
        self.save_button.setToolTip("Write a checkpoint into the run folder at the next step boundary")
        self.save_button.clicked.connect(lambda: self.queue_save(None))
        self.cache_button = QPushButton("Empty CUDA cache")
        self.cache_button.setObjectName("emptyCacheButton")
        self.cache_button.setToolTip("torch.cuda.empty_cache(): give cached, unused GPU memory back")
        self.cache_button.clicked.connect(self.empty_cuda_cache)
        self.lr_finder = LRFinder(self, self._lr_find_config, self.session, self.settings.lr_spin.setValue,
                                  self.prompts.training_error)
        self.lr_find_button = self._action_button(self.find_lr_action, "findLrButton")
        self.tensorboard_button = QPushButton("TensorBoard…")
        self.tensorboard_button.setObjectName("tensorboardButton")
        self.tensorboard_button.setToolTip("Copy the command that opens the last run in TensorBoard "
                                           "(no server is started)")
        self.tensorboard_button.clicked.connect(self.copy_tensorboard_command)
        self.reset_button = QPushButton("Reset settings")
        self.reset_button.setObjectName("resetSettingsButton")
        self.reset_button.setToolTip("Put every training setting back to its default (and forget the remembered ones)")
        self.reset_button.clicked.connect(self.reset_settings)
        self.resume_check = QCheckBox("Resume from opened checkpoint")
        self.resume_check.setObjectName("resumeCheck")
        self.resume_check.setToolTip("Restore optimizer, scheduler, epoch, step and RNG from the file opened")
        self.in_process_check = QCheckBox("Train in this window's process")
        self.in_process_check.setObjectName("inProcessCheck")
        self.in_process_check.setToolTip(
            "Off (default): training runs in its own process at full speed, and a crash there never "
            "closes the window.\nOn: training runs on a thread of the window (slower; a crash takes the window down).")
        self.run_progress = RunProgress()
        self.progress = self.run_progress.bar
        self.input_label = self.run_progress.input_label
        self.ranks_label = self.run_progress.ranks_label
        #: ``"<file> (class folder <name>): <reason>"`` of the images the current run skipped as unreadable
        self.skipped_images: list[str] = []

        self.run_options = self._build_run_options()
        self.inspector = self._build_inspector()
        split = QSplitter(Qt.Orientation.Horizontal)
        split.setObjectName("trainingSplitter")
        self._split = split
        split.addWidget(self.inspector)
        split.addWidget(self.plots)
        split.setStretchFactor(0, 0)
        split.setStretchFactor(1, 1)
        split.setChildrenCollapsible(False)
        split.setSizes([INSPECTOR_WIDTH, 800])
        #: True once the user dragged the splitter: the panel stops giving the inspector its first width.
        self._split_moved = False
        split.splitterMoved.connect(self._on_splitter_moved)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(4, 4, 4, 4)
        self._run_bar = QWidget(objectName="runBar")
        self._run_bar.setLayout(self._build_run_bar())
        layout.addWidget(self._run_bar)
        layout.addWidget(split, 1)
        layout.addWidget(self.run_progress)

    def _build_run_actions(self) -> None:
        """Start (F5), Pause / Resume (F6), Stop (Shift+F5) and Find LR (Ctrl+L): one QAction each.

        The run bar's buttons show these actions (``QToolButton.setDefaultAction``)
        and the window's Training menu lists the same objects, so text, tooltip,
        shortcut and enabled state are defined here once.
        """
        def action(text: str, icon_text: str, name: str, shortcut: str, tip: str, slot) -> QAction:
            act = QAction(text, self, objectName=name)
            act.setIconText(icon_text)  # the button's text; the menu shows ``text``
            act.setShortcut(QKeySequence(shortcut))
            act.setShortcutContext(Qt.ShortcutContext.WindowShortcut)
            act.setToolTip(tip)
            act.setStatusTip(tip)
            act.triggered.connect(slot)
            return act

        # lambdas, not bound methods: a script (or a test) that replaces panel.start is obeyed
        self.start_action = action("&Start", "Start (F5)", "startAction", RUN_SHORTCUTS["startAction"], START_TIP,
                                   lambda: self.start())
        self.pause_action = action("&Pause", "Pause", "pauseAction", RUN_SHORTCUTS["pauseAction"], PAUSE_TIP,
                                   lambda: self._on_pause_clicked())
        self.stop_action = action("S&top", "Stop", "stopAction", RUN_SHORTCUTS["stopAction"], STOP_TIP,
                                  lambda: self.stop())
        self.find_lr_action = action("&Find LR…", "Find LR…", "findLrAction", RUN_SHORTCUTS["findLrAction"],
                                     FIND_LR_TIP, lambda: self.lr_finder.start())
        self.addActions(self.run_actions())  # the keys work in the panel alone too (one action: never ambiguous)

    @staticmethod
    def _action_button(action: QAction, name: str) -> QPushButton:
        """A QPushButton that triggers ``action`` and shows it: its icon text, tooltip and enabled state.

        The action is the one owner (a QToolButton's ``setDefaultAction`` in
        push-button form): setting the action's state changes the button, never
        the other way round.
        """
        button = QPushButton(objectName=name)

        def follow() -> None:
            button.setText(action.iconText())
            button.setToolTip(action.toolTip())
            button.setEnabled(action.isEnabled())

        follow()
        action.changed.connect(follow)
        button.clicked.connect(lambda: action.isEnabled() and action.trigger())
        return button

    def run_actions(self) -> list[QAction]:
        """Start, Pause / Resume, Stop and Find LR, in menu order (the Training menu lists them)."""
        return [self.start_action, self.pause_action, self.stop_action, self.find_lr_action]

    def _build_run_bar(self) -> QHBoxLayout:
        """Start, Pause, Stop, Save now and Find LR in one row above the settings and plots: always in view."""
        bar = QHBoxLayout()
        bar.setContentsMargins(0, 0, 0, 2)
        for button in (self.start_button, self.pause_button, self.stop_button, self.save_button,
                       self.lr_find_button):
            bar.addWidget(button)
        bar.addStretch(1)
        return bar

    def _build_run_options(self) -> CollapsibleSection:
        """The inspector's last section: resume, the training process, Reset, TensorBoard, the CUDA cache."""
        form = compact_form()
        form.addRow(self.resume_check)
        form.addRow(self.in_process_check)
        buttons = QGridLayout()
        buttons.addWidget(self.reset_button, 0, 0)
        buttons.addWidget(self.tensorboard_button, 0, 1)
        buttons.addWidget(self.cache_button, 1, 0, 1, 2)
        form.addRow(buttons)
        return CollapsibleSection("Run options", "runOptions", form, expanded=False)

    def _build_inspector(self) -> QScrollArea:
        """The settings' sections and the run options in a scroll area that scrolls up and down only."""
        inner = QWidget(objectName="trainingInspector")
        column = QVBoxLayout(inner)
        column.setContentsMargins(0, 0, 0, 0)
        column.setSpacing(2)
        #: during a run: what the user can still change, and where
        self.live_note = QLabel(LIVE_NOTE, objectName="liveNote", wordWrap=True)
        self.live_note.setContentsMargins(6, 2, 2, 4)
        self.live_note.setVisible(False)
        column.addWidget(self.live_note)
        column.addWidget(self.settings)
        column.addWidget(self.run_options)
        column.addStretch(1)
        scroll = QScrollArea(objectName="trainingSettingsScroll")
        scroll.setWidgetResizable(True)
        # the sections wrap their rows to the width there is; the splitter cannot make it narrower than that
        scroll.setHorizontalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
        scroll.setWidget(inner)
        scroll.setMinimumWidth(inner.minimumSizeHint().width() + scroll.verticalScrollBar().sizeHint().width()
                               + 2 * scroll.frameWidth())
        return scroll

    def _side_by_side_width(self) -> int:
        """The least width that shows the settings beside the plots, px (inspector + plots + handle + margins)."""
        margins = self.layout().contentsMargins()
        return (self.inspector.minimumWidth() + self.plots.minimumSizeHint().width() + self._split.handleWidth()
                + margins.left() + margins.right())

    def minimumSizeHint(self):  # noqa: N802 - Qt override
        """As narrow as the settings *above* the plots need: a dock narrower than side by side stacks them.

        The splitter's own minimum is that of its orientation; reporting the
        stacked one lets the Training dock share a laptop screen with the model tree
        (:meth:`resizeEvent` turns the splitter before anything would be squeezed).
        """
        from PySide6.QtCore import QSize

        margins = self.layout().contentsMargins()
        parts = (self._run_bar, self.inspector, self.plots, self.run_progress)
        width = max(max(p.minimumSizeHint().width(), p.minimumWidth()) for p in parts)
        height = (self._run_bar.minimumSizeHint().height() + self.inspector.minimumSizeHint().height()
                  + self.plots.minimumSizeHint().height() + self.run_progress.minimumSizeHint().height()
                  + self._split.handleWidth() + 3 * self.layout().spacing())
        return QSize(width + margins.left() + margins.right(), height + margins.top() + margins.bottom())

    def resizeEvent(self, event) -> None:  # noqa: N802
        """Settings beside the plots in a wide dock, above them (a smaller share) in a narrow or tall one."""
        super().resizeEvent(event)
        size = event.size()
        wide = size.width() >= self._side_by_side_width() and (
            size.width() >= 1.2 * size.height() or size.width() >= 900)
        orientation = Qt.Orientation.Horizontal if wide else Qt.Orientation.Vertical
        if self._split.orientation() != orientation or (wide and not self._split_moved):
            self._split.setOrientation(orientation)
            total = size.width() if wide else size.height()
            first = INSPECTOR_WIDTH if wide else int(total * STACKED_INSPECTOR_SHARE)
            self._split.setSizes([first, max(100, total - first)])

    def _on_splitter_moved(self, *args) -> None:
        self._split_moved = True

    # ------------------------------------------------------------------ public API
    def is_running(self) -> bool:
        """True from Start until the training thread has finished."""
        return self._run.is_running()

    def start(self) -> bool:
        """Start a run with the form's settings; False (and nothing happens) while one runs.

        Setting errors are shown through ``prompts.training_error`` and return False.
        """
        if self.is_running():
            return False
        model = self.session.model
        reason = self.untrainable_reason()
        if reason is not None:
            self._status(reason, 10000)
            return False
        try:
            config = self.settings.config()
            self._fill_config(config)
        except Exception as exc:  # noqa: BLE001 - a setting the user can fix
            self.prompts.training_error(f"Cannot start training: {exc}")
            return False
        refused = confirm_file_code(self.settings, config, self.prompts)
        if refused is not None:
            self._status(refused, 15000)
            return False
        resume = self._resume_source()
        if resume is not None and not self._extend_finished_run(config):
            return False
        handle = self._make_run(model, config, resume)
        if handle is None:
            return False
        self._config = config
        self.memory.remember(config)
        self._begin(handle, config.run_dir, config.epochs, config.device)
        if str(config.device).startswith("cuda"):
            self._status_timer.start()
        return True

    def attach(self, handle) -> bool:
        """Follow a script's run (an :class:`~workbench.core.attach.client.AttachedRun`) like a run of the window's
        own: its curves from the beginning, the tree's checkboxes, the LR, Pause, Save now and Stop steer it.

        False (and nothing happens) while a run is going. :meth:`detach` lets go of it.
        """
        if self.is_running():
            return False
        self._config = None
        lrs = handle.info.get("lrs") or []
        self._attached_lr = float(lrs[0]) if lrs else math.nan
        if lrs:
            self.settings.lr_spin.setValue(float(lrs[0]))  # the field shows the script's LR (sent only when edited)
        self._begin(handle, handle.info.get("run_dir"), 0, handle.info.get("device", "cpu"))
        self._status(f"Attached to {handle.info.get('name', 'the script')} (pid {handle.info.get('pid', '?')}) at "
                     f"{handle.address}" + ("" if handle.steering else " - read-only: another window steers it"),
                     10000)
        return True

    def is_attached(self) -> bool:
        """The run of the moment is a script's, attached (:meth:`attach`)."""
        return self.is_running() and self._run.kind == "attached"

    def detach(self) -> bool:
        """Let go of an attached script: it trains on as it is. False when none is attached."""
        if not self.is_attached():
            return False
        self._run.stop_and_save()  # an attached run's stop_and_save detaches; the script is never stopped
        return True

    def _begin(self, handle, run_dir, epochs: int, device) -> None:
        """What every run shows from its start: empty curves, the progress, the run's state in the controls."""
        self._last_reason = None
        self._last_error = None
        self._last_samples = None
        self._last_epoch_metrics = {}
        self.skipped_images = []
        self._run_dir = run_dir
        self.feed.begin()
        self.run_progress.begin(epochs, device)
        self._run.start(handle)
        self._redraw_timer.start()
        self.settings.set_running(True)
        info = getattr(handle, "info", None)
        self.live_note.setText(ATTACHED_NOTE.format(name=info.get("name", "a script")) if handle.kind == "attached"
                               and isinstance(info, dict) else LIVE_NOTE)
        self.live_note.setVisible(True)
        self._update_buttons()
        self.session.set_running(True)
        self.runningChanged.emit(True)

    def stop(self) -> None:
        """Ask the trainer to stop after the current step.

        A step that has not returned after ``STOP_TIMEOUT_MS`` (a hung forward)
        makes the panel offer to end the training process (``prompts.end_training_process``).
        """
        if self.is_running():
            self._run.stop()
            self.run_progress.show_stopping()
            if self._run.kind != "attached":  # a script's step is the script's: nothing here can end it
                self._stop_timer.start()

    def end_training_process(self) -> bool:
        """End the run's training process now (a step that never returns); False for a run in this process."""
        if not self._run.end():
            return False
        self._status("Ending the training process…", 5000)
        return True

    def set_in_process(self, flag: bool, remember: bool = True) -> None:
        """Train the next runs on a thread in the window's process (True) or in a training process (False).

        Remembered (QSettings ``training/in_process``) unless ``remember`` is False
        (``workbench --in-process``); a started-ahead process is ended when turned on.
        """
        self._remember_mode = remember
        try:
            if self.in_process_check.isChecked() != bool(flag):
                self.in_process_check.setChecked(bool(flag))  # -> _on_in_process_toggled
            else:
                self._on_in_process_toggled(bool(flag))
        finally:
            self._remember_mode = True

    def _on_in_process_toggled(self, flag: bool) -> None:
        if self._remember_mode:
            self._qsettings.setValue(IN_PROCESS_KEY, bool(flag))
        if flag:
            self._launcher.end_spare()
        else:
            self.start_ahead()

    def in_process(self) -> bool:
        """The next run trains on a thread in the window's process."""
        return self.in_process_check.isChecked()

    def start_ahead(self) -> None:
        """Start an idle training process now, so the next Start shows its first step within a second.

        Does nothing in in-process mode, when one is already waiting, or when the
        environment sets ``WORKBENCH_START_AHEAD=0``.
        """
        if not self.in_process() and self._launcher.start_ahead():
            self._warm_spare()

    def _warm_spare(self) -> None:
        """Have the process started ahead take a few throwaway steps of the opened model at the form's batch size.

        Skipped for settings the form cannot build yet (:meth:`RunLauncher.warm` says what else).
        """
        model = self.session.model
        if model is None or self.is_running():
            return
        try:
            config = self.settings.config()
        except Exception:  # noqa: BLE001 - an unfinished setting: the run will say so at Start
            return
        self._launcher.warm(model, config, self.session.input_shape)

    def wait_for_training_process(self, timeout: float = 120.0) -> bool:
        """Block until the process started ahead is ready and has warmed up on the opened model (benchmarks:
        neither may overlap a measurement). True when it is, or none was started."""
        return self._launcher.wait_ready(timeout)

    def last_run_stats(self) -> dict:
        """``{"samples", "time"}`` of the last run: training samples seen, and seconds from the start of
        ``fit()`` to its last epoch's end (train + validation); ``{}`` before a run's first epoch."""
        m = self._last_epoch_metrics
        if not m or self._last_samples is None:
            return {}
        return {"samples": float(self._last_samples), "time": float(m.get("time", math.nan))}

    def _make_run(self, model, config, resume):
        """The handle of the next run, where the launcher chooses (None after saying why it cannot start)."""
        device, processes = self.settings.device_and_processes()
        request = RunRequest(model, config, self.session.arch_spec, resume, self.session.training_callbacks(),
                             processes=processes, in_process=self.in_process())
        try:
            handle = self._launcher.make_run(request)
        except ModelNotPortable as exc:
            self.prompts.training_error(f"Cannot start a data-parallel run: {exc}")
            return None
        if self._launcher.note:
            self._status(self._launcher.note, 15000)
        return handle

    def pause(self) -> None:
        """Pause at the next step boundary."""
        if self.is_running() and not self._paused:
            self._run.pause()
            self._paused = self.run_progress.paused = True
            self._update_buttons()

    def resume(self) -> None:
        """Resume a paused run."""
        if self.is_running() and self._paused:
            self._run.resume()
            self.run_progress.eta.restart_window()  # the time paused is not step time
            self._paused = self.run_progress.paused = False
            self._update_buttons()

    def is_paused(self) -> bool:
        """True while the active run is paused by the user."""
        return self.is_running() and self._paused

    def queue_trainable(self, names: list[str], flag: bool) -> None:
        """Queue a freeze (``flag=False``) / unfreeze on the trainer, applied at the next step boundary.

        ``names``: module or parameter qualified names (``""`` = whole model).
        Only valid while a run is active (MainWindow applies edits itself otherwise).
        """
        names = [names] if isinstance(names, str) else list(names)
        self._run.queue(SetTrainable(names, bool(flag)))

    def queue_save(self, path=None) -> None:
        """Save a checkpoint at the next step boundary (``None``: into the run folder)."""
        self._run.queue(SaveNow(None if path is None else str(path)))

    def queue_lr(self, lr: float) -> None:
        """Change the learning rate at the next step boundary."""
        self._run.queue(SetLR(float(lr)))

    def checkpoint_extras(self) -> dict:
        """``optimizer_state_dict``, ``scheduler_state_dict``, ``epoch``, ``step``, ``loss`` of the last run.

        Detached CPU copies made on the training thread at the run's end
        (``session.run_extras``); ``{}`` before any run (or after the model changed).
        """
        return dict(self.session.run_extras)

    def last_reason(self) -> str | None:
        """End reason of the last run: ``"completed"``, ``"stopped"``, ``"error"``, ``"nonfinite"``."""
        return self._last_reason

    def run_dir(self) -> str | None:
        """Folder of the current / last run (once the trainer created it)."""
        return self._run_dir

    def on_model_changed(self) -> None:
        """``session.model`` was replaced: its weights are the file's; show the file's settings."""
        if not self.is_running():
            self._trained = False
            self._fill_from_checkpoint()
            self._warm_spare()
        self._refresh_resume_check()

    def _refresh_resume_check(self) -> None:
        ckpt = self.session.checkpoint
        raw = getattr(ckpt, "raw", None) or {}
        can_resume = isinstance(raw, dict) and "optimizer_state_dict" in raw
        self.resume_check.setEnabled(can_resume and not self.is_running())
        if can_resume:  # the choice this checkpoint offers is in view
            self.run_options.set_expanded(True)
        if not can_resume:
            self.resume_check.setChecked(False)
        self._update_train_buttons()

    def shutdown(self, ask: bool = True, timeout_ms: int = SHUTDOWN_TIMEOUT_MS) -> bool:
        """The window's closeEvent path; True = the window may close.

        While a run is active: ask (``prompts.confirm_stop``; False = cancel the close),
        stop at the next step boundary (a pause or a pending NaN decision ends
        with "stop") and write ``last.pt`` into the run folder, wait for the
        thread (``timeout_ms``), and let the run's end reach the panel. A training
        process that has not stopped by then is ended (SIGKILL; the run folder
        keeps its last checkpoint). The process started ahead is ended too.
        Returns False if a run in the window's process did not finish in time
        (closing then would destroy a running QThread).
        """
        self._status_timer.stop()
        self._stop_timer.stop()
        self.lr_finder.shutdown()
        if not self.is_running():
            self._launcher.end_spare()
            return True
        if ask and self._run.kind != "attached" and not self.prompts.confirm_stop():
            return False  # an attached script is let go, never stopped: nothing to ask
        self._launcher.end_spare()
        self._run.stop_and_save()
        if not self._run.wait(timeout_ms):
            if not self._run.end() or not self._run.wait(15000):
                self.prompts.training_error("Training did not stop in time; try closing again in a moment.")
                return False
        # deliver the run's last queued signals (extras, finished) and the thread's end
        for _ in range(20):
            QCoreApplication.processEvents()
            if not self.is_running():
                break
        self._run.finish_now()  # the queued end did not arrive: finish by hand
        self._launcher.end_spare()  # _on_thread_finished started the next one
        return True

    # ------------------------------------------------------------------ settings that follow the model / the user
    def reset_settings(self) -> None:
        """Every training setting back to its default; the remembered settings are forgotten."""
        self.memory.reset()
        self._status("Training settings reset to their defaults.", 5000)

    def _fill_from_checkpoint(self) -> None:
        """A checkpoint was opened: show the settings it records (run.toml beside it, its config, its optimizer)."""
        ckpt = self.session.checkpoint
        if ckpt is not None and not self.is_running():
            said = self.memory.fill_from_checkpoint(ckpt)
            if said:
                self._status(said, 8000)

    def _extend_finished_run(self, config) -> bool:
        """Resuming a run that already did its planned epochs: ask until which epoch to go on; False = cancel."""
        raw = getattr(self.session.checkpoint, "raw", None) or {}
        done = int(raw.get("epoch") or 0)
        if done < config.epochs:
            return True
        until = self.prompts.integer(
            "Extend the run", f"The checkpoint has completed {done} of {config.epochs} planned epochs.\n"
            "Train until epoch:", done + 1)
        if until is None or until <= done:
            self._status("Nothing to resume: the run has completed its epochs.", 8000)
            return False
        config.epochs = int(until)
        self.settings.epochs_spin.setValue(int(until))
        return True

    def _on_lr_edited(self) -> None:
        """The LR field changed during a run: send it (applied at the next step, marked on the plot)."""
        lr = float(self.settings.lr_spin.value())
        if not self.is_running():
            return
        if self._config is not None and lr != self._config.lr:
            self._config.lr = lr
            self.queue_lr(lr)
            self._status(f"Learning rate {lr:.3g}: applied at the next step", 4000)
        elif self._config is None and lr != self._attached_lr:  # an attached script: its first group's LR
            self._attached_lr = lr
            self.queue_lr(lr)
            self._status(f"Learning rate {lr:.3g}: applied at the next step", 4000)

    # ------------------------------------------------------------------ session
    def _on_command_requested(self, command) -> None:
        """A core command from elsewhere in the window (tree freeze, File > Save) for the active run."""
        if not self.is_running():
            self.session.show_status("No training run is active: the command was not sent.", 5000)
            return
        self._run.queue(command)

    @Slot(list)
    def _on_probe_reports(self, reports: list) -> None:
        for report in reports:
            grads = getattr(report, "grads", None)
            if grads is not None:
                self.plots.grad_norm.add(report.step, grads.global_norm)

    # ------------------------------------------------------------------ helpers
    def tensorboard_command(self) -> str | None:
        """``tensorboard --logdir "<run>/tensorboard"`` for the current or last run, or None before any run."""
        run_dir = self._run_dir
        if not run_dir:
            return None
        return f'tensorboard --logdir "{Path(run_dir) / "tensorboard"}"'

    def copy_tensorboard_command(self) -> str | None:
        """Put :meth:`tensorboard_command` on the clipboard and say so in the status bar; returns it."""
        from PySide6.QtGui import QGuiApplication

        command = self.tensorboard_command()
        if command is None:
            self._status("Start a run first: TensorBoard reads the run folder's event files", 8000)
            return None
        QGuiApplication.clipboard().setText(command)
        self._status(f"Copied: {command}", 15000)
        return command

    def _lr_find_config(self):
        """The form's settings for the LR finder (as Start would use them); raises ValueError on a bad setting."""
        if self.is_running():
            raise ValueError("a training run owns the model; find the LR before starting it")
        config = self.settings.config()
        self._fill_config(config)
        return config

    def _fill_config(self, config) -> None:
        """Record the model's source in ``config.model`` so ``run.toml`` replays the run.

        The architecture, and the opened checkpoint as the starting weights (with
        ``resume`` when "Resume from opened checkpoint" is ticked) as long as no
        run has changed the weights since the file was opened.
        """
        session = self.session
        spec = session.arch_spec
        if spec is not None:
            config.model.arch = spec.name
            config.model.kwargs = dict(spec.kwargs)
        config.model.edits = [dict(e) for e in session.edits]
        path = getattr(session.checkpoint, "path", None)
        if path is not None and Path(path).is_file():
            config.model.source = str(Path(path).resolve())
            if self._resume_source() is not None and not self._trained:
                config.model.checkpoint = config.model.source
                config.model.resume = True
        config.keep_frozen_bn_eval = bool(session.keep_bn_stats_fixed)
        config.emit_every_ms = max(float(config.emit_every_ms), float(METRICS_MS))

    def _resume_source(self):
        if not (self.resume_check.isEnabled() and self.resume_check.isChecked()):
            return None
        return self.session.checkpoint

    def _update_buttons(self) -> None:
        running = self.is_running()
        if not running:
            self._paused = False
        self._update_train_buttons()
        self.stop_action.setEnabled(running)
        self.pause_action.setEnabled(running)
        self.save_button.setEnabled(running)
        resume = running and self._paused
        self.pause_action.setText("&Resume" if resume else "&Pause")
        self.pause_action.setIconText("Resume" if resume else "Pause")
        self.cache_button.setVisible(_cuda_available())
        self.resume_check.setEnabled(not running and self.resume_check.isEnabled())

    def untrainable_reason(self) -> str | None:
        """Why the model shown cannot be trained (no model, a weights-only tree), or None when it can."""
        model = self.session.model
        if model is None:
            return "There is no model to train: open a checkpoint or create a model first."
        if is_skeleton(model):
            return ("This tree is the structure of a script's model (attached): its weights and code are in the "
                    "script. Attach to it again to steer it, or open a checkpoint it saved to train here.")
        if isinstance(model, WeightsOnlyModule):
            return ("This is a weights-only tree: it has no architecture, so no forward pass and no training. "
                    "Choose the architecture with Edit > Change architecture… to train it.")
        return None

    def _update_train_buttons(self) -> None:
        """Start and Find LR: enabled when idle with a trainable model, else disabled with the reason as tooltip."""
        reason = None if self.is_running() else self.untrainable_reason()
        can = not self.is_running() and reason is None
        for action, tip in ((self.start_action, START_TIP), (self.find_lr_action, FIND_LR_TIP)):
            action.setEnabled(can)
            action.setToolTip(tip if reason is None else f"{reason}\n\n{tip}")

    def _status(self, text: str, ms: int = 0) -> None:
        self.session.show_status(text, ms)

    # ------------------------------------------------------------------ slots
    def _on_pause_clicked(self) -> None:
        if self._paused:
            self.resume()
        else:
            self.pause()

    @Slot(object)
    def _on_event(self, event) -> None:
        """One typed event of the run, on the GUI thread: what it does here (``Sink`` never reaches the window)."""
        handler = self._handlers.get(type(event))
        if handler is not None:
            handler(event)

    def _on_fit_started(self, info: dict) -> None:
        self.run_progress.set_plan(info)
        self.feed.plan(info)
        for metrics in info.get("history") or []:  # a resumed run: draw the epochs it continues
            self._on_epoch_ended(metrics)
        if info.get("run_dir"):
            self._run_dir = info["run_dir"]
            note = f" ({info['data_note']})" if info.get("data_note") else ""
            self._status(f"Training… run folder {self._run_dir}{note}", 8000)

    def _on_metrics(self, m: dict) -> None:
        last = self.feed.add_metrics(m)
        if last is None:
            return
        self.run_progress.add_steps(*last)
        self._last_metrics = m  # the progress bar is repainted on the redraw tick, not per batch
        samples = m.get("samples")
        if samples is not None and len(samples):
            self._last_samples = float(samples[-1])

    def _on_redraw_tick(self) -> None:
        """Repaint the plots, or the progress, each at most every ``REDRAW_MS`` (painting is the GUI's main cost).

        The timer fires twice per ``REDRAW_MS`` and the two take turns (the step
        curves; the progress and, after an epoch's end, one plot's epoch curves):
        each event-loop pass then holds the GUI thread about half as long. A 10 ms timer
        was late by more than 16 ms on about half the combined redraws (2-core
        reference machine), so that the two together were the largest share of
        ``gui_latency_p99_ms``.
        """
        self._redraw_phase ^= 1
        if self._redraw_phase:
            self.plots.refresh_steps()
            return
        m, self._last_metrics = self._last_metrics, None
        if m is not None:
            self.run_progress.show_metrics(m)
        self.plots.refresh_epochs(one_plot=True)  # an epoch's end: one plot per pass, not with the step curves

    def _on_epoch_ended(self, m: dict) -> None:
        self.feed.add_epoch(m)
        self._last_epoch_metrics = m
        skipped = [str(name) for name in (m.get("skipped") or [])]
        if skipped:
            self.skipped_images.extend(skipped)
            shown = "; ".join(skipped[:3]) + (f" and {len(skipped) - 3} more" if len(skipped) > 3 else "")
            epoch = m.get("epoch") if isinstance(m.get("epoch"), (int, float)) else 0
            self._status(f"Epoch {int(epoch) + 1}: skipped {len(skipped)} unreadable image(s): {shown}",
                         20000)

    def _on_command_applied(self, event: CommandApplied) -> None:
        """A queued command was applied at ``event.step``: mark it on the plots, follow it, say it."""
        command, step = event.command, int(event.step)
        self.feed.mark(command, event.step, event.epoch)
        if isinstance(command, SetTrainable):
            changed = list(command.changed or [])
            self._follow_trainable(changed, bool(command.flag))
            self.trainableChanged.emit(changed)
            self.session.trainableChanged.emit()
            self._status(f"Step {step}: {trainable_change(command)} - {len(changed)} parameter tensors changed", 5000)
        elif isinstance(command, SaveNow):
            bad = list(command.nonfinite or [])
            warning = f" - it holds NaN/Inf in {', '.join(bad[:3])}{' and more' if len(bad) > 3 else ''}" if bad else ""
            self._status(f"Saved {command.saved_to or command.path or 'checkpoint'}{warning}", 15000 if bad else 5000)
        elif isinstance(command, SetLR):
            self._status(f"Step {step}: learning rate set to {float(command.lr):.3g}", 5000)

    def _on_nonfinite(self, step: int, loss: float, trace: dict | None = None) -> None:
        if not self.is_running():
            return
        text = ""
        if trace:
            text = NonFiniteTrace(**trace).text()
            if trace.get("phase") in ("forward", "backward"):
                module = trace.get("module", "")
                badges = dict(self.session.badges)
                badges[module] = [b for b in badges.get(module, []) if b.kind != "nonfinite"] + [
                    Badge("nonfinite", 1.0, step, text)]
                self.session.set_badges(badges)
                self.session.reveal(module, step)
        attached = self._run.kind == "attached"  # a script's run has no checkpoint of the window's to roll back to
        action = self.prompts.nonfinite(step, loss, can_rollback=not attached, trace=text)
        if action not in NONFINITE_ACTIONS:
            action = "stop"
        self._run.resolve_nonfinite(action)
        self._status(f"Non-finite loss at step {step}: {action.replace('_', ' ')}", 8000)

    def _on_class_count_mismatch(self, data_classes: int, outputs: int, message: str) -> None:
        """Caught before any step: offer the fix (one click replaces the head), else show the message."""
        self._last_error = message
        if self.prompts.replace_head(data_classes, outputs, message):
            self._head_request = int(data_classes)  # made once the run has ended and the model is free

    def _on_error(self, text: str) -> None:
        self._last_error = text
        self.prompts.training_error(text)

    def _on_extras(self, extras: dict) -> None:
        self.session.run_extras = extras

    def _follow_trainable(self, changed: list[str], flag: bool) -> None:
        """A run in a training process changed ``requires_grad``: the window's copy follows (its tree shows it)."""
        handle = self._run.handle
        if handle is None or handle.in_this_process or self.session.model is None:
            return
        params = dict(self.session.model.named_parameters(remove_duplicate=False))
        for name in changed:
            if name in params:
                params[name].requires_grad_(flag)

    def _on_state_synced(self, data: dict) -> None:
        """A training process sent its weights and frozen set (paused, saved or ended): the window's model shows them."""
        model = self.session.model
        if model is None:
            return
        try:
            apply_state(model, data)
        except RuntimeError as exc:  # the window's model changed shape meanwhile: keep it, say so
            self._status(f"The trained weights do not fit the model shown: {exc}", 10000)
            return
        self._trained = True
        self.session.weightsChanged.emit()
        self.session.trainableChanged.emit()
        self.weightsSynced.emit()

    def _on_cuda_memory(self, allocated: float, reserved: float) -> None:
        self._cuda_mem = (allocated, reserved)

    def _on_stop_timeout(self) -> None:
        """Stop was asked ``STOP_TIMEOUT_MS`` ago and the step has not returned."""
        handle = self._run.handle
        if handle is None or not self.is_running():
            return
        seconds = STOP_TIMEOUT_MS // 1000
        if not handle.can_end:
            self._status(f"The step has not returned in {seconds} s; a run in this window's process cannot be "
                         "ended by force.", 15000)
            return
        if self.prompts.end_training_process(seconds):
            self.end_training_process()
        else:
            self._stop_timer.start()  # ask again later

    def _on_finished(self, reason: str) -> None:
        self._last_reason = reason
        self._stop_timer.stop()
        handle = self._run.handle
        if handle is not None and handle.in_this_process and getattr(handle, "trainer", None) is not None:
            self._trained = True  # trained in place on the thread (a process run syncs its weights instead)
        folder = self._run_dir if self._run_dir and Path(self._run_dir).is_dir() else None
        self._status(f"Training {reason}" + (f" - run folder {folder}" if folder else " - no run folder was created"),
                     10000)
        m, self._last_metrics = self._last_metrics, None
        if m is not None:  # the metrics that arrived after the last redraw tick
            self.run_progress.show_metrics(m)
        self.run_progress.finish(reason, int(self.plots.steps.last("step", 0.0)))

    @Slot()
    def _on_thread_finished(self) -> None:
        self._status_timer.stop()
        self._redraw_timer.stop()
        self.plots.refresh(force=True)
        self.settings.set_running(False)
        self.live_note.setVisible(False)
        self._update_buttons()
        self._refresh_resume_check()
        self.session.set_running(False)  # the window re-reads requires_grad and weights on this
        self.runningChanged.emit(False)
        request, self._head_request = self._head_request, None
        if request is not None:
            self.session.replaceHeadRequested.emit(request)
        self.start_ahead()  # the next run starts quickly too

    def _on_status_tick(self) -> None:
        device = str(self._config.device) if self._config is not None else "cpu"
        if not device.startswith("cuda"):
            return
        # a process run reports its memory; this process never initializes CUDA for it
        mem = self._cuda_mem if self._cuda_mem is not None else (
            cuda_memory(device) if self._run.handle is not None and self._run.handle.in_this_process else None)
        if mem:
            alloc, reserved = _mem_pair(mem)
            self._status(f"{device}: {alloc / 2**20:,.0f} MiB allocated / {reserved / 2**20:,.0f} MiB reserved")

    def empty_cuda_cache(self) -> None:
        """``torch.cuda.empty_cache()`` where the run trains (its process at the next step), and show the memory."""
        if self.is_running():  # applied where the run trains, at its next step
            self._run.queue(EmptyCudaCache())
            return
        import torch

        if torch.cuda.is_available():
            torch.cuda.empty_cache()
            self._on_status_tick()


def _mem_pair(mem) -> tuple[float, float]:
    if isinstance(mem, dict):
        return float(mem.get("allocated", 0)), float(mem.get("reserved", 0))
    if isinstance(mem, (tuple, list)):
        return float(mem[0]), float(mem[1])
    return float(getattr(mem, "allocated", 0)), float(getattr(mem, "reserved", 0))


def _cuda_available() -> bool:
    import torch

    return torch.cuda.is_available()


def _as_bool(value) -> bool:
    """A QSettings value as bool (the INI backend gives back ``"true"`` / ``"false"`` strings)."""
    if isinstance(value, str):
        return value.strip().lower() in ("1", "true", "yes", "on")
    return bool(value)
