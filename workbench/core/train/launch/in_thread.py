"""A run on a thread of the caller's process (:class:`ThreadRun`), and the thread policy it needs.

The fallback for a model that cannot cross into a training process, and the
window's "train in this window's process" setting. ``Trainer.fit()`` runs on the
thread that calls :meth:`ThreadRun.run` and trains the caller's model object in
place; steering goes through the run's
:class:`~workbench.core.train.trainer.control.RunControl`.

Intra-op thread policy for a process whose training runs on a worker thread
(:func:`reserve_cores_for_workers`, :func:`worker_thread_count`,
:func:`lower_current_thread_priority`). Why it exists (measured on the 2-core
reference machine, torch 2.15 with its OpenMP backend, DigitsCNN, batch 64): a
training loop on a secondary thread ran at 0.47-0.69x the speed of the same loop
on the main thread, while a process whose main thread never entered an OpenMP
parallel region ran the secondary thread at full speed (18,900 vs 18,900
samples/s). The cause is libgomp's thread pools: each thread that starts a
parallel region keeps its own pool of worker threads, and once the process holds
more OpenMP-managed threads than CPUs, every pool's workers stop spin-waiting and
sleep on a futex between regions (``gomp_throttled_spin_count_var``), so each
parallel op pays a wake-up. An elementwise op on 131k floats went from 7 us to
26-36 us. So the GUI thread computes single-threaded (its pool is never
created) and the worker thread that trains gets every core. Qt-free.
"""


from __future__ import annotations

import os
import traceback
from typing import Any, Callable

import torch

from workbench.core.train.entry import make_trainer, save_last
from workbench.core.train.events import Event, EventBridge, Finished
from workbench.core.train.handle import SteeredByControl
from workbench.core.train.launch.training_process_main import stop_and_save
from workbench.core.train.trainer.control import RunControl

__all__ = ["ThreadRun", "training_thread_count", "reserve_cores_for_workers", "worker_thread_count",
           "lower_current_thread_priority"]


_worker_threads: int | None = None


def reserve_cores_for_workers() -> int:
    """Make the calling (GUI) thread compute with one intra-op thread.

    Call it once at process start, on the main thread, before any torch
    computation. ``torch.set_num_threads`` sets the calling thread's OpenMP
    thread count only, so worker threads keep the default.

    Returns
    -------
    int
        Intra-op threads that worker threads should use (the default before the
        call: the number of cores, or ``OMP_NUM_THREADS``).
    """
    global _worker_threads
    if _worker_threads is None:
        _worker_threads = torch.get_num_threads()
    torch.set_num_threads(1)
    return _worker_threads


def worker_thread_count() -> int:
    """Intra-op threads for a training or probe worker thread.

    Returns
    -------
    int
        The count saved by :func:`reserve_cores_for_workers`, or the current
        thread's count (torch's default: the number of cores) when it was not called.
    """
    if _worker_threads is not None:
        return _worker_threads
    return max(1, torch.get_num_threads() or (os.cpu_count() or 1))


def lower_current_thread_priority(increment: int = 10) -> bool:
    """Lower the scheduling priority (raise the nice value) of the calling thread.

    A training thread calls this before its first computation, so the OpenMP
    workers it creates inherit the lower priority too: the GUI thread then gets a
    core whenever it needs one (a responsive window), and training takes the rest.
    On Linux the nice value is per thread (``setpriority`` on the thread id); on
    other systems this does nothing.

    Parameters
    ----------
    increment : int
        Nice value to add, 0-19.

    Returns
    -------
    bool
        True when the priority was lowered.
    """
    import threading

    if not hasattr(os, "setpriority") or not os.path.exists("/proc/self/task"):
        return False
    try:
        tid = threading.get_native_id()
        current = os.getpriority(os.PRIO_PROCESS, tid)
        os.setpriority(os.PRIO_PROCESS, tid, min(19, current + increment))
    except OSError:
        return False
    return True


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

    CPU runs use every core the process has (:func:`worker_thread_count`):
    the app's GUI thread computes single-threaded
    (:func:`reserve_cores_for_workers`, called by
    ``ui.app.main``), so the training thread's OpenMP pool is the only one and
    runs at main-thread speed. GPU runs keep torch's setting.
    """
    if not str(config.device).startswith("cpu"):
        return torch.get_num_threads()
    return worker_thread_count()
