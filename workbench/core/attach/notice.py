"""What a script tells its window besides the run's events: :class:`Notice`, and failed writes (:class:`WriteReporter`).

A full disk or a failed write never ends an attached script's training: the
edit log (:class:`ReportingEditLog`), ``steps.csv``, ``metrics.csv`` and Save
now's checkpoint catch it, log it, tell the window in a :class:`Notice` (the
file and the error), and the next write tries again. A notice is live only
(never replayed to a window that attaches later: the welcome carries the
problems of the moment). Qt-free.
"""

from __future__ import annotations

import logging
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from workbench.core.train.events import Event
from workbench.core.train.trainer.edit_log import EditLog

__all__ = ["Notice", "NOTICE_KINDS", "WriteReporter", "ReportingEditLog"]

log = logging.getLogger("workbench.attach")

#: The kinds of :class:`Notice`.
NOTICE_KINDS = ("write_failed", "write_ok", "save_failed", "command_failed", "lease_lapsed", "read_only")


@dataclass
class Notice(Event):
    """One line the window shows in its status bar.

    Attributes
    ----------
    kind : str
        One of :data:`NOTICE_KINDS`: a write failed (``file`` names it), a file is written again after a failure,
        Save now failed, a command could not apply, the pause lease lapsed, this window is read-only now.
    text : str
        The line, whole (what failed and why).
    file : str
        The file concerned (``""``: none).
    """

    kind: str
    text: str
    file: str = ""


class WriteReporter:
    """Keep which run files fail to be written; say each failure once and each recovery once.

    Parameters
    ----------
    publish : callable
        ``publish(notice)``: to the windows (any thread).
    """

    def __init__(self, publish: Callable[[Notice], None]):
        self._publish = publish
        self._lock = threading.Lock()
        self.failing: dict[str, str] = {}  # file -> the line said

    def failed(self, path, error, what: str = "not written") -> None:
        """Writing ``path`` failed with ``error`` (an exception or a text): logged and told, once while it fails."""
        name = str(path)
        reason = getattr(error, "strerror", None) or str(error) or type(error).__name__
        text = f"{Path(name).name} {what}: {reason} ({name}); training goes on, the next write tries again"
        with self._lock:
            if self.failing.get(name) == text:
                return
            self.failing[name] = text
        log.warning("workbench attach: %s", text)
        self._publish(Notice("write_failed", text, name))

    def ok(self, path) -> None:
        """``path`` was written: a failure said before is over (told once)."""
        name = str(path)
        with self._lock:
            if self.failing.pop(name, None) is None:
                return
        text = f"{Path(name).name} written again"
        log.warning("workbench attach: %s", text)
        self._publish(Notice("write_ok", text, name))

    def problems(self) -> list[str]:
        """The failures of the moment, one line each."""
        with self._lock:
            return list(self.failing.values())


class ReportingEditLog(EditLog):
    """``edits.jsonl`` whose failed write is reported (:class:`WriteReporter`) instead of raised: a freeze, a pause
    or a data-parallel boundary never ends the script on a full disk (the line is lost, the next one is tried).

    Parameters
    ----------
    run_dir : str or Path
    reporter : WriteReporter
    """

    def __init__(self, run_dir, reporter: WriteReporter):
        super().__init__(run_dir)
        self.reporter = reporter

    def write(self, step: int, entry: dict) -> None:
        """Append one line (see :meth:`EditLog.write`); a failure is reported, never raised."""
        try:
            super().write(step, entry)
        except OSError as exc:
            self.reporter.failed(self.path, exc, f"not written (the {entry.get('op', 'edit')} at step {step} "
                                                  "is not recorded)")
        else:
            self.reporter.ok(self.path)
