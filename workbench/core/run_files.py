"""Total readers of the files of a run folder: whatever is on disk, an answer or a :class:`RunFileError`.

A run folder (:mod:`workbench.core.train.runs.folder`) is written by the trainer, but
anything may be found there later: a file of the wrong type, bytes that are not
UTF-8, NUL bytes left by a power loss, a truncated line, a FIFO or a device, a
symbolic link to ``/dev/zero``, a file of gigabytes. Every reader here either
returns what the file says or raises :class:`RunFileError` naming the file and
the reason, promptly and in bounded memory:

- a file is opened only when ``lstat``/``stat`` say it is a regular file inside
  the run folder (a link may point within the folder, never out of it), and it
  is opened with ``O_NONBLOCK`` and checked again with ``fstat``, so a FIFO put
  there between the two never blocks;
- ``status.json`` and ``run.toml`` are read up to :data:`MAX_SMALL_BYTES`;
  the times of ``status.json`` must be times a clock can show (:func:`is_time`);
- ``metrics.csv`` is read in blocks of :data:`BLOCK_BYTES`
  (:class:`MetricsBlocks`), parsed by ``numpy.loadtxt``, whatever its length;
  a damaged line is skipped and the lines after it are read.

A run file the user names by path (``workbench train run.toml``) is read by
:func:`read_text_file` with the same care (a link may point anywhere, but to a
regular file). It also says whether a recorded process id is a live Workbench
training process (:func:`is_training_process`: by its command line) and escapes
text for a terminal (:func:`printable`). Qt-free; imports nothing of
``workbench.core.train``.
"""

from __future__ import annotations

import csv
import io
import json
import math
import os
import stat
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Callable, Iterator

import numpy as np
import tomllib

__all__ = ["RunFileError", "RunIsTraining", "NotATextFile", "RunInfo", "MetricsBlocks", "MAX_SMALL_BYTES",
           "BLOCK_BYTES", "MAX_COLUMNS", "MAX_TIME", "open_run_file", "read_csv_rows", "read_small", "read_status",
           "read_text_file", "read_toml", "read_run_info", "is_time", "printable", "process_start_time",
           "is_training_process", "training_pid", "refuse_if_training"]

#: The most bytes read of ``status.json`` or ``run.toml`` (a larger one is unreadable).
MAX_SMALL_BYTES = 4 * 2**20
#: Bytes of ``metrics.csv`` parsed at a time (~12,000 rows; numpy holds the GIL ~15 ms over each: a
#: reading thread leaves the GUI thread that often).
BLOCK_BYTES = 2**20
#: The longest ``metrics.csv`` line read (a longer one is skipped as damaged).
MAX_LINE_BYTES = 2**20
#: The most columns of ``metrics.csv`` read when all are asked for (the others are said in the problem).
MAX_COLUMNS = 1000
#: Times in ``status.json`` (seconds since 1970) are before this: 3000-01-01 UTC (``time.localtime`` of
#: 1e20 raises, an infinity too; a later time is a damaged file).
MAX_TIME = 32503680000.0

STATUS_FILE, TOML_FILE, METRICS_FILE = "status.json", "run.toml", "metrics.csv"


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


class RunIsTraining(OSError):
    """The run folder belongs to a live training process: it is not renamed or deleted."""


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


# ---------------------------------------------------------------------------------------------- text
def printable(text: object) -> str:
    """``str(text)`` with every control or invisible character escaped (``\\x1b``, ``\\u202e``).

    Folder names and file contents go to a terminal or a table: an escape
    sequence in them must show as text, never act. A byte that was not UTF-8 in
    a file name (a lone surrogate from ``surrogateescape``) shows as ``\\xNN``.
    """
    s = str(text)
    if s.isprintable():
        return s
    return "".join(ch if ch.isprintable() else _escape(ch) for ch in s)


def _escape(ch: str) -> str:
    code = ord(ch)
    if 0xDC80 <= code <= 0xDCFF:  # surrogateescape'd byte of a file name
        return f"\\x{code - 0xDC00:02x}"
    if code < 0x100:
        return f"\\x{code:02x}"
    return f"\\u{code:04x}" if code < 0x10000 else f"\\U{code:08x}"


# ---------------------------------------------------------------------------------------------- opening
def _kind(mode: int) -> str:
    for test, name in ((stat.S_ISFIFO, "a FIFO"), (stat.S_ISCHR, "a character device"),
                       (stat.S_ISBLK, "a block device"), (stat.S_ISSOCK, "a socket"), (stat.S_ISDIR, "a folder")):
        if test(mode):
            return name
    return "not a regular file"


def _os_reason(exc: OSError) -> str:
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
        raise RunFileError(name, _os_reason(exc)) from None
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
        raise RunFileError(name, _os_reason(exc)) from None
    if not stat.S_ISREG(os.fstat(fd).st_mode):  # replaced between the stat and the open
        os.close(fd)
        raise RunFileError(name, "not a regular file (replaced while opening)")
    return open(fd, "rb", closefd=True)


def _decode(name: str, data: bytes) -> str:
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
            raise RunFileError(name, _os_reason(exc)) from None
    if len(data) > limit:
        raise RunFileError(name, f"larger than {limit / 2**20:g} MB: not read")
    return _decode(name, data)


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
        return _decode("", data)
    except RunFileError as exc:
        raise NotATextFile(path, exc.reason) from None


# ---------------------------------------------------------------------------------------------- status.json
_NUMBER, _INT, _STR = "a number", "an integer", "a string"
#: The fields of status.json a reader uses, and their JSON types (null is allowed for each).
STATUS_FIELDS = {"state": _STR, "reason": _STR, "started": _NUMBER, "ended": _NUMBER, "pid": _INT,
                 "pid_start": _INT, "model": _STR, "dataset": _STR, "epochs": _INT}


def _json_type(v: object) -> str:
    return {bool: "a boolean", int: "an integer", float: "a number", str: "a string", list: "a list",
            dict: "an object"}.get(type(v), type(v).__name__)


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
        raise RunFileError(STATUS_FILE, f"{_json_type(status)}, not a JSON object")
    for key, want in STATUS_FIELDS.items():
        if not _check(status.get(key), want):
            raise RunFileError(STATUS_FILE, f"{key!r} is {_json_type(status[key])}, not {want}")
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


# ---------------------------------------------------------------------------------------------- run.toml
def read_toml(folder: str | Path) -> dict | None:
    """``run.toml`` of a run folder as a dict; None when missing.

    Raises
    ------
    RunFileError
        Unreadable (see :func:`read_small`) or not TOML.
    """
    text = read_small(folder, TOML_FILE)
    if text is None:
        return None
    try:
        return tomllib.loads(text)
    except (tomllib.TOMLDecodeError, ValueError) as exc:  # ValueError: an integer of more than 4,300 digits
        raise RunFileError(TOML_FILE, f"not TOML ({exc})") from None
    except RecursionError:
        raise RunFileError(TOML_FILE, "not TOML (nested too deeply)") from None


@dataclass(frozen=True)
class RunInfo:
    """What a runs list shows of a ``run.toml``: ``[model] arch``, ``[data] dataset``, ``epochs``.

    ``""`` or 0: not set.
    """

    model: str = ""
    dataset: str = ""
    epochs: int = 0


def _toml_type(v: object) -> str:
    return "a table" if isinstance(v, dict) else _json_type(v)


def _table(cfg: dict, key: str) -> dict:
    value = cfg.get(key, {})
    if not isinstance(value, dict):
        raise RunFileError(TOML_FILE, f"{key} is {_toml_type(value)}, not a table ([{key}])")
    return value


def _field(table: dict, key: str, where: str, kind: type):
    value = table.get(key)
    if value is not None and (not isinstance(value, kind) or isinstance(value, bool)):
        raise RunFileError(TOML_FILE, f"{where} is {_toml_type(value)}, not {_INT if kind is int else _STR}")
    return value


def read_run_info(folder: str | Path) -> RunInfo | None:
    """The :class:`RunInfo` of a run folder's ``run.toml``, its types checked; None when missing.

    Raises
    ------
    RunFileError
        Unreadable (see :func:`read_toml`), or ``model = 3`` where a table belongs, and the like.
    """
    cfg = read_toml(folder)
    if cfg is None:
        return None
    arch = _field(_table(cfg, "model"), "arch", "[model] arch", str)
    dataset = _field(_table(cfg, "data"), "dataset", "[data] dataset", str)
    epochs = _field(cfg, "epochs", "epochs", int)
    if epochs is not None and epochs < 0:
        raise RunFileError(TOML_FILE, f"epochs is {epochs}, not a count")
    return RunInfo(arch or "", dataset or "", epochs or 0)


# ---------------------------------------------------------------------------------------------- metrics.csv
def _to_float(text: str) -> float:
    return float(text) if text.strip() else math.nan


class MetricsBlocks:
    """``metrics.csv`` of a run folder read in blocks: iterate for ``{column: float64 array}`` per block.

    Each block holds the next rows of the file (about :data:`BLOCK_BYTES` of
    text), one float64 array per requested column that the header has (a blank
    cell or one that is not a number is NaN). Memory is bounded by the block,
    whatever the file's length. A damaged line (not UTF-8, NUL bytes left by a
    power loss, a cell too many or too few, longer than :data:`MAX_LINE_BYTES`)
    is skipped and the lines after it are read. The first such problem is kept
    in :attr:`problem`. With ``columns`` None, the first :data:`MAX_COLUMNS`
    columns are read (the count of the others is the problem); the work per row
    is linear in the columns read.

    Parameters
    ----------
    folder : str or Path
        The run folder.
    columns : sequence of str, optional
        The columns wanted (None: all of the header's).
    progress : callable, optional
        ``progress(fraction)`` after each block, fraction of the file's bytes read in [0, 1].
    block_bytes : int
        Bytes per block.

    Attributes
    ----------
    header : tuple of str
        The file's columns (empty until iterated; empty for a missing file).
    rows : int
        Rows read so far.
    problem : str
        ``"metrics.csv: <reason>"`` for the first problem met, else ``""``.
    exists : bool
        Whether the file was there.
    """

    def __init__(self, folder: str | Path, columns=None, progress: Callable[[float], None] | None = None,
                 block_bytes: int = BLOCK_BYTES):
        self.folder, self.progress = folder, progress
        self.columns = None if columns is None else tuple(columns)
        self.block_bytes = max(1024, int(block_bytes))
        self.header: tuple[str, ...] = ()
        self.rows = 0
        self.problem = ""
        self.exists = False
        self._line = 1  # line number of the header; the next line read is _line + 1
        self._converters = False  # a blank cell was seen: parse with a converter from now on
        self._wanted: list[str] = []  # the columns read, in order (set with the header)
        self._use: list[int] = [0]  # their indices in the header (column 0 when none: rows are still counted)

    def _note(self, reason: str) -> None:
        if not self.problem:
            self.problem = f"{METRICS_FILE}: {reason}"

    def __iter__(self) -> Iterator[dict[str, np.ndarray]]:
        try:
            f = open_run_file(self.folder, METRICS_FILE)
        except RunFileError as exc:
            self.problem = str(exc)
            return
        if f is None:
            return
        self.exists = True
        with f:
            try:
                yield from self._blocks(f, os.fstat(f.fileno()).st_size)
            except OSError as exc:
                self._note(_os_reason(exc))

    def _blocks(self, f: IO[bytes], size: int) -> Iterator[dict[str, np.ndarray]]:
        done, carry, skipping = 0, b"", False
        while True:
            data = f.read(self.block_bytes)
            done += len(data)
            if not data:
                break
            if skipping:  # inside a line too long to read: drop up to its end
                cut = data.find(b"\n")
                if cut < 0:
                    continue
                data, skipping = data[cut + 1:], False
                self._line += 1
            data = carry + data
            cut = data.rfind(b"\n")
            if cut < 0:
                carry = data
                if len(carry) > MAX_LINE_BYTES:
                    self._note(f"line {self._line + 1} is longer than {MAX_LINE_BYTES // 2**20} MB: skipped")
                    carry, skipping = b"", True
                continue
            carry = data[cut + 1:]
            block = data[:cut + 1]
            if not self.header:
                block = self._read_header(block)
                if block is None:
                    return
            out = self._block(block)
            if out is not None:
                yield out
            if self.progress is not None:
                self.progress(min(1.0, done / size) if size else 1.0)
        if not self.header and not carry.strip():
            self._note("empty (truncated?)")
            return
        if carry:  # the last line has no newline: read it if it is whole
            if not self.header:
                block = self._read_header(carry + b"\n")
                if block is None or not block:
                    return
                carry = block[:-1]
            out = self._block(carry + b"\n", last=True)
            if out is not None:
                yield out
        if self.progress is not None:
            self.progress(1.0)

    def _read_header(self, block: bytes) -> bytes | None:
        """Parse the header line at the start of ``block``; the rest of the block, or None when unreadable."""
        end = block.find(b"\n")
        line = block[:end]
        try:
            text = _decode(METRICS_FILE, line)
        except RunFileError as exc:
            self.problem = f"{exc} on its header line"
            return None
        names = next(csv.reader([text.strip("\r\n")]), [])
        self.header = tuple(n.strip() for n in names)
        if not any(self.header):
            self._note("no header line")
            return None
        index: dict[str, int] = {}  # name -> its first column (a dict: linear in the header, never quadratic)
        for i, name in enumerate(self.header):
            if name and name not in index:
                index[name] = i
        if self.columns is None:
            wanted = list(index)
            if len(wanted) > MAX_COLUMNS:
                self._note(f"has {len(wanted):,} columns: only the first {MAX_COLUMNS:,} are read")
                wanted = wanted[:MAX_COLUMNS]
        else:
            wanted = [c for c in dict.fromkeys(self.columns) if c and c in index]
        self._wanted = wanted
        self._use = [index[c] for c in wanted] or [0]
        return block[end + 1:]

    def _block(self, block: bytes, last: bool = False) -> dict[str, np.ndarray] | None:
        """Columns of the lines in ``block`` (each ending in a newline); None when it holds no row."""
        first = self._line + 1
        lines = block.count(b"\n")
        self._line += lines
        nul = block.find(b"\0")
        if nul >= 0:  # a line holding NUL bytes is left out (blank: the numbering holds); the lines after are read
            where = first + block.count(b"\n", 0, nul)
            self._note(f"NUL bytes on line {where} (a write cut short by a power loss?): skipped")
            block = _blank_nul_lines(block)
        if not block.strip():  # blank lines only (numpy would warn "input contained no data")
            return None
        wanted, use = self._wanted, self._use
        values = self._fast(block, use)
        if values is None:
            values = self._slow(block, use, first, last)
        self.rows += len(values)
        if not wanted or not len(values):
            return {} if len(values) else None
        return {c: np.ascontiguousarray(values[:, i]) for i, c in enumerate(wanted)}

    def _fast(self, block: bytes, use: list[int]) -> np.ndarray | None:
        """numpy's C parser over the block; None when the block needs the line-by-line reading."""
        if not block.isascii() or b'"' in block:
            return None
        try:
            values = self._loadtxt(block, use)
        except ValueError as exc:
            if self._converters or "could not convert" not in str(exc):
                return None
            self._converters = True  # a blank cell (an epoch without validation): converters from now on
            try:
                values = self._loadtxt(block, use)
            except ValueError:
                return None
        if block.count(b",") != len(values) * (len(self.header) - 1):  # a row with a cell too many or too few
            return None
        return values

    def _loadtxt(self, block: bytes, use: list[int]) -> np.ndarray:
        conv = _to_float if self._converters else None
        return np.loadtxt(io.BytesIO(block), delimiter=",", usecols=use, comments=None, ndmin=2,
                          dtype=np.float64, converters=conv, encoding="ascii")

    def _slow(self, block: bytes, use: list[int], first: int, last: bool) -> np.ndarray:
        """Line by line: damaged lines are skipped (the first is noted), cells that are not numbers are NaN."""
        out = []
        width = len(self.header)
        for number, raw in enumerate(block.split(b"\n")[:-1], start=first):
            try:
                text = _decode(METRICS_FILE, raw)
            except RunFileError as exc:
                self._note(f"{exc.reason} on line {number}: skipped")
                continue
            if not text.strip():
                continue
            cells = next(csv.reader([text.rstrip("\r")]), [])
            if len(cells) != width:
                cut = " (the file ends there: truncated?)" if last else ""
                self._note(f"line {number} has {len(cells)} of {width} cells{cut}: skipped")
                continue
            out.append([_float(cells[i]) for i in use])
        return np.asarray(out, dtype=np.float64).reshape(len(out), len(use))


def _float(text: str) -> float:
    try:
        return _to_float(text)
    except ValueError:
        return math.nan


def _blank_nul_lines(block: bytes) -> bytes:
    """``block`` with every line that holds a NUL byte made empty (its newline kept)."""
    return b"\n".join(b"" if b"\0" in line else line for line in block.split(b"\n"))


#: The most bytes of metrics.csv :func:`read_csv_rows` reads (its rows are all held, as strings).
MAX_ROWS_BYTES = 256 * 2**20


def read_csv_rows(folder: str | Path, name: str = METRICS_FILE, limit: int = MAX_ROWS_BYTES,
                  header: tuple[str, ...] | list[str] | None = None) -> tuple[list[dict[str, str]], str]:
    """The rows of a CSV file of a run folder as ``{column: text}``: ``(rows, problem)``.

    For a file that is rewritten whole (the trainer's metrics.csv on resume).
    Every readable row is returned, those after a damaged line included: a line
    that holds NUL bytes (a power loss), is not UTF-8 or has a cell too many or
    too few is left out and said in ``problem`` (``""``: the file was read whole;
    else its first problem and how many more). A missing file has no rows and
    no problem; one that is not a regular file in the folder has no rows and a
    problem.

    Parameters
    ----------
    header : sequence of str, optional
        The columns to read the rows by when the file's header line itself is
        damaged (without it, such a file gives no rows).

    Raises
    ------
    RunFileError
        The file is larger than ``limit`` bytes (its rows are not dropped silently).
    """
    try:
        f = open_run_file(folder, name)
    except RunFileError as exc:
        return [], str(exc)
    if f is None:
        return [], ""
    with f:
        try:
            data = f.read(limit + 1)
        except OSError as exc:
            return [], f"{name}: {_os_reason(exc)}"
    if len(data) > limit:
        raise RunFileError(name, f"larger than {limit / 2**20:g} MB: not read")
    problems: list[str] = []
    columns: list[str] | None = None
    rows: list[dict[str, str]] = []
    for number, raw in enumerate(data.split(b"\n"), start=1):
        if b"\0" not in raw and not raw.strip():
            continue  # a blank line (one of NUL bytes is damage: said)
        try:
            if b"\0" in raw:
                raise RunFileError(name, "NUL bytes (a write cut short by a power loss?)")
            text = _decode(name, raw)
        except RunFileError as exc:
            if columns is None:  # the header line
                problems.append(f"{exc} on its header line" + ("" if header else ": no row can be read"))
                columns = list(header or ())
            else:
                problems.append(f"{exc} on line {number}: left out")
            continue
        cells = next(csv.reader([text.rstrip("\r")]), [])
        if columns is None:
            columns = cells
            if len(set(columns)) < len(columns):
                problems.append(f"{name}: its header names a column twice")
            continue
        if not columns:  # the header could not be read: said once
            continue
        if len(cells) != len(columns):
            problems.append(f"{name}: line {number} has {len(cells)} of {len(columns)} cells: left out")
            continue
        rows.append(dict(zip(columns, cells)))
    if not problems:
        return rows, ""
    more = f" (and {len(problems) - 1} more damaged line(s))" if len(problems) > 1 else ""
    return rows, problems[0] + more


# ---------------------------------------------------------------------------------------------- processes
def _proc_stat(pid: int) -> list[bytes] | None:
    """The fields of ``/proc/PID/stat`` from field 3 (state) on; None where there is no such process."""
    try:
        with open(f"/proc/{int(pid)}/stat", "rb") as f:
            data = f.read(4096)
    except (OSError, ValueError, OverflowError):
        return None
    return data[data.rfind(b")") + 2:].split()  # the name (field 2) may hold spaces and parentheses


def process_start_time(pid: int) -> int | None:
    """When process ``pid`` started, in clock ticks since boot (Linux: field 22 of ``/proc/PID/stat``).

    None where there is no ``/proc``, or no such live process (a zombie counts as gone).
    """
    fields = _proc_stat(pid)
    if fields is None or len(fields) < 20 or fields[0] in (b"Z", b"X"):
        return None
    try:
        return int(fields[19])
    except ValueError:
        return None


def _parent_pid(pid: int) -> int | None:
    """The parent of process ``pid`` (field 4 of ``/proc/PID/stat``); None when unknown."""
    fields = _proc_stat(pid)
    try:
        return int(fields[1]) if fields is not None and len(fields) > 1 else None
    except ValueError:
        return None


def _cmdline(pid: int) -> list[str] | None:
    """``/proc/PID/cmdline`` as a list of arguments; None when it cannot be read (or is empty: a kernel thread)."""
    try:
        with open(f"/proc/{int(pid)}/cmdline", "rb") as f:
            data = f.read(65536)
    except (OSError, ValueError, OverflowError):
        return None
    argv = [os.fsdecode(a) for a in data.split(b"\0")]
    while argv and not argv[-1]:
        argv.pop()
    return argv or None


def _stem(arg: str) -> str:
    """The lower-case base name of a program or script, without ``.exe`` / ``.py`` / ``-script.py``."""
    name = os.path.basename(arg).lower()
    for suffix in ("-script.py", "-script.pyw", ".exe", ".py", ".pyw"):
        if name.endswith(suffix):
            return name[: -len(suffix)]
    return name


def _python_target(argv: list[str]) -> tuple[str, str] | None:
    """What a Python command line runs: ``("m", module)``, ``("c", code)`` or ``("script", path)``; None: nothing.

    Python's own options before it are skipped as the interpreter reads them
    (``-u``, ``-X dev``, ``-W error``, ``-uBm mod``); an argument after the target is
    the program's own, never taken for ``-m``.
    """
    i = 1
    while i < len(argv):
        arg = argv[i]
        if arg == "--":
            return ("script", argv[i + 1]) if i + 1 < len(argv) else None
        if not arg.startswith("-") or arg == "-":
            return "script", arg
        if arg.startswith("--"):
            i += 1
            continue
        for j in range(1, len(arg)):
            flag = arg[j]
            if flag in "mcWX":  # the rest of the argument, or the next one, is the option's value
                value = arg[j + 1:]
                if not value:
                    i += 1
                    value = argv[i] if i < len(argv) else ""
                if flag in "mc":
                    return flag, value
                break
        i += 1
    return None


def _is_python(program: str) -> bool:
    name = _stem(program)
    return "python" in name or "pypy" in name or name == _stem(sys.executable)


#: Python code of a ``multiprocessing`` child (spawn and forkserver start methods): who it is depends on its parent.
_MP_CHILD_CODE = ("from multiprocessing.spawn import spawn_main", "from multiprocessing.forkserver import main")


def _command_kind(argv: list[str]) -> str | None:
    """``"workbench"`` for a command line of a Workbench process, ``"child"`` for a multiprocessing child, else None.

    A Workbench process: the ``workbench`` program (a frozen executable, or the
    console script Python runs: ``python .../bin/workbench``), or ``python -m
    workbench`` / ``-m workbench.<module>`` (the window, the CLI, the ranks of a
    data-parallel run, ``workbench.core.train.launch.parent_watch``).
    """
    if _stem(argv[0]) == "workbench":
        return "workbench"
    if not _is_python(argv[0]):
        return None
    target = _python_target(argv)
    if target is None:
        return None
    kind, value = target
    if kind == "m" and (value == "workbench" or value.startswith("workbench.")):
        return "workbench"
    if kind == "script" and (_stem(value) == "workbench"
                             or value.replace(os.sep, "/").endswith("/workbench/__main__.py")):
        return "workbench"
    if (kind == "c" and value.startswith(_MP_CHILD_CODE)) or "--multiprocessing-fork" in argv:
        return "child"
    return None


def _is_workbench_process(pid: int, depth: int = 0) -> bool:
    """Whether the live process ``pid`` runs Workbench (Linux: from ``/proc/PID/cmdline``).

    This very process is one (it is running this code: the tests' in-process
    trainers, the window's own thread). A ``multiprocessing`` child (the
    window's training process) is one when its parent is.
    """
    if pid == os.getpid():
        return True
    argv = _cmdline(pid)
    kind = _command_kind(argv) if argv else None
    if kind == "child" and depth < 4:
        parent = _parent_pid(pid)
        return parent is not None and parent > 1 and _is_workbench_process(parent, depth + 1)
    return kind == "workbench"


def _alive_elsewhere(pid: int) -> bool:
    """Whether ``pid`` is alive, where there is no /proc (its identity cannot be checked there)."""
    if sys.platform == "win32":  # os.kill(pid, 0) would end the process on Windows
        import ctypes

        kernel32 = ctypes.windll.kernel32  # type: ignore[attr-defined]
        handle = kernel32.OpenProcess(0x1000, False, pid)  # PROCESS_QUERY_LIMITED_INFORMATION
        if not handle:
            return False
        code = ctypes.c_ulong()
        try:
            return bool(kernel32.GetExitCodeProcess(handle, ctypes.byref(code))) and code.value == 259
        finally:
            kernel32.CloseHandle(handle)
    try:
        os.kill(pid, 0)
    except PermissionError:
        return True
    except OSError:
        return False
    return True


#: Above any process id of Linux (2**22), macOS or Windows; a larger "pid" is no process (os.kill would overflow).
_MAX_PID = 2**31 - 1


def is_training_process(pid: object, start: object = None, attached: bool = False) -> bool:
    """Whether a ``status.json``'s ``pid`` (and ``pid_start``) name a live Workbench training process.

    A recorded pid is trusted only if it is a positive pid (``os.kill(0, 0)``
    would signal this process's group, ``-1`` every process) of a live process
    whose command line is a Workbench process. Where ``/proc`` exists: alive and
    not a zombie, started at ``start`` (when recorded: a reused pid fails), and
    its ``/proc/PID/cmdline`` the ``workbench`` program or console script,
    ``python -m workbench[.<module>]``, or a ``multiprocessing`` child of such a
    process (the window's training process); this very process counts too (it
    runs Workbench: a trainer on one of its threads, as in the tests). Any other
    process (a plain ``python``, ``sleep``) that took the pid of a dead run is
    not. Elsewhere being alive is all that can be checked. ``attached`` (a
    ``status.json`` written by a user's own script through ``workbench.attach``):
    any program counts, as long as its recorded start time matches (required then).
    """
    if not isinstance(pid, int) or isinstance(pid, bool) or not 0 < pid <= _MAX_PID:
        return False
    if os.path.exists("/proc/self/stat"):
        began = process_start_time(pid)
        if began is None or (isinstance(start, int) and not isinstance(start, bool) and began != start):
            return False
        if attached:  # the user's own python script: its identity is its start time
            return isinstance(start, int) and not isinstance(start, bool)
        return _is_workbench_process(pid)
    return _alive_elsewhere(pid)


def training_pid(folder: str | Path) -> int | None:
    """The pid of the live training process of a run folder (its ``status.json`` says running); None if none.

    An unreadable ``status.json`` is no evidence of a live run: None.
    """
    try:
        status = read_status(folder)
    except RunFileError:
        return None
    if not status or status.get("state") != "running":
        return None
    pid = status.get("pid")
    return pid if is_training_process(pid, status.get("pid_start"), status.get("attached") is True) else None


def refuse_if_training(folder: str | Path, action: str) -> None:
    """Raise :class:`RunIsTraining` when a live process is training in ``folder``.

    Parameters
    ----------
    action : str
        What was asked, for the message (``"rename"``, ``"delete"``).
    """
    pid = training_pid(folder)
    if pid is not None:
        name = printable(Path(folder).name)
        raise RunIsTraining(f"{name} is training (process {pid}): stop the run before you {action} it")
