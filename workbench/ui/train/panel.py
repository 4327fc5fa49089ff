"""The Training dock: settings, Start / Pause / Stop, progress and the live plots.

``TrainingPanel(session, prompts)`` trains ``session.model`` with the settings of its
form. It holds the widgets (the run bar, the settings inspector with the run options,
the plots, the progress) and draws the typed events of the run
(:mod:`workbench.core.train.events`); its
:class:`~workbench.ui.train.run_controller.RunController` (``panel.run``) starts the
run where the launcher chooses, drives it and ends it. The window's model gets the
trained weights whenever a run in another process pauses, saves or ends
(``StateSynced``). Commands from elsewhere in the window arrive as
``session.commandRequested``. Dialogs go through the prompts (``confirm_stop``,
``training_error``, ``nonfinite``), so tests pass prompts that answer at once.
"""

from __future__ import annotations

import math

from PySide6.QtCore import Qt, Signal, Slot
from PySide6.QtWidgets import QVBoxLayout, QWidget

from workbench.core.train.events import (
    ClassCountDiffers, CommandApplied, CudaMemory, EpochEnded, ExtrasReady, Finished, FitStarted, Metrics, NonFinite,
    Notice, Paused, ProgressText, RanksLine, RunError, StateSynced, apply_state,
)
from workbench.core.train.trainer.commands import SaveNow, SetLR, SetTrainable
from workbench.ui.nonfinite_dialog import mark_nonfinite
from workbench.ui.qsettings import make_settings
from workbench.ui.session import Session
from workbench.ui.train.code_confirm import confirm_file_code
from workbench.ui.train.head_note import HeadNote
from workbench.ui.train.inspector import InspectorSplit, TrainingInspector
from workbench.ui.train.loss_plot import TrainingPlots
from workbench.ui.train.lr_find_dialog import LRFinder
from workbench.ui.train.plot_feed import trainable_change
from workbench.ui.train.run_bar import RunBar
from workbench.ui.train.run_config import fill_model_source, untrainable_reason
from workbench.ui.train.run_controller import SHUTDOWN_TIMEOUT_MS, RunController, copy_tensorboard_command
from workbench.ui.train.remote_target import submit_from_window
from workbench.ui.train.run_options import RunOptions
from workbench.ui.train.task_head import ensure_task_head, extend_finished_run
from workbench.ui.train.run_progress import RunProgress
from workbench.ui.train.run_view import METRICS_MS, RunView
from workbench.ui.train.settings_form import TrainingSettings
from workbench.ui.train.settings_memory import SettingsMemory
from workbench.ui.train.start_from import choose_start_weights
from workbench.ui.train.steering import Steering


class TrainingPanel(QWidget):
    """Training settings, controls and live plots for ``session.model``.

    Parameters
    ----------
    session : Session
        The model to train (``model``, ``arch_spec``, ``checkpoint``, ``edits``,
        ``keep_bn_stats_fixed``); the panel reports ``running`` and status lines to it.
    prompts : Prompts
        ``confirm_stop()``, ``training_error(text)``, ``nonfinite(step, loss, can_rollback)``,
        ``end_training_process(seconds)``, ``replace_head(...)``, ``integer(...)``.
    parent : QWidget, optional

    Attributes
    ----------
    run : RunController
        Starts, drives and ends the run (the launcher, the process started ahead, attach / detach).
    view : RunView
        What the plots and the progress show of the run.

    Signals
    -------
    runningChanged(bool)
        A run started (True) / its thread finished (False).
    trainableChanged(list)
        Names of parameters whose ``requires_grad`` the trainer changed at a step boundary.
    remoteSubmitted(object)
        Start sent a run to a host (Run options › Run on): its :class:`~workbench.remote.RemoteRun`.
    steeringChanged(str)
        Whether this window steers the run: ``""`` it does (or no run), else why not (another window took the
        steering of the attached run: :class:`~workbench.ui.train.steering.Steering`); the tree's checkboxes follow.
    runEvent(object)
        Every typed event of the run (:mod:`workbench.core.train.events`), on the GUI thread, in order,
        after the panel handled it (``Finished`` last).
    """

    runEvent = Signal(object)
    steeringChanged = Signal(str)
    remoteSubmitted = Signal(object)
    runningChanged = Signal(bool)
    trainableChanged = Signal(list)
    runPaused = Signal(int)
    weightsSynced = Signal()

    def __init__(self, session: Session, prompts, parent: QWidget | None = None):
        super().__init__(parent)
        self.session = session
        self.prompts = prompts
        self.setObjectName("trainingPanel")
        self.run = RunController(self, prompts=prompts)
        self.run.event.connect(self._on_event)
        self.run.event.connect(self.runEvent)
        self.run.ended.connect(self._on_thread_finished)
        self.run.status.connect(self._status)
        self.run.warm_source = self._warm_source
        #: what each event of a run does here (one entry per event type the window shows)
        self._handlers = {
            FitStarted: lambda e: self.view.fit_started(e.info),
            Metrics: lambda e: self.view.add_metrics(e.values),
            EpochEnded: lambda e: self.view.epoch_ended(e.metrics),
            CommandApplied: self._on_command_applied,
            NonFinite: lambda e: self._on_nonfinite(e.step, e.loss, e.trace),
            ClassCountDiffers: lambda e: self._on_class_count_mismatch(e.data_classes, e.model_outputs, e.message),
            ProgressText: lambda e: self.run_progress.show_starting(e.text),
            RunError: lambda e: self._on_error(e.text),
            ExtrasReady: lambda e: setattr(self.session, "run_extras", e.extras),
            Paused: lambda e: self.runPaused.emit(e.step),
            StateSynced: lambda e: self._on_state_synced(e.state),
            CudaMemory: lambda e: None,  # the controller shows it
            RanksLine: lambda e: self.run_progress.show_ranks(e.text),
            Notice: lambda e: self.steering.on_notice(e),  # a failed write (a full disk), Save now failed, read-only
            Finished: self._on_finished,
        }
        self._last_reason: str | None = None
        self._last_error: str | None = None
        self._trained = False  # a run changed the weights since the model was opened
        self._paused = False
        self.steering = Steering(self)  # whether this window steers the run (another may have taken it)
        self.steering.changed.connect(self.steeringChanged)
        self._config = None
        self._attached_lr = math.nan  # the LR of an attached script's first param group, as last known here
        self._head_request: int | None = None
        self._qsettings = make_settings()
        self._build()
        session.modelChanged.connect(self.on_model_changed)
        self.runningChanged.connect(self.head_note.follow)
        session.commandRequested.connect(self._on_command_requested)
        session.probeReports.connect(self._on_probe_reports, Qt.ConnectionType.QueuedConnection)
        session.set_data_config_source(lambda: self.settings.config().data)
        self.memory = SettingsMemory(self.settings, self._qsettings)
        self.memory.restore()
        self.settings.lr_spin.editingFinished.connect(self._on_lr_edited)
        self.settings.lr_spin.outOfRange.connect(lambda text: self._status(f"Learning rate: {text}", 8000))
        self.run.in_process = self.in_process_check.isChecked()
        self.in_process_check.toggled.connect(self._on_in_process_toggled)
        self._remember_mode = True
        self.update_buttons()
        self.on_model_changed()
        self.run.start_ahead()

    # ------------------------------------------------------------------ layout
    def _build(self) -> None:
        self.settings = TrainingSettings(self)
        self.plots = TrainingPlots(self, prompts=self.prompts)
        self.run_progress = RunProgress()
        self.progress = self.run_progress.bar
        self.input_label = self.run_progress.input_label
        self.ranks_label = self.run_progress.ranks_label
        self.view = RunView(self.plots, self.run_progress, self._status, self)
        self.lr_finder = LRFinder(self, self._lr_find_config, self.session, self.settings.lr_spin.setValue,
                                  self.prompts.training_error)
        # lambdas, not bound methods: a script (or a test) that replaces panel.start is obeyed
        self.run_bar = RunBar(self, lambda: self.start(), lambda: self._on_pause_clicked(), lambda: self.stop(),
                              lambda: self.queue_save(None), lambda: self.lr_finder.start(),
                              lambda: self.run.empty_cuda_cache())
        for name in ("start_action", "pause_action", "stop_action", "find_lr_action", "start_button", "pause_button",
                     "stop_button", "save_button", "lr_find_button", "cache_button"):
            setattr(self, name, getattr(self.run_bar, name))
        self.addActions(self.run_actions())  # the keys work in the panel alone too (one action: never ambiguous)
        self.run_options = RunOptions(self._qsettings, lambda: self.reset_settings(),
                                      lambda: self.copy_tensorboard_command())
        for name in ("resume_check", "in_process_check", "reset_button", "tensorboard_button"):
            setattr(self, name, getattr(self.run_options, name))
        self.run_options.steer_priority(self.run, self.settings.config)
        self.inspector = TrainingInspector([self.settings, self.run_options])
        self.live_note = self.inspector.live_note
        self._split = InspectorSplit(self.inspector, self.plots)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(4, 4, 4, 4)
        self.head_note = HeadNote(self.session, self.settings, self.prompts, self)
        layout.addWidget(self.run_bar)
        layout.addWidget(self.head_note)
        layout.addWidget(self._split, 1)
        layout.addWidget(self.run_progress)

    def run_actions(self) -> list:
        """Start, Pause / Resume, Stop and Find LR, in menu order (the Training menu lists them)."""
        return self.run_bar.run_actions()

    def side_by_side_width(self) -> int:
        """The least width of this panel that shows the settings beside the plots (not above them), px."""
        return self._split.side_by_side_width() + (m := self.layout().contentsMargins()).left() + m.right()

    def minimumSizeHint(self):  # noqa: N802 - Qt override
        """As narrow as the settings *above* the plots need: a dock narrower than side by side stacks them.

        The splitter's own minimum is that of its orientation; reporting the
        stacked one lets the Training dock share a laptop screen with the model tree
        (:meth:`resizeEvent` turns the splitter before anything would be squeezed).
        """
        return self._split.stacked_size_with((self.run_bar, self.run_progress), self.layout())

    def resizeEvent(self, event) -> None:  # noqa: N802
        """Settings beside the plots in a wide dock, above them (a smaller share) in a narrow or tall one."""
        super().resizeEvent(event)
        margins = self.layout().contentsMargins()
        self._split.fit(event.size(), event.size().width() - margins.left() - margins.right())

    # ------------------------------------------------------------------ starting and steering a run
    def is_running(self) -> bool:
        """True from Start until the training thread has finished."""
        return self.run.is_running()

    def start(self) -> bool:
        """Start a run with the form's settings; False (and nothing happens) while one runs.

        Setting errors are shown through ``prompts.training_error`` and return False. A model trained in this
        window asks which weights to start from (``prompts.start_from``, :mod:`.start_from`); Cancel returns False.
        With a host chosen in Run options › Run on, the run is sent there (:func:`.remote_target.submit_from_window`,
        ``remoteSubmitted``) and True means it was submitted.
        """
        if self.is_running():
            return False
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
        if self._trained:  # trained in this window: from those weights, or the file as opened again?
            answer = choose_start_weights(self.session, self.prompts, self.run_dir(), self._status, self)
            if answer is None:
                return False
            if answer == "file":
                self._trained = False
                self._fill_config(config)  # [model] source: the file, not the last run's last.pt
        refused = confirm_file_code(self.settings, config, self.prompts)
        if refused is not None:
            self._status(refused, 15000)
            return False
        if not ensure_task_head(self.session, config, self.prompts.training_error, self._status):
            return False  # a text task on a bare encoder (a sentence model's folder) gets its head here
        resume = self._resume_source()
        if resume is not None and not extend_finished_run(self.session.checkpoint, config, self.prompts,
                                                          self._status, self.settings.epochs_spin):
            return False
        host = self.run_options.run_target.entry()
        if host is not None:  # Training › Run on: a host (its run is listed in the Runs dock, not trained here)
            run = submit_from_window(self, config, host)
            if run is not None:
                self.remoteSubmitted.emit(run)
            return run is not None
        processes = self.settings.device_and_processes()[1]
        handle = self.run.make_run(self.session.model, config, arch=self.session.arch_spec, resume=resume,
                                   callbacks=self.session.training_callbacks(), processes=processes)
        if handle is None:
            return False
        self._config = config
        self.memory.remember(config)
        self._begin(handle, config.run_dir, config.epochs, str(config.device))
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
        self._begin(handle, handle.info.get("run_dir"), 0, handle.info.get("device", "cpu"), attached=True)
        self.view.follow_attached(getattr(handle, "host", None), getattr(handle, "run_name", None))  # its folder
        self.run_bar.fit_line.show_attached()  # not "estimating…" for ever: no estimate is made during a run
        self._status(f"Attached to {handle.info.get('name', 'the script')} (pid {handle.info.get('pid', '?')}) at "
                     f"{handle.address}" + ("" if handle.steering else " - read-only: another window steers it"),
                     10000)
        return True

    def is_attached(self) -> bool:
        """The run of the moment is a script's, attached (:meth:`attach`)."""
        return self.run.is_attached()

    def detach(self) -> bool:
        """Let go of an attached script: it trains on as it is. False when none is attached."""
        return self.run.detach()

    def _begin(self, handle, run_dir, epochs: int, device, attached: bool = False) -> None:
        """What every run shows from its start: empty curves, the progress, the run's state in the controls."""
        self._last_reason = None
        self._last_error = None
        self.view.begin(epochs, device, run_dir)
        # an attached script's memory is the script's to show; a run started here shows its device's
        self.run.start(handle, "cpu" if attached else str(device))
        self.settings.set_running(True)
        info = getattr(handle, "info", None)
        self.inspector.show_run(info.get("name", "a script") if attached and isinstance(info, dict) else None)
        self.update_buttons()
        self.session.set_running(True)
        self.runningChanged.emit(True)
        self.steering.follow()  # attached while another window steers: read-only from the start

    def stop(self) -> None:
        """Ask the trainer to stop after the current step.

        A step that has not returned after 3x the slowest recent step (at least 10 s; a hung
        forward, :mod:`.stop_timeout`) makes the controller offer to end the training process
        (``prompts.end_training_process``).
        """
        if self.is_running():
            self.run.stop()
            self.run_progress.show_stopping()

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
            self.run_options.remember_in_process(flag)
        self.run.set_in_process(flag)

    def in_process(self) -> bool:
        """The next run trains on a thread in the window's process."""
        return self.in_process_check.isChecked()

    def _warm_source(self):
        """``(model, config, input_shape)`` to warm the process started ahead on (the form's batch size), or None
        when there is no model or the form cannot build its settings yet (the run will say so at Start)."""
        model = self.session.model
        if model is None:
            return None
        try:
            config = self.settings.config()
        except Exception:  # noqa: BLE001 - an unfinished setting: the run will say so at Start
            return None
        return model, config, self.session.input_shape

    def pause(self) -> None:
        """Pause at the next step boundary."""
        if self.is_running() and not self._paused:
            self.run.pause()
            self._paused = self.run_progress.paused = True
            self.update_buttons()

    def resume(self) -> None:
        """Resume a paused run."""
        if self.is_running() and self._paused:
            self.run.resume()
            self.run_progress.eta.restart_window()  # the time paused is not step time
            self._paused = self.run_progress.paused = False
            self.update_buttons()

    def is_paused(self) -> bool:
        """True while the active run is paused by the user."""
        return self.is_running() and self._paused

    def queue_save(self, path=None) -> None:
        """Save a checkpoint at the next step boundary (``None``: into the run folder)."""
        self.run.queue_save(path)

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
        return self.view.run_dir

    def copy_tensorboard_command(self) -> str | None:
        """Put the TensorBoard command of the current or last run on the clipboard and say so; returns it."""
        return copy_tensorboard_command(self.view.run_dir, self._status)

    def shutdown(self, ask: bool = True, timeout_ms: int = SHUTDOWN_TIMEOUT_MS) -> bool:
        """The window's closeEvent path; True = the window may close (:meth:`RunController.shutdown`).

        While a run is active: ask (``prompts.confirm_stop``; False = cancel the close),
        stop and write ``last.pt``, wait for the thread (``timeout_ms``); a training
        process that has not stopped by then is ended. The process started ahead is ended too.
        """
        self.lr_finder.shutdown()
        return self.run.shutdown(self.prompts.confirm_stop if ask else None, timeout_ms)

    # ------------------------------------------------------------------ the model, the form and the buttons
    def on_model_changed(self) -> None:
        """``session.model`` was replaced: its weights are the file's; show the file's settings."""
        if not self.is_running():
            self._trained = False
            self._fill_from_checkpoint()
            self.run.warm_spare()
        self._refresh_resume_check()

    def untrainable_reason(self) -> str | None:
        """Why the model shown cannot be trained (no model, a weights-only tree), or None when it can."""
        return untrainable_reason(self.session.model)

    def update_buttons(self) -> None:
        """The run bar's buttons as the run's state (running, paused, read-only) and the model allow."""
        running = self.is_running()
        if not running:
            self._paused = False
        self.run_bar.show_state(running, self._paused, self.untrainable_reason(), self.steering.reason)
        self.run_bar.show_cuda(_cuda_available())
        self.resume_check.setEnabled(not running and self.resume_check.isEnabled())

    def _refresh_resume_check(self) -> None:
        raw = getattr(self.session.checkpoint, "raw", None) or {}
        self.run_options.offer_resume(isinstance(raw, dict) and "optimizer_state_dict" in raw, self.is_running())
        self.run_bar.show_state(self.is_running(), self._paused, self.untrainable_reason(), self.steering.reason)

    def _lr_find_config(self):
        """The form's settings for the LR finder (as Start would use them); raises ValueError on a bad setting."""
        if self.is_running():
            raise ValueError("a training run owns the model; find the LR before starting it")
        config = self.settings.config()
        self._fill_config(config)
        return config

    def _fill_config(self, config) -> None:
        resume = self._resume_source() is not None and not self._trained  # only the weights of the file opened
        fill_model_source(config, self.session, resume, METRICS_MS, self.run_dir() if self._trained else None)

    def _resume_source(self):
        if not (self.resume_check.isEnabled() and self.resume_check.isChecked()):
            return None
        return self.session.checkpoint

    def reset_settings(self) -> None:
        """Every training setting back to its default; the remembered settings are forgotten."""
        self.memory.reset()
        self._status("Training settings reset to their defaults.", 5000)

    def _fill_from_checkpoint(self) -> None:
        """A checkpoint was opened: show the settings it records (run.toml beside it, its config, its optimizer)."""
        ckpt = self.session.checkpoint
        if ckpt is not None and not self.is_running():
            said = self.memory.fill_from_checkpoint(ckpt) or self.memory.follow_task(self.session.model, ckpt)
            if said:
                self._status(said, 8000)

    def _on_lr_edited(self) -> None:
        """The LR field changed during a run: send it (applied at the next step, marked on the plot)."""
        lr = float(self.settings.lr_spin.value())
        if not self.is_running():
            return
        if self._config is not None and lr != self._config.lr:
            self._config.lr = lr
        elif self._config is None and lr != self._attached_lr:  # an attached script: its first group's LR
            self._attached_lr = lr
        else:
            return
        self.run.queue_lr(lr)
        self._status(f"Learning rate {lr:.3g}: applied at the next step", 4000)

    def _status(self, text: str, ms: int = 0) -> None:
        self.session.show_status(text, ms)

    def _on_pause_clicked(self) -> None:
        if self._paused:
            self.resume()
        else:
            self.pause()

    # ------------------------------------------------------------------ the run's events
    @Slot(object)
    def _on_event(self, event) -> None:
        """One typed event of the run, on the GUI thread: what it does here (``Sink`` never reaches the window)."""
        handler = self._handlers.get(type(event))
        if handler is not None:
            handler(event)

    def _on_command_applied(self, event: CommandApplied) -> None:
        """A queued command was applied at ``event.step``: mark it on the plots, follow it, say it."""
        command, step = event.command, int(event.step)
        self.view.feed.mark(command, event.step, event.epoch)
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
        text = mark_nonfinite(self.session, step, trace)  # badged on its module in the tree
        attached = self.run.kind == "attached"  # a script's run has no checkpoint of the window's to roll back to
        action = self.run.resolve_nonfinite(self.prompts.nonfinite(step, loss, can_rollback=not attached, trace=text))
        self._status(f"Non-finite loss at step {step}: {action.replace('_', ' ')}", 8000)

    def _on_class_count_mismatch(self, data_classes: int, outputs: int, message: str) -> None:
        """Caught before any step: offer the fix (one click replaces the head), else show the message."""
        self._last_error = message
        if self.prompts.replace_head(data_classes, outputs, message):
            self._head_request = int(data_classes)  # made once the run has ended and the model is free

    def _on_error(self, text: str) -> None:
        self._last_error = text
        self.prompts.training_error(text)

    def _follow_trainable(self, changed: list[str], flag: bool) -> None:
        """A run in a training process changed ``requires_grad``: the window's copy follows (its tree shows it)."""
        handle = self.run.handle
        if handle is None or handle.in_this_process or self.session.model is None:
            return
        params = dict(self.session.model.named_parameters(remove_duplicate=False))
        for name in changed:
            if name in params:
                params[name].requires_grad_(flag)

    def _on_state_synced(self, data: dict) -> None:
        """A training process sent its weights and frozen set (paused, saved, ended): the window's model shows them."""
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

    def _on_finished(self, event: Finished) -> None:
        self._last_reason = event.reason
        handle = self.run.handle
        if handle is not None and handle.in_this_process and getattr(handle, "trainer", None) is not None:
            self._trained = True  # trained in place on the thread (a process run syncs its weights instead)
        self.view.finished(event.reason)

    @Slot()
    def _on_thread_finished(self) -> None:
        self.view.end()
        self.settings.set_running(False)
        self.steering.run_ended()
        self.inspector.hide_run()
        self.update_buttons()
        self._refresh_resume_check()
        self.session.set_running(False)  # the window re-reads requires_grad and weights on this
        self.runningChanged.emit(False)
        request, self._head_request = self._head_request, None
        if request is not None:
            self.session.replaceHeadRequested.emit(request)
        self.run.start_ahead()  # the next run starts quickly too

    def _on_command_requested(self, command) -> None:
        """A core command from elsewhere in the window (tree freeze, File > Save) for the active run."""
        if not self.is_running():
            self.session.show_status("No training run is active: the command was not sent.", 5000)
            return
        if not self.steering.refuses():
            self.run.queue(command)

    @Slot(list)
    def _on_probe_reports(self, reports: list) -> None:
        for report in reports:
            grads = getattr(report, "grads", None)
            if grads is not None:
                self.plots.grad_norm.add(report.step, grads.global_norm)


def _cuda_available() -> bool:
    import torch

    return torch.cuda.is_available()
