"""The QThread that owns a run in a training process: :class:`ProcessTrainingWorker`.

It hands the job to a :class:`~workbench.core.train.launch.process.TrainingProcess`
(started ahead, or now), then reads the process's events and emits the
:class:`~workbench.ui.train.worker.RunWorker` signal of each; bytes are decoded
here, off the GUI thread (``stateSynced``, ``extrasReady``). Steering goes
through ``worker.control`` (a :class:`~workbench.core.train.launch.process.RemoteControl`).

When the process dies (``abort()``, a segfault, ``os._exit``, a kill) the
worker emits ``error("training process ended unexpectedly (signal 6, SIGABRT)"``
plus the process's last output lines) and ``finished("crashed")``; after
:meth:`ProcessTrainingWorker.end_process` (a step that never returned, ended
by the user) it finishes with ``"ended"``. Either way the process is joined:
no orphan.

Steering sent before the job reaches the process (Stop or a closing window
while the process still starts) is held by :class:`JobControl` and sent right
after the job, in order: a process that got a control message instead of its
job used to end at once (exit code 0), which the window reported as a crash.
A stop asked before the job left sends no job at all (``"stopped"``); and once
the window asked the run to stop and save (it closes), the process's end is
never reported as an error.
"""

from __future__ import annotations

import threading
import time

from PySide6.QtCore import Slot

from workbench.core.train.events import extras_from_bytes, read_state_blob
from workbench.core.train.launch.process import READY_TIMEOUT_S, RemoteControl, TrainingProcess, describe_exit
from workbench.ui.train.worker import RunWorker

#: Seconds between two checks that the process still lives while no event arrives.
POLL_S = 0.1


class JobControl(RemoteControl):
    """A :class:`RemoteControl` whose messages wait until the job was handed to the process.

    Attributes
    ----------
    stop_requested : bool
        Stop (or stop-and-save) was asked.
    shutdown_requested : bool
        The window asked the run to stop and save (it closes).
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


class ProcessTrainingWorker(RunWorker):
    """Runs one job in a training process and relays its events as signals.

    Parameters
    ----------
    process : TrainingProcess
        Idle (ready or still starting); it trains this one job and ends.
    job : dict
        :func:`workbench.core.train.launch.process.make_job`.
    callbacks : sequence of Callback
        The window's callbacks whose copies the job builds in the process (the
        live probes), in the job's order: what a copy hands its sink comes back
        to the window's ``callback.sink``, and the changes a callback announces
        (``add_listener``: ``set_probed``...) are made on its copy during the run.

    Attributes
    ----------
    control : JobControl
    reason : str or None
        The end reason once finished (``"crashed"`` / ``"ended"`` besides the trainer's).
    """

    mode = "process"

    def __init__(self, process: TrainingProcess, job: dict, callbacks=()):
        super().__init__()
        self.process = process
        self.job = job
        self.callbacks = list(callbacks)
        self.control = JobControl(process)
        self.reason: str | None = None
        self._ended_by_user = False
        self._listeners = []
        for index, cb in enumerate(self.callbacks):
            if hasattr(cb, "add_listener"):
                listener = self._forward_to(index)
                cb.add_listener(listener)
                self._listeners.append((cb, listener))

    @Slot()
    def run(self) -> None:
        """Start the job, relay events until ``finished``; always ends by emitting ``finished(reason)``."""
        reason = "error"
        proc = self.process
        try:
            if not proc.ready:
                self.progressText.emit("starting training process…")
            if not self._wait_ready() and not self.control.stop_requested:
                reason = self._died("did not start")
                return
            if self.control.stop_requested:  # stopped (or the window closed) before the job left: nothing ran
                self.progressText.emit("stopped before the first step")
                reason = "stopped"
                return
            if not self.control.start_job(self.job):
                reason = self._died("did not start")
                return
            self.job = None  # the model's bytes are the process's now
            while True:
                try:
                    msg = proc.recv(POLL_S)
                except EOFError:
                    reason = self._died("ended unexpectedly")
                    return
                if msg is None:
                    if not proc.is_alive():
                        reason = self._died("ended unexpectedly")
                        return
                    continue
                _, name, args = msg
                if name == "finished":
                    reason = str(args[0])
                    return
                self._relay(name, args)
        except Exception as exc:  # noqa: BLE001 - the worker's top: report, end cleanly
            self.error.emit(f"Training process: {type(exc).__name__}: {exc}")
            reason = "error"
        finally:
            for cb, listener in self._listeners:
                cb.remove_listener(listener)
            self._listeners = []  # the listeners hold this worker: no cycle left for the GC to free off-thread
            proc.end()
            self.reason = reason
            self.finished.emit(reason)

    def _wait_ready(self) -> bool:
        """Wait until the process is ready for its job; False when it died, timed out or a stop came first."""
        end = time.monotonic() + READY_TIMEOUT_S
        while not self.process.wait_ready(POLL_S):
            if self.control.stop_requested or time.monotonic() > end or not self.process.is_alive():
                return False
        return True

    def _relay(self, name: str, args: tuple) -> None:
        if name == "stateSynced":
            args = (read_state_blob(args[0]),)
        elif name == "extrasReady":
            args = (extras_from_bytes(args[0]),)
        elif name == "sink":
            index, data = args
            self.callbacks[index].sink(data)
            return
        self.emit_event(name, *args)

    def _died(self, what: str) -> str:
        """The process ended without ``finished``: say how, with its last output; the end reason."""
        self.process.join(5)
        if self._ended_by_user:
            self.progressText.emit("training process ended")
            return "ended"
        if self.control.shutdown_requested:  # the window closes: its end is no news to show in a box
            self.progressText.emit("training process ended")
            return "stopped" if self.process.exitcode == 0 else "ended"
        tail = self.process.log_tail()
        text = f"training process {what} ({describe_exit(self.process.exitcode)})"
        if tail:
            text += f"\n\nLast output:\n{tail}"
        self.error.emit(text)
        return "crashed"

    def stop_and_save(self) -> None:
        """Stop at the next step boundary (ending a pause or a NaN question) and write ``last.pt``."""
        self.control.stop_and_save()

    def end_process(self) -> bool:
        """End the training process now (SIGKILL): for a step that never returns. True when it was running.

        Safe: the window's model keeps the weights of the last sync, the run
        folder keeps its last checkpoint; the worker finishes with ``"ended"``.
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
