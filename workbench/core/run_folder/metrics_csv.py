"""``metrics.csv`` (and ``steps.csv``) of a run folder read whatever is on disk, in bounded memory.

:class:`MetricsBlocks` reads it (or ``steps.csv``, the per-step rows, given ``name``) in
blocks of :data:`BLOCK_BYTES`, parsed by ``numpy.loadtxt``, whatever its length; a damaged line (NUL bytes left by a
power loss, a truncated line, a cell too many) is skipped and the lines after it
are read. :func:`read_csv_rows` reads a file that is rewritten whole (the
trainer's ``metrics.csv`` on resume) as ``{column: text}`` rows; :func:`read_header` reads a file's columns
alone. Qt-free.
"""

from __future__ import annotations

import csv
import io
import math
import os
from pathlib import Path
from typing import IO, Callable, Iterator

import numpy as np

from workbench.core.csv_cells import unescape_cell
from workbench.core.run_folder.reading import METRICS_FILE, RunFileError, decode_text, open_run_file, os_reason

__all__ = ["MetricsBlocks", "BLOCK_BYTES", "MAX_COLUMNS", "read_csv_rows", "read_header", "MAX_LINE_BYTES",
           "MAX_ROWS_BYTES"]


#: Bytes of ``metrics.csv`` parsed at a time (~12,000 rows; numpy holds the GIL ~15 ms over each: a
#: reading thread leaves the GUI thread that often).
BLOCK_BYTES = 2**20
#: The longest ``metrics.csv`` line read (a longer one is skipped as damaged).
MAX_LINE_BYTES = 2**20
#: The most columns of ``metrics.csv`` read when all are asked for (the others are said in the problem).
MAX_COLUMNS = 1000


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
    name : str
        The file of the run folder read (:data:`~workbench.core.run_folder.reading.METRICS_FILE`, or
        ``steps.csv``: the same form, one row per step).

    Attributes
    ----------
    header : tuple of str
        The file's columns (empty until iterated; empty for a missing file).
    rows : int
        Rows read so far.
    problem : str
        ``"<name>: <reason>"`` for the first problem met, else ``""``.
    exists : bool
        Whether the file was there.
    """

    def __init__(self, folder: str | Path, columns=None, progress: Callable[[float], None] | None = None,
                 block_bytes: int = BLOCK_BYTES, name: str = METRICS_FILE):
        self.folder, self.progress, self.name = folder, progress, name
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
            self.problem = f"{self.name}: {reason}"

    def __iter__(self) -> Iterator[dict[str, np.ndarray]]:
        try:
            f = open_run_file(self.folder, self.name)
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
                self._note(os_reason(exc))

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
            text = decode_text(self.name, line)
        except RunFileError as exc:
            self.problem = f"{exc} on its header line"
            return None
        names = next(csv.reader([text.strip("\r\n")]), [])
        self.header = tuple(unescape_cell(n.strip()) for n in names)
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
                text = decode_text(self.name, raw)
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


def read_header(folder: str | Path, name: str = METRICS_FILE) -> tuple[str, ...]:
    """The columns of a CSV file of a run folder (its first line); ``()`` when it is missing or unreadable.

    Reads at most :data:`MAX_LINE_BYTES` (the rest of the file is not read); never raises.
    """
    try:
        f = open_run_file(folder, name)
    except RunFileError:
        return ()
    if f is None:
        return ()
    with f:
        try:
            line = f.readline(MAX_LINE_BYTES)
        except OSError:
            return ()
    if b"\0" in line:
        return ()
    try:
        text = decode_text(name, line.rstrip(b"\r\n"))
    except RunFileError:
        return ()
    return tuple(unescape_cell(n.strip()) for n in next(csv.reader([text]), []))


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
            return [], f"{name}: {os_reason(exc)}"
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
            text = decode_text(name, raw)
        except RunFileError as exc:
            if columns is None:  # the header line
                problems.append(f"{exc} on its header line" + ("" if header else ": no row can be read"))
                columns = list(header or ())
            else:
                problems.append(f"{exc} on line {number}: left out")
            continue
        cells = [unescape_cell(c) for c in next(csv.reader([text.rstrip("\r")]), [])]
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
