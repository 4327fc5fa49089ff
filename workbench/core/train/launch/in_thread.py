"""A run on a thread of the caller's process: :class:`ThreadRun`.

The fallback for a model that cannot cross into a training process, and the
window's "train in this window's process" setting. ``Trainer.fit()`` runs on the
thread that calls :meth:`ThreadRun.run` and trains the caller's model object in
place; steering goes through the run's
:class:`~workbench.core.train.trainer.control.RunControl`. Qt-free.
"""

from __future__ import annotations

import traceback
from typing import Any, Callable

import torch

from workbench.core.train.entry import make_trainer, save_last
from workbench.core.train.events import Event, EventBridge, Finished
from workbench.core.train.handle import SteeredByControl
from workbench.core.train.launch.child import stop_and_save
from workbench.core.train.launch.threads import lower_current_thread_priority, worker_thread_count
from workbench.core.train.trainer.control import RunControl

__all__ = ["ThreadRun", "training_thread_count"]


class ThreadRun(SteeredByControl):
    """One ``Trainer.fit()`` on the calling thread (a :class:`~workbench.core.train.handle.RunHandle`).

    Parameters
    ----------
    model : nn.Module
        Trained in place; owned by the training thread until :meth:`run` returns.
    config : TrainConfig
        ``data.num_workers = "auto"`` becomes 0 (no DataLoader worker is forked from this process).
    arch : ArchSpec or None
        Written into checkpoints.
    resume : str, Path or Checkpoint, optional
        Restored before ``fit()``.
    callbacks : sequence of Callback
        Extra core callbacks (probes, tests).
    trainer_factory : callable, optional
        ``factory(model, config, callbacks, arch, control=control) -> Trainer``;
        default :class:`~workbench.core.train.trainer.loop.Trainer` (tests inject faults here).

    Attributes
    ----------
    control : RunControl
        Shared with the trainer: steering may come before or during ``fit()``.
    trainer : Trainer or None
        Set on the training thread before ``fit()``.
    """

    kind = "thread"
    ranks = 1
    in_this_process = True
    can_end = False

    def __init__(self, model, config, arch=None, resume=None, callbacks=(), trainer_factory=None):
        self.model = model
        if config.data.num_workers == "auto":
            # The window's own process runs Qt's threads: a DataLoader worker forked from it copies one thread of
            # a multi-threaded process (undefined behaviour in POSIX; a worker died with exit code 1 mid-run in
            # CI). "auto" loads on the training thread here; a training process (the default) forks freely.
            config.data.num_workers = 0
        self.config = config
        self.arch = arch
        self.resume_from = resume
        self.callbacks = list(callbacks)
        self.trainer_factory = trainer_factory
        self.control = RunControl()
        self.trainer = None
        self.reason: str | None = None
        self._flags = {"save_last": False}

    def run(self, emit: Callable[[Event], Any]) -> str:
        """Build the trainer and run ``fit()`` here; every event to ``emit``, ``Finished`` last; the end reason."""
        reason = "error"
        threads = torch.get_num_threads()
        bridge = EventBridge(emit)
        try:
            lower_current_thread_priority()  # before the first op: its OpenMP workers inherit it
            torch.set_num_threads(training_thread_count(self.config))
            trainer = make_trainer(self.model, self.config, [bridge, *self.callbacks], self.arch,
                                   control=self.control, resume=self.resume_from, factory=self.trainer_factory)
            self.trainer = trainer
            reason = trainer.fit()
            bridge.send_extras(trainer)
            if reason == "stopped" and self._flags["save_last"]:
                save_last(trainer)
        except BaseException:  # noqa: BLE001 - the run's top: report, end cleanly
            bridge.report_error(traceback.format_exc())
            reason = "error"
        finally:
            torch.set_num_threads(threads)
            # break handle -> trainer -> bridge -> emit -> caller: a cycle is freed by the cyclic GC on
            # whichever thread runs it, and a QObject freed off the GUI thread can deadlock PySide
            bridge.emit = _ignore
            self.reason = reason
            emit(Finished(reason))
        return reason

    def stop_and_save(self) -> None:
        """Stop at the next step boundary (ending a pause or a NaN question) and write ``last.pt``."""
        stop_and_save(self.control, self._flags)

    def end(self) -> bool:
        """A run in the caller's process cannot be ended by force (False)."""
        return False


def _ignore(*args) -> None:
    """The bridge's emit once the run has ended."""


def training_thread_count(config) -> int:
    """Intra-op threads for a run on a secondary thread.

    CPU runs use every core the process has (:func:`~workbench.core.train.launch.threads.worker_thread_count`):
    the app's GUI thread computes single-threaded
    (:func:`~workbench.core.train.launch.threads.reserve_cores_for_workers`, called by
    ``ui.app.main``), so the training thread's OpenMP pool is the only one and
    runs at main-thread speed. GPU runs keep torch's setting.
    """
    if not str(config.device).startswith("cpu"):
        return torch.get_num_threads()
    return worker_thread_count()
