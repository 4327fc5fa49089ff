"""``status.json`` of a run folder read whatever is on disk: :func:`read_status`, :func:`is_time`.

Each field a reader uses has its JSON type checked (:data:`STATUS_FIELDS`), and
its times must be times a clock can show (:func:`is_time`). Qt-free.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

from workbench.core.run_folder.reading import STATUS_FILE, RunFileError, json_type, read_small

__all__ = ["MAX_TIME", "read_status", "is_time", "STATUS_FIELDS"]


#: Times in ``status.json`` (seconds since 1970) are before this: 3000-01-01 UTC (``time.localtime`` of
#: 1e20 raises, an infinity too; a later time is a damaged file).
MAX_TIME = 32503680000.0

_NUMBER, _INT, _STR = "a number", "an integer", "a string"
#: The fields of status.json a reader uses, and their JSON types (null is allowed for each).
STATUS_FIELDS = {"state": _STR, "reason": _STR, "started": _NUMBER, "ended": _NUMBER, "pid": _INT,
                 "pid_start": _INT, "model": _STR, "dataset": _STR, "epochs": _INT}


def _check(value: object, want: str) -> bool:
    if value is None:
        return True
    if want == _STR:
        return isinstance(value, str)
    if isinstance(value, bool):
        return False
    return isinstance(value, int) if want == _INT else isinstance(value, (int, float))


def read_status(folder: str | Path) -> dict | None:
    """``status.json`` of a run folder, its fields of :data:`STATUS_FIELDS` type-checked; None when missing.

    Raises
    ------
    RunFileError
        Unreadable (see :func:`read_small`), not a JSON object, or a field of the wrong type.
    """
    text = read_small(folder, STATUS_FILE)
    if text is None:
        return None
    try:
        status = json.loads(text)
    except json.JSONDecodeError as exc:
        raise RunFileError(STATUS_FILE, f"not JSON ({exc.msg} at line {exc.lineno} column {exc.colno}; "
                                        "truncated?)") from None
    except (ValueError, RecursionError) as exc:
        raise RunFileError(STATUS_FILE, f"not JSON ({type(exc).__name__})") from None
    if not isinstance(status, dict):
        raise RunFileError(STATUS_FILE, f"{json_type(status)}, not a JSON object")
    for key, want in STATUS_FIELDS.items():
        if not _check(status.get(key), want):
            raise RunFileError(STATUS_FILE, f"{key!r} is {json_type(status[key])}, not {want}")
    if isinstance(status.get("epochs"), int) and status["epochs"] < 0:
        raise RunFileError(STATUS_FILE, f"'epochs' is {status['epochs']}, not a count")
    for key in _TIME_FIELDS:
        value = status.get(key)
        if value is not None and not is_time(value):
            raise RunFileError(STATUS_FILE, f"{key!r} is {_number_text(value)}, not a time (seconds since 1970, "
                                            "before the year 3000)")
    return status


#: The fields of status.json that are times (``time.time()``).
_TIME_FIELDS = ("started", "ended")


def is_time(value: object) -> bool:
    """Whether ``value`` is a number of seconds since 1970 that a clock could show: finite, in (0, :data:`MAX_TIME`).

    ``time.localtime`` raises on 1e20, -1e18 or an infinity ("Value too large for defined data type",
    OverflowError); a time that passes here is safe to give it.
    """
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return False
    try:
        t = float(value)
    except OverflowError:  # an integer of hundreds of digits
        return False
    return math.isfinite(t) and 0 < t < MAX_TIME


def _number_text(value: object) -> str:
    """A number, short (``1e+20``, ``inf``, ``nan``; a huge integer as its digit count)."""
    try:
        return f"{float(value):.6g}"  # type: ignore[arg-type]
    except OverflowError:
        return f"an integer of about {int(value.bit_length() * math.log10(2)) + 1} digits"  # type: ignore[union-attr]
