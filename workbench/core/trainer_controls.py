"""The thread-safe controls of a :class:`~workbench.core.training.Trainer` and its step boundary.

:class:`ControlsMixin` holds stop / pause / resume / queue (callable from any
thread), the step boundary where the training thread waits while paused, and
how each queued command (:mod:`workbench.core.commands`) is applied. Qt-free.
"""

from __future__ import annotations

import queue
import time
from pathlib import Path
from typing import Any

from workbench.core import optim as _optim
from workbench.core.commands import Call, SaveNow, SetLR, SetTrainable
from workbench.core.errors import TrainingError
from workbench.core.io import atomic_save
from workbench.core.param_names import _resolve_parameter_names

__all__ = ["ControlsMixin"]


class ControlsMixin:
    """Stop, pause, resume and command queue of :class:`~workbench.core.training.Trainer`.

    Uses the trainer's ``_cond`` (a ``threading.Condition``), ``_commands`` queue
    and ``_stop`` / ``_paused`` / ``_waiting`` / ``_running`` flags, set up in
    ``Trainer.__init__``.
    """

    def request_stop(self) -> None:
        """Ask the run to stop at the next step boundary (also ends a pause)."""
        with self._cond:
            self._stop = True
            self._cond.notify_all()

    def pause(self) -> None:
        """Pause at the next step boundary (the thread waits on a condition, no spinning)."""
        with self._cond:
            self._paused = True
            self._cond.notify_all()

    def resume(self) -> None:
        """Continue after :meth:`pause` (a NaN pause needs :meth:`resolve_nonfinite`)."""
        with self._cond:
            if self._nonfinite_step is None:
                self._paused = False
            self._cond.notify_all()

    @property
    def is_paused(self) -> bool:
        """True while paused (by :meth:`pause` or waiting for a NaN decision)."""
        return self._paused

    @property
    def is_waiting(self) -> bool:
        """True while the training thread is blocked at a step boundary (paused, or awaiting a NaN decision)."""
        return self._waiting

    @property
    def is_running(self) -> bool:
        """True while :meth:`fit` runs."""
        return self._running

    def queue(self, command: Any) -> None:
        """Queue a command (:class:`SetTrainable`, :class:`SetLR`, :class:`SaveNow`, :class:`Call`).

        Applied on the training thread at the next step boundary (immediately
        when paused), then ``on_command_applied``. Before/after ``fit()`` it is
        applied at the start of the next ``fit()``; use :meth:`apply_commands`
        to apply now when no run is active.
        """
        self._commands.put(command)
        with self._cond:
            self._cond.notify_all()

    # ------------------------------------------------------------ step boundary
    def _boundary(self) -> None:
        """Apply queued commands; wait while paused (commands still apply); return on stop."""
        self.apply_commands()
        if not self._paused:
            return
        self._emit()
        with self._cond:
            self._waiting = True
            try:
                while self._paused and not self._stop:
                    if not self._commands.empty():
                        self._cond.release()
                        try:
                            self.apply_commands()
                        finally:
                            self._cond.acquire()
                        continue
                    self._cond.wait()
            finally:
                self._waiting = False
        self._window = (time.perf_counter(), self.samples)  # pause time is not throughput
        self.apply_commands()

    def apply_commands(self) -> None:
        """Apply every queued command now (the training thread calls this at step boundaries).

        Call it from another thread only while no ``fit()`` runs.
        """
        while True:
            try:
                cmd = self._commands.get_nowait()
            except queue.Empty:
                return
            self._apply(cmd)
            self._call("on_command_applied", self, cmd)

    def _apply(self, cmd: Any) -> None:
        if isinstance(cmd, SetTrainable):
            self._set_trainable(cmd)
        elif isinstance(cmd, SetLR):
            if self.optimizer is not None:
                _optim.rescale_lr(self.optimizer, self.scheduler, float(cmd.lr), self.config)
            self.config.lr = float(cmd.lr)
            self._lr_cache = float(cmd.lr)
        elif isinstance(cmd, SaveNow):
            self.prepare()
            self.wait_for_saves()  # the epoch-end write must not land after this one
            path = Path(cmd.path) if cmd.path else self.run_dir / "last.pt"
            atomic_save(self.checkpoint_payload(), path)
            cmd.saved_to = str(path)
        elif isinstance(cmd, Call):
            cmd.result = cmd.fn(self)
        else:
            raise TrainingError(f"unknown command {cmd!r}")

    def _set_trainable(self, cmd: SetTrainable) -> None:
        names = [cmd.names] if isinstance(cmd.names, str) else list(cmd.names)
        try:
            targets = _resolve_parameter_names(self.model, names)
        except KeyError as e:
            cmd.error = str(e.args[0])
            return
        params = dict(self.model.named_parameters())
        changed = []
        for n in targets:
            p = params[n]
            if p.requires_grad != cmd.flag:
                p.requires_grad_(cmd.flag)
                changed.append(n)
            if not cmd.flag:
                p.grad = None
        cmd.changed = changed
        if cmd.flag and changed and self.optimizer is not None:
            self._add_to_optimizer(changed)
        if self.model.training:
            self._apply_bn_policy()

    def _add_to_optimizer(self, names: list[str]) -> None:
        """Add a param group per role for newly trainable parameters not yet in the optimizer."""
        in_opt = {id(p) for g in self.optimizer.param_groups for p in g["params"]}
        params = dict(self.model.named_parameters())
        new = [n for n in names if id(params[n]) not in in_opt]
        if not new:
            return
        head = self.lr
        for g in _optim.param_groups(self.model, self.config, names=new):
            role = g["wb_role"]
            ref = next((x for x in self.optimizer.param_groups if x.get("wb_role") == role and x["params"]),
                       None) or next((x for x in self.optimizer.param_groups), None)
            group = {"params": g["params"], "wb_role": role, "lr": _optim.lr_for_role(role, head, self.config)}
            self.optimizer.add_param_group(group)
            _optim.adopt_group(self.optimizer, self.scheduler, self.optimizer.param_groups[-1], ref)
            self._group_names.append(list(g["wb_names"]))
