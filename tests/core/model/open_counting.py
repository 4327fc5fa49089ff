"""Counting how often a file is opened: ``sys.addaudithook`` on ``open`` events whose path is that file.

Python raises the ``open`` audit event for every ``open()`` / ``io.open`` /
``os.open`` (and ``torch.load``'s own opening of a path goes through them);
memory maps made in C++ (``torch.UntypedStorage.from_file``, torch's mmap of a
zip) raise none, and need none: they follow an ``open`` that was counted. An
audit hook cannot be removed, so one hook is installed for the test session
and a context manager switches the counting on and off.

    with count_opens(path) as opened:
        ...
    assert opened.count <= 2
"""

from __future__ import annotations

import contextlib
import os
import sys
from pathlib import Path
from typing import Iterator

_WATCH: list["OpenCount"] = []
_INSTALLED = False


class OpenCount:
    """The ``open`` events of one path (resolved) while counting."""

    def __init__(self, path: Path):
        self.path = os.path.realpath(path)
        self.count = 0


def _hook(event: str, args: tuple) -> None:
    if event != "open" or not _WATCH or not args:
        return
    target = args[0]
    if isinstance(target, bytes):
        target = os.fsdecode(target)
    if not isinstance(target, (str, os.PathLike)):
        return  # a file descriptor
    try:
        real = os.path.realpath(target)
    except (OSError, ValueError):
        return
    for watch in _WATCH:
        if real == watch.path:
            watch.count += 1


@contextlib.contextmanager
def count_opens(path: str | Path) -> Iterator[OpenCount]:
    """Count the ``open`` audit events of ``path`` inside the block."""
    global _INSTALLED
    if not _INSTALLED:
        sys.addaudithook(_hook)
        _INSTALLED = True
    watch = OpenCount(Path(path))
    _WATCH.append(watch)
    try:
        yield watch
    finally:
        _WATCH.remove(watch)
