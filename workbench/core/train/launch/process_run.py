"""A run in a training process or on torchrun's ranks: :class:`ProcessRun`.

It hands the job to a :class:`~workbench.core.train.launch.process.TrainingProcess`
(started ahead, or now) or a
:class:`~workbench.core.train.launch.ddp_process.DistributedTrainingProcess`,
then reads the process's events (:func:`~workbench.core.train.events.from_wire`,
bytes decoded on the thread that calls :meth:`ProcessRun.run`, never the
window's) and hands each to ``emit``. Steering goes through
:class:`JobControl`.

When the process dies (``abort()``, a segfault, ``os._exit``, a kill) the run
emits ``RunError("training process ended unexpectedly (signal 6, SIGABRT)"``
plus the process's last output lines) and ends ``"crashed"``; after
:meth:`ProcessRun.end` (a step that never returned, ended by the user) it ends
``"ended"``. Either way the process is joined: no orphan.

Steering sent before the job reaches the process (Stop or a closing window
while the process still starts) is held by :class:`JobControl` and sent right
after the job, in order: a process that got a control message instead of its
job used to end at once (exit code 0), which the window reported as a crash.
A stop asked before the job left sends no job at all (``"stopped"``); and once
the caller asked the run to stop and save (the window closes), the process's
end is never reported as an error. Qt-free.
"""

from __future__ import annotations

import threading
import time
from typing import Any, Callable

from workbench.core.train.events import Event, Finished, ProgressText, RunError, Sink, from_wire
from workbench.core.train.handle import SteeredByControl
from workbench.core.train.launch.process import READY_TIMEOUT_S, RemoteControl, describe_exit

__all__ = ["ProcessRun", "JobControl", "POLL_S"]

#: Seconds between two checks that the process still lives while no event arrives.
POLL_S = 0.1


class JobControl(RemoteControl):
    """A :class:`RemoteControl` whose messages wait until the job was handed to the process.

    Attributes
    ----------
    stop_requested : bool
        Stop (or stop-and-save) was asked.
    shutdown_requested : bool
        The caller asked the run to stop and save (the window closes).
    """

    def __init__(self, process):
        super().__init__(process)
        self._process = process
        self._lock = threading.Lock()
        self._held: list[tuple] | None = []  # None once the job has gone
        self.stop_requested = False
        self.shutdown_requested = False

    def request_stop(self) -> None:
        """Stop at the next step boundary (before the job left: no job is sent)."""
        self.stop_requested = True
        super().request_stop()

    def stop_and_save(self) -> None:
        """Stop at the next step boundary and write ``last.pt`` (the window closes)."""
        self.stop_requested = self.shutdown_requested = True
        self._post(("stop_and_save",))

    def call_callback(self, index: int, method: str, *args) -> None:  # noqa: D102 - RemoteControl's
        self._post(("callback", index, method, args))

    def _send(self, method: str, *args) -> None:
        self._post(("control", method, args))

    def _post(self, msg: tuple) -> None:
        with self._lock:
            if self._held is not None:
                self._held.append(msg)
                return
        self._process.send(msg)

    def start_job(self, job: dict) -> bool:
        """Hand the job to the process, then every message held meanwhile, in order; False when it is gone."""
        ok = self._process.start_job(job)  # messages posted during a long send are still held
        while True:
            with self._lock:
                held, self._held = self._held, ([] if self._held else None)
            if not held:
                return ok
            for msg in held:
                self._process.send(msg)


class ProcessRun(SteeredByControl):
    """One job in a training process (or on torchrun's ranks), a :class:`~workbench.core.train.handle.RunHandle`.

    Parameters
    ----------
    process : TrainingProcess or DistributedTrainingProcess
        Idle (ready or still starting); it trains this one job and ends.
    job : dict
        :func:`workbench.core.train.launch.process.make_job`.
    callbacks : sequence of Callback
        The caller's callbacks whose copies the job builds in the process (the
        live probes), in the job's order: what a copy hands its sink comes back
        to the caller's ``callback.sink``, and the changes a callback announces
        (``add_listener``: ``set_probed``...) are made on its copy during the run.
    kind : str
        ``"process"`` or ``"ddp"``.
    ranks : int
        Processes that train.

    Attributes
    ----------
    control : JobControl
    reason : str or None
        The end reason once finished (``"crashed"`` / ``"ended"`` besides the trainer's).
    """

    in_this_process = False
    can_end = True

    def __init__(self, process, job: dict, callbacks=(), *, kind: str = "process", ranks: int = 1):
        self.process = process
        self.job: dict | None = job
        self.callbacks = list(callbacks)
        self.kind = kind
        self.ranks = int(ranks)
        self.control = JobControl(process)
        self.reason: str | None = None
        self._ended_by_user = False
        self._listeners: list = []
        for index, cb in enumerate(self.callbacks):
            if hasattr(cb, "add_listener"):
                listener = self._forward_to(index)
                cb.add_listener(listener)
                self._listeners.append((cb, listener))

    def run(self, emit: Callable[[Event], Any]) -> str:
        """Start the job, hand its events to ``emit`` until ``Finished``; the end reason (never raises)."""
        reason = "error"
        proc = self.process
        try:
            if not proc.ready:
                emit(ProgressText("starting training process…"))
            if not self._wait_ready() and not self.control.stop_requested:
                reason = self._died("did not start", emit)
                return reason
            if self.control.stop_requested:  # stopped (or the window closed) before the job left: nothing ran
                emit(ProgressText("stopped before the first step"))
                reason = "stopped"
                return reason
            if not self.control.start_job(self.job):
                reason = self._died("did not start", emit)
                return reason
            self.job = None  # the model's bytes are the process's now
            while True:
                try:
                    msg = proc.recv(POLL_S)
                except EOFError:
                    reason = self._died("ended unexpectedly", emit)
                    return reason
                if msg is None:
                    if not proc.is_alive():
                        reason = self._died("ended unexpectedly", emit)
                        return reason
                    continue
                _, name, fields = msg
                event = from_wire(name, fields)
                if isinstance(event, Finished):
                    reason = event.reason
                    return reason
                if isinstance(event, Sink):
                    self.callbacks[event.index].sink(event.data)
                    continue
                emit(event)
        except Exception as exc:  # noqa: BLE001 - the run's top: report, end cleanly
            emit(RunError(f"Training process: {type(exc).__name__}: {exc}"))
            reason = "error"
            return reason
        finally:
            for cb, listener in self._listeners:
                cb.remove_listener(listener)
            self._listeners = []  # the listeners hold this run: no cycle left for the GC to free off-thread
            proc.end()
            self.reason = reason
            emit(Finished(reason))

    def _wait_ready(self) -> bool:
        """Wait until the process is ready for its job; False when it died, timed out or a stop came first."""
        end = time.monotonic() + READY_TIMEOUT_S
        while not self.process.wait_ready(POLL_S):
            if self.control.stop_requested or time.monotonic() > end or not self.process.is_alive():
                return False
        return True

    def _died(self, what: str, emit: Callable[[Event], Any]) -> str:
        """The process ended without ``Finished``: say how, with its last output; the end reason."""
        self.process.join(5)
        if self._ended_by_user:
            emit(ProgressText("training process ended"))
            return "ended"
        if self.control.shutdown_requested:  # the window closes: its end is no news to show in a box
            emit(ProgressText("training process ended"))
            return "stopped" if self.process.exitcode == 0 else "ended"
        tail = self.process.log_tail()
        text = f"training process {what} ({describe_exit(self.process.exitcode)})"
        if tail:
            text += f"\n\nLast output:\n{tail}"
        emit(RunError(text))
        return "crashed"

    def stop_and_save(self) -> None:
        """Stop at the next step boundary (ending a pause or a NaN question) and write ``last.pt``."""
        self.control.stop_and_save()

    def end(self) -> bool:
        """End the training process now (SIGKILL): for a step that never returns. True when it was running.

        Safe: the caller's model keeps the weights of the last sync, the run
        folder keeps its last checkpoint; the run ends ``"ended"``.
        """
        if not self.process.is_alive():
            return False
        self._ended_by_user = True
        self.process.kill()
        return True

    def _forward_to(self, index: int):
        def forward(method: str, args: tuple) -> None:
            self.control.call_callback(index, method, *args)
        return forward
