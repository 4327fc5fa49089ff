"""Atomic file writes.

A crash in the middle of a save must never damage the previous file: every write
goes to a temporary file in the same folder, is flushed and fsync'ed, and then
replaces the target with ``os.replace`` (atomic on POSIX and Windows).
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path
from typing import IO, Any, Callable


def atomic_write(path: str | Path, write: Callable[[IO[bytes]], Any]) -> Path:
    """Write a file atomically through a callback.

    Parameters
    ----------
    path : str or Path
        Target file. Its folder is created if missing.
    write : callable
        Called with a binary file object open for writing.

    Returns
    -------
    Path
        The target path.

    Raises
    ------
    OSError
        When the folder cannot be written; the previous file, if any, is untouched
        and no temporary file is left behind.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as f:
            write(f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        raise
    return path


def atomic_write_bytes(path: str | Path, data: bytes) -> Path:
    """Write ``data`` to ``path`` atomically. See :func:`atomic_write`."""
    return atomic_write(path, lambda f: f.write(data))


def atomic_write_text(path: str | Path, text: str, encoding: str = "utf-8") -> Path:
    """Write ``text`` to ``path`` atomically. See :func:`atomic_write`."""
    return atomic_write(path, lambda f: f.write(text.encode(encoding)))


def atomic_save(obj: Any, path: str | Path) -> Path:
    """``torch.save(obj)`` to ``path`` atomically. See :func:`atomic_write`."""
    import torch

    return atomic_write(path, lambda f: torch.save(obj, f))
