"""A run's failed writes: said once, logged, retried, and their recovery said once (:class:`WriteWatch`). Qt-free.

A full disk or a folder that cannot be written never ends training, in a
Workbench run (``workbench train``, the window's runs) as in an attached script:
``metrics.csv`` (:class:`ReportedMetricsCSV`), ``steps.csv``
(:class:`ReportedStepsCSV`), ``edits.jsonl`` and the checkpoints catch the
error, keep the file as it was (every write is whole or nothing), tell the
watchers one line naming the file and what to do (``free space on /mnt/runs``),
and the next write tries again. ``publish(kind, text, file)`` takes each line:
the trainer's ``on_notice`` hook (the window shows it in its status bar), an
attached script's socket.
"""

from __future__ import annotations

import errno
import logging
import os
import threading
import time
from pathlib import Path
from typing import Callable

from workbench.core.train.runs.folder import MetricsCSV, StepsCSV

__all__ = ["WriteWatch", "ReportedMetricsCSV", "ReportedStepsCSV", "mount_of", "RETRY_EVERY_S"]

log = logging.getLogger("workbench.runs")

#: Seconds between two retries of a file whose write failed and that has no later write of its own
#: (``metrics.csv`` after the last epoch's row): a full disk freed mid-run is used within this.
RETRY_EVERY_S = 5.0

#: Errors that say the file system is full (a quota is a full disk for this user).
_FULL = {errno.ENOSPC, errno.EDQUOT}


def mount_of(path: str | Path) -> str:
    """The mount point that holds ``path`` (``/``, ``/mnt/runs``): where to free space. ``path`` need not exist."""
    p = Path(os.path.abspath(path))
    while not p.exists() and p != p.parent:
        p = p.parent
    while not os.path.ismount(p) and p != p.parent:
        p = p.parent
    return str(p)


def _is_full(error) -> bool:
    if isinstance(error, OSError):
        return error.errno in _FULL
    return any(os.strerror(code) in str(error) for code in _FULL)


class WriteWatch:
    """Which of a run's files fail to be written now; each failure said once, each recovery once.

    Parameters
    ----------
    publish : callable
        ``publish(kind, text, file)`` with ``kind`` ``"write_failed"``, ``"save_failed"`` or ``"write_ok"``
        (any thread; its errors are logged, never raised).
    logger : logging.Logger, optional
        Where each line is logged (WARNING; default ``workbench.runs``).
    prefix : str
        Put before each logged line (``"workbench attach: "``).

    Attributes
    ----------
    failing : dict of str to str
        File -> the line said while its writes fail.
    """

    def __init__(self, publish: Callable[[str, str, str], None], logger: logging.Logger | None = None,
                 prefix: str = ""):
        self._publish = publish
        self._log = logger or log
        self._prefix = prefix
        self._lock = threading.Lock()
        self.failing: dict[str, str] = {}
        self._retry: dict[str, Callable[[], None]] = {}
        self._retried_at = time.monotonic()

    def _say(self, kind: str, text: str, name: str) -> None:
        self._log.warning("%s%s", self._prefix, text)
        try:
            self._publish(kind, text, name)
        except Exception:  # noqa: BLE001 - a watcher that cannot take the line never ends the run
            self._log.exception("%scannot tell the run's watchers: %s", self._prefix, text)

    def failed(self, path, error, what: str = "not written", kind: str = "write_failed",
               retry: Callable[[], None] | None = None) -> None:
        """Writing ``path`` failed with ``error`` (an exception or its text): logged and told, once while it fails.

        The line: ``"<file> <what>: <error> (<path>); free space on <mount>; training goes on, the next write
        tries again"`` (a full disk; another error asks for a writable run folder). ``retry`` (no arguments,
        raises ``OSError`` while it still fails) is called by :meth:`retry_due` until it succeeds.
        """
        name = str(path)
        reason = getattr(error, "strerror", None) or str(error) or type(error).__name__
        advice = (f"free space on {mount_of(name)}; " if _is_full(error)
                  else "make the run folder writable (or set run_dir to one that is); "
                  if isinstance(error, (OSError, str)) else "")  # not a disk's error: NaN weights not saved
        text = f"{Path(name).name} {what}: {reason} ({name}); {advice}training goes on, the next write tries again"
        with self._lock:
            if retry is not None:
                self._retry[name] = retry
            if self.failing.get(name) == text and kind != "save_failed":  # a Save now pressed is always answered
                return
            self.failing[name] = text
        self._say(kind, text, name)

    def ok(self, path) -> None:
        """``path`` was written: a failure said before is over (told once)."""
        name = str(path)
        with self._lock:
            self._retry.pop(name, None)
            if self.failing.pop(name, None) is None:
                return
        self._say("write_ok", f"{Path(name).name} written again ({name})", name)

    def problems(self) -> list[str]:
        """The failures of the moment, one line each."""
        with self._lock:
            return list(self.failing.values())

    def retry_due(self, now: float | None = None, force: bool = False) -> None:
        """Try again the writes that failed with a ``retry`` (at most every :data:`RETRY_EVERY_S`; ``force``: now).

        Cheap when nothing failed (the training loop calls it after each step)."""
        if not self._retry:
            return
        now = time.monotonic() if now is None else now
        if not force and now - self._retried_at < RETRY_EVERY_S:
            return
        self._retried_at = now
        with self._lock:
            due = list(self._retry.items())
        for name, again in due:
            try:
                again()
            except OSError:
                continue  # still failing: said already
            self.ok(name)


class ReportedMetricsCSV(MetricsCSV):
    """``metrics.csv`` whose failed write is told through a :class:`WriteWatch` instead of raised.

    The epoch's row stays in memory: the next write (the next epoch's, or
    :meth:`WriteWatch.retry_due`) writes the whole file again with it.
    """

    def __init__(self, path: str | Path, writes: WriteWatch):
        super().__init__(path)
        self.writes = writes

    def append(self, metrics: dict) -> None:
        """Add one epoch row (:meth:`MetricsCSV.append`); never raises ``OSError``."""
        try:
            super().append(metrics)
        except OSError as exc:
            self.writes.failed(self.path, exc, "row not written (kept: the next write carries it)",
                               retry=self._write)
        else:
            self.writes.ok(self.path)


class ReportedStepsCSV(StepsCSV):
    """``steps.csv`` whose failed rows are told through a :class:`WriteWatch` (a batch that failed is lost
    whole; each later batch is a new try)."""

    def __init__(self, path: str | Path, writes: WriteWatch):
        super().__init__(path)
        self.writes = writes

    def append(self, rows: list[dict]) -> None:
        """Write the step rows (:meth:`StepsCSV.append`); a failure is told once, and its end once."""
        if not rows:
            return
        self.problem = ""  # each batch is a new try
        super().append(rows)
        if self.problem:
            self.writes.failed(self.path, self.problem.partition(": ")[2] or self.problem, "rows not written")
        else:
            self.writes.ok(self.path)
