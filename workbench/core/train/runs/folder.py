"""Run folders: ``run.toml``, ``metrics.csv``, ``steps.csv``, ``last.pt``, ``best.pt``.

A run folder holds everything needed to look at or replay a run:

``run.toml``
    Every setting (:meth:`TrainConfig.to_toml`); ``workbench train run.toml``
    replays it.
``metrics.csv``
    One row per epoch (columns :data:`METRICS_COLUMNS`, then a task's own
    metrics). Rewritten atomically each epoch.
``steps.csv``
    One row per optimizer step (columns :data:`STEP_COLUMNS`, then an attached
    script's own step metrics), appended at each emission of the step metrics
    from the first step on (:class:`StepsCSV`): a run stopped before its first
    epoch ended still has its curve.
``last.pt`` / ``best.pt``
    Checkpoints at the last epoch end and at the epoch of lowest validation loss.
``status.json``
    ``{"state", "reason", "started", "ended", "pid", "pid_start"}``: ``"running"``
    from the start (with the process id and, where ``/proc`` tells it, the
    process's start time, so that a reused pid is not taken for the run), then
    the end reason (:func:`write_status`).
``edits.jsonl``
    The mid-run edits (:mod:`workbench.core.train.trainer.edit_log`).
"""

from __future__ import annotations

import io
import logging
import math
import os
import sys
import time
from pathlib import Path

from workbench.core import csv_cells
from workbench.core.files import append_whole, atomic_write, atomic_write_text
from workbench.core.run_folder.metrics_csv import MAX_LINE_BYTES, read_csv_rows, read_header
from workbench.core.run_folder.processes import process_start_time

log = logging.getLogger(__name__)

#: Columns of ``metrics.csv``; times in seconds since the start of the run.
METRICS_COLUMNS = ("epoch", "step", "train_loss", "val_loss", "val_acc", "lr", "time_s", "samples_per_s",
                   "input_wait", "best")


#: Numbers of an epoch's metrics dict that are not metrics.csv columns (``time`` is written as ``time_s``).
_NOT_COLUMNS = ("time", "epoch_time")

#: The run's state for each end reason of ``Trainer.fit()``: a user's stop is not a crash.
STATES = {"completed": "finished", "stopped": "stopped", "error": "crashed", "nonfinite": "crashed",
          "oom": "crashed"}


def write_status(run_dir: str | Path, reason: str | None, started: float, info: dict | None = None) -> None:
    """Write ``run_dir/status.json`` atomically: running (``reason`` None) or ended with ``reason``.

    Times are seconds since the epoch (``time.time()``). ``info`` (``model``,
    ``dataset``, ``epochs``) is copied in, so a runs list need not parse every
    run.toml (1.5 ms each). ``pid_start`` is the process's start time in clock
    ticks since boot (Linux; None elsewhere): a reader trusts "running" only while
    that process lives (:func:`workbench.core.run_folder.processes.is_training_process`).
    """
    import json

    pid = os.getpid()
    status = {"state": "running" if reason is None else STATES.get(reason, "crashed"), "reason": reason,
              "started": float(started), "ended": None if reason is None else time.time(), "pid": pid,
              "pid_start": process_start_time(pid), **(info or {})}
    atomic_write_text(Path(run_dir) / "status.json", json.dumps(status))


def note_status(run_dir: str | Path, **fields) -> None:
    """Add ``fields`` to ``run_dir/status.json`` (atomically), keeping what it says: a fact learnt after the run's
    end (``error``: the ranks ended with different weights).

    Raises
    ------
    OSError
        The file cannot be written (one that cannot be read is written anew with ``fields``).
    """
    import json

    path = Path(run_dir) / "status.json"
    try:
        with open(path, "rb") as f:
            status = json.loads(f.read(1 << 20))  # status.json is a few hundred bytes; bounded all the same
    except (OSError, ValueError):
        status = {}
    if not isinstance(status, dict):
        status = {}
    atomic_write_text(path, json.dumps({**status, **fields}))


def default_data_dir() -> Path:
    """``$WORKBENCH_DATA_DIR`` if set, else the platform's per-user data folder + ``workbench``.

    Linux: ``$XDG_DATA_HOME/workbench`` (``~/.local/share/workbench``); macOS:
    ``~/Library/Application Support/workbench``; Windows: ``%LOCALAPPDATA%\\workbench``.
    """
    env = os.environ.get("WORKBENCH_DATA_DIR")
    if env:
        return Path(env).expanduser()
    home = Path.home()
    if sys.platform == "win32":
        return Path(os.environ.get("LOCALAPPDATA", home / "AppData" / "Local")) / "workbench"
    if sys.platform == "darwin":
        return home / "Library" / "Application Support" / "workbench"
    return Path(os.environ.get("XDG_DATA_HOME", home / ".local" / "share")) / "workbench"


def default_runs_root() -> Path:
    """Folder that holds the run folders: ``default_data_dir() / "runs"``."""
    return default_data_dir() / "runs"


def new_run_dir(root: str | Path | None = None, name: str | None = None) -> Path:
    """Create and return a fresh run folder ``root/NAME`` (default name: local time ``YYYYmmdd-HHMMSS``).

    A ``-2``, ``-3``... suffix keeps names unique.
    """
    root = Path(root) if root is not None else default_runs_root()
    base = name or time.strftime("%Y%m%d-%H%M%S")
    root.mkdir(parents=True, exist_ok=True)
    for i in range(1, 10_000):
        path = root / (base if i == 1 else f"{base}-{i}")
        try:
            path.mkdir()
            return path
        except FileExistsError:
            continue
    raise OSError(f"{root}: cannot create a new run folder named {base}")


#: How a damaged metrics.csv set aside is named: ``metrics.csv.damaged-YYYYmmdd-HHMMSS`` (``-2``... if taken).
DAMAGED_INFIX = ".damaged-"


def _set_aside(path: Path) -> Path:
    """Rename ``path`` (a file, a FIFO, a link: never followed) to a free ``NAME.damaged-<local time>``; the new path.

    Raises
    ------
    OSError
        It could not be renamed (the caller must then not overwrite it).
    """
    base = f"{path.name}{DAMAGED_INFIX}{time.strftime('%Y%m%d-%H%M%S')}"
    for i in range(1, 1000):
        dst = path.with_name(base if i == 1 else f"{base}-{i}")
        if not os.path.lexists(dst):
            os.rename(path, dst)
            return dst
    raise FileExistsError(f"{path}: no free name to set it aside as {base}")


class MetricsCSV:
    """The epoch-level ``metrics.csv`` of a run, rewritten atomically at each append.

    An existing file's rows are kept (a resumed run appends to them). No data is
    ever dropped: when the existing file is damaged (NUL bytes from a power
    loss, a line that is not UTF-8 or has a cell too many or too few, not a
    regular file), it is renamed ``metrics.csv.damaged-<time>`` before anything
    is written, and every row that could be read (those after the damage
    included) is written at once to a new ``metrics.csv``; :attr:`problem` says
    what was damaged and where the old file is. Columns of the file that are
    not :data:`METRICS_COLUMNS` (an older or newer version's) are kept.

    Parameters
    ----------
    path : Path
        The CSV file.

    Attributes
    ----------
    rows : list of dict
        The rows so far (text values for the rows read back).
    problem : str
        Why some of the existing file could not be read and where it was kept
        (``""``: all was). The trainer should show it to the user (the run's log or status).
    damaged : Path or None
        Where the damaged file was set aside (None: it was not damaged).

    Raises
    ------
    RunFileError
        The existing file is too large to hold (:func:`~workbench.core.run_folder.metrics_csv.read_csv_rows`).
    OSError
        The existing file is damaged and could not be set aside (nothing was written).
    """

    def __init__(self, path: str | Path):
        self.path = Path(path)
        self.rows: list[dict]
        self.rows, self.problem = read_csv_rows(self.path.parent, self.path.name, header=METRICS_COLUMNS)
        extra = {k: None for r in self.rows for k in r if k not in METRICS_COLUMNS}
        self.columns: list[str] = [*METRICS_COLUMNS, *extra]
        self.damaged: Path | None = None
        if self.problem and os.path.lexists(self.path):
            try:
                self.damaged = _set_aside(self.path)
            except OSError as exc:
                raise OSError(f"{self.path}: damaged ({self.problem}) and it could not be set aside "
                              f"({exc.strerror or exc}): not overwritten") from exc
            self.problem += (f"; the file was kept as {self.damaged.name} and its {len(self.rows)} readable "
                             f"row(s) carried over to a new {self.path.name}")
            self._write()

    def append(self, metrics: dict) -> None:
        """Add one epoch row: the keys of :data:`METRICS_COLUMNS` (missing ones left blank), then every
        other number in ``metrics`` (a task's metrics: ``val_r2``, ``train_iou``...) as a column of its own."""
        for k, v in metrics.items():
            if k not in self.columns and k not in _NOT_COLUMNS and isinstance(v, (int, float)) \
                    and not isinstance(v, bool):
                self.columns.append(k)
        row = {}
        for k in self.columns:
            v = metrics.get(k, "")
            if isinstance(v, float) and math.isnan(v):
                v = ""
            row[k] = v
        # A resumed run replaces the rows of epochs it is redoing.
        self.rows = [r for r in self.rows if str(r.get("epoch")) != str(row["epoch"])]
        self.rows.append(row)
        self._write()

    def _write(self) -> None:
        buf = io.StringIO()
        w = csv_cells.dict_writer(buf, fieldnames=self.columns, extrasaction="ignore")
        w.writeheader()
        w.writerows(self.rows)
        atomic_write_text(self.path, buf.getvalue())


#: Columns of ``steps.csv``: the step dict's keys (:data:`~workbench.core.train.trainer.hooks.STEP_KEYS`), ``loss``
#: written as ``train_loss`` and ``time`` as ``time_s`` (the names of ``metrics.csv``).
STEP_COLUMNS = ("step", "epoch", "epoch_float", "train_loss", "lr", "time_s", "samples", "samples_per_s",
                "input_wait")
#: A step dict's keys written under another name.
_STEP_NAMES = {"loss": "train_loss", "time": "time_s"}
#: Bytes read from a file's end at a time, looking for the last rows (a rewind drops them).
_TAIL_BYTES = 1 << 16


def _is_number(v: object) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


class StepsCSV:
    """The per-step ``steps.csv`` of a run: rows appended (never rewritten) from the first step.

    Each :meth:`append` adds the step dicts of one emission (4-25 per second)
    as rows of :data:`STEP_COLUMNS` (blank when a dict lacks one), then a
    column for every other number a dict holds (an attached script's
    ``acc=...``); a column first seen later widens the file once (a copy, put
    in place atomically). Steps redone after a rewind (a resume from an
    earlier checkpoint, a NaN rollback) replace the rows they redo, so the
    steps read in order. A line cut short by a crash is dropped before the
    next rows; a file whose header cannot be read is set aside
    (``steps.csv.damaged-<time>``). Writing never raises: a failure is kept in
    :attr:`problem` and logged once, and training goes on.

    Parameters
    ----------
    path : str or Path
        The file (``run_dir / "steps.csv"``).

    Attributes
    ----------
    columns : list of str
        The file's columns (empty until the first row for a new file).
    last_step : int
        The last step written (0: none).
    problem : str
        Why rows could not be written (``""``: all were).
    """

    def __init__(self, path: str | Path):
        self.path = Path(path)
        self.columns: list[str] = []
        self.last_step = 0
        self.problem = ""
        try:
            self._open_existing()
        except OSError as exc:
            self._fail(exc)

    def _fail(self, exc: OSError) -> None:
        if not self.problem:
            log.warning("%s: step rows not written: %s", self.path, exc.strerror or exc)
        self.problem = f"{self.path.name}: {exc.strerror or exc}"

    def _open_existing(self) -> None:
        if not os.path.lexists(self.path):
            return
        header = list(read_header(self.path.parent, self.path.name))
        if not self.path.is_file() or "step" not in header:
            _set_aside(self.path)
            return
        self.columns = header
        with open(self.path, "rb+") as f:
            end = f.seek(0, os.SEEK_END)
            f.seek(max(0, end - 1))
            if end and f.read(1) != b"\n":  # a line cut short by a crash: drop it
                self._truncate(f, self._line_start(f, end))
        self.last_step = self._tail_step()

    def _line_start(self, f, end: int) -> int:
        """The offset just after the last newline before ``end`` (0: none)."""
        pos = end
        while pos > 0:
            start = max(0, pos - _TAIL_BYTES)
            f.seek(start)
            cut = f.read(pos - start).rfind(b"\n")
            if cut >= 0:
                return start + cut + 1
            pos = start
        return 0

    @staticmethod
    def _truncate(f, offset: int) -> None:
        f.truncate(offset)
        f.flush()

    def _tail_lines(self, f):
        """``(offset, step or None)`` of the file's rows from the last back (the header line is not one)."""
        index = self.columns.index("step")
        pos, carry = f.seek(0, os.SEEK_END), b""  # carry: the part of a line after ``pos`` whose start is before
        while pos > 0:
            start = max(0, pos - _TAIL_BYTES)
            f.seek(start)
            data = f.read(pos - start) + carry  # the bytes from ``start`` on
            lines = data.split(b"\n")
            carry = lines.pop(0) if start > 0 else b""
            offset = start + len(carry) + 1 if start > 0 else 0
            offsets = []
            for line in lines:
                offsets.append(offset)
                offset += len(line) + 1
            for line, at in zip(reversed(lines), reversed(offsets)):
                if at > 0 and line.strip():  # not the header, not the empty piece after the last newline
                    yield at, _step_of(line, index)
            if len(carry) > MAX_LINE_BYTES:
                return
            pos = start

    def _tail_step(self) -> int:
        with open(self.path, "rb") as f:
            for _offset, step in self._tail_lines(f):
                if step is not None:
                    return step
        return 0

    def _rewind(self, step: int) -> None:
        """Drop the rows of steps ``>= step`` at the file's end (steps being redone)."""
        with open(self.path, "rb+") as f:
            cut = None
            for offset, row_step in self._tail_lines(f):
                if row_step is not None and row_step < step:
                    break
                cut = offset
            if cut is not None:
                self._truncate(f, cut)
        self.last_step = self._tail_step()

    def _widen(self, new: list[str]) -> None:
        """Add columns ``new`` to the file: every row gets blank cells for them (a copy put in place)."""
        columns = self.columns + new
        blanks = b"," * len(new)

        def write(out) -> None:
            text = io.StringIO()
            csv_cells.writer(text, lineterminator="\n").writerow(columns)
            out.write(text.getvalue().encode())
            with open(self.path, "rb") as f:
                f.readline()
                for line in f:
                    out.write(line.rstrip(b"\r\n") + blanks + b"\n")

        atomic_write(self.path, write)
        self.columns = columns

    def append(self, rows: list[dict]) -> None:
        """Write the step dicts ``rows`` (keys :data:`~workbench.core.train.trainer.hooks.STEP_KEYS`, and any
        other numbers); never raises."""
        rows = [{_STEP_NAMES.get(k, k): v for k, v in r.items() if _is_number(v)} for r in rows]
        rows = [r for r in rows if "step" in r]
        if not rows:
            return
        try:
            self._append(rows)
        except OSError as exc:
            self._fail(exc)

    def _append(self, rows: list[dict]) -> None:
        first = int(rows[0]["step"])
        if self.columns and first <= self.last_step and self.path.exists():
            self._rewind(first)
        keys = list(dict.fromkeys(k for r in rows for k in r))
        if not self.columns or not self.path.exists():
            self.columns = [*STEP_COLUMNS, *(k for k in keys if k not in STEP_COLUMNS)]
            text = io.StringIO()
            csv_cells.writer(text, lineterminator="\n").writerow(self.columns)
            try:
                self.path.write_text(text.getvalue(), encoding="utf-8")
            except OSError:  # a header cut short (a full disk): no file, and the next rows start it again
                self.columns = []
                self.path.unlink(missing_ok=True)
                raise
        else:
            new = [k for k in keys if k not in self.columns]
            if new:
                self._widen(new)
        text = io.StringIO()
        w = csv_cells.writer(text, lineterminator="\n")
        for r in rows:
            w.writerow(["" if (v := r.get(k, "")) == "" or (isinstance(v, float) and math.isnan(v)) else v
                        for k in self.columns])
        append_whole(self.path, text.getvalue().encode("utf-8"))
        self.last_step = int(rows[-1]["step"])


def _step_of(line: bytes, index: int) -> int | None:
    """The step cell of a ``steps.csv`` line (None: not a row that can be read)."""
    cells = line.rstrip(b"\r").split(b",")
    if index >= len(cells) or b"\0" in line:
        return None
    try:
        return int(float(cells[index]))
    except ValueError:
        return None
