"""The QThread side of a run: :class:`TrainingWorker` (the run on this thread) and its signals.

A worker is a QObject moved to a QThread (:func:`workbench.ui.threading.start_in_thread`).
Both kinds have the same signals, one per event of
:mod:`workbench.core.train.events` (the one protocol), and the same steering
through ``worker.control`` (``request_stop``, ``pause``, ``resume``, ``queue``,
``resolve_nonfinite``):

* :class:`TrainingWorker` (``mode = "thread"``) runs ``Trainer.fit()`` on its
  QThread in the window's process: the fallback for a model that cannot cross
  into a training process, and the "train in this window's process" setting;
* :class:`~workbench.ui.train.process_worker.ProcessTrainingWorker`
  (``mode = "process"``, the default) hands the run to a training process and
  turns its events into these signals.

Signals carry only floats, strings, dicts, lists and numpy arrays; they reach
GUI slots as queued calls. The GUI thread never touches a model being trained.
"""

from __future__ import annotations

import traceback

import torch
from PySide6.QtCore import QObject, Signal, Slot

from workbench.core.train.trainer.control import RunControl
from workbench.core.train.entry import make_trainer, save_last
from workbench.core.train.events import EventBridge
from workbench.core.train.launch.threads import lower_current_thread_priority, worker_thread_count


class RunWorker(QObject):
    """The signals of a run, named as the events of :mod:`workbench.core.train.events`.

    Signals
    -------
    fitStarted(dict), metrics(dict), epochEnded(dict), commandApplied(dict),
    nonFinite(int, float, dict) (the dict: the NaN trace, or empty), classCountMismatch(int, int, str), progressText(str),
    error(str), extrasReady(dict), paused(int), stateSynced(dict) (process runs:
    ``{"state_dict", "trainable"}``), cudaMemory(float, float)
    (bytes allocated, reserved), ranks(str) (a data-parallel run: every rank's step and
    heartbeat, ``"ranks: 0 step 40 (812/s, 0.1 s ago) · 1 step 40 (…)"``), finished(str)
    """

    fitStarted = Signal(object)
    metrics = Signal(object)
    epochEnded = Signal(object)
    commandApplied = Signal(object)
    nonFinite = Signal(int, float, object)
    classCountMismatch = Signal(int, int, str)
    progressText = Signal(str)
    error = Signal(str)
    extrasReady = Signal(object)
    paused = Signal(int)
    stateSynced = Signal(object)
    cudaMemory = Signal(float, float)
    ranks = Signal(str)
    finished = Signal(str)

    mode = ""

    def emit_event(self, name: str, *args) -> None:
        """Emit the signal of event ``name`` with ``args``."""
        getattr(self, name).emit(*args)


class TrainingWorker(RunWorker):
    """Runs one ``Trainer.fit()`` on the thread it was moved to (the window's process).

    Parameters
    ----------
    model : nn.Module
        Trained in place; owned by the training thread until ``finished``.
    config : TrainConfig
    arch : ArchSpec or None
        Written into checkpoints.
    resume : str, Path or Checkpoint, optional
        Restored before ``fit()``.
    callbacks : sequence of Callback
        Extra core callbacks (probes, tests).
    trainer_factory : callable, optional
        ``factory(model, config, callbacks, arch, control=control) -> Trainer``;
        default :class:`workbench.core.train.trainer.loop.Trainer` (tests inject faults here).

    Attributes
    ----------
    control : RunControl
        Shared with the trainer: stop, pause, commands and the NaN decision go
        here from the GUI thread, before or during ``fit()``.
    trainer : Trainer or None
        Set on the training thread before ``fit()``.
    """

    mode = "thread"

    def __init__(self, model, config, arch=None, resume=None, callbacks=(), trainer_factory=None):
        super().__init__()
        self.model = model
        self.config = config
        self.arch = arch
        self.resume = resume
        self.callbacks = list(callbacks)
        self.trainer_factory = trainer_factory
        self.control = RunControl()
        self.trainer = None
        self.reason: str | None = None
        self._save_last = False

    @Slot()
    def run(self) -> None:
        """Build the trainer and run ``fit()``; always ends by emitting ``finished(reason)``."""
        reason = "error"
        threads = torch.get_num_threads()
        bridge = EventBridge(self.emit_event)
        try:
            lower_current_thread_priority()  # before the first op: its OpenMP workers inherit it
            torch.set_num_threads(training_thread_count(self.config))
            trainer = make_trainer(self.model, self.config, [bridge, *self.callbacks], self.arch,
                                   control=self.control, resume=self.resume, factory=self.trainer_factory)
            self.trainer = trainer
            reason = trainer.fit()
            bridge.send_extras(trainer)
            if reason == "stopped" and self._save_last:
                save_last(trainer)
        except BaseException:  # noqa: BLE001 - the worker's top: report, end cleanly
            bridge.report_error(traceback.format_exc())
            reason = "error"
        finally:
            torch.set_num_threads(threads)
            # break worker -> trainer -> bridge -> worker: a cycle is freed by the cyclic GC on
            # whichever thread runs it, and a QObject freed off the GUI thread can deadlock PySide
            bridge.emit = _ignore
            self.reason = reason
            self.finished.emit(reason)

    def stop_and_save(self) -> None:
        """Stop at the next step boundary (ending a pause or a NaN question) and write ``last.pt``."""
        self._save_last = True
        self.control.request_stop()
        self.control.resolve_nonfinite("stop")
        self.control.resume()

    def end_process(self) -> bool:
        """A run in the window's process cannot be ended by force (False)."""
        return False


def _ignore(*args) -> None:
    """The bridge's emit once the run has ended."""


def training_thread_count(config) -> int:
    """Intra-op threads for a run on the training QThread.

    CPU runs use every core the process has (``core.train.threads.worker_thread_count``):
    the app's GUI thread computes single-threaded (``core.train.threads.reserve_cores_for_workers``,
    called by ``ui.app.main``), so the training thread's OpenMP pool is the only
    one and runs at main-thread speed. GPU runs keep torch's setting.
    """
    if not str(config.device).startswith("cpu"):
        return torch.get_num_threads()
    return worker_thread_count()
