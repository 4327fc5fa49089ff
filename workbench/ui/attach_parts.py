"""What the two attach dialogs share: a waiting script's "started N min ago" and the take-over checkbox.

File › Attach to a running script… (:mod:`workbench.ui.attach_dialog`) and File › Attach to a run on a
host… (:mod:`workbench.ui.remote_attach_dialog`) word both the same way, from here.
"""

from __future__ import annotations

import time

from PySide6.QtWidgets import QCheckBox, QWidget

__all__ = ["TAKE_OVER_TEXT", "started_ago", "take_over_check"]

#: The take-over checkbox's text.
TAKE_OVER_TEXT = "Take over steering if another window steers it (that window becomes read-only)"


def started_ago(started: float | None, now: float | None = None) -> str:
    """``"started 12 min ago"`` (a minute or more) or ``"started 40 s ago"``.

    Parameters
    ----------
    started : float or None
        When the script started listening, seconds since the epoch; None or 0: unknown (a discovery file
        without the time), said so rather than as an age.
    now : float, optional
        The time it is, seconds since the epoch (default ``time.time()``). A ``started`` after it reads 0 s.

    Returns
    -------
    str
        Whole minutes from 60 s on, whole seconds below; ``"start time unknown"`` without a time.
    """
    if not started:
        return "start time unknown"
    now = time.time() if now is None else now
    age = max(0.0, now - float(started))
    return f"started {age / 60:.0f} min ago" if round(age) >= 60 else f"started {age:.0f} s ago"


def take_over_check(parent: QWidget | None = None) -> QCheckBox:
    """The "Take over steering…" checkbox (objectName ``takeCheck``, unchecked): checked, attaching takes the
    steering from a window that has it, and that window watches read-only."""
    check = QCheckBox(TAKE_OVER_TEXT, parent)
    check.setObjectName("takeCheck")
    return check
