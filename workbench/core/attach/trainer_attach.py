"""A headless run a window can attach to: :class:`TrainerAttach`, a Trainer callback.

``workbench train RUN.toml`` adds it (``--no-attach`` leaves it out): when the
fit starts, rank 0 listens as a script that called :func:`workbench.attach`
does (:class:`~workbench.core.attach.server.AttachServer`: ``127.0.0.1``, a free
port unless one is given, a per-run token, a discovery file so the window's
File > Attach lists it) and prints the address and token once. The Trainer's
hooks become the events a window takes
(:class:`~workbench.core.train.events.EventBridge`; step metrics in batches
every :data:`~workbench.core.attach.script.EMIT_S`); a window's commands are
read by :func:`~workbench.core.attach.commands_in.read_command` (the checks an
attached script makes) and queued on the Trainer's
:class:`~workbench.core.train.trainer.control.RunControl`, so they apply at its
next step boundary, are written to ``edits.jsonl`` and come back as
``CommandApplied``. A pause is a lease (:mod:`.lease`), as for scripts. The
window's live probes run in the Trainer (the same
:class:`~workbench.core.probe.callback.ProbeCallback`), their reports sent back.
At the end of the fit the window gets ``Finished``, the server closes and the
discovery file is removed. Qt-free.
"""

from __future__ import annotations

import logging
import os
import secrets
import sys
import threading
import time
from typing import Any, Callable

import torch

from workbench.core.attach.commands_in import read_command, steer_control
from workbench.core.attach.discovery import remove_discovery, write_discovery
from workbench.core.attach.lease import PAUSE_LEASE_S, PauseLease, check_lease
from workbench.core.attach.probe_hooks import call_probes
from workbench.core.attach.notice import Notice
from workbench.core.attach.script import EMIT_S, PUBLISHED
from workbench.core.attach.server import AttachServer
from workbench.core.errors import TrainingError
from workbench.core.model.skeleton import describe_structure
from workbench.core.probe import callback
from workbench.core.train.events import CommandApplied, EventBridge, Finished, Metrics, RunError, Sink, pack_metrics
from workbench.core.train.trainer.commands import Call, SampleNow, SaveNow, SetLR, SetTrainable
from workbench.core.train.trainer.control import NONFINITE_ACTIONS
from workbench.core.train.trainer.hooks import Callback

__all__ = ["TrainerAttach"]

log = logging.getLogger("workbench.attach")

_WIRE_COMMANDS = (SetTrainable, SetLR, SaveNow, SampleNow)


def _stderr(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


class TrainerAttach(Callback):
    """Let Workbench's window see and steer a Trainer's run (``workbench train``; see the module docstring).

    Parameters
    ----------
    out : callable, optional
        Takes the one line that says where to attach (default: standard error).
    host, port : str, int
        Where to listen: ``127.0.0.1`` (this machine only; from another one through ``ssh -L``) and a
        free port (0) or the one given (``--attach-port``).
    pause_lease_s : float
        Seconds a pause outlives the last renewal of the window that holds it (:data:`~.lease.PAUSE_LEASE_S`).
    pause_lease : {"resume", "hold"}
        What a lapsed lease does.

    Attributes
    ----------
    address : str
        ``"host:port"`` once the fit started on rank 0 (``""`` before, and on other ranks).
    token : str
        The run's secret (also in the discovery file, readable by this user only).
    server : AttachServer or None

    Raises
    ------
    ValueError
        ``pause_lease_s`` or ``pause_lease`` is not one the lease takes.
    """

    def __init__(self, out: Callable[[str], Any] | None = None, *, host: str = "127.0.0.1", port: int = 0,
                 pause_lease_s: float = PAUSE_LEASE_S, pause_lease: str = "resume"):
        lease_s, self.lease_mode = check_lease(pause_lease_s, pause_lease)
        self.out = out or _stderr
        self.host, self.port = str(host), int(port)
        self.token = secrets.token_urlsafe(24)
        self.server: AttachServer | None = None
        self.address = ""
        self.trainer = None
        self.lease = PauseLease(lease_s, self._lease_lapsed, self._paused)
        self._bridge = EventBridge(self._publish)
        self._discovery = None
        self._rows: list[dict] = []
        self._last_emit = time.monotonic()
        self._probes: list = []
        self._error_sent = False
        self._pending: list[Callable[[], Any]] = []  # data-parallel: the probes' changes for the training thread
        self._later_lock = threading.Lock()
        self._closed = False
        self._started = time.time()

    # ------------------------------------------------------------------ the Trainer's hooks (training thread)
    def on_fit_start(self, trainer) -> None:  # noqa: D102
        if not trainer.is_main or self.server is not None:
            return  # rank 0 alone listens in a data-parallel run
        self.trainer = trainer
        try:
            self.server = AttachServer(self.token, self._welcome, self._on_command, self._on_lost, self.host,
                                       self.port, on_renew=self.lease.renew, on_steering=self._on_steering)
        except OSError as exc:
            why = os.strerror(exc.errno) if exc.errno else str(exc)
            raise TrainingError(f"attach: cannot listen on {self.host}:{self.port} ({why}); choose another "
                                "--attach-port, or --no-attach") from None
        self.address = self.server.address
        self._last_emit = time.monotonic()
        self._bridge.on_fit_start(trainer)
        name = trainer.run_dir.name if trainer.run_dir is not None else "workbench train"
        try:
            self._discovery = write_discovery({
                "address": self.address, "host": self.host, "port": self.server.port, "token": self.token,
                "pid": os.getpid(), "name": name, "run_dir": str(trainer.run_dir), "started": self._started,
                "model": type(trainer.model).__name__})
        except OSError as exc:
            log.warning("workbench train: no discovery file (%s); attach with the address and token", exc)
        self.out(f"attach: {self.address} token {self.token} (File > Attach to a running script...; "
                 f"from another machine: ssh -L {self.server.port}:127.0.0.1:{self.server.port} HOST; "
                 "--no-attach turns this off)")

    def on_step_end(self, trainer, metrics) -> None:  # noqa: D102
        if self._pending:
            self._run_later()
        if self._probes:
            self._probe_hook("on_step_end", trainer, metrics)

    def on_after_backward(self, trainer) -> None:  # noqa: D102
        if self._probes:
            self._probe_hook("on_after_backward", trainer)

    def on_metrics(self, trainer, batch) -> None:  # noqa: D102
        if self.server is None:
            return
        self._rows.extend(batch)
        now = time.monotonic()
        if now - self._last_emit >= EMIT_S:
            self._flush(now)
        if self._probes:
            self._probe_hook("on_metrics", trainer, batch)

    def on_heartbeat(self, trainer) -> None:
        """Data-parallel, paused (every rank's tick): the probes the window set meanwhile."""
        if self._pending:
            self._run_later()

    def on_progress(self, trainer, text) -> None:  # noqa: D102
        self._bridge.on_progress(trainer, text)

    def on_notice(self, trainer, kind, text, file) -> None:  # noqa: D102 - a failed write: the window's status bar
        self._bridge.on_notice(trainer, kind, text, file)

    def on_epoch_end(self, trainer, metrics) -> None:  # noqa: D102
        self._flush()
        self._probe_hook("on_epoch_end", trainer, metrics)
        self._bridge.on_epoch_end(trainer, metrics)

    def on_pause(self, trainer) -> None:  # noqa: D102
        self._flush()
        self._bridge.on_pause(trainer)
        self._probe_hook("on_pause", trainer)
        if self.server is not None and self.server.steered:
            self.lease.arm()

    def on_command_applied(self, trainer, command) -> None:  # noqa: D102
        if isinstance(command, _WIRE_COMMANDS):
            self._flush()
            self._bridge.on_command_applied(trainer, command)

    def handles_nonfinite(self) -> bool:
        """Only while a window steers: a headless run nobody watches ends on a non-finite loss, as before."""
        return self.server is not None and self.server.steered

    def on_nonfinite(self, trainer, step, loss) -> None:  # noqa: D102
        self._flush()
        self._bridge.on_nonfinite(trainer, step, loss)

    def on_exception(self, trainer, exc, tb) -> None:  # noqa: D102
        if not self._error_sent:
            self._error_sent = True
            self._publish(RunError(tb or f"{type(exc).__name__}: {exc}"))

    def on_fit_end(self, trainer, reason) -> None:  # noqa: D102
        self.close(reason)

    def close(self, reason: str = "stopped") -> None:
        """The run ended: the last rows and ``Finished`` to the windows, stop listening, remove the discovery
        file (idempotent)."""
        if self._closed or self.server is None:
            return
        self._closed = True
        try:
            self._flush()
            self._set_probes([])
        except Exception:  # noqa: BLE001 - the end of a run is never an error of its own
            log.exception("workbench train: while closing the attach server")
        self._publish(Finished(str(reason)))
        self.lease.close()
        self.server.close()
        remove_discovery(self._discovery)
        self._discovery = None

    # ------------------------------------------------------------------ publishing
    def _publish(self, event) -> None:
        """Hand ``event`` to the windows; only what a window takes from a script crosses the socket."""
        if self.server is None or type(event) not in PUBLISHED:
            return  # ExtrasReady, StateSynced, ClassCountDiffers...: the window's own runs only
        if isinstance(event, CommandApplied) and not isinstance(event.command, _WIRE_COMMANDS):
            return
        self.server.publish(event)

    def _flush(self, now: float | None = None) -> None:
        self._last_emit = time.monotonic() if now is None else now
        if self._rows:
            rows, self._rows = self._rows, []
            self._publish(Metrics(pack_metrics(rows)))

    # ------------------------------------------------------------------ the window's probes (training thread)
    def _set_probes(self, specs: list) -> None:
        tr = self.trainer
        self._probe_hook("on_fit_end", tr, "stopped")
        self._probes = []
        for index, spec in enumerate(specs):
            cb = callback.ProbeCallback(lambda reports, i=index: self._publish(Sink(i, reports)), **spec)
            try:
                cb.on_fit_start(tr)
            except Exception as exc:  # noqa: BLE001 - a probe that cannot start is left out
                log.warning("workbench train: a probe could not start: %s: %s", type(exc).__name__, exc)
                continue
            self._probes.append(cb)

    def _call_probe(self, index: int, method: str, args: list) -> None:
        if 0 <= index < len(self._probes):
            try:
                getattr(self._probes[index], method)(*args)
            except Exception as exc:  # noqa: BLE001 - a probe the window asked for is never the run's end
                log.warning("workbench train: probe %s not changed: %s", method, exc)

    def _probe_hook(self, hook: str, *args) -> None:
        """Call ``hook`` on every probe; one that raises is logged and removed (never the run's end)."""
        call_probes(self._probes, hook, args, state=self.trainer, log=log, who="workbench train")

    # ------------------------------------------------------------------ the server's threads
    def _paused(self) -> bool:
        return self.trainer is not None and self.trainer.control.is_paused

    def _welcome(self) -> dict:
        tr = self.trainer
        opt = tr.optimizer
        return {"name": tr.run_dir.name if tr.run_dir is not None else "workbench train", "pid": os.getpid(),
                "address": self.address, "run_dir": str(tr.run_dir), "model": describe_structure(tr.model),
                "model_class": type(tr.model).__name__, "step": int(tr.step), "epoch": int(tr.epoch),
                "paused": tr.control.is_paused, "stopping": tr.control.stop_requested,
                "pause_lease_s": self.lease.seconds, "pause_lease": self.lease_mode,
                "problems": tr.checkpoints.writes.problems(),  # a write failing now (a full disk)
                "lrs": [float(g["lr"]) for g in opt.param_groups] if opt is not None else [],
                "device": str(tr.device), "torch": torch.__version__, "headless": True}

    def _on_command(self, msg: dict, steering: bool) -> str | None:
        cmd = read_command(msg, steering)
        if isinstance(cmd, str):
            return cmd
        tr = self.trainer
        c = tr.control
        if isinstance(cmd.command, SetLR) and cmd.command.group is not None:
            n = len(tr.optimizer.param_groups) if tr.optimizer is not None else 0
            if cmd.command.group >= n:  # refused here: the Trainer would end the run on it
                return f"param group {cmd.command.group} does not exist (the run has {n})"
        if cmd.op == "resume":
            self.lease.disarm()
        if steer_control(c, cmd):
            return None
        if cmd.op == "resolve_nonfinite":
            if cmd.action not in NONFINITE_ACTIONS:
                return f"a headless run can {', '.join(NONFINITE_ACTIONS)} after a non-finite loss"
            c.resolve_nonfinite(cmd.action)
        elif cmd.op == "callbacks":
            self._later(lambda specs=cmd.probe_specs: self._set_probes(specs))
        elif cmd.op == "callback":
            self._later(lambda call=cmd.call: self._call_probe(*call))  # after the callbacks queued before
        return None

    def _later(self, fn: Callable[[], Any]) -> None:
        """Run ``fn()`` on the training thread at its next step boundary, in order.

        In one process, a :class:`Call` on the run's control. A data-parallel rank 0 keeps them here
        instead (:meth:`_run_later`, at its next step's end or pause tick): the control's commands go to
        every rank (pickled by :class:`~workbench.core.train.trainer.rank_sync.RankSync`), and the probes
        are rank 0's alone."""
        tr = self.trainer
        if tr.world_size > 1:
            with self._later_lock:
                self._pending.append(fn)
        else:
            tr.control.queue(Call(lambda _tr: fn()))

    def _run_later(self) -> None:
        with self._later_lock:
            todo, self._pending = self._pending, []
        for fn in todo:
            fn()

    def _on_lost(self, clean: bool) -> None:
        """The steering window went away: its probes go; a pause ends unless it detached on purpose (or
        ``pause_lease="hold"``)."""
        c = self.trainer.control
        self._later(lambda: self._set_probes([]))
        self.lease.disarm()
        if c.awaiting_decision and not self.server.steered:  # nobody is left to answer the non-finite loss
            log.warning("workbench train: the window that was to answer the non-finite loss went away; stopping")
            c.resolve_nonfinite("stop")
            return
        if not clean and c.is_paused:
            if self.lease_mode == "hold":
                log.warning("workbench train: the window that paused this run went away; still paused "
                            "(pause_lease='hold'): attach a window to resume it")
                return
            log.warning("workbench train: the window that paused this run went away; resuming")
            c.resume()

    def _on_steering(self) -> None:
        """A window steers from now on: a pause is its lease from now."""
        c = self.trainer.control
        if c.is_paused and not c.stop_requested:
            self.lease.arm()

    def _lease_lapsed(self) -> None:
        """No renewal from the steering window for the lease's seconds (the lease's thread)."""
        c = self.trainer.control
        if c.stop_requested:
            return
        hold = self.lease_mode == "hold"
        text = f"pause lease lapsed after {self.lease.seconds:g} s: " + (
            "still paused (pause_lease='hold'); the steering is free for another window" if hold else "resumed")
        log.warning("workbench train: %s", text)
        self._publish(Notice("lease_lapsed", text))
        if hold:
            self.server.release_steering(text)
        else:
            c.resume()
