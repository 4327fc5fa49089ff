"""Nothing outlives its owner: a process that notices when the process that started it ends.

A training process (the window's child), torchrun (the launcher's child) and
each rank (torchrun's child) end when their parent ends, however it ends (a
SIGKILL included). :class:`ParentWatch` calls a function once, from its own
daemon thread, when that happens; the caller decides how to end (a training
process stops its run, saves ``last.pt`` and writes ``status.json`` within a
bounded time; torchrun sends itself SIGTERM, so it ends its ranks).

Two ways to notice, because neither alone is enough:

* Linux ``prctl(PR_SET_PDEATHSIG)`` (through ``ctypes``: the standard library
  has no binding) makes the kernel send :data:`WAKE_SIGNAL` at once. It fires
  when the *thread* that forked this process ends, not the process: the window
  may start a process from a QThread that ends long before the window does. So
  the signal only wakes the watch, which then checks.
* The check itself: ``os.getppid()`` differs from the parent's pid (the kernel
  re-parents an orphan to init or a subreaper at once). Polled every
  :data:`POLL_S`, it works on every POSIX system and from any thread.

Python runs a signal handler and the watch thread only when the interpreter
can take the GIL. A step hung in native code *holding* the GIL (rare: torch
releases it in its kernels and waits) is beyond any Python-level watch; once
the watch has fired, :func:`exit_later` arms faulthandler's native timer, so a
process whose ending then hangs still ends.

``python -m workbench.core.train.launch.parent_watch MODULE ARGS...`` runs ``MODULE``
(``torch.distributed.run``) as ``__main__`` under a watch that sends the process
SIGTERM when the pid in :data:`PARENT_ENV` ends. Qt-free; no torch import.
"""

from __future__ import annotations

import contextlib
import ctypes
import faulthandler
import os
import runpy
import select
import signal
import sys
import threading
from typing import Callable, Sequence

__all__ = ["ParentWatch", "set_death_signal", "exit_later", "main", "POLL_S", "WAKE_SIGNAL", "PARENT_ENV", "AGENT_ENV",
           "AGENT_GRACE_S"]

#: Seconds between two checks of the parent.
POLL_S = 0.25
#: The signal the kernel sends when the parent (thread) ends; it only wakes the watch.
WAKE_SIGNAL = getattr(signal, "SIGUSR2", None)
#: Environment variable with the pid whose end ends the process run by :func:`main`.
PARENT_ENV = "WORKBENCH_PARENT_PID"
#: Environment variable :func:`main` sets to its own pid: the children of ``MODULE`` (torchrun's ranks)
#: watch that pid, so a torchrun that died before a rank looked is noticed too.
AGENT_ENV = "WORKBENCH_AGENT_PID"
#: Seconds torchrun may take to end its ranks after its parent ended, before it is ended itself.
AGENT_GRACE_S = 20.0
#: ``prctl`` option (linux/prctl.h).
PR_SET_PDEATHSIG = 1


def set_death_signal(sig: int) -> bool:
    """Ask the kernel to send ``sig`` to this process when the thread that started it ends (Linux).

    Parameters
    ----------
    sig : int
        Signal number.

    Returns
    -------
    bool
        True when set; False on other systems or when ``prctl`` failed.
    """
    if not sys.platform.startswith("linux"):
        return False
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        return libc.prctl(PR_SET_PDEATHSIG, int(sig), 0, 0, 0) == 0
    except (OSError, AttributeError):
        return False


def exit_later(seconds: float, note: str = "") -> None:
    """End the process after ``seconds`` even if no Python code can run then (exit status 1).

    ``faulthandler.dump_traceback_later(exit=True)``: a C thread that needs no GIL
    prints every thread's stack to stderr (the process's log: where it hung) and
    calls ``_exit(1)``. One timer per process; a later call replaces it.

    Parameters
    ----------
    seconds : float
        Delay, > 0.
    note : str
        A line printed to stderr first (why the timer was armed).
    """
    if note:
        with contextlib.suppress(Exception):
            print(note, file=sys.stderr, flush=True)
    with contextlib.suppress(Exception):
        faulthandler.dump_traceback_later(float(seconds), repeat=False, exit=True)


class ParentWatch:
    """Calls ``on_death()`` once, on its own daemon thread, when this process's parent has ended.

    Parameters
    ----------
    on_death : callable
        Called with no argument; may end the process (``os._exit``).
    parent_pid : int, optional
        The parent's pid as the parent knows it (passed down by the parent: a parent
        that died before this process looked is noticed too). Default: ``os.getppid()`` now.
    poll_s : float
        Seconds between two checks.

    Attributes
    ----------
    fired : threading.Event
        Set once the parent was found gone (before ``on_death`` is called).
    death_signal : bool
        ``prctl(PR_SET_PDEATHSIG)`` was set (Linux, started on the main thread).
    """

    def __init__(self, on_death: Callable[[], object], parent_pid: int | None = None, poll_s: float = POLL_S):
        self.on_death = on_death
        self.parent_pid = int(parent_pid) if parent_pid else os.getppid()
        self.poll_s = float(poll_s)
        self.fired = threading.Event()
        self.death_signal = False
        # the signal handler wakes the watch thread through a pipe, never a lock: a second signal that
        # arrives while the handler is inside threading.Event.set() re-enters the handler on the same
        # thread and would wait for ever on the Condition's lock (a rank whose torchrun was SIGKILLed
        # got three death signals in a row and hung so, inside a forward, for 45 minutes)
        self._wake_r, self._wake_w = os.pipe()
        os.set_blocking(self._wake_w, False)
        self._stopped = threading.Event()
        self._thread: threading.Thread | None = None

    def parent_alive(self) -> bool:
        """The parent has not ended (this process was not re-parented)."""
        return os.getppid() == self.parent_pid

    def start(self) -> ParentWatch:
        """Start watching (the death signal too, when called on the main thread); returns self."""
        self._arm_death_signal()
        self._thread = threading.Thread(target=self._watch, name="workbench-parent-watch", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop watching (``on_death`` is not called any more unless it already runs); on the main thread
        the death signal is cleared and the signal's handler put back."""
        self._stopped.set()
        self._wake()
        if self.death_signal and threading.current_thread() is threading.main_thread():
            set_death_signal(0)
            signal.signal(WAKE_SIGNAL, signal.SIG_DFL)
            self.death_signal = False

    def _arm_death_signal(self) -> None:
        """Handler first, then ``prctl``: the signal never finds its default action (which ends the process)."""
        if WAKE_SIGNAL is None or threading.current_thread() is not threading.main_thread():
            return  # signal handlers can only be set on the main thread: the poll alone then
        if signal.getsignal(WAKE_SIGNAL) not in (signal.SIG_DFL, None):
            return  # someone else's handler: leave it, the poll notices as well
        signal.signal(WAKE_SIGNAL, self._on_signal)
        self.death_signal = set_death_signal(WAKE_SIGNAL)
        if not self.death_signal:
            signal.signal(WAKE_SIGNAL, signal.SIG_DFL)

    def _on_signal(self, signum, frame) -> None:
        self._wake()  # the watch thread checks: the thread that forked us may simply have ended

    def _wake(self) -> None:
        """Wake the watch thread (async-signal-safe: one ``os.write``, no Python lock)."""
        try:
            os.write(self._wake_w, b"w")
        except OSError:  # the pipe is full (the thread wakes anyway) or closed
            pass

    def _watch(self) -> None:
        while not self._stopped.is_set():
            if not self.parent_alive():
                self.fired.set()
                self.on_death()
                return
            readable, _, _ = select.select([self._wake_r], [], [], self.poll_s)
            if readable:
                os.read(self._wake_r, 4096)  # every wake-up so far


def main(argv: Sequence[str] | None = None) -> None:
    """``python -m workbench.core.train.launch.parent_watch MODULE ARGS...``: run ``MODULE`` as ``__main__``,
    sending this process SIGTERM when the pid in :data:`PARENT_ENV` (default: the parent) ends.
    Its children find this process's pid in :data:`AGENT_ENV`.

    torchrun (``torch.distributed.run``) handles SIGTERM by sending it to its ranks,
    waiting for them and exiting; should that hang, the process ends
    :data:`AGENT_GRACE_S` seconds later (:func:`exit_later`).

    Raises
    ------
    SystemExit
        Usage error (no module), or the module's own exit.
    """
    args = list(sys.argv[1:] if argv is None else argv)
    if not args:
        raise SystemExit("usage: python -m workbench.core.train.launch.parent_watch MODULE [ARGS...]")
    parent = int(os.environ.get(PARENT_ENV) or 0) or None

    def end_self() -> None:
        exit_later(AGENT_GRACE_S, f"parent process {parent or ''} ended: ending {args[0]}")
        os.kill(os.getpid(), signal.SIGTERM)

    ParentWatch(end_self, parent).start()
    os.environ[AGENT_ENV] = str(os.getpid())
    sys.argv = list(args)
    runpy.run_module(args[0], run_name="__main__", alter_sys=True)


if __name__ == "__main__":
    main()
