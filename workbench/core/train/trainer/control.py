"""RunControl: how other threads steer a run (stop, pause, commands, the NaN decision).

Created by whoever starts a run and passed to the
:class:`~workbench.core.train.trainer.loop.Trainer`: a thread run
(:class:`~workbench.core.train.launch.in_thread.ThreadRun`), the training process, the headless
``workbench train`` and the tests share the one object with the loop instead of
copying its state. Every method is thread-safe; the training thread calls
:meth:`RunControl.wait_while_paused` and :meth:`RunControl.wait_for_decision` at
step boundaries. One ``threading.Condition`` guards every flag. Qt-free.
"""

from __future__ import annotations

import queue
import threading
from typing import Any, Callable

__all__ = ["RunControl", "NONFINITE_ACTIONS"]

#: The answers :meth:`RunControl.resolve_nonfinite` accepts.
NONFINITE_ACTIONS = ("lower_lr", "rollback", "stop")


class RunControl:
    """Stop flag, pause flag, command queue and NaN decision of one run (thread-safe).

    A stop or pause requested before ``fit()`` starts is honoured when it starts;
    :meth:`reset` (called by the trainer when ``fit()`` ends) clears them for the
    next run. Commands queued while no run is active are applied at the start of
    the next ``fit()``.
    """

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._commands: queue.SimpleQueue = queue.SimpleQueue()
        self._stop = False
        self._paused = False
        self._waiting = False
        self._nonfinite_step: int | None = None
        self._decision: str | None = None

    # ------------------------------------------------------------ any thread
    def request_stop(self) -> None:
        """Ask the run to stop at the next step boundary (also ends a pause and a NaN wait)."""
        with self._cond:
            self._stop = True
            self._cond.notify_all()

    def pause(self) -> None:
        """Pause at the next step boundary (the training thread waits on the condition, no spinning)."""
        with self._cond:
            self._paused = True
            self._cond.notify_all()

    def resume(self) -> None:
        """Continue after :meth:`pause` (a NaN pause needs :meth:`resolve_nonfinite`)."""
        with self._cond:
            if self._nonfinite_step is None:
                self._paused = False
            self._cond.notify_all()

    def queue(self, command: Any) -> None:
        """Queue a command (:mod:`workbench.core.train.trainer.commands`) for the next step boundary."""
        self._commands.put(command)
        with self._cond:
            self._cond.notify_all()

    def resolve_nonfinite(self, action: str) -> None:
        """Answer a NaN/Inf pause: one of :data:`NONFINITE_ACTIONS`.

        Raises
        ------
        ValueError
            Unknown action.
        """
        if action not in NONFINITE_ACTIONS:
            raise ValueError(f"unknown action {action!r}; choose one of {', '.join(NONFINITE_ACTIONS)}")
        with self._cond:
            self._decision = action
            self._cond.notify_all()

    @property
    def stop_requested(self) -> bool:
        """True once :meth:`request_stop` was called (until :meth:`reset`)."""
        return self._stop

    @property
    def is_paused(self) -> bool:
        """True while paused (by :meth:`pause` or waiting for a NaN decision)."""
        return self._paused

    @property
    def awaiting_decision(self) -> bool:
        """True while a non-finite loss waits for :meth:`resolve_nonfinite` (between :meth:`begin_nonfinite` and
        the answer)."""
        return self._nonfinite_step is not None

    @property
    def is_waiting(self) -> bool:
        """True while the training thread is blocked at a step boundary."""
        return self._waiting

    def wait_until_blocked(self, timeout: float | None = None) -> bool:
        """Block the caller until the training thread waits at a step boundary (paused / NaN decision).

        Parameters
        ----------
        timeout : float, optional
            Seconds; None waits for ever.

        Returns
        -------
        bool
            True when the training thread is blocked; False after ``timeout``.
        """
        with self._cond:
            return self._cond.wait_for(lambda: self._waiting, timeout)

    # ------------------------------------------------------------ training thread
    def take_commands(self) -> list:
        """Every queued command, oldest first (empties the queue)."""
        out = []
        while True:
            try:
                out.append(self._commands.get_nowait())
            except queue.Empty:
                return out

    def wait_while_paused(self, apply: Callable[[], None]) -> bool:
        """Block while paused; ``apply()`` runs queued commands that arrive meanwhile.

        Returns
        -------
        bool
            True when the run was paused (the caller restarts its throughput window).
        """
        if not self._paused:
            return False
        with self._cond:
            self._waiting = True
            self._cond.notify_all()  # wakes wait_until_blocked()
            try:
                while self._paused and not self._stop:
                    if not self._commands.empty():
                        self._cond.release()
                        try:
                            apply()
                        finally:
                            self._cond.acquire()
                        continue
                    self._cond.wait()
            finally:
                self._waiting = False
        return True

    def wait_for_change(self, timeout: float) -> None:
        """Block up to ``timeout`` seconds while paused with no command queued and no stop.

        A data-parallel rank 0 (:class:`~workbench.core.train.trainer.rank_sync.RankSync`) waits
        this way between the ticks that keep the other ranks in step.
        """
        with self._cond:
            self._waiting = True
            self._cond.notify_all()  # wakes wait_until_blocked()
            try:
                self._cond.wait_for(lambda: not self._paused or self._stop or not self._commands.empty(), timeout)
            finally:
                self._waiting = False

    def begin_nonfinite(self, step: int) -> None:
        """Enter the NaN pause for ``step`` (before the ``on_nonfinite`` callbacks run)."""
        with self._cond:
            self._nonfinite_step = step
            self._decision = None
            self._paused = True

    def wait_for_decision(self, timeout: float | None = None) -> str | None:
        """Block until :meth:`resolve_nonfinite` (or a stop, which counts as ``"stop"``).

        With ``timeout`` (seconds): None when it passed undecided (the NaN pause goes on).
        """
        with self._cond:
            self._waiting = True
            self._cond.notify_all()  # wakes wait_until_blocked()
            decided = self._cond.wait_for(lambda: self._decision is not None or self._stop, timeout)
            self._waiting = False
            if not decided:
                return None
            action = self._decision or "stop"
            self._nonfinite_step = None
            self._decision = None
            self._paused = False
        return action

    def reset(self) -> None:
        """End of ``fit()``: clear stop, pause and a pending NaN wait (queued commands stay)."""
        with self._cond:
            self._paused = False
            self._stop = False
            self._nonfinite_step = None
            self._decision = None
            self._cond.notify_all()
