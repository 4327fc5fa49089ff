"""The window's side of the training process boundary (Qt-free).

A run from the window trains in a separate process by default (one GIL and one
set of OpenMP pools per process: a repaint never competes with a step, and a
segfault, ``abort()`` or a hung step in training cannot take the window down).
The process is started with the standard library's ``multiprocessing`` (spawn
context) and talks over a ``multiprocessing`` duplex ``Pipe``; only small
picklable data and bytes cross (:mod:`workbench.core.train.events`). This is how
SLEAP's GUI runs ``sleap-train`` and how TensorBoard / W&B stay out of the
training script's process, minus their loss of live control.

* :class:`TrainingProcess`: start (ahead, idle), send, receive, end; the exit
  described in words and the last lines of its output;
* :class:`RemoteControl`: the run's steering with :class:`RunControl`'s method
  names, sent as messages;
* :func:`encode_model` / :func:`make_job`: what a job carries; a model that
  cannot cross raises :class:`ModelNotPortable` (the window then trains on a thread);
* :class:`ProcessRun`: the :class:`~workbench.core.train.handle.RunHandle` of a run in a
  training process or on torchrun's ranks, steered through :class:`JobControl`.

A :class:`ProcessRun` hands the job to a :class:`TrainingProcess`
(started ahead, or now) or a
:class:`~workbench.core.train.launch.ddp_ranks.DistributedTrainingProcess`,
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
end is never reported as an error.
"""

from __future__ import annotations

import atexit
import contextlib
import multiprocessing
import os
import signal
import sys
import tempfile
import threading
import time
import weakref
from pathlib import Path
from typing import Any, Callable

from torch import nn

from workbench.core.contrib import FILE_MODULE_PREFIX
from workbench.core.errors import WorkbenchError
from workbench.core.model.wire import to_bytes
from workbench.core.model.example_input import default_input_shape
from workbench.core.train.events import Event, Finished, ProgressText, RunError, Sink, from_wire
from workbench.core.train.handle import SteeredByControl
from workbench.core.train.launch.training_process_main import NICE_INCREMENT, serve

__all__ = ["TrainingProcess", "RemoteControl", "ModelNotPortable", "encode_model", "callback_spec", "make_job",
           "make_warm_up", "end_all", "WARM_MAX_BYTES", "ProcessRun", "JobControl", "POLL_S"]

#: Seconds a cold process may take to import torch and say it is ready.
READY_TIMEOUT_S = 120.0
#: Lines of the process's output shown when it dies.
LOG_TAIL_LINES = 15
#: Largest model (parameters and buffers, bytes) sent to an idle process to warm it up: pickling it
#: costs the window's thread ~1 ms per MB, and a large model's step is long enough that its warm-up matters little.
WARM_MAX_BYTES = 64 * 2**20

_live: weakref.WeakSet = weakref.WeakSet()


class ModelNotPortable(WorkbenchError):
    """The model cannot be sent to a training process (the message says why, in one line)."""


def encode_model(model: nn.Module) -> tuple[bytes, dict[str, str]]:
    """The model as bytes for the training process, and the files its classes come from.

    Pickled whole (weights, ``requires_grad`` flags, tied parameters, edits such
    as a replaced head travel as they are); a TorchScript module as its archive.
    Classes defined in a ``file.py:callable`` architecture are named with the
    file, which the training process imports under the same module name first.

    Returns
    -------
    (bytes, dict)
        The model and ``{module name: file path}``.

    Raises
    ------
    ModelNotPortable
        Something in the model cannot be pickled (a lambda, a class defined in a
        function or typed in a console).
    """
    factories: dict[str, str] = {}
    for module in model.modules():
        name = type(module).__module__
        if name.startswith(FILE_MODULE_PREFIX):
            path = getattr(sys.modules.get(name), "__file__", None)
            if path:
                factories[name] = str(path)
        elif name == "__main__":
            raise ModelNotPortable(f"{type(module).__name__} is defined in the main script, "
                                   "which a training process cannot import")
    try:
        data = to_bytes(model)
    except Exception as exc:  # pickle raises PicklingError, AttributeError, TypeError...
        raise ModelNotPortable(f"the model cannot be pickled ({type(exc).__name__}: {exc})") from exc
    return data, factories


def callback_spec(callback) -> dict:
    """How a training process builds ``callback`` again: ``{"factory": "pkg.mod:Class", "kwargs": settings()}``.

    A callback crosses when it has ``settings()`` (the keyword arguments of
    ``Class(sink, **settings)``) and a ``sink``.

    Raises
    ------
    ModelNotPortable
        ``callback`` has no ``settings()``.
    """
    if not callable(getattr(callback, "settings", None)) or not hasattr(callback, "sink"):
        raise ModelNotPortable(f"the training callback {type(callback).__name__} cannot be sent to a training process")
    cls = type(callback)
    return {"factory": f"{cls.__module__}:{cls.__qualname__}", "kwargs": callback.settings()}


def make_job(model: nn.Module, config, arch=None, resume=None, callbacks=(), threads: int | None = None) -> dict:
    """The job dict :func:`workbench.core.train.launch.training_process_main.run_job` trains.

    Parameters
    ----------
    model : nn.Module
        The window's model (its current weights and frozen set).
    config : TrainConfig
    arch : ArchSpec or dict, optional
    resume : str, Path or Checkpoint, optional
        A checkpoint file to continue (its path crosses).
    callbacks : sequence of Callback
        Built again in the process (:func:`callback_spec`), e.g. the live probes.
    threads : int, optional
        Intra-op threads of the training process (None: every core).

    Raises
    ------
    ModelNotPortable
        The model, a callback, or a resume source without a file, cannot cross.
    """
    specs = [callback_spec(cb) for cb in callbacks]
    data, factories = encode_model(model)
    if resume is not None and not isinstance(resume, (str, Path)):
        path = getattr(resume, "path", None)
        if path is None or not Path(path).is_file():
            raise ModelNotPortable("the checkpoint to resume from is not a file")
        resume = path
    arch_dict = arch.to_dict() if hasattr(arch, "to_dict") else arch
    return {"model": data, "factories": factories, "config": config.to_dict(), "arch": arch_dict,
            "resume": None if resume is None else str(resume), "callbacks": specs, "threads": threads}


def make_warm_up(model: nn.Module, config, input_shape) -> dict | None:
    """What an idle training process needs to warm up on ``model``.

    :func:`workbench.core.train.launch.training_process_main.warm_model` takes it.

    Parameters
    ----------
    model : nn.Module
        The window's model.
    config : TrainConfig
        The settings the next run will likely use (device, optimizer, AMP, batch size).
    input_shape : tuple of int or None
        The model's input shape with a batch dimension, ``(N, C, H, W)``; N is replaced by the batch size.
        None takes the model's own hint (:func:`workbench.core.model.example_input.default_input_shape`:
        ``(1, 16)`` token ids for a model whose first layer is an ``nn.Embedding``).

    Returns
    -------
    dict or None
        None when there is nothing to warm: no input shape, a device other than
        the CPU, a model larger than :data:`WARM_MAX_BYTES`, or one that cannot cross.
        ``input_shape`` is one sample's shape (an embedding model's batch is int64 ids:
        :func:`workbench.core.model.example_input.example_input` on the process's copy).
    """
    input_shape = input_shape or default_input_shape(model)
    if not input_shape or len(input_shape) < 2 or not str(config.device).startswith("cpu"):
        return None
    size = sum(t.numel() * t.element_size() for t in (*model.parameters(), *model.buffers()))
    if size > WARM_MAX_BYTES:
        return None
    try:
        data, factories = encode_model(model)
    except ModelNotPortable:
        return None
    return {"model": data, "factories": factories, "config": config.to_dict(),
            "input_shape": [int(d) for d in input_shape[1:]]}


def describe_exit(exitcode: int | None) -> str:
    """``"signal 6"`` for a process killed by a signal (``SIGABRT``), ``"exit code 3"`` otherwise."""
    if exitcode is None:
        return "still running"
    if exitcode < 0:
        try:
            name = signal.Signals(-exitcode).name
        except ValueError:
            name = ""
        return f"signal {-exitcode}" + (f", {name}" if name else "")
    return f"exit code {exitcode}"


class TrainingProcess:
    """One training process (spawn context), started at once and idle until it gets a job.

    Attributes
    ----------
    process : multiprocessing.Process
    log_path : Path
        Its stdout and stderr.
    pid : int or None
        Set once the process said it is ready.
    niceness : int
        What it added to its nice value at its start (0: the window's priority; Training › Run options ›
        Process priority, :mod:`workbench.core.train.launch.priority`).
    """

    def __init__(self, niceness: int = NICE_INCREMENT) -> None:
        ctx = multiprocessing.get_context("spawn")
        self._conn, child = ctx.Pipe(duplex=True)
        fd, log = tempfile.mkstemp(prefix="workbench-training-", suffix=".log")
        os.close(fd)
        self.log_path = Path(log)
        # not daemonic: a daemonic process may not start DataLoader workers
        # its parent watch ends it when this process ends (a SIGKILL included)
        self.niceness = int(niceness)
        self.process = ctx.Process(target=serve, args=(child, str(self.log_path), os.getpid(), self.niceness),
                                   name="workbench-training")
        self.process.start()
        child.close()
        self.pid: int | None = None
        self.job_sent = False
        self._closed = False
        self._exitcode: int | None = None
        self._send_lock = threading.Lock()
        self._pending: list = []
        self._warm_sent = 0
        self._warmed = 0
        _live.add(self)

    # ------------------------------------------------------------ state
    @property
    def ready(self) -> bool:
        """True once the process has imported torch and waits for a job (polls, never blocks)."""
        if self.pid is None:
            try:
                while self._conn.poll(0):
                    msg = self._conn.recv()
                    if msg and msg[0] == "ready":
                        self.pid = int(msg[1])
                    elif msg and msg[0] == "warmed":
                        self._warmed += 1
                    else:
                        self._pending.append(msg)
            except (EOFError, OSError):
                return False
        return self.pid is not None

    def is_alive(self) -> bool:
        """The process runs."""
        return not self._closed and self.process.is_alive()

    @property
    def exitcode(self) -> int | None:
        """Its exit code (negative: killed by that signal), None while it runs."""
        return self._exitcode if self._closed else self.process.exitcode

    def wait_ready(self, timeout: float = READY_TIMEOUT_S) -> bool:
        """Block until :attr:`ready` (True), the process died or ``timeout`` seconds passed (False)."""
        end = time.monotonic() + timeout
        while not self.ready:
            if not self.is_alive() or time.monotonic() > end:
                return False
            with contextlib.suppress(Exception):
                self._conn.poll(0.05)
        return True

    def wait_warm(self, timeout: float = READY_TIMEOUT_S) -> bool:
        """Block until the process answered every warm-up sent (:meth:`warm_up`); False if it died or timed out."""
        end = time.monotonic() + timeout
        while self._warmed < self._warm_sent:
            if not self.is_alive() or time.monotonic() > end:
                return False
            with contextlib.suppress(EOFError):
                msg = self._read(0.05)  # the connection itself: a message kept for recv() is not an answer
                if msg is not None:
                    self._pending.append(msg)
        return True

    # ------------------------------------------------------------ messages
    def send(self, msg: tuple) -> bool:
        """Send one message (thread-safe); False when the process is gone."""
        with self._send_lock:
            try:
                self._conn.send(msg)
            except (OSError, EOFError, BrokenPipeError, ValueError):
                return False
        return True

    def warm_up(self, spec: dict | None) -> None:
        """Have the idle process take a few throwaway steps of a model (:func:`make_warm_up`) before its job.

        Sent from a short-lived thread: a large message would block the caller
        until the process, maybe still importing torch, reads it. A job sent
        meanwhile waits for it; a newer warm-up supersedes an unread one.
        """
        if spec is None or self.job_sent or not self.is_alive():
            return
        self._warm_sent += 1
        threading.Thread(target=self.send, args=(("warm", spec),), name="warm-up", daemon=True).start()

    def start_job(self, job: dict) -> bool:
        """Hand the idle process its job; False when it is gone."""
        self.job_sent = True
        return self.send(("job", job))

    def recv(self, timeout: float) -> Any:
        """The next message, or None after ``timeout`` seconds.

        Raises
        ------
        EOFError
            The process closed its end (it ended or died).
        """
        if self._pending:
            return self._pending.pop(0)
        return self._read(timeout)

    def _read(self, timeout: float) -> Any:
        """The next message on the connection that is not a warm-up's answer (counted), or None after ``timeout``."""
        end = time.monotonic() + timeout
        try:
            while self._conn.poll(max(0.0, end - time.monotonic())):
                msg = self._conn.recv()
                if not (msg and msg[0] == "warmed"):
                    return msg
                self._warmed += 1  # the answer to a warm-up, not an event of the job
            return None
        except OSError as exc:
            raise EOFError(str(exc)) from exc

    # ------------------------------------------------------------ ending
    def log_tail(self, lines: int = LOG_TAIL_LINES) -> str:
        """The last ``lines`` lines the process printed (stdout and stderr).

        After a native crash, from faulthandler's ``Fatal Python error`` line on
        (the crashing thread's Python stack), without its list of extension modules.
        """
        try:
            text = self.log_path.read_text(errors="replace")
        except OSError:
            return ""
        rows = [r for r in text.rstrip().splitlines() if not r.startswith("Extension modules:")]
        fatal = [i for i, r in enumerate(rows) if r.startswith("Fatal Python error")]
        if fatal:
            return "\n".join(rows[fatal[-1]:fatal[-1] + 2 * lines])
        return "\n".join(rows[-lines:])

    def end(self, timeout: float = 5.0) -> None:
        """End the process: ``quit`` when idle, else wait ``timeout`` s for it to end, then SIGTERM, SIGKILL; never raises."""
        if self._closed:
            return
        try:
            if self.process.is_alive() and not self.job_sent:
                self.send(("quit",))
                self.process.join(min(timeout, 2.0))
            elif self.process.is_alive():  # a job that sent its Finished event ends by itself
                self.process.join(timeout)
            if self.process.is_alive():  # multiprocessing.Process.terminate: SIGTERM to the child (no QThread)
                self.process.terminate()
                self.process.join(timeout)
            if self.process.is_alive():
                self.process.kill()
                self.process.join(timeout)
            self.close()
        except ValueError:  # "process object is closed": another thread ended it meanwhile (atexit's end_all)
            return

    def join(self, timeout: float) -> None:
        """Wait up to ``timeout`` seconds for the process to end."""
        if not self._closed:
            self.process.join(timeout)

    def kill(self) -> None:
        """SIGKILL at once (a step that never returns); joins the process."""
        if self._closed:
            return
        if self.process.is_alive():
            self.process.kill()
        self.process.join(10)

    def close(self) -> None:
        """Join an ended process and free its connection and log (call after it ended)."""
        if self._closed or self.process.is_alive():
            return
        self._closed = True
        self.process.join(0)
        self._exitcode = self.process.exitcode
        with contextlib.suppress(Exception):
            self._conn.close()
        with contextlib.suppress(Exception):
            self.process.close()
        with contextlib.suppress(Exception):
            self.log_path.unlink()
        _live.discard(self)


def end_all() -> None:
    """End every training process this process started (at exit: no orphan, no hang in multiprocessing's join)."""
    for proc in list(_live):
        proc.end(timeout=2.0)


atexit.register(end_all)


class RemoteControl:
    """A run's steering in a training process: :class:`~workbench.core.train.trainer.control.RunControl`'s method names.

    Each call is one message, applied by the process's reader thread; the
    effects (paused, stopped, commands applied) come back as events.
    """

    def __init__(self, process: TrainingProcess):
        self._process = process

    def request_stop(self) -> None:
        """Stop at the next step boundary."""
        self._send("request_stop")

    def pause(self) -> None:
        """Pause at the next step boundary (the process then sends a ``Paused`` and a ``StateSynced`` event)."""
        self._send("pause")

    def resume(self) -> None:
        """Continue after :meth:`pause`."""
        self._send("resume")

    def queue(self, command: Any) -> None:
        """A command of :mod:`workbench.core.train.trainer.commands` for the next step boundary (must pickle)."""
        self._send("queue", command)

    def resolve_nonfinite(self, action: str) -> None:
        """Answer a NaN/Inf pause (``lower_lr``, ``rollback`` or ``stop``)."""
        self._send("resolve_nonfinite", action)

    def stop_and_save(self) -> None:
        """Stop at the next step boundary and write ``last.pt`` into the run folder (the window closes)."""
        self._process.send(("stop_and_save",))

    def call_callback(self, index: int, method: str, *args) -> None:
        """``callbacks[index].method(*args)`` in the process (``set_probed`` of the live probes: thread-safe there)."""
        self._process.send(("callback", index, method, args))

    def _send(self, method: str, *args) -> None:
        self._process.send(("control", method, args))


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
        :func:`workbench.core.train.launch.training_process.make_job`.
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
