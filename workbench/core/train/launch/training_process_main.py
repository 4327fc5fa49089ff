"""The training process: what runs on the other side of the window's process boundary.

:func:`serve` is the ``multiprocessing`` target (spawn context) of a training
process (:class:`workbench.core.train.launch.training_process.TrainingProcess`). It imports torch
and the trainer, says ``("ready", pid)`` and waits idle for one job, so that a
process started ahead makes Start quick. A job is a dict (:func:`run_job`):
the model as bytes, the config as a dict, the architecture, the checkpoint to
resume and the callbacks to build there (``{"factory": "pkg.mod:Class", "kwargs": {...}}``,
resolved through :func:`workbench.core.contrib.resolve` and built as ``Class(sink, **kwargs)``:
what ``sink`` gets goes back as a :class:`~workbench.core.train.events.Sink` event
(``index``, ``data``); the live probes travel this way). The run is the same as everywhere:
:func:`workbench.core.train.entry.make_trainer` then ``fit()``, with one
:class:`~workbench.core.train.events.EventBridge` whose events go back over the
connection as ``("event", type name, fields)`` (:func:`~workbench.core.train.events.to_wire`). A reader thread turns the window's
messages into calls on the run's :class:`~workbench.core.train.trainer.control.RunControl`:

* ``("control", method, args)``: ``request_stop``, ``pause``, ``resume``,
  ``queue`` (a command of :mod:`workbench.core.train.trainer.commands`), ``resolve_nonfinite``;
* ``("callback", index, method, args)``: ``callbacks[index].method(*args)`` on a callback
  the job built (e.g. ``set_probed`` of the live probes), from the reader thread;
* ``("stop_and_save",)``: stop at the next step boundary and write ``last.pt`` (the window closes);
* ``("quit",)``: an idle process ends.

Before its job, an idle process may get ``("warm", spec)`` messages
(:func:`warm_model`), each answered with ``("warmed", steps)``: a few throwaway
steps of the window's opened model at the run's batch shape, so that the run's
first steps do not pay oneDNN's kernel creation at the run's shapes (a script
pays it once too; the process started ahead pays it while the user looks at the window).

When the window's process ends, however it ends (a SIGKILL included), the
process notices (its connection closes; :class:`~workbench.core.train.launch.parent_watch.ParentWatch`
sees it re-parented), stops the run at the next step boundary, saves ``last.pt``
and ends. A step that does not return within :data:`ORPHAN_GRACE_S` is not
waited for: ``status.json`` then says the run crashed (reason ``"orphaned"``)
and the process exits. One process trains one job. Qt-free; the process
computes with every core at a lower scheduling priority.
"""

from __future__ import annotations

import contextlib
import faulthandler
import importlib.util
import json
import os
import sys
import threading
import time
import traceback
from pathlib import Path
from typing import Any

from workbench.core.hub_offline import offline_by_default
from workbench.core.train.launch.parent_watch import ParentWatch, exit_later

__all__ = ["serve", "run_job", "warm_model", "import_file", "JobState", "stop_and_save", "mark_unfinished",
           "run_batch_sizes", "NICE_INCREMENT", "WARM_STEPS", "WARM_SIZED_DATASETS", "WARM_BUDGET_S",
           "ORPHAN_GRACE_S", "ORPHAN_REASON"]

#: Nice value added to the training process, so the window's process wins a contended core.
NICE_INCREMENT = 10
#: Most throwaway steps of one warm-up (:func:`warm_model`): oneDNN creates its kernels at the first.
WARM_STEPS = 3
#: Seconds after which a warm-up takes no further step (a step under way is finished).
WARM_BUDGET_S = 2.0
#: Datasets the warm-up builds to learn the run's last, smaller batch sizes (:func:`run_batch_sizes`): built in
#: memory in a few tens of ms (any other may scan folders or read files for seconds).
WARM_SIZED_DATASETS = ("digits", "fake")
#: Seconds a run whose window ended may take to reach a step boundary and save ``last.pt``.
ORPHAN_GRACE_S = 5.0
#: Seconds after the grace when faulthandler's native timer ends a process that could not end itself.
EXIT_MARGIN_S = 5.0
#: ``status.json``'s reason for a run whose window's process ended: ``stopped`` when the run reached a step
#: boundary and saved ``last.pt``, ``crashed`` when its step never returned.
ORPHAN_REASON = "the window's process ended"


class JobState:
    """What ending a process's run from another thread needs (the parent watch); filled in by :func:`run_job`.

    Attributes
    ----------
    control : RunControl or None
        The run's control, once the job started.
    flags : dict
        ``{"save_last": bool}``: write ``last.pt`` after a stop.
    trainer : Trainer or None
        Once built.
    started, ended : threading.Event
        The job arrived; :func:`run_job` returned (the process is ending by itself).
    orphaned : threading.Event
        The window's process ended (:func:`end_orphaned`): the run's status says so.
    log_path : str or None
        The process's output file (removed when the window ended: no one is left to read it).
    """

    def __init__(self, log_path: str | None = None) -> None:
        self.log_path = log_path
        self.control = None
        self.flags = {"save_last": False}
        self.trainer = None
        self.started = threading.Event()
        self.ended = threading.Event()
        self.orphaned = threading.Event()


def stop_and_save(control, flags: dict) -> None:
    """Stop at the next step boundary (ending a pause or a NaN question) and have ``last.pt`` written."""
    flags["save_last"] = True
    control.request_stop()
    control.resolve_nonfinite("stop")
    control.resume()


def mark_unfinished(run_dir: str | Path | None, reason: str = ORPHAN_REASON, *, stopped: bool = False) -> bool:
    """Rewrite a ``status.json`` that still says ``running`` as ended with ``reason`` (state ``crashed``).

    For a run that cannot end itself (a step that never returns): the runs list
    then shows it crashed at once. Its start time, model, dataset and epochs are kept.
    With ``stopped``, a run that stopped and saved ``last.pt`` (``stopped``)
    keeps that state and gets ``reason`` instead of its own.

    Parameters
    ----------
    run_dir : str, Path or None
    reason : str
    stopped : bool
        Also rewrite a ``stopped`` status (the state stays ``stopped``).

    Returns
    -------
    bool
        True when the file was rewritten; False when there is none, it is unreadable or the run ended.
    """
    from workbench.core.files import atomic_write_text
    from workbench.core.train.runs.folder import write_status

    if run_dir is None:
        return False
    try:
        status = json.loads((Path(run_dir) / "status.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return False
    if not isinstance(status, dict) or status.get("state") not in (("running", "stopped") if stopped else ("running",)):
        return False
    info = {k: status[k] for k in ("model", "dataset", "epochs") if k in status}
    try:
        if status["state"] == "stopped":  # saved at a step boundary: the state stays, the reason says why
            atomic_write_text(Path(run_dir) / "status.json", json.dumps({**status, "reason": reason}))
        else:
            write_status(run_dir, reason, float(status.get("started") or time.time()), info)
    except (OSError, TypeError, ValueError):
        return False
    return True


#: What torch's DataLoader says when one of its worker processes died; the worker's own traceback went to this
#: process's output, whose last lines :func:`with_worker_output` adds.
WORKER_DIED = "DataLoader worker"
#: Lines of this process's output added to an error saying a DataLoader worker died.
WORKER_TAIL_LINES = 20
#: Bytes read from the end of the output file for them (a traceback is a few kB).
WORKER_TAIL_BYTES = 64 * 1024


def output_tail(log_path: str | Path | None, lines: int = WORKER_TAIL_LINES) -> str:
    """The last ``lines`` lines of this process's output file (``""`` when there is none or it cannot be read)."""
    if not log_path:
        return ""
    try:
        with open(log_path, "rb") as f:
            f.seek(0, os.SEEK_END)
            f.seek(max(0, f.tell() - WORKER_TAIL_BYTES))
            text = f.read().decode("utf-8", errors="replace")
    except OSError:
        return ""
    return "\n".join(text.rstrip().splitlines()[-lines:])


def with_worker_output(event: Any, log_path: str | Path | None) -> Any:
    """A :class:`RunError` saying a DataLoader worker died (torch: "details are lost"), with the output's last lines.

    A worker writes its traceback (``ModuleNotFoundError`` while it unpickles the
    dataset, an error in ``__getitem__``...) to the training process's output
    before it exits; the window sees only this process's events, so the error
    carries those lines. Any other event is returned as it is.
    """
    from workbench.core.train.events import RunError

    if not isinstance(event, RunError) or WORKER_DIED not in event.text:
        return event
    tail = output_tail(log_path)
    if not tail:
        return event
    return RunError(f"{event.text.rstrip()}\n\nLast output of the training process and its DataLoader workers:\n"
                    f"{tail}")


class _Sender:
    """``send(event)`` as ``("event", type name, fields)``; thread-safe; a closed connection is ignored.

    An error saying a DataLoader worker died carries the output's last lines (:func:`with_worker_output`).
    """

    def __init__(self, conn, log_path: str | None = None):
        from workbench.core.train.events import to_wire

        self._conn = conn
        self._lock = threading.Lock()
        self._to_wire = to_wire
        self._log_path = log_path

    def __call__(self, event: Any) -> None:
        event = with_worker_output(event, self._log_path)
        name, fields = self._to_wire(event)  # tensors to bytes outside the lock
        with self._lock:
            try:
                self._conn.send(("event", name, fields))
            except (OSError, EOFError, BrokenPipeError):
                pass  # the window is gone; the reader thread stops the run


def serve(conn, log_path: str | None = None, parent_pid: int | None = None, niceness: int = NICE_INCREMENT) -> None:
    """Entry point of a training process: get ready, wait for one job, run it, end.

    Parameters
    ----------
    conn : multiprocessing.connection.Connection
        Duplex connection to the window's process.
    log_path : str, optional
        File that receives this process's stdout and stderr (the window shows its
        last lines when the process dies); faulthandler writes native crash
        tracebacks there too.
    parent_pid : int, optional
        The window's pid: when it ends, so does this process (:func:`end_orphaned`).
    niceness : int
        Added to the nice value before anything else runs (0: the window's priority; the threads and loader
        workers started later inherit it). Training › Run options › Process priority.
    """
    offline_by_default()  # as the window's own process (inherited), also when a process is started otherwise
    _redirect_output(log_path)
    faulthandler.enable(all_threads=False)  # the thread that crashed
    state = JobState(log_path)
    ParentWatch(lambda: end_orphaned(state), parent_pid).start()
    try:
        if niceness > 0:
            os.nice(niceness)
    except (AttributeError, OSError):
        pass  # Windows, or not permitted: same priority as the window
    _warm_up()
    try:
        conn.send(("ready", os.getpid()))
        msg = conn.recv()
        while msg and msg[0] == "warm":
            steps = 0
            if not conn.poll(0):  # a newer warm-up or the job supersedes this one
                steps = warm_model(msg[1], lambda: conn.poll(0))
                print(f"warmed up on the opened model: {steps} training steps")
            conn.send(("warmed", steps))  # one answer per warm-up message
            msg = conn.recv()
    except (EOFError, OSError):
        return
    if not msg or msg[0] != "job":
        return
    state.started.set()
    try:
        run_job(conn, msg[1], state=state)
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        conn.close()
        state.ended.set()


def end_orphaned(state: JobState, grace_s: float = ORPHAN_GRACE_S) -> None:
    """The window's process ended: stop the run and save ``last.pt`` within ``grace_s`` seconds, else exit.

    Called on the parent watch's thread. An idle process exits at once. A run
    stops at its next step boundary, writes ``last.pt`` and ``status.json``
    (``stopped``, reason :data:`ORPHAN_REASON`) and the process ends by itself; when the step does not return
    in time, ``status.json`` is marked crashed (:func:`mark_unfinished`) and the
    process exits with status 1. faulthandler's native timer ends a process
    whose Python code cannot run any more :data:`EXIT_MARGIN_S` later.
    """
    exit_later(grace_s + EXIT_MARGIN_S)
    state.orphaned.set()
    if state.log_path:
        with contextlib.suppress(OSError):
            os.unlink(state.log_path)  # the window that would show it is gone; the output goes on, unread
    if not state.started.is_set():
        os._exit(0)  # idle: nothing to save, and no run to wait for
    print(f"the window's process ended: stopping the run (at most {grace_s:.0f} s)", flush=True)
    if state.control is not None:
        stop_and_save(state.control, state.flags)
    if state.ended.wait(grace_s):
        return  # the run ended: the main thread ends the process
    trainer = state.trainer
    marked = mark_unfinished(getattr(trainer, "run_dir", None))
    print(f"the step did not end within {grace_s:.0f} s: exiting" + (" (status.json: crashed)" if marked else ""),
          flush=True)
    os._exit(1)


def _warm_up() -> None:
    """What the first step of any run pays once, paid while the process waits idle.

    Importing torch, torchvision, the trainer and TensorBoard's writer, the first
    optimizer (it imports torch._dynamo, ~2 s on the 2-core reference machine)
    and the first convolution forward/backward; a process started ahead then
    shows a run's first step in well under a second. Then the objects imported
    so far leave full garbage collections (:mod:`workbench.core.gc_freeze`).
    """
    import torch
    import torchvision  # noqa: F401 - architectures and datasets
    from torch import nn

    from workbench.core.gc_freeze import freeze_startup_objects
    from workbench.core.train.data import datasets  # noqa: F401
    from workbench.core.train.trainer import loop  # noqa: F401

    net = nn.Sequential(nn.Conv2d(1, 2, 3), nn.BatchNorm2d(2), nn.ReLU(), nn.Flatten(), nn.Linear(2 * 6 * 6, 2))
    opt = torch.optim.AdamW(net.parameters())
    loss = nn.functional.cross_entropy(net(torch.zeros(2, 1, 8, 8)), torch.zeros(2, dtype=torch.long))
    loss.backward()
    opt.step()
    try:  # the run's TensorBoard writer imports it at fit start: ~0.2-0.4 s of a cold first step
        from torch.utils.tensorboard import SummaryWriter  # noqa: F401
    except Exception:  # noqa: BLE001 - optional
        pass
    # torch's ~400,000 objects out of full collections: one took ~180 ms of a run's step
    freeze_startup_objects()


def warm_model(spec: dict, interrupted=lambda: False) -> int:
    """Throwaway training steps of a copy of the window's model on a random batch; returns the steps taken.

    The forward, backward and optimizer kernels meet the run's shapes here
    instead of in the run's first steps (oneDNN creates a primitive per layer and
    shape on first use: 10-80 ms for the digits CNN on the 2-core reference
    machine, against ~0.7 s for a whole 3-epoch digits run). Nothing of it
    reaches the run: the model is the process's own copy, thrown away; the batch
    comes from a private ``torch.Generator`` and the global RNG state is restored
    (``torch.random.fork_rng``). A model whose forward does not take one random
    tensor, or fails, is simply not warmed. For a dataset built in memory
    (:func:`run_batch_sizes`) it also takes one step at the epoch's last, smaller
    batch and runs validation's forward at its batch sizes (digits at batch 64: the
    run's first 30-sample step took ~2 ms more CPU than the next one, of a ~0.45 s
    run at one thread); otherwise validation's forward at the batch size.

    Parameters
    ----------
    spec : dict
        ``model`` (bytes of :func:`workbench.core.train.launch.training_process.encode_model`),
        ``factories``, ``config`` (``TrainConfig.to_dict()``: device, optimizer,
        AMP, batch size), ``input_shape`` (one sample's shape, ``(C, H, W)``).
    interrupted : callable
        Checked between steps; True (the job arrived) ends the warm-up.

    Returns
    -------
    int
        Training steps taken at the run's batch size (0 when the model could not be warmed).
    """
    import time

    import torch

    from workbench.core.model.wire import module_from_bytes
    from workbench.core.model.example_input import example_input
    from workbench.core.train.config import TrainConfig
    from workbench.core.train.trainer.faults import grads_finite  # imported before the warm-up's clock starts
    from workbench.core.train.trainer.optim import build_optimizer, param_groups

    steps = 0
    try:
        config = TrainConfig.from_dict(spec["config"])  # a CPU device (make_warm_up sends nothing else)
        for name, path in (spec.get("factories") or {}).items():
            import_file(name, path)
        model = module_from_bytes(spec["model"], trust=True)  # the window pickled its own model
        shape = (int(config.data.batch_size), *(int(d) for d in spec["input_shape"]))
        optimizer = build_optimizer(param_groups(model, config), config)
        end = time.perf_counter() + WARM_BUDGET_S
        with torch.random.fork_rng(devices=[]):
            # random floats, or token ids below num_embeddings for a model that starts with an nn.Embedding
            x = example_input(model, shape, fill="randn", seed=0)
            model.train()
            while steps < WARM_STEPS and time.perf_counter() < end and not interrupted():
                _warm_step(model, optimizer, x, config, grads_finite)
                steps += 1
            more = steps and time.perf_counter() < end and not interrupted()  # the job waits: no more
            train_sizes, eval_sizes = run_batch_sizes(config) if more else ([], [])
            for n in train_sizes:  # the epoch's last, smaller batch: its own kernels too
                if time.perf_counter() < end and not interrupted():
                    _warm_step(model, optimizer, example_input(model, (n, *shape[1:]), fill="randn", seed=0), config,
                               grads_finite)
            model.eval()
            for n in (eval_sizes or [shape[0]]):  # validation's forwards
                if n == shape[0] or (time.perf_counter() < end and not interrupted()):
                    with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16, enabled=bool(config.amp)):
                        xn = x if n == shape[0] else example_input(model, (n, *shape[1:]), fill="randn", seed=0)
                        xn.call(model)
    except Exception:  # noqa: BLE001 - a warm-up is optional: the run reports its own errors
        return steps
    return steps


def _warm_step(model, optimizer, x, config, grads_finite) -> None:
    """One throwaway training step of :func:`warm_model`: forward (under the run's autocast), backward, the
    trainer's gradient check (:func:`~workbench.core.train.trainer.faults.grads_finite`), optimizer step."""
    import torch

    with torch.autocast("cpu", dtype=torch.bfloat16, enabled=bool(config.amp)):  # as the run's steps
        out = x.call(model)
    out.float().square().mean().backward()
    grads_finite(optimizer)  # the run checks its gradients each step: the same kernels
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)


def run_batch_sizes(config) -> tuple[list[int], list[int]]:
    """The batch sizes a run of ``config`` meets besides full training batches: ``(training, validation)``.

    Known only for :data:`WARM_SIZED_DATASETS` (built here to learn their sizes); ``([], [])`` for any other
    dataset or when building fails. Training: the epoch's last, smaller batch (none when ``batch_size``
    divides the split); validation: a full batch and the last, smaller one.
    """
    data = config.data
    if data.dataset not in WARM_SIZED_DATASETS:
        return [], []
    try:
        from workbench.core.train.data.datasets import build_datasets

        train_ds, val_ds, _ = build_datasets(data)
        n_train, n_val = len(train_ds), len(val_ds) if val_ds is not None else 0
    except Exception:  # noqa: BLE001 - only a warm-up: the run reports its own data errors
        return [], []
    bs = max(1, int(data.batch_size))
    train = [n_train % bs] if n_train > bs and n_train % bs else []
    val = [n for n in dict.fromkeys((bs if n_val >= bs else 0, n_val % bs)) if n]
    return train, val


def run_job(conn, job: dict, extra_callbacks=(), state: JobState | None = None) -> str:
    """Train one job and send its events; the last one is ``finished(reason)``.

    Parameters
    ----------
    conn : Connection
    job : dict
        ``model`` (bytes of :func:`workbench.core.train.launch.training_process.encode_model`),
        ``factories`` (``{module name: file}`` to import before unpickling),
        ``config`` (``TrainConfig.to_dict()``), ``arch`` (dict or None),
        ``resume`` (path or None), ``callbacks`` (list of ``{"factory", "kwargs"}``),
        ``threads`` (intra-op threads, or None for every core).
    extra_callbacks : sequence of Callback
        Added to the run as they are (a data-parallel rank 0's heartbeat reporter).
    state : JobState, optional
        Filled in as the run is built, so another thread can stop it (the parent watch).

    Returns
    -------
    str
        The end reason.
    """
    import torch

    from workbench.core.model.spec import ArchSpec
    from workbench.core.model.wire import module_from_bytes
    from workbench.core.model.example_input import example_input
    from workbench.core.train.config import TrainConfig
    from workbench.core.train.trainer.control import RunControl
    from workbench.core.train.entry import make_trainer, save_last
    from workbench.core.train.events import EventBridge, Finished

    state = state if state is not None else JobState()
    send = _Sender(conn, state.log_path)
    control = state.control = RunControl()
    bridge = EventBridge(send, sync_state=True)
    flags = state.flags
    extra: list = []
    reason = "error"
    trainer = None
    if job.get("threads"):
        torch.set_num_threads(int(job["threads"]))
    try:
        for name, path in (job.get("factories") or {}).items():
            import_file(name, path)
        for index, spec in enumerate(job.get("callbacks") or []):
            extra.append(_build_callback(spec, index, send))
        reader = threading.Thread(target=_read, args=(conn, control, extra, flags), name="commands", daemon=True)
        reader.start()
        model = module_from_bytes(job["model"], trust=True)  # the window pickled its own model
        config = TrainConfig.from_dict(job["config"])
        callbacks = [bridge, *extra, *extra_callbacks]
        arch = ArchSpec.from_dict(job["arch"]) if job.get("arch") else None
        trainer = state.trainer = make_trainer(model, config, callbacks, arch, control=control,
                                               resume=job.get("resume"))
        reason = trainer.fit()
        if reason == "stopped" and flags["save_last"]:
            path = save_last(trainer)
            if path is not None:
                print(f"saved {path}")
        if state.orphaned.is_set() or flags.get("window_gone"):  # the window's process ended: status.json says so
            mark_unfinished(getattr(trainer, "run_dir", None), stopped=True)
    except BaseException:  # noqa: BLE001 - the process's top: report, end cleanly
        bridge.report_error(traceback.format_exc())
        reason = "error"
    send(Finished(reason))
    return reason


def _build_callback(spec: dict, index: int, send):
    """``Class(sink, **kwargs)`` for ``{"factory": "pkg.mod:Class", "kwargs": ...}``; sink data goes back as events."""
    from workbench.core.contrib import resolve
    from workbench.core.train.events import Sink

    cls = resolve("probe", spec["factory"])  # the window made this spec (no file named it): no trust question
    return cls(lambda data: send(Sink(index, data)), **spec.get("kwargs", {}))


def _read(conn, control, callbacks: list, flags: dict) -> None:
    """Reader thread: the window's messages to the run's control; EOF (window gone) stops the run and saves."""
    while True:
        try:
            msg = conn.recv()
        except (EOFError, OSError):
            flags["window_gone"] = True  # read before the parent watch may have looked
            stop_and_save(control, flags)
            return
        kind = msg[0]
        if kind == "control":
            _, method, args = msg
            getattr(control, method)(*args)
        elif kind == "callback":
            _, index, method, args = msg
            getattr(callbacks[index], method)(*args)
        elif kind == "stop_and_save":
            stop_and_save(control, flags)


def import_file(name: str, path: str) -> None:
    """Import ``path`` as module ``name`` (a ``file.py:callable`` architecture the pickle refers to), inside its
    package when ``name`` is dotted (relative imports work: :func:`workbench.core.contrib.import_file_module`)."""
    from workbench.core.contrib import import_file_module

    import_file_module(name, path)


def _redirect_output(log_path: str | None) -> None:
    """Send fd 1 and 2 (Python's and native code's output) to ``log_path``."""
    if not log_path:
        return
    fd = os.open(log_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    os.dup2(fd, 1)
    os.dup2(fd, 2)
    os.close(fd)
    sys.stdout = open(1, "w", buffering=1, closefd=False)  # noqa: SIM115 - lives as long as the process
    sys.stderr = open(2, "w", buffering=1, closefd=False)  # noqa: SIM115
