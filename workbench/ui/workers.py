"""The QThread bridge between ``core.training.Trainer`` and the widgets.

:class:`TrainingWorker` is a QObject moved to a QThread (:func:`start_in_thread`,
the superqt wiring). Its :meth:`~TrainingWorker.run` slot builds the core
:class:`~workbench.core.training.Trainer` on the training thread with one
:class:`QtBridge` callback and calls ``fit()``. The bridge turns trainer events
into Qt signals carrying only Python floats, strings and numpy arrays:

* ``metrics(dict)`` once per ``on_metrics`` batch (~every 40 ms, so ~25 Hz, never
  one signal per step): ``{"step": array, "loss": array, "lr": array, ...}``;
* ``epochEnded(dict)``, ``commandApplied(dict)``, ``nonFinite(int, float)``,
  ``error(str)`` (traceback text), ``extrasReady(dict)`` and ``finished(str)``
  (the end reason).

The GUI thread never touches the model during a run: pause / resume / stop and
queued commands go straight to the trainer's thread-safe methods
(:meth:`TrainingWorker.pause`, ...), which the trainer applies at the next step
boundary. Signals from the training thread reach GUI slots as queued calls.
"""

from __future__ import annotations

import copy
import os
import threading
import time
import traceback
from typing import Any

import numpy as np
import torch
from PySide6.QtCore import QObject, Qt, QThread, Signal, Slot

from workbench.core import training
from workbench.core.threads import lower_current_thread_priority, worker_thread_count

#: Threads and workers alive right now: Python keeps a reference until the thread
#: has finished, so neither is ever garbage-collected while running (which would print
#: "QThread: Destroyed while thread is still running").
_LIVE: set[QObject] = set()


def live_threads() -> list[QThread]:
    """The training threads started by :func:`start_in_thread` that are still running."""
    out = []
    for obj in list(_LIVE):
        if isinstance(obj, QThread):
            try:
                if obj.isRunning():
                    out.append(obj)
            except RuntimeError:  # C++ object deleted: finished
                pass
    return out


def to_cpu_copy(obj: Any) -> Any:
    """Deep copy ``obj`` with every tensor detached, cloned and moved to the CPU.

    Works on nested dicts / lists / tuples (``optimizer.state_dict()``, ...).
    """
    if isinstance(obj, torch.Tensor):
        return obj.detach().to("cpu", copy=True)
    if isinstance(obj, dict):
        return {k: to_cpu_copy(v) for k, v in obj.items()}
    if isinstance(obj, list):
        return [to_cpu_copy(v) for v in obj]
    if isinstance(obj, tuple):
        return tuple(to_cpu_copy(v) for v in obj)
    return copy.deepcopy(obj)


def _plain(value: Any) -> Any:
    """A float / int / str / numpy version of ``value`` (tensors become Python numbers or arrays)."""
    if isinstance(value, torch.Tensor):
        value = value.detach()
        return value.item() if value.numel() == 1 else value.cpu().numpy()
    if isinstance(value, (bool, int, float, str, type(None), np.ndarray, np.generic)):
        return value
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    return str(value)


def pack_metrics(batch: list[dict]) -> dict[str, np.ndarray]:
    """Turn a list of per-step metric dicts into one dict of float64 arrays (NaN where missing)."""
    keys: list[str] = []
    for row in batch:
        for k in row:
            if k not in keys:
                keys.append(k)
    out: dict[str, np.ndarray] = {}
    for k in keys:
        values = []
        for row in batch:
            v = _plain(row.get(k, float("nan")))
            values.append(float(v) if isinstance(v, (int, float, np.generic)) and not isinstance(v, bool) else float("nan"))
        out[k] = np.asarray(values, dtype=np.float64)
    return out


def describe_command(command: Any) -> dict:
    """A plain dict describing an applied queued command (type name + its fields)."""
    info: dict[str, Any] = {"type": type(command).__name__}
    fields = getattr(command, "__dataclass_fields__", None)
    names = list(fields) if fields else [k for k in vars(command)] if hasattr(command, "__dict__") else []
    for name in names:
        info[name] = _plain(getattr(command, name))
    return info


class QtBridge(training.Callback):
    """The core callback that forwards trainer events to :class:`TrainingWorker` signals.

    Runs on the training thread. Emits one signal per ``on_metrics`` batch.
    """

    def __init__(self, worker: TrainingWorker):
        self._worker = worker

    def on_fit_start(self, trainer) -> None:  # noqa: D102
        self._worker.apply_early_requests(trainer)  # fit() clears a stop requested before it began
        self._worker.fitStarted.emit(_fit_info(trainer))

    def on_metrics(self, trainer, batch) -> None:  # noqa: D102
        if batch:
            self._worker.metrics.emit(pack_metrics(batch))

    def on_epoch_end(self, trainer, metrics) -> None:  # noqa: D102
        self._worker.epochEnded.emit(_plain(dict(metrics)))

    def on_command_applied(self, trainer, command) -> None:  # noqa: D102
        info = describe_command(command)
        info.setdefault("applied_step", int(getattr(trainer, "step", 0) or 0))
        info.setdefault("applied_epoch", float(getattr(trainer, "epoch", 0) or 0)
                        + float(getattr(trainer, "batch_in_epoch", 0) or 0) / max(1, _len(trainer)))
        changed = getattr(command, "changed", None)
        if changed is not None:
            info["changed"] = list(changed)
        self._worker.commandApplied.emit(info)

    def on_nonfinite(self, trainer, step, *args) -> None:  # noqa: D102
        loss = args[0] if args else float("nan")
        self._worker.nonFinite.emit(int(step), float(_plain(loss)) if loss is not None else float("nan"))

    def on_exception(self, trainer, exc, tb) -> None:  # noqa: D102
        self._worker.report_error(exc, tb)

    def on_fit_end(self, trainer, reason) -> None:  # noqa: D102
        self._worker.collect_extras(trainer)


def _len(trainer) -> int:
    try:
        return len(trainer.train_loader)
    except Exception:  # noqa: BLE001 - not prepared / no len()
        return 1


def _fit_info(trainer) -> dict:
    info: dict[str, Any] = {"epoch": int(trainer.epoch), "step": int(trainer.step),
                            "epochs": int(trainer.config.epochs)}
    try:
        info["steps_per_epoch"] = int(trainer.steps_per_epoch)
        info["total_steps"] = int(trainer.total_steps)
    except Exception:  # noqa: BLE001 - loaders without len()
        pass
    run_dir = getattr(trainer, "run_dir", None)
    info["run_dir"] = str(run_dir) if run_dir is not None else None
    info["data_note"] = getattr(trainer, "data_note", None)
    return info


class TrainingWorker(QObject):
    """Runs one ``Trainer.fit()`` on the thread it was moved to.

    Parameters
    ----------
    model : nn.Module
        Trained in place; owned by the training thread until ``finished``.
    config : TrainConfig
    arch : ArchSpec or None
        Written into checkpoints.
    resume : str, Path or Checkpoint, optional
        ``trainer.resume_from(resume)`` before ``fit()``.
    callbacks : sequence of Callback
        Extra core callbacks (probes, tests).
    trainer_factory : callable, optional
        ``factory(model, config, callbacks, arch) -> Trainer``; default
        :class:`workbench.core.training.Trainer` (tests inject faults here).

    Signals
    -------
    fitStarted(dict), metrics(dict), epochEnded(dict), commandApplied(dict),
    nonFinite(int, float), error(str), extrasReady(dict), finished(str)
    """

    fitStarted = Signal(object)
    metrics = Signal(object)
    epochEnded = Signal(object)
    commandApplied = Signal(object)
    nonFinite = Signal(int, float)
    error = Signal(str)
    extrasReady = Signal(object)
    finished = Signal(str)

    def __init__(self, model, config, arch=None, resume=None, callbacks=(), trainer_factory=None):
        super().__init__()
        self.model = model
        self.config = config
        self.arch = arch
        self.resume = resume
        self.callbacks = list(callbacks)
        self.trainer_factory = trainer_factory or training.Trainer
        self.trainer = None
        self.reason: str | None = None
        self._lock = threading.Lock()
        self._stop = False
        self._pending: list = []
        self._paused = False
        self._error_sent = False
        self._extras_sent = False

    # ------------------------------------------------------------------ GUI-thread API (thread-safe)
    def request_stop(self) -> None:
        """Ask the trainer to stop after the current step (works before the trainer exists)."""
        with self._lock:
            self._stop = True
            trainer = self.trainer
        if trainer is not None:
            trainer.request_stop()

    def pause(self) -> None:
        """Pause at the next step boundary."""
        with self._lock:
            self._paused = True
            trainer = self.trainer
        if trainer is not None:
            trainer.pause()

    def resume_run(self) -> None:
        """Resume a paused run."""
        with self._lock:
            self._paused = False
            trainer = self.trainer
        if trainer is not None:
            trainer.resume()

    def queue(self, command) -> None:
        """Queue a core command (SetTrainable / SetLR / SaveNow); applied at the next step boundary."""
        with self._lock:
            trainer = self.trainer
            if trainer is None:
                self._pending.append(command)
                return
        trainer.queue(command)

    def resolve_nonfinite(self, action: str) -> None:
        """Hand the user's NaN/Inf decision to the waiting trainer."""
        trainer = self.trainer
        if trainer is not None:
            trainer.resolve_nonfinite(action)

    # ------------------------------------------------------------------ training thread
    @Slot()
    def run(self) -> None:
        """Build the trainer and run ``fit()``; always ends by emitting ``finished(reason)``."""
        reason = "error"
        threads = torch.get_num_threads()
        try:
            lower_current_thread_priority()  # before the first op: its OpenMP workers inherit it
            torch.set_num_threads(training_thread_count(self.config))
            trainer = self.trainer_factory(self.model, self.config, [QtBridge(self), *self.callbacks], self.arch)
            if self.resume is not None:
                trainer.resume_from(self.resume)
            with self._lock:
                self.trainer = trainer
                pending, self._pending = self._pending, []
                stop, paused = self._stop, self._paused
            for command in pending:
                trainer.queue(command)
            if stop:
                trainer.request_stop()
            if paused:
                trainer.pause()
            reason = trainer.fit()
            if reason == "error":
                self._error_sent = True  # fit() reported it through on_exception
            if not self._extras_sent:
                self.collect_extras(trainer)
        except BaseException as exc:  # noqa: BLE001 - the worker's top: report, end cleanly
            self.report_error(exc, traceback.format_exc())
            reason = "error"
        finally:
            torch.set_num_threads(threads)
            self.reason = reason
            self.finished.emit(reason)

    def apply_early_requests(self, trainer) -> None:
        """Re-apply a stop / pause asked for before ``fit()`` started (training thread)."""
        with self._lock:
            stop, paused = self._stop, self._paused
        if stop:
            trainer.request_stop()
        if paused:
            trainer.pause()

    def report_error(self, exc: BaseException, tb: str) -> None:
        """Emit ``error`` once per run with the traceback text."""
        if self._error_sent:
            return
        self._error_sent = True
        text = tb or "".join(traceback.format_exception(exc))
        self.error.emit(text)

    def collect_extras(self, trainer) -> None:
        """Emit ``extrasReady`` with detached CPU copies of the optimizer/scheduler state (training thread)."""
        if self._extras_sent:
            return
        self._extras_sent = True
        try:
            extras = run_extras(trainer)
        except Exception:  # noqa: BLE001 - extras are a convenience, never fail the run's end
            extras = {}
        self.extrasReady.emit(extras)


def training_thread_count(config) -> int:
    """Intra-op threads for a run on the training QThread.

    CPU runs use every core the process has (``core.threads.worker_thread_count``):
    the app's GUI thread computes single-threaded (``core.threads.reserve_cores_for_workers``,
    called by ``ui.app.main``), so the training thread's OpenMP pool is the only
    one and runs at main-thread speed. GPU runs keep torch's setting.
    """
    if not str(getattr(config, "device", "cpu")).startswith("cpu"):
        return torch.get_num_threads()
    return worker_thread_count()


def run_extras(trainer) -> dict:
    """``optimizer_state_dict`` / ``scheduler_state_dict`` / ``epoch`` / ``step`` / ``loss`` of ``trainer``.

    Tensors are deep-copied, detached CPU tensors (call on the training thread).
    """
    extras: dict[str, Any] = {}
    optimizer = getattr(trainer, "optimizer", None)
    scheduler = getattr(trainer, "scheduler", None)
    if optimizer is not None:
        extras["optimizer_state_dict"] = to_cpu_copy(optimizer.state_dict())
    if scheduler is not None:
        extras["scheduler_state_dict"] = to_cpu_copy(scheduler.state_dict())
    extras["epoch"] = int(getattr(trainer, "epoch", 0) or 0)
    extras["step"] = int(getattr(trainer, "step", 0) or 0)
    history = getattr(trainer, "history", None) or []
    if history:
        last = history[-1]
        loss = last.get("val_loss")
        if loss is None or not np.isfinite(loss):
            loss = last.get("train_loss")
        if loss is not None and np.isfinite(loss):
            extras["loss"] = float(loss)
    return extras


class _Reaper(QObject):
    """Drops the module's references to a finished thread and its worker, on the GUI thread."""

    def __init__(self, thread: QThread, worker: QObject):
        super().__init__()
        self._objs = (thread, worker)

    @Slot()
    def reap(self) -> None:
        thread, worker = self._objs
        wait_for(thread, 5000)
        for obj in (thread, worker, self):
            _LIVE.discard(obj)


def start_in_thread(worker: TrainingWorker) -> QThread:
    """Move ``worker`` to a new QThread wired the superqt way and start it.

    ``worker.moveToThread(thread); thread.started.connect(worker.run);
    worker.finished.connect(thread.quit); worker.finished.connect(worker.deleteLater);
    thread.finished.connect(thread.deleteLater)``, with ``quit`` as a direct call
    (thread-safe) so a GUI thread blocked in :func:`wait_for` cannot keep the
    thread's event loop alive. Both stay referenced in a module set until the GUI
    thread has seen the thread finish (:func:`live_threads`).
    """
    thread = QThread()
    thread.setObjectName("trainingThread")
    worker.moveToThread(thread)
    thread.started.connect(worker.run)
    # quit() is thread-safe: call it directly from the training thread, so the thread ends
    # even while the GUI thread is blocked waiting for it (closeEvent).
    worker.finished.connect(thread.quit, Qt.ConnectionType.DirectConnection)
    worker.finished.connect(worker.deleteLater)
    thread.finished.connect(thread.deleteLater)
    reaper = _Reaper(thread, worker)
    thread.finished.connect(reaper.reap, Qt.ConnectionType.QueuedConnection)  # runs on the GUI thread
    _LIVE.update((thread, worker, reaper))
    thread.start()
    return thread


def wait_for(thread: QThread | None, timeout_ms: int) -> bool:
    """Wait up to ``timeout_ms`` for ``thread`` to finish; True when it is not running (or gone).

    Polls with ``time.sleep`` (which releases the GIL) rather than blocking in
    ``QThread.wait``: a training thread that still needs the GIL to reach its next
    step boundary must be able to get it while the GUI thread waits.
    """
    if thread is None:
        return True
    try:
        deadline = time.monotonic() + timeout_ms / 1000.0
        while thread.isRunning():
            if time.monotonic() >= deadline:
                return False
            time.sleep(0.002)
        thread.wait(1000)  # finished: returns at once, joins the native thread
        return True
    except RuntimeError:  # the C++ QThread was already deleted: it had finished
        return True
