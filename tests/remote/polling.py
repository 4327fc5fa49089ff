"""Waiting on a remote host: its state is read by a command over ssh (``squeue``, a run's files), and nothing on
this side is signalled when it changes, so the tests ask again at a fixed pace until the condition holds."""

from __future__ import annotations

import time

import pytest

#: Seconds between two questions to the host (each one an ssh command through the ControlMaster, ~50 ms).
POLL_S = 0.2


def wait_until(condition, what: str, timeout: float):
    """The first true value of ``condition()``, asked every :data:`POLL_S` s; the test fails after ``timeout`` s
    naming ``what``."""
    deadline = time.monotonic() + timeout
    while not (value := condition()):
        if time.monotonic() > deadline:
            pytest.fail(f"not within {timeout:.0f} s: {what}")
        time.sleep(POLL_S)
    return value
