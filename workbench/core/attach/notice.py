"""What a script tells its window besides the run's events: :class:`Notice`, and failed writes (:class:`WriteReporter`).

A full disk or a failed write never ends an attached script's training: the
edit log (an :class:`~workbench.core.train.trainer.edit_log.EditLog` given the reporter), ``steps.csv``, ``metrics.csv`` and Save
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

__all__ = ["Notice", "NOTICE_KINDS", "WriteReporter"]

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
