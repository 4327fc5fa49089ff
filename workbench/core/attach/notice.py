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
from typing import Callable

from workbench.core.train.events import NOTICE_KINDS, Notice
from workbench.core.train.runs.writes import WriteWatch
from workbench.core.train.trainer.edit_log import EditLog

__all__ = ["Notice", "NOTICE_KINDS", "WriteReporter", "ReportingEditLog"]

log = logging.getLogger("workbench.attach")


class WriteReporter(WriteWatch):
    """Keep which run files fail to be written; say each failure once and each recovery once
    (:class:`~workbench.core.train.runs.writes.WriteWatch`, whose lines a Workbench run says too), as a
    :class:`Notice` to the windows.

    Parameters
    ----------
    publish : callable
        ``publish(notice)``: to the windows (any thread).
    """

    def __init__(self, publish: Callable[[Notice], None]):
        super().__init__(lambda kind, text, file: publish(Notice(kind, text, file)), log, "workbench attach: ")


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
