"""Processes by pid, from ``/proc`` (Linux): is one running, which are below one, wait until they are gone."""

from __future__ import annotations

import os
import time
from pathlib import Path


def _stat(pid: int) -> list[str] | None:
    """Fields of ``/proc/PID/stat`` after the command name (state first), None when there is no such process."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (FileNotFoundError, ProcessLookupError, IndexError):
        return None


def running(pid: int) -> bool:
    """The process exists and is not a zombie."""
    fields = _stat(pid)
    return fields is not None and fields[0] not in ("Z", "X")


def descendants(pid: int) -> set[int]:
    """Every living process below ``pid`` (children, their children...), whatever session they are in."""
    parents: dict[int, int] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            fields = _stat(int(entry))
            if fields is not None and fields[0] not in ("Z", "X"):
                parents[int(entry)] = int(fields[1])
    found: set[int] = set()
    frontier = {pid}
    while frontier:
        frontier = {p for p, pp in parents.items() if pp in frontier} - found
        found |= frontier
    return found


def wait_gone(pids, timeout: float) -> set[int]:
    """Wait until none of ``pids`` runs; the ones still running after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        alive = {p for p in pids if running(p)}
        if not alive or time.monotonic() > deadline:
            return alive
        time.sleep(0.05)


def wait_for(predicate, timeout: float, every: float = 0.05) -> bool:
    """Poll ``predicate()`` until it is true (True) or ``timeout`` seconds passed (False)."""
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            return False
        time.sleep(every)
    return True
