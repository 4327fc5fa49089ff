"""The window's probe callbacks inside a run a window steers: called at each hook, never the run's end.

Both an attached script (:mod:`.script`) and an attachable headless run
(:mod:`.trainer_attach`) run the probes the window installed as callbacks; a
probe that raises is logged, told ``on_exception`` and removed, and the
training goes on. Qt-free.
"""

from __future__ import annotations

import logging
from typing import Any

__all__ = ["call_probes"]


def call_probes(probes: list, hook: str, args: tuple, *, state: Any, log: logging.Logger, who: str,
                traceback_text: str | None = None) -> None:
    """Call ``hook(*args)`` on every probe of ``probes``; one that raises is logged, removed from ``probes`` and
    told ``on_exception(state, exc, traceback)``.

    Parameters
    ----------
    probes : list
        The installed probe callbacks (changed in place: a failing one is removed).
    hook : str
        The callback method (``"on_step_end"``, ``"on_after_backward"``...).
    args : tuple
        Its arguments.
    state : object
        What ``on_exception`` gets as the trainer (the Trainer, or the script's ``ScriptRun``).
    log : logging.Logger
    who : str
        Names the run in the log line (``"workbench train"``, ``"workbench attach"``).
    traceback_text : str, optional
        Given to ``on_exception`` (default: the formatted traceback).
    """
    import traceback

    for cb in list(probes):
        try:
            getattr(cb, hook)(*args)
        except Exception as exc:  # noqa: BLE001 - a probe's failure is the probe's, not the training's
            log.warning("%s: a probe failed in %s and was removed: %s: %s", who, hook, type(exc).__name__, exc)
            if cb in probes:
                probes.remove(cb)
            try:
                cb.on_exception(state, exc, traceback.format_exc() if traceback_text is None else traceback_text)
            except Exception:  # noqa: BLE001 - the probe failing again while told of its failure changes nothing
                pass
