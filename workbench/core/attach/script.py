"""The script's side of attaching: :func:`attach` and :class:`Attached`.

A user's own loop calls :meth:`Attached.step` after each optimizer step and
:meth:`Attached.epoch_end` after validating. That call is the step boundary:
commands a window sent (freeze, LR, pause, save now, stop, probes) apply there,
on the training thread, through the same code as Workbench's own runs
(:func:`~workbench.core.train.trainer.commands.apply_command`, the
:class:`~workbench.core.train.events.EventBridge`, the live
:class:`~workbench.core.probe.callback.ProbeCallback`, ``edits.jsonl`` and
``status.json`` of a run folder).

With no window attached a step costs a few microseconds: a row appended to a
list, a clock read, and every :data:`EMIT_S` seconds the rows packed into one
:class:`~workbench.core.train.events.Metrics` event kept in the run's bounded
history (:class:`~workbench.core.attach.server.History`). The script never
waits for a window; only a pause the user asked for blocks ``step``, and only
while the window that paused it renews its lease (:mod:`.lease`). A write that
fails (a full disk) is told to the window and logged, never raised
(:mod:`.notice`).
"""

from __future__ import annotations

import atexit
import logging
import math
import os
import secrets
import sys
import time
import traceback
from pathlib import Path
from typing import Any

import torch
from torch import nn

from workbench.core.attach.commands_in import CALLBACK_METHODS, OPS, PROBE_SETTINGS, read_command, steer_control
from workbench.core.attach.ddp_guard import DDPGuard
from workbench.core.attach.discovery import remove_discovery, write_discovery
from workbench.core.attach.lease import PAUSE_LEASE_S, PauseLease, check_lease
from workbench.core.attach.probe_hooks import call_probes
from workbench.core.attach.notice import Notice, WriteReporter
from workbench.core.attach.server import AttachServer
from workbench.core.attach.script_run import ScriptRun
from workbench.core.attach.script_values import distributed, output_sum, read_tensors, unwrap_optimizer
from workbench.core.attach.wire import register
from workbench.core.train.trainer.edit_log import EditLog
from workbench.core.model.skeleton import describe_structure
from workbench.core.probe import activations, cadence, callback, gradients, health, layer_stats, stats
from workbench.core.train.events import (CommandApplied, EpochEnded, Finished, FitStarted, Metrics, NonFinite,
                                         Paused, ProgressText, RunError, Sink, pack_metrics, plain)
from workbench.core.train.runs.folder import MetricsCSV, StepsCSV, new_run_dir, write_status
from workbench.core.train.trainer.commands import SampleNow, SaveNow, SetLR, SetTrainable, apply_command
from workbench.core.train.trainer.control import RunControl
from workbench.core.train.trainer.nan_trace import trace_nonfinite
from workbench.core.train.trainer.optim import set_group_lr
from workbench.core.train.trainer.rank_sync import RankSync

__all__ = ["attach", "Attached", "PUBLISHED", "EMIT_S", "AWAY_STEPS", "AWAY_S", "PROBE_SETTINGS", "CALLBACK_METHODS", "OPS"]

log = logging.getLogger("workbench.attach")

#: The events a script publishes; with the commands they carry and the probes' reports, the dataclasses
#: the socket rebuilds (:func:`~workbench.core.attach.wire.register`): no other type crosses it.
PUBLISHED = (FitStarted, Metrics, ProgressText, EpochEnded, CommandApplied, NonFinite, RunError, Paused, Sink, Finished,
             Notice)
register(*PUBLISHED, SetTrainable, SetLR, SaveNow, SampleNow)
register(callback.ProbeReport, activations.ActivationStats, cadence.CadencePlan, gradients.GradNorms,
         gradients.LayerNorm, health.Badge, health.HealthThresholds, layer_stats.LayerSnapshot, stats.Histogram)

#: Seconds between two metric batches: 4 a second, as the runs a window starts (the training panel's
#: ``METRICS_MS``; its curves redraw at 2 Hz). Each batch wakes the script's sending thread and the
#: window's reader and GUI threads: at 25 a second the attached window took ~2x the CPU on the cores
#: the script trains on (``benchmarks/bench_attach.py``). A loss left on a GPU is read at a batch, so a
#: non-finite one is seen up to this long after its step (the trace then runs on the newest batch).
EMIT_S = 0.25
#: A gap between two steps longer than this many typical steps and :data:`AWAY_S` seconds is not training time
#: for the probes' budget (the script was doing something else).
AWAY_STEPS = 20
AWAY_S = 0.5


class _Callbacks:
    """Replace the window's probe callbacks (applied on the training thread)."""

    def __init__(self, specs: list):
        self.specs = specs


class _CallbackCall:
    """``probes[index].method(*args)``, queued behind a :class:`_Callbacks` sent just before it."""

    def __init__(self, index: int, method: str, args: list):
        self.index, self.method, self.args = index, method, args


def attach(model: nn.Module, optimizer=None, *, scheduler=None, run_dir=None, name: str | None = None,
           host: str = "127.0.0.1", port: int = 0, pause_lease_s: float = PAUSE_LEASE_S,
           pause_lease: str = "resume") -> "Attached":
    """Let Workbench's window see and steer this script's training (see :class:`Attached`).

    Parameters
    ----------
    model : nn.Module
        The model the loop trains (freezing goes through its parameters).
    optimizer : torch.optim.Optimizer, optional
        LR changes go through its ``param_groups``.
    scheduler : LRScheduler, optional
        Its reference LRs follow an LR change.
    run_dir : str or Path, optional
        The run folder (``edits.jsonl``, ``status.json`` marked ``attached``, ``metrics.csv`` of the epochs,
        ``steps.csv`` of the steps, saves; no ``run.toml``: the script is its own replay);
        default: a new folder under Workbench's runs folder.
    name : str, optional
        Shown in the window's list (default: the script's file name).
    host, port : str, int
        Where to listen: ``127.0.0.1`` (this machine only; reach it from another
        machine with ``ssh -L``) and a free port.
    pause_lease_s : float
        Seconds a pause outlives the last renewal of the window that holds it
        (:data:`~workbench.core.attach.lease.PAUSE_LEASE_S`): a window that went to sleep never
        keeps the run paused for longer.
    pause_lease : {"resume", "hold"}
        What a lapsed lease does: resume the training, or keep the pause and let another window steer.

    Returns
    -------
    Attached

    Raises
    ------
    TypeError
        ``model`` is not an ``nn.Module``.
    ValueError
        ``pause_lease_s`` or ``pause_lease`` is not one the lease takes.
    OSError
        The address cannot be bound or the run folder written.
    """
    return Attached(model, optimizer, scheduler=scheduler, run_dir=run_dir, name=name, host=host, port=port,
                    pause_lease_s=pause_lease_s, pause_lease=pause_lease)


class Attached:
    """A script's training, open to Workbench's window (:func:`attach`; a context manager).

    Attributes
    ----------
    address : str
        ``"host:port"`` the window connects to.
    token : str
        The run's secret (also in the discovery file, readable by this user only).
    run_dir : Path
    state : ScriptRun
        What the steering parts act on: the model, optimizer, control, run folder and step.
    ddp_guard : DDPGuard or None
        Set by :meth:`use_ddp`: what the script's ``DistributedDataParallel`` wrapper can follow.
    lease : PauseLease
        The pause lease of the steering window (rank 0; ``pause_lease_s``, ``pause_lease`` of :func:`attach`).
    writes : WriteReporter
        The run files that fail to be written now (told to the window).
    """

    def __init__(self, model: nn.Module, optimizer=None, *, scheduler=None, run_dir=None, name=None,
                 host: str = "127.0.0.1", port: int = 0, pause_lease_s: float = PAUSE_LEASE_S,
                 pause_lease: str = "resume"):
        if not isinstance(model, nn.Module):
            raise TypeError(f"workbench.attach needs the nn.Module being trained, not {type(model).__name__}")
        lease_s, self.lease_mode = check_lease(pause_lease_s, pause_lease)
        optimizer = unwrap_optimizer(optimizer)
        self.name = name or Path(sys.argv[0] or "python").stem or "script"
        rank, world = distributed()
        self.rank = rank
        if rank == 0:
            self.run_dir = Path(run_dir) if run_dir is not None else new_run_dir(name=None)
            self.run_dir.mkdir(parents=True, exist_ok=True)
        else:  # rank 0 alone writes the run folder and listens; the others follow it (RankSync)
            self.run_dir = Path(run_dir) if run_dir is not None else Path(".")
        self.control = RunControl()
        self.state = ScriptRun(model, optimizer, scheduler, self.run_dir, self.control, self.name,
                               rank=rank, world_size=world, apply_one=self.apply_one, lockstep_paused=self.on_pause)
        self.sync = RankSync(self.state) if world > 1 else None
        self.writes = WriteReporter(self._publish)
        if self.state.edit_log is not None:  # a full disk never ends the script from a freeze or a pause
            self.state.edit_log = EditLog(self.run_dir, self.writes)  # a full disk: reported, never raised
        self.lease = PauseLease(lease_s, self._lease_lapsed, lambda: self.control.is_paused)
        self._lapsed: str | None = None  # the line of a lease that lapsed, for the resume's edit log entry
        try:
            self._device = next(model.parameters()).device
        except StopIteration:
            self._device = torch.device("cpu")
        self._last_batch: Any = None  # the latest batch given to step() (for the NaN trace)
        self.token = secrets.token_urlsafe(24)
        self._t0 = time.perf_counter()
        self._started = time.time()
        self._rows: list[dict] = []
        self._device_losses = False
        self._last_emit = self._t0
        self._pending = False
        self._probes: list = []
        self._last_step_t = time.perf_counter()
        self._step_s: float | None = None  # a typical step's seconds while probes run (an average)
        self._grad_hook = None
        self._epoch_loss = [0.0, 0]
        self._bad_loss = False
        self._closed = False
        self.ddp_guard: DDPGuard | None = None
        self.server: AttachServer | None = None
        self.address = ""
        self._discovery = None
        self._steps: StepsCSV | None = None  # steps.csv: the step rows (rank 0), as a Workbench run writes them
        if rank != 0:
            return
        self._csv = MetricsCSV(self.run_dir / "metrics.csv")
        self._steps = StepsCSV(self.run_dir / "steps.csv")
        write_status(self.run_dir, None, self._started,
                     {"model": type(model).__name__, "dataset": self.name, "attached": True})
        self.server = AttachServer(self.token, self._welcome, self._on_command, self._on_lost, host, port,
                                   on_renew=self.lease.renew, on_steering=self._on_steering)
        self.address = self.server.address
        self._publish(FitStarted({"epoch": 0, "step": 0, "epochs": 0, "run_dir": str(self.run_dir),
                                  "data_note": f"attached script {self.name}", "history": []}))
        try:
            self._discovery = write_discovery({
                "address": self.address, "host": host, "port": self.server.port, "token": self.token,
                "pid": os.getpid(), "name": self.name, "run_dir": str(self.run_dir), "started": self._started,
                "model": type(model).__name__})
        except OSError as exc:
            self._discovery = None
            log.warning("workbench attach: no discovery file (%s); attach with the address and token", exc)
        print(f"workbench: attach to this run at {self.address} with token {self.token} "
              f"(File > Attach to a running script...)", file=sys.stderr, flush=True)
        atexit.register(self.close)
        self._hook_excepthook()

    # ------------------------------------------------------------------ the script's calls
    @property
    def should_stop(self) -> bool:
        """True once the window said Stop: end the loop cleanly, then :meth:`close`.

        Data-parallel: once every rank agreed on it (:class:`RankSync`), at the same step on all of them; rank
        0's own flag comes earlier when the Stop arrives between two agreements, and a rank 0 that left
        then would leave the others waiting in their next all-reduce.
        """
        if self.sync is not None:
            return self.sync.stop
        return self.control.stop_requested

    def step(self, loss=None, *, batch: Any = None, **metrics) -> None:
        """One optimizer step is done: record ``loss`` and ``metrics``; apply the window's commands.

        Parameters
        ----------
        loss : Tensor or float, optional
            The step's training loss (a 0-d tensor is read in batches, one device sync every :data:`EMIT_S`).
        batch : object, optional
            The step's batch (``(inputs, targets)``, a dict of tensors, a tensor): with it, a
            non-finite loss is traced to the first module that produced a NaN/Inf, by re-running
            the batch on the weights as they are now (after a step that already spread NaN into
            every weight, that is the first module).
        **metrics : float or 0-d Tensor
            More per-step values to plot (``acc=...``).
        """
        tr = self.state
        tr.step = step = tr.step + 1
        if isinstance(loss, torch.Tensor):
            loss = loss.detach()
            if loss.device.type == "cpu":
                loss = float(loss)
            else:
                self._device_losses = True
        row = {"step": step, "loss": loss, **metrics}
        self._rows.append(row)
        if batch is not None:
            self._last_batch = batch
        if isinstance(loss, float) and not math.isfinite(loss):
            self._nonfinite(step, loss)
        if self._probes:
            self._away_check(tr)
            self._probe_hook("on_step_end", tr, row)
        if self.sync is not None:  # every rank applies rank 0's commands, pause and stop at this same step
            self._rank_step(row)
            return
        now = time.perf_counter()
        if now - self._last_emit >= EMIT_S:
            self._flush(now)
        if self._pending or self.control.is_paused:
            self._boundary()

    def _away_check(self, tr) -> None:
        """A gap since the last step far longer than a step (the script validated or saved without telling,
        or ran other work): not training time, so the probes' budget does not count it, as an epoch end's
        validation is not counted in Workbench's own runs (the probes' ``on_pause``)."""
        now = time.perf_counter()
        gap, self._last_step_t = now - self._last_step_t, now
        if self._step_s is not None and gap > max(AWAY_S, AWAY_STEPS * self._step_s):
            self._probe_hook("on_pause", tr)
        else:
            self._step_s = gap if self._step_s is None else self._step_s + 0.1 * (gap - self._step_s)

    def _rank_step(self, row: dict) -> None:
        """Data-parallel: one all-reduce of the loss and rank 0's flags (:class:`RankSync`), then the boundary."""
        loss = row["loss"]
        value = loss if isinstance(loss, torch.Tensor) else torch.tensor(
            float(loss) if isinstance(loss, (int, float)) else math.nan, device=self._device)
        mean, _ = self.sync.reduce(value.float().reshape(()), 1, deferred=value.device.type == "cuda")
        row["loss"] = mean  # the curve shows the mean over the ranks
        now = time.perf_counter()
        if now - self._last_emit >= EMIT_S:
            self._flush(now)
        self.sync.boundary()

    def epoch_end(self, **val_metrics) -> None:
        """An epoch ended: ``val_loss=...``, ``val_acc=...`` and any other numbers, one row of ``metrics.csv``."""
        self._flush(time.perf_counter())
        tr = self.state
        if self.rank != 0:
            tr.epoch += 1
            return
        total, count = self._epoch_loss
        m = {"epoch": tr.epoch, "step": tr.step, "train_loss": total / count if count else math.nan,
             "lr": tr.lr, "time": time.perf_counter() - self._t0}
        for k, v in val_metrics.items():
            m[k] = float(v.detach().float().mean()) if isinstance(v, torch.Tensor) else plain(v)
        tr.history.append(m)
        try:
            self._csv.append(m)
        except OSError as exc:  # the row stays in memory: the next epoch's write carries it
            self.writes.failed(self._csv.path, exc)
        else:
            self.writes.ok(self._csv.path)
        self._probe_hook("on_epoch_end", tr, m)
        self._publish(EpochEnded(dict(m)))
        tr.epoch += 1
        self._epoch_loss = [0.0, 0]
        if self.sync is None and (self._pending or self.control.is_paused):
            self._boundary()

    def close(self, reason: str | None = None) -> None:
        """The run ended: final metrics, ``status.json``, ``Finished`` to the windows, stop listening (idempotent)."""
        if self._closed:
            return
        self._closed = True
        atexit.unregister(self.close)
        ours = getattr(self, "_excepthook", None)
        if ours is not None and sys.excepthook is ours[0]:
            sys.excepthook = ours[1]  # the closure holds this object (the model): let both go
        try:
            self._flush(time.perf_counter())
            self._set_probes([])
        except Exception:  # noqa: BLE001 - the end of a run is never an error of its own
            log.exception("workbench attach: while closing")
        reason = reason or ("stopped" if self.control.stop_requested else "completed")
        if self.server is None:
            return
        try:
            write_status(self.run_dir, reason, self._started, {"model": type(self.state.model).__name__,
                                                               "dataset": self.name, "attached": True})
        except OSError:
            pass
        self._publish(Finished(reason))
        self.lease.close()
        self.server.close()
        remove_discovery(self._discovery)

    @property
    def step_count(self) -> int:
        """Steps reported so far."""
        return self.state.step

    def __enter__(self) -> "Attached":
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        if exc is not None and not isinstance(exc, KeyboardInterrupt):
            self._publish(RunError("".join(traceback.format_exception(exc_type, exc, tb))))
            self.close("error")
        else:
            self.close("stopped" if exc is not None else None)

    def _hook_excepthook(self) -> None:
        """An uncaught exception ends the script: the run ends ``"error"`` with its traceback (not ``"completed"``
        at exit); the previous hook runs as before."""
        previous = sys.excepthook

        def hook(exc_type, exc, tb):
            if not self._closed:
                if issubclass(exc_type, KeyboardInterrupt):
                    self.close("stopped")
                else:
                    self._publish(RunError("".join(traceback.format_exception(exc_type, exc, tb))))
                    self.close("error")
            previous(exc_type, exc, tb)

        sys.excepthook = hook
        self._excepthook = (hook, previous)

    # ------------------------------------------------------------------ the training thread
    def _publish(self, event) -> None:
        if self.server is not None:
            self.server.publish(event)

    def flush(self, now: float | None = None) -> None:
        """Send the step rows so far as one ``Metrics`` event (``now``: ``time.perf_counter()``, default: now)."""
        self._flush(time.perf_counter() if now is None else now)

    def _flush(self, now: float) -> None:
        self._last_emit = now
        rows, self._rows = self._rows, []
        if not rows:
            return
        if self._device_losses:
            self._device_losses = False
            idx = [i for i, r in enumerate(rows) if isinstance(r["loss"], torch.Tensor)]
            if idx:
                values = torch.stack([rows[i]["loss"].float().reshape(()) for i in idx]).tolist()
                for i, v in zip(idx, values):
                    rows[i]["loss"] = v
                    if not math.isfinite(v):
                        self._nonfinite(rows[i]["step"], v)
        tr = self.state
        t = now - self._t0
        lr = tr.lr
        epoch = tr.epoch
        read_tensors(rows)  # every other tensor value of the batch in one read (one device sync)
        for r in rows:
            loss = r.get("loss")
            if isinstance(loss, (int, float)) and math.isfinite(loss):
                self._epoch_loss[0] += float(loss)
                self._epoch_loss[1] += 1
            r.setdefault("lr", lr)
            r.setdefault("time", t)
            r.setdefault("epoch", epoch)
        if self._steps is not None:
            self._steps.problem = ""  # each batch is a new try: said once while it fails, and when it works again
            self._steps.append(rows)
            if self._steps.problem:
                self.writes.failed(self._steps.path, self._steps.problem.partition(": ")[2] or self._steps.problem,
                                   "rows not written")
            else:
                self.writes.ok(self._steps.path)
        self._publish(Metrics(pack_metrics(rows)))
        self._probe_hook("on_metrics", tr, rows)

    def _nonfinite(self, step: int, loss: float) -> None:
        if self._bad_loss:
            return
        self._bad_loss = True  # once per run: the window asks what to do
        tr = self.state
        trace: dict = {}
        if self._last_batch is not None and self.rank == 0:  # a forward on one rank alone: no collective waits
            try:
                trace = trace_nonfinite(tr.model, self._last_batch, output_sum, step, exact=False).to_dict()
            except Exception as exc:  # noqa: BLE001 - the trace is a help, never the run's end
                log.warning("workbench attach: could not trace the non-finite loss: %s", exc)
        self._publish(NonFinite(int(step), float(loss), trace))

    def _boundary(self) -> None:
        """Apply queued commands; block while paused (the window resumes or stops)."""
        self._pending = False
        self._apply()
        if self.control.is_paused and not self.control.stop_requested:
            self._flush(time.perf_counter())
            step = int(self.state.step)
            self._publish(Paused(step))
            self.state.edit_log.write(step, {"op": "pause"})
            self._probe_hook("on_pause", self.state)
            if self.server is not None and self.server.steered:
                self.lease.arm()
            self.control.wait_while_paused(self._apply)
            self.lease.disarm()
            why, self._lapsed = self._lapsed, None
            self.state.edit_log.write(int(self.state.step), {"op": "resume", **({"why": why} if why else {})})
            self._last_emit = time.perf_counter()

    def _apply(self) -> None:
        self._pending = False
        for cmd in self.control.take_commands():
            self.apply_one(cmd)

    def apply_one(self, cmd) -> None:
        """Apply one command on the training thread, record it in ``edits.jsonl`` and tell the windows
        (``state.apply_one``: :class:`RankSync` calls it on every rank with rank 0's commands)."""
        tr = self.state
        if isinstance(cmd, (_Callbacks, _CallbackCall)):
            if self.rank != 0:  # the probes measure rank 0's replica
                return
            try:
                if isinstance(cmd, _Callbacks):
                    self._set_probes(cmd.specs)
                elif 0 <= cmd.index < len(self._probes):
                    getattr(self._probes[cmd.index], cmd.method)(*cmd.args)
            except Exception as exc:  # noqa: BLE001 - a probe the window asked for is never the script's end
                log.warning("workbench attach: probes not changed: %s", exc)
            return
        try:
            if isinstance(cmd, SetTrainable) and self.ddp_guard is not None:
                self.ddp_guard.check(tr.model, cmd.name_list(), cmd.flag)
            if isinstance(cmd, SetLR):
                if tr.optimizer is None:
                    raise ValueError("the script attached no optimizer")
                set_group_lr(tr.optimizer, tr.scheduler, cmd.lr, cmd.group)
            elif isinstance(cmd, SaveNow):
                self._flush(time.perf_counter())
                apply_command(tr, cmd)
            else:
                apply_command(tr, cmd)
        except Exception as exc:  # noqa: BLE001 - a command that cannot apply is reported, never fatal
            log.warning("workbench attach: %s not applied: %s", type(cmd).__name__, exc)
            if isinstance(cmd, SaveNow):
                where = str(cmd.path or tr.run_dir / "last.pt")
                self._publish(Notice("save_failed", f"Save now failed: {exc}"[:2000], where))
            elif not isinstance(cmd, SetTrainable):
                self._publish(Notice("command_failed", f"{type(cmd).__name__} not applied: {exc}"[:2000]))
            if not isinstance(cmd, SetTrainable):
                return
            cmd.error = str(exc)
        if tr.edit_log is not None:
            tr.edit_log.command(tr.step, cmd)
        self._publish(CommandApplied(cmd, int(tr.step), float(tr.epoch)))

    def use_ddp(self, wrapper: nn.Module) -> None:
        """The script's ``DistributedDataParallel`` wrapper of the model, just built: from now on a freeze it cannot
        follow (built without ``find_unused_parameters=True``) or an unfreeze of a parameter it does not average is
        refused with a message (the window shows it) instead of stopping or splitting the ranks.

        Parameters
        ----------
        wrapper : torch.nn.parallel.DistributedDataParallel
        """
        self.ddp_guard = DDPGuard(wrapper, self.state.model)

    def on_pause(self) -> None:
        """Data-parallel: the ranks pause in lockstep at this step (:class:`RankSync`): say so, like a pause of one process."""
        self._flush(time.perf_counter())
        self._publish(Paused(int(self.state.step)))
        self._probe_hook("on_pause", self.state)
        if self.server is not None and self.server.steered:
            self.lease.arm()

    def _set_probes(self, specs: list) -> None:
        self._probe_hook("on_fit_end", self.state, "stopped")
        self._probes = []
        if self._grad_hook is not None:
            self._grad_hook.remove()
            self._grad_hook = None
        for index, spec in enumerate(specs):
            cb = callback.ProbeCallback(lambda reports, i=index: self._publish(Sink(i, reports)), **spec)
            try:
                cb.on_fit_start(self.state)
            except Exception as exc:  # noqa: BLE001 - a probe that cannot start is left out
                log.warning("workbench attach: a probe could not start: %s: %s", type(exc).__name__, exc)
                continue
            self._probes.append(cb)
        opt = self.state.optimizer
        if self._probes and isinstance(opt, torch.optim.Optimizer):
            # the optimizer's step is where the gradients of the step are whole (after backward,
            # before the update and zero_grad): the probes' on_after_backward
            try:
                self._grad_hook = opt.register_step_pre_hook(lambda *_: self._after_backward())
            except Exception as exc:  # noqa: BLE001 - no gradient probes, never the script's end
                log.warning("workbench attach: gradient probes unavailable (%s)", exc)

    def _after_backward(self) -> None:
        self._probe_hook("on_after_backward", self.state)

    def _probe_hook(self, hook: str, *args) -> None:
        """Call ``hook`` on every probe callback; one that raises is logged and removed (never the script's end)."""
        call_probes(self._probes, hook, args, state=self.state, log=log, who="workbench attach", traceback_text="")

    # ------------------------------------------------------------------ the server's threads
    def _welcome(self) -> dict:
        tr = self.state
        opt = tr.optimizer
        return {"name": self.name, "pid": os.getpid(), "address": self.address, "run_dir": str(self.run_dir),
                "model": describe_structure(tr.model), "model_class": type(tr.model).__name__,
                "step": tr.step, "epoch": tr.epoch, "paused": self.control.is_paused,
                "stopping": self.control.stop_requested, "pause_lease_s": self.lease.seconds,
                "pause_lease": self.lease_mode, "problems": self.writes.problems(),
                "lrs": [float(g["lr"]) for g in opt.param_groups] if opt is not None else [],
                "device": str(self._device), "torch": torch.__version__}

    def _on_command(self, msg: dict, steering: bool) -> str | None:
        cmd = read_command(msg, steering)
        if isinstance(cmd, str):
            return cmd
        c = self.control
        if steer_control(c, cmd):
            pass
        elif cmd.op == "resolve_nonfinite":
            if cmd.action == "stop":
                c.request_stop()
            elif cmd.action == "lower_lr":
                c.queue(SetLR(self.state.lr / 10))
            elif cmd.action != "continue":
                return "an attached script can stop, lower the LR or continue (no rollback)"
            self._bad_loss = False
        elif cmd.op == "callbacks":
            c.queue(_Callbacks(cmd.probe_specs))
        elif cmd.op == "callback":
            c.queue(_CallbackCall(*cmd.call))  # after the callbacks queued before it
        self._pending = True
        return None

    def _on_lost(self, clean: bool) -> None:
        """The steering window went away: its probes go; a pause ends unless it detached on purpose (or
        ``pause_lease="hold"``), and no lease counts until a window steers again."""
        self.control.queue(_Callbacks([]))
        self._pending = True
        self.lease.disarm()
        if not clean and self.control.is_paused:
            if self.lease_mode == "hold":
                log.warning("workbench attach: the window that paused this run went away; still paused "
                            "(pause_lease='hold'): attach a window to resume it")
                return
            log.warning("workbench attach: the window that paused this run went away; resuming")
            self._lapsed = "the window that paused the run went away"
            self.control.resume()

    def _on_steering(self) -> None:
        """A window steers from now on (attached, or took over): a pause is its lease from now."""
        if self.control.is_paused and not self.control.stop_requested:
            self.lease.arm()

    def _lease_lapsed(self) -> None:
        """No renewal from the steering window for the lease's seconds (the lease's thread)."""
        if self.control.stop_requested:
            return
        hold = self.lease_mode == "hold"
        text = f"pause lease lapsed after {self.lease.seconds:g} s: " + (
            "still paused (pause_lease='hold'); the steering is free for another window" if hold else "resumed")
        log.warning("workbench attach: %s", text)
        self._publish(Notice("lease_lapsed", text))  # before the steering window is told it is read-only
        if hold:
            self.server.release_steering(text)
        else:
            self._lapsed = text
            self.control.resume()

