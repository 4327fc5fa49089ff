"""A bounded call on a thread: a reader that blocks (a FIFO, a device) fails the test instead of hanging it."""

from __future__ import annotations

import threading


def in_thread(fn, timeout=5.0):
    """``fn()`` on a thread; its result or exception, failing the test if it does not return within ``timeout``."""
    box = {}

    def run():
        try:
            box["result"] = fn()
        except BaseException as exc:  # noqa: BLE001 - handed to the test
            box["error"] = exc

    t = threading.Thread(target=run, daemon=True)
    t.start()
    t.join(timeout)
    assert not t.is_alive(), f"{fn} blocked for {timeout} s"
    if "error" in box:
        raise box["error"]
    return box["result"]
