"""The QThread bridge between the core :class:`~workbench.core.train.loop.Trainer` and the widgets.

:class:`TrainingWorker` is a QObject moved to a QThread (:func:`workbench.ui.threading.start_in_thread`,
the superqt wiring). Its :meth:`~TrainingWorker.run` slot builds the core
:class:`~workbench.core.train.loop.Trainer` on the training thread with one
:class:`QtBridge` callback and calls ``fit()``. The bridge turns trainer events
into Qt signals carrying only Python floats, strings and numpy arrays:

* ``metrics(dict)`` once per ``on_metrics`` batch (~every 40 ms, so ~25 Hz, never
  one signal per step): ``{"step": array, "loss": array, "lr": array, ...}``;
* ``epochEnded(dict)``, ``commandApplied(dict)``, ``nonFinite(int, float)``,
  ``error(str)`` (traceback text), ``extrasReady(dict)`` and ``finished(str)``
  (the end reason).

The GUI thread never touches the model during a run: pause / resume / stop and
queued commands go to the run's :class:`~workbench.core.train.control.RunControl`
(``worker.control``, shared with the trainer), which the trainer applies at the
next step boundary. Signals from the training thread reach GUI slots as queued calls.
"""

from __future__ import annotations

import copy
import traceback
from typing import Any

import numpy as np
import torch
from PySide6.QtCore import QObject, Signal, Slot

from workbench.core.train.commands import SetTrainable
from workbench.core.train.control import RunControl
from workbench.core.train.hooks import Callback
from workbench.core.train.loop import Trainer
from workbench.core.train.preflight import ClassCountMismatch
from workbench.core.train.threads import lower_current_thread_priority, worker_thread_count


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


class QtBridge(Callback):
    """The core callback that forwards trainer events to :class:`TrainingWorker` signals.

    Runs on the training thread. Emits one signal per ``on_metrics`` batch.
    """

    def __init__(self, worker: TrainingWorker):
        self._worker = worker

    def on_fit_start(self, trainer) -> None:  # noqa: D102
        self._worker.fitStarted.emit(_fit_info(trainer))

    def on_metrics(self, trainer, batch) -> None:  # noqa: D102
        if batch:
            self._worker.metrics.emit(pack_metrics(batch))

    def on_progress(self, trainer, text) -> None:  # noqa: D102
        self._worker.progressText.emit(str(text))

    def on_epoch_end(self, trainer, metrics) -> None:  # noqa: D102
        self._worker.epochEnded.emit(_plain(dict(metrics)))

    def on_command_applied(self, trainer, command) -> None:  # noqa: D102
        info = describe_command(command)
        info.setdefault("applied_step", int(trainer.step))
        info.setdefault("applied_epoch", float(trainer.epoch) + float(trainer.batch_in_epoch) / max(1, _len(trainer)))
        if isinstance(command, SetTrainable):
            info["changed"] = list(command.changed)
        self._worker.commandApplied.emit(info)

    def on_nonfinite(self, trainer, step, loss) -> None:  # noqa: D102
        self._worker.nonFinite.emit(int(step), float(loss))

    def on_exception(self, trainer, exc, tb) -> None:  # noqa: D102
        if isinstance(exc, ClassCountMismatch):  # the window offers to replace the head instead
            self._worker.classCountMismatch.emit(exc.data_classes, exc.model_outputs, str(exc))
            self._worker.mark_error_reported()
            return
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
    info["run_dir"] = str(trainer.run_dir) if trainer.run_dir is not None else None
    info["data_note"] = trainer.data_note
    info["history"] = [_plain(dict(h)) for h in trainer.history]  # the epochs a resumed run continues
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
        ``factory(model, config, callbacks, arch, control=control) -> Trainer``;
        default :class:`workbench.core.train.loop.Trainer` (tests inject faults here).

    Attributes
    ----------
    control : RunControl
        Shared with the trainer: stop, pause, commands and the NaN decision go
        here from the GUI thread, before or during ``fit()``.

    Signals
    -------
    fitStarted(dict), metrics(dict), epochEnded(dict), commandApplied(dict),
    nonFinite(int, float), classCountMismatch(int, int, str), error(str), extrasReady(dict), finished(str)
    """

    fitStarted = Signal(object)
    metrics = Signal(object)
    epochEnded = Signal(object)
    commandApplied = Signal(object)
    nonFinite = Signal(int, float)
    classCountMismatch = Signal(int, int, str)
    progressText = Signal(str)
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
        self.trainer_factory = trainer_factory or Trainer
        self.control = RunControl()
        self.trainer = None
        self.reason: str | None = None
        self._error_sent = False
        self._extras_sent = False

    # ------------------------------------------------------------------ training thread
    @Slot()
    def run(self) -> None:
        """Build the trainer and run ``fit()``; always ends by emitting ``finished(reason)``."""
        reason = "error"
        threads = torch.get_num_threads()
        try:
            lower_current_thread_priority()  # before the first op: its OpenMP workers inherit it
            torch.set_num_threads(training_thread_count(self.config))
            trainer = self.trainer_factory(self.model, self.config, [QtBridge(self), *self.callbacks], self.arch,
                                           control=self.control)
            if self.resume is not None:
                trainer.resume_from(self.resume)
            self.trainer = trainer
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

    def mark_error_reported(self) -> None:
        """The run's error went out another way (``classCountMismatch``): send no ``error`` for it."""
        self._error_sent = True

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

    CPU runs use every core the process has (``core.train.threads.worker_thread_count``):
    the app's GUI thread computes single-threaded (``core.train.threads.reserve_cores_for_workers``,
    called by ``ui.app.main``), so the training thread's OpenMP pool is the only
    one and runs at main-thread speed. GPU runs keep torch's setting.
    """
    if not str(config.device).startswith("cpu"):
        return torch.get_num_threads()
    return worker_thread_count()


def run_extras(trainer) -> dict:
    """``optimizer_state_dict`` / ``scheduler_state_dict`` / ``epoch`` / ``step`` / ``loss`` of ``trainer``.

    Tensors are deep-copied, detached CPU tensors (call on the training thread).
    """
    extras: dict[str, Any] = {}
    if trainer.optimizer is not None:
        extras["optimizer_state_dict"] = to_cpu_copy(trainer.optimizer.state_dict())
    if trainer.scheduler is not None:
        extras["scheduler_state_dict"] = to_cpu_copy(trainer.scheduler.state_dict())
    extras["epoch"] = int(trainer.epoch)
    extras["step"] = int(trainer.step)
    history = trainer.history
    if history:
        last = history[-1]
        loss = last.get("val_loss")
        if loss is None or not np.isfinite(loss):
            loss = last.get("train_loss")
        if loss is not None and np.isfinite(loss):
            extras["loss"] = float(loss)
    return extras
