"""The careful opening and reading of a run folder's files: whatever is on disk, an answer or a :class:`RunFileError`.

A file is opened only when ``lstat``/``stat`` say it is a regular file inside
the run folder (a link may point within the folder, never out of it), and it is
opened with ``O_NONBLOCK`` and checked again with ``fstat``, so a FIFO put there
between the two never blocks; small files are read up to :data:`MAX_SMALL_BYTES`.
A run file the user names by path (``workbench train run.toml``) is read by
:func:`read_text_file` with the same care (a link may point anywhere, but to a
regular file). Qt-free.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path
from typing import IO

from workbench.core.run_folder.printable import printable

__all__ = ["RunFileError", "NotATextFile", "MAX_SMALL_BYTES", "STATUS_FILE", "TOML_FILE", "METRICS_FILE",
           "STEPS_FILE", "open_run_file", "read_small", "read_text_file", "decode_text", "os_reason", "json_type"]


#: The most bytes read of ``status.json`` or ``run.toml`` (a larger one is unreadable).
MAX_SMALL_BYTES = 4 * 2**20
STATUS_FILE, TOML_FILE, METRICS_FILE = "status.json", "run.toml", "metrics.csv"
#: One row per optimizer step (:class:`~workbench.core.train.runs.folder.StepsCSV`), appended from the first step.
STEPS_FILE = "steps.csv"


class RunFileError(Exception):
    """A file of a run folder that cannot be read as what it should be.

    Attributes
    ----------
    file : str
        The file's name in its run folder (``"status.json"``).
    reason : str
        Why, in words (``"not UTF-8 (byte 0xff at offset 12)"``).
    """

    def __init__(self, file: str, reason: str):
        super().__init__(f"{file}: {reason}")
        self.file, self.reason = file, reason


class NotATextFile(ValueError):
    """A file given by path is not a regular text file of a sane size (a FIFO, a device, not UTF-8, too large).

    Its message names the file: ``"<path>: <reason>"``.

    Attributes
    ----------
    path : str
    reason : str
    """

    def __init__(self, path: str | Path, reason: str):
        super().__init__(f"{printable(os.fspath(path))}: {reason}")
        self.path, self.reason = os.fspath(path), reason


def _kind(mode: int) -> str:
    for test, name in ((stat.S_ISFIFO, "a FIFO"), (stat.S_ISCHR, "a character device"),
                       (stat.S_ISBLK, "a block device"), (stat.S_ISSOCK, "a socket"), (stat.S_ISDIR, "a folder")):
        if test(mode):
            return name
    return "not a regular file"


def os_reason(exc: OSError) -> str:
    """Why an ``OSError`` happened, in words (its ``strerror``, else its type)."""
    return exc.strerror or type(exc).__name__


def _inside(path: str, folder: str) -> bool:
    try:
        return os.path.commonpath([path, folder]) == folder
    except ValueError:  # another drive (Windows)
        return False


def open_run_file(folder: str | Path, name: str) -> IO[bytes] | None:
    """Open ``folder/name`` for reading in binary; None when there is no such file.

    Raises
    ------
    RunFileError
        It is not a regular file (a FIFO, a device, a folder), a link out of the
        run folder or a broken one, or it cannot be opened (permissions).
    """
    path = os.path.join(folder, name)
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise RunFileError(name, os_reason(exc)) from None
    if stat.S_ISLNK(st.st_mode):
        real, base = os.path.realpath(path), os.path.realpath(folder)
        if not _inside(real, base):
            raise RunFileError(name, f"a link out of the run folder (to {real})")
        try:
            st = os.stat(real)
        except OSError:
            raise RunFileError(name, f"a broken link (to {real})") from None
        path = real
    if not stat.S_ISREG(st.st_mode):
        raise RunFileError(name, f"{_kind(st.st_mode)}, not a regular file")
    flags = os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_BINARY", 0)
    try:
        fd = os.open(path, flags)
    except OSError as exc:
        raise RunFileError(name, os_reason(exc)) from None
    if not stat.S_ISREG(os.fstat(fd).st_mode):  # replaced between the stat and the open
        os.close(fd)
        raise RunFileError(name, "not a regular file (replaced while opening)")
    return open(fd, "rb", closefd=True)


def decode_text(name: str, data: bytes) -> str:
    """UTF-8 text of ``data``; RunFileError for NUL bytes or bytes that are not UTF-8."""
    nul = data.find(b"\0")
    if nul >= 0:
        raise RunFileError(name, f"holds NUL bytes (from offset {nul}: a write cut short by a power loss?)")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise RunFileError(name, f"not UTF-8 (byte 0x{data[exc.start]:02x} at offset {exc.start})") from None


def read_small(folder: str | Path, name: str, limit: int = MAX_SMALL_BYTES) -> str | None:
    """The UTF-8 text of a small file of a run folder (at most ``limit`` bytes); None when missing.

    Raises
    ------
    RunFileError
        See :func:`open_run_file`; also larger than ``limit`` bytes, NUL bytes, not UTF-8.
    """
    f = open_run_file(folder, name)
    if f is None:
        return None
    with f:
        try:
            data = f.read(limit + 1)
        except OSError as exc:
            raise RunFileError(name, os_reason(exc)) from None
    if len(data) > limit:
        raise RunFileError(name, f"larger than {limit / 2**20:g} MB: not read")
    return decode_text(name, data)


def read_text_file(path: str | Path, limit: int = MAX_SMALL_BYTES) -> str:
    """The UTF-8 text of a file given by its path (a run file the user names), promptly and in bounded memory.

    A link is followed wherever it points (the user named the file), but what it
    reaches must be a regular file: a FIFO, a device (``/dev/zero``) or a folder
    is refused without being read, and the file is opened with ``O_NONBLOCK`` and
    checked again with ``fstat``. At most ``limit`` bytes are read.

    Raises
    ------
    FileNotFoundError
        There is no such file (or a link to nothing).
    OSError
        It cannot be opened or read (permissions); the error's ``filename`` is the path.
    NotATextFile
        A ValueError naming the file: not a regular file, larger than ``limit``, NUL bytes, not UTF-8.
    """
    path = os.fspath(path)
    st = os.stat(path)  # follows links; FileNotFoundError / PermissionError name the path
    if not stat.S_ISREG(st.st_mode):
        raise NotATextFile(path, f"{_kind(st.st_mode)}, not a regular file")
    flags = os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_BINARY", 0)
    fd = os.open(path, flags)
    with open(fd, "rb", closefd=True) as f:
        if not stat.S_ISREG(os.fstat(fd).st_mode):  # replaced between the stat and the open
            raise NotATextFile(path, "not a regular file (replaced while opening)")
        data = f.read(limit + 1)
    if len(data) > limit:
        raise NotATextFile(path, f"larger than {limit / 2**20:g} MB: not read")
    try:
        return decode_text("", data)
    except RunFileError as exc:
        raise NotATextFile(path, exc.reason) from None


def json_type(v: object) -> str:
    """The kind of a decoded JSON / TOML value in words (``"a number"``, ``"a list"``...), for a message."""
    return {bool: "a boolean", int: "an integer", float: "a number", str: "a string", list: "a list",
            dict: "an object"}.get(type(v), type(v).__name__)
