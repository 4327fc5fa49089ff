"""Run folders: ``run.toml``, ``metrics.csv``, ``last.pt``, ``best.pt``.

A run folder holds everything needed to look at or replay a run:

``run.toml``
    Every setting (:meth:`TrainConfig.to_toml`); ``workbench train run.toml``
    replays it.
``metrics.csv``
    One row per epoch (columns :data:`METRICS_COLUMNS`); step-level curves are
    streamed to callbacks, not written here. Rewritten atomically each epoch.
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

import csv
import io
import math
import os
import sys
import time
from pathlib import Path

from workbench.core.files import atomic_write_text
from workbench.core.run_folder.metrics_csv import read_csv_rows
from workbench.core.run_folder.processes import process_start_time

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
        w = csv.DictWriter(buf, fieldnames=self.columns, extrasaction="ignore")
        w.writeheader()
        w.writerows(self.rows)
        atomic_write_text(self.path, buf.getvalue())
