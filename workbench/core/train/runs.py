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
    The mid-run edits (:mod:`workbench.core.train.edit_log`).
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
from workbench.core.run_files import process_start_time, read_csv_rows

#: Columns of ``metrics.csv``; times in seconds since the start of the run.
METRICS_COLUMNS = ("epoch", "step", "train_loss", "val_loss", "val_acc", "lr", "time_s", "samples_per_s",
                   "input_wait", "best")


#: The run's state for each end reason of ``Trainer.fit()``: a user's stop is not a crash.
STATES = {"completed": "finished", "stopped": "stopped", "error": "crashed", "nonfinite": "crashed",
          "oom": "crashed"}


def write_status(run_dir: str | Path, reason: str | None, started: float, info: dict | None = None) -> None:
    """Write ``run_dir/status.json`` atomically: running (``reason`` None) or ended with ``reason``.

    Times are seconds since the epoch (``time.time()``). ``info`` (``model``,
    ``dataset``, ``epochs``) is copied in, so a runs list need not parse every
    run.toml (1.5 ms each). ``pid_start`` is the process's start time in clock
    ticks since boot (Linux; None elsewhere): a reader trusts "running" only while
    that process lives (:func:`workbench.core.run_files.is_training_process`).
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


class MetricsCSV:
    """The epoch-level ``metrics.csv`` of a run, rewritten atomically at each append.

    Parameters
    ----------
    path : Path
        The CSV file. Existing rows are kept (a resumed run appends to them).

    Attributes
    ----------
    problem : str
        Why some of the existing file could not be read (``""``: all was).
    """

    def __init__(self, path: str | Path):
        self.path = Path(path)
        #: the rows of an existing file that could be read (damaged lines, a FIFO or a link out of the folder:
        #: left out, and gone at the first rewrite; a file too large to hold raises RunFileError)
        self.rows: list[dict]
        self.rows, self.problem = read_csv_rows(self.path.parent, self.path.name)

    def append(self, metrics: dict) -> None:
        """Add one epoch row (keys of :data:`METRICS_COLUMNS`; missing ones left blank)."""
        row = {}
        for k in METRICS_COLUMNS:
            v = metrics.get(k, "")
            if isinstance(v, float) and math.isnan(v):
                v = ""
            row[k] = v
        # A resumed run replaces the rows of epochs it is redoing.
        self.rows = [r for r in self.rows if str(r.get("epoch")) != str(row["epoch"])]
        self.rows.append(row)
        buf = io.StringIO()
        w = csv.DictWriter(buf, fieldnames=list(METRICS_COLUMNS), extrasaction="ignore")
        w.writeheader()
        w.writerows(self.rows)
        atomic_write_text(self.path, buf.getvalue())
