"""The run folders under a runs root, one summary each: what ``workbench runs`` prints.

A summary comes from the folder's own files (``run.toml``, ``metrics.csv``, ``steps.csv``,
``status.json``: :mod:`workbench.core.train.runs.folder`), read by the total readers of
:mod:`workbench.core.run_folder`; nothing is loaded with torch, so 1,000 folders
list in well under a second. A file that cannot be read (wrong types, not UTF-8,
NUL bytes, truncated, a FIFO, a device, a link out of the folder, too large)
marks its run ``unreadable: <file>: <reason>`` (:attr:`RunSummary.problem`);
the other runs are listed as usual (a ``started`` time no clock can show, such
as 1e20 or Infinity, is such a reason; the formatters never raise and the JSON
holds no NaN or Infinity). A damaged ``metrics.csv`` that a resumed run set
aside (``metrics.csv.damaged-<time>``) is said too. A folder whose ``status.json`` says
``running`` is listed ``running`` only while the recorded process is a live
Workbench process (:func:`~workbench.core.run_folder.processes.is_training_process`), else
``crashed``; status.json is not rewritten (a run on another machine sharing the
folder would be clobbered). ``metrics.csv`` is read in blocks, so memory is
bounded whatever its length: a curve is built into a min/max pyramid as it is
read (:func:`read_curve`).

Every metric a run has is offered (:func:`metric_names`): each ``metrics.csv``
column but the axes (``val_r2``, ``val_f1``, ``val_top5``...: a task's own), and
each ``steps.csv`` column as ``step/<name>`` (``step/train_loss``: the loss of
every step, there from a run's first step, so a run stopped before its first
epoch ended draws too). A run of a script attached with ``workbench.attach``
(``status.json`` says ``attached``) has no ``run.toml`` by design: it is listed
as an :data:`ATTACHED` run, with its epochs and steps, never as unreadable.
"""

from __future__ import annotations

import io
import json
import math
import os
import stat
import time
from collections import OrderedDict
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Callable

import numpy as np

from workbench.core import csv_cells
from workbench.core.model.spec import short_name
from workbench.core.plot_lod import MinMaxPyramid, PyramidBuilder
from workbench.core.run_folder.metrics_csv import MetricsBlocks, read_header
from workbench.core.run_folder.printable import printable
from workbench.core.run_folder.processes import RunIsTraining, is_training_process, refuse_if_training
from workbench.core.run_folder.reading import (
    METRICS_FILE,
    STATUS_FILE,
    STEPS_FILE,
    TOML_FILE,
    RunFileError,
    open_run_file,
)
from workbench.core.run_folder.run_toml import RunInfo, read_run_info, read_toml
from workbench.core.run_folder.status import is_time, read_status

__all__ = ["METRICS", "X_AXES", "CURVE_POINTS", "TABLE_COLUMNS", "STEP_PREFIX", "ATTACHED", "WORKBENCH_RUN",
           "RunSummary", "RunIsTraining", "MetricsSummary", "config_diff", "curve_file", "export_metrics",
           "forget_cached", "format_time", "list_runs", "metric_last", "metric_names", "metrics_bytes",
           "metrics_signature", "metrics_summary", "read_curve", "read_metrics", "run_cell", "runs_table",
           "rename_run", "run_checkpoint", "summarize", "unread_bytes"]

#: The metrics.csv columns every run of Workbench's own has (offered first), and the x axes a comparison offers.
METRICS = ("train_loss", "val_loss", "val_acc", "lr")
X_AXES = ("step", "epoch", "time_s")
#: How a ``steps.csv`` column is named among a run's metrics: ``step/train_loss``.
STEP_PREFIX = "step/"
#: Columns of metrics.csv / steps.csv that are axes or flags, not metrics.
NOT_METRICS = frozenset({"epoch", "step", "time_s", "best", "epoch_float", "samples"})
#: :attr:`RunSummary.kind` of a run of Workbench's trainer, and of a script attached with ``workbench.attach``.
WORKBENCH_RUN, ATTACHED = "workbench run", "attached script"
#: The most points (or bin min/max points) :func:`read_curve` keeps of one curve (~12 MB with its levels).
CURVE_POINTS = 2**18

#: ``progress(fraction)``, fraction in [0, 1].
Progress = Callable[[float], None]


@dataclass
class RunSummary:
    """One run folder.

    Attributes
    ----------
    name : str
        The folder's name (as on disk: escape it with :func:`~workbench.core.run_folder.printable.printable` to show it).
    path : str
    started : float
        ``time.time()`` of the start (NaN: unknown; the folder's creation time is not used).
    model : str
        ``[model] arch`` (``""``: not recorded).
    dataset : str
    epochs_done : int
        Rows of ``metrics.csv``.
    epochs : int
        Epochs the run was set to (0: not said, as for an attached script).
    best_val_loss : float
        NaN when no epoch was validated.
    best_val_acc : float
        Accuracy in [0, 1] (NaN: none).
    state : str
        ``finished``, ``stopped``, ``crashed``, ``running`` (a live Workbench process), ``unknown``
        (no ``status.json``) or ``unreadable`` (``status.json`` could not be read).
    problem : str
        ``"<file>: <reason>"`` for each file of the folder that could not be read (``"; "`` between
        them), ``""`` when all could.
    steps : int
        Optimizer steps done: the last step of ``steps.csv`` or ``metrics.csv`` (0: none recorded).
    kind : str
        :data:`WORKBENCH_RUN`, or :data:`ATTACHED` for a script attached with ``workbench.attach`` (its
        ``dataset`` is the script's name; it has no ``run.toml``).
    metrics : list of str
        Every metric the run has (:func:`metric_names`).
    """

    name: str
    path: str
    started: float = math.nan
    model: str = ""
    dataset: str = ""
    epochs_done: int = 0
    epochs: int = 0
    best_val_loss: float = math.nan
    best_val_acc: float = math.nan
    state: str = "unknown"
    problem: str = ""
    steps: int = 0
    kind: str = WORKBENCH_RUN
    metrics: list[str] = field(default_factory=list)

    def state_text(self) -> str:
        """The state as a table shows it: with ``unreadable: <file>: <reason>`` when a file could not be read."""
        if not self.problem:
            return self.state
        if self.state == "unreadable":
            return f"unreadable: {self.problem}"
        return f"{self.state}; unreadable: {self.problem}"

    def to_dict(self) -> dict:
        """JSON-ready dict: NaN and infinities as None (``json.dumps`` would write ``NaN``/``Infinity``, which is
        not JSON), no problem as None."""
        out = {k: (None if isinstance(v, float) and not math.isfinite(v) else v) for k, v in asdict(self).items()}
        out["problem"] = self.problem or None
        return out


@dataclass(frozen=True)
class MetricsSummary:
    """What a runs list shows of a ``metrics.csv``: rows, best validation loss and accuracy (NaN: none), the last
    step and the columns."""

    rows: int = 0
    best_val_loss: float = math.nan
    best_val_acc: float = math.nan
    problem: str = ""
    last_step: int = 0
    columns: tuple[str, ...] = ()


#: metrics.csv summaries and run.toml infos by (path, device, inode, size, mtime): a file is read once per change
#: (a long metrics.csv takes seconds; parsing 1,000 run.toml files ~0.3 s).
_SUMMARIES: OrderedDict[tuple, MetricsSummary] = OrderedDict()
_INFOS: OrderedDict[tuple, object] = OrderedDict()
_KEPT = 4096


def forget_cached() -> None:
    """Drop the kept summaries of metrics.csv and run.toml files (benchmarks: read as a fresh process does)."""
    _SUMMARIES.clear()
    _INFOS.clear()


def _cached(cache: OrderedDict, key: tuple | None, compute):
    """``compute()``, kept in ``cache`` under ``key`` (None: not kept); the oldest go past :data:`_KEPT`."""
    if key is not None and key in cache:
        cache.move_to_end(key)
        return cache[key]
    value = compute()
    if key is not None:
        cache[key] = value
        while len(cache) > _KEPT:
            cache.popitem(last=False)
    return value


def _file_key(path: Path) -> tuple | None:
    try:
        st = os.stat(path)
    except (OSError, ValueError):
        return None
    if not stat.S_ISREG(st.st_mode):
        return None
    return (str(path), st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns)


def _reduce(op, best: float, values: np.ndarray | None) -> float:
    """``op`` (np.fmin / np.fmax: NaN skipped) of ``best`` and ``values``."""
    if values is None or not len(values):
        return best
    return float(op(best, op.reduce(values)))


def metrics_summary(folder: str | Path, progress: Progress | None = None) -> MetricsSummary:
    """Rows and best validation metrics of a run's ``metrics.csv``, read in blocks (kept until the file changes).

    Never raises: a file that cannot be read, or a damaged line, is said in ``problem``.
    """
    def read() -> MetricsSummary:
        blocks = MetricsBlocks(folder, ("val_loss", "val_acc"), progress)
        loss = acc = math.nan
        for cols in blocks:
            loss = _reduce(np.fmin, loss, cols.get("val_loss"))
            acc = _reduce(np.fmax, acc, cols.get("val_acc"))
        step = blocks.header.index("step") if "step" in blocks.header else -1
        last = _last_step(Path(folder), METRICS_FILE, step) if step >= 0 else 0
        return MetricsSummary(blocks.rows, loss, acc, blocks.problem, last, blocks.header)

    return _cached(_SUMMARIES, _file_key(Path(folder) / METRICS_FILE), read)


def _steps_summary(folder: Path) -> tuple[tuple[str, ...], int]:
    """``(columns, last step)`` of a run's ``steps.csv`` (``((), 0)``: none), reading its first line and its last
    64 KB only; kept until the file changes. Never raises."""
    def read():
        columns = read_header(folder, STEPS_FILE)
        return columns, (_last_step(folder, STEPS_FILE, columns.index("step")) if "step" in columns else 0)

    return _cached(_SUMMARIES, _file_key(folder / STEPS_FILE), read)


def _last_step(folder: Path, file: str, index: int) -> int:
    """The step cell (column ``index``) of the last whole row of ``file`` (0: none), from its last 64 KB (the rows
    of metrics.csv and steps.csv go in step order)."""
    try:
        f = open_run_file(folder, file)
    except RunFileError:
        return 0
    if f is None:
        return 0
    with f:
        try:
            f.seek(max(0, os.fstat(f.fileno()).st_size - (1 << 16)))
            tail = f.read(1 << 16)
        except OSError:
            return 0
    for line in reversed(tail.split(b"\n")[1:]):  # the first piece: the header, or a line cut by the seek
        try:
            value = float(line.rstrip(b"\r").split(b",")[index])
        except (IndexError, ValueError):
            continue
        if math.isfinite(value) and 0 <= value < 2**62:
            return int(value)
    return 0


def _names(metrics_columns, steps_columns) -> list[str]:
    """The metrics of one run: :data:`METRICS` it has first, its other metrics.csv columns, then ``step/...``."""
    epoch = [c for c in metrics_columns if c and c not in NOT_METRICS]
    first = [m for m in METRICS if m in epoch]
    steps = [c for c in steps_columns if c and c not in NOT_METRICS]
    steps = [c for c in ("train_loss", "lr") if c in steps] + [c for c in steps if c not in ("train_loss", "lr")]
    return list(dict.fromkeys([*first, *epoch, *(STEP_PREFIX + c for c in steps)]))


def metric_names(folder: str | Path) -> list[str]:
    """Every metric a run has: the metrics.csv columns but the axes (:data:`METRICS` first, then a task's own:
    ``val_r2``, ``val_f1``...), then each steps.csv column as ``step/<name>`` (``step/train_loss``...).

    Reads the files' first lines only; never raises (a file that cannot be read has no metrics).
    """
    folder = Path(folder)
    return _names(read_header(folder, METRICS_FILE), read_header(folder, STEPS_FILE))


def curve_file(metric: str) -> str:
    """The file of a run folder that holds ``metric``: ``steps.csv`` for a ``step/...`` one, else ``metrics.csv``."""
    return STEPS_FILE if metric.startswith(STEP_PREFIX) else METRICS_FILE


def _run_info(folder: Path) -> RunInfo | None:
    """:func:`~workbench.core.run_folder.run_toml.read_run_info`, kept until run.toml changes (its error too)."""
    def read():
        try:
            return read_run_info(folder)
        except RunFileError as exc:
            return exc

    out = _cached(_INFOS, _file_key(folder / TOML_FILE), read)
    if isinstance(out, RunFileError):
        raise out
    return out


def _read(reader, folder: Path, problems: list[str]):
    """``reader(folder)``, or None with the reason appended to ``problems``."""
    try:
        return reader(folder)
    except RunFileError as exc:
        problems.append(str(exc))
        return None


def _state(status: dict) -> str:
    """The state a readable status.json says, a stale ``running`` reconciled to ``crashed``."""
    state = status.get("state") or "unknown"
    if state == "running" and not is_training_process(status.get("pid"), status.get("pid_start"),
                                                      status.get("attached") is True):
        return "crashed"
    return state


def _is_run_folder(folder: Path) -> bool:
    """Whether ``folder`` holds a ``run.toml`` or a ``status.json`` (of any kind; unreadable ones count)."""
    for name in (TOML_FILE, STATUS_FILE):
        try:
            os.lstat(folder / name)
        except FileNotFoundError:
            continue
        except OSError:  # permission denied, ...: a run folder that cannot be read
            return True
        return True
    return False


#: The prefix of a damaged metrics.csv that a resumed run set aside (:class:`~workbench.core.train.runs.folder.MetricsCSV`).
_SET_ASIDE = METRICS_FILE + ".damaged-"


def _set_aside_files(folder: Path) -> list[str]:
    """A problem for each damaged metrics.csv a resumed run set aside in ``folder`` (its rows may be missing)."""
    try:
        with os.scandir(folder) as it:
            names = sorted(e.name for e in it if e.name.startswith(_SET_ASIDE))
    except OSError:
        return []
    return [f"{name}: a damaged {METRICS_FILE} set aside when the run was resumed (its readable rows were "
            f"carried over; the lines it could not read are only there)" for name in names]


def summarize(folder: Path, progress: Progress | None = None) -> RunSummary | None:
    """The summary of one run folder, or None when it holds neither ``run.toml`` nor ``status.json``.

    A file that cannot be read is said in :attr:`RunSummary.problem`; this raises
    only on a bug (:func:`list_runs` lists even that, as a problem).
    """
    folder = Path(folder)
    if not _is_run_folder(folder):
        return None
    s = RunSummary(folder.name, str(folder))
    problems: list[str] = []
    status = _read(read_status, folder, problems)
    status_bad = bool(problems)
    attached = status is not None and status.get("attached") is True
    if attached:  # a script attached with workbench.attach: no run.toml by design (the script is its replay)
        s.kind = ATTACHED
        info = None
    else:
        info = _read(_run_info, folder, problems)
        if info is None and not any(p.startswith(TOML_FILE) for p in problems):
            problems.append(f"{TOML_FILE}: missing")
    if status is not None and "model" in status:  # written by the trainer: no run.toml to parse
        s.model, s.dataset, s.epochs = status["model"] or "", status.get("dataset") or "", status.get("epochs") or 0
    elif info is not None:
        s.model, s.dataset, s.epochs = info.model, info.dataset, info.epochs
    if ":" in s.model and info is not None:  # a builder or factory spec: its short name, with run.toml's arguments
        s.model = short_name({"name": info.model or s.model, "kwargs": info.model_kwargs}, info.model_source)
    m = metrics_summary(folder, progress)
    s.epochs_done, s.best_val_loss, s.best_val_acc = m.rows, m.best_val_loss, m.best_val_acc
    if m.problem:
        problems.append(m.problem)
    step_columns, last_step = _steps_summary(folder)
    s.steps = max(m.last_step, last_step)
    s.metrics = _names(m.columns, step_columns)
    problems += _set_aside_files(folder)
    if status is not None:
        started = status.get("started")
        s.started = float(started) if is_time(started) else math.nan  # read_status let only a time through
        s.state = _state(status)
    elif status_bad:
        s.state = "unreadable"
    s.problem = "; ".join(problems)
    return s


def _run_folders(root: Path) -> list[Path]:
    """The run folders directly under ``root``, by name."""
    with os.scandir(root) as it:
        entries = sorted(it, key=lambda e: e.name)
    out = []
    for entry in entries:
        try:
            is_dir = entry.is_dir()
        except OSError:
            continue
        if is_dir and _is_run_folder(Path(entry.path)):
            out.append(Path(entry.path))
    return out


def _metrics_bytes(folder: Path, file: str = METRICS_FILE) -> int:
    try:
        st = os.stat(folder / file)
    except (OSError, ValueError):
        return 0
    return st.st_size if stat.S_ISREG(st.st_mode) else 0


def metrics_signature(folder: str | Path, file: str = METRICS_FILE) -> tuple | None:
    """What changes when a run's ``metrics.csv`` (or ``file``: :func:`curve_file`) changes (path, device, inode,
    size, mtime); None: not a file."""
    return _file_key(Path(folder) / file)


def metrics_bytes(folder: str | Path, file: str = METRICS_FILE) -> int:
    """Bytes of a run's ``metrics.csv`` (or ``file``: :func:`curve_file`; 0: missing, or not a regular file)."""
    return _metrics_bytes(Path(folder), file)


def unread_bytes(root: str | Path) -> int:
    """Bytes of ``metrics.csv`` that :func:`list_runs` would read under ``root`` (files it read unchanged are not
    read again); 0 when ``root`` cannot be listed."""
    try:
        folders = _run_folders(Path(root))
    except OSError:
        return 0
    return sum(_metrics_bytes(f) for f in folders if _file_key(f / METRICS_FILE) not in _SUMMARIES)


def _summary_or_problem(folder: Path, progress: Progress | None) -> RunSummary | None:
    try:
        return summarize(folder, progress)
    except Exception as exc:  # noqa: BLE001 - one folder never hides the others: it is listed with the reason
        return RunSummary(folder.name, str(folder), state="unreadable", problem=f"{type(exc).__name__}: {exc}")


def list_runs(root: str | Path, progress: Progress | None = None) -> list[RunSummary]:
    """Summaries of the run folders directly under ``root``, oldest start first (unknown starts last).

    Never raises for a run folder's contents: a file that cannot be read marks
    its run (:attr:`RunSummary.problem`).

    Parameters
    ----------
    root : str or Path
    progress : callable, optional
        ``progress(fraction)``: the fraction of the folders' bytes of ``metrics.csv`` read so far.

    Raises
    ------
    FileNotFoundError
        ``root`` does not exist.
    OSError
        ``root`` cannot be listed (permissions).
    """
    root = Path(root)
    if not root.is_dir():
        raise FileNotFoundError(f"{root}: no such runs folder")
    folders = _run_folders(root)
    weights = [_metrics_bytes(f) + 4096 for f in folders] if progress is not None else [0] * len(folders)
    total, done, out = max(1, sum(weights)), 0, []
    for folder, weight in zip(folders, weights):
        sub = None
        if progress is not None:
            def sub(fraction, before=done, weight=weight):
                progress((before + fraction * weight) / total)
        s = _summary_or_problem(folder, sub)
        if s is not None:
            out.append(s)
        done += weight
        if progress is not None:
            progress(done / total)
    return sorted(out, key=lambda s: (math.isnan(s.started), s.started if not math.isnan(s.started) else 0, s.name))


#: The columns of a runs table (``workbench runs``, the Runs dock).
#: ``epochs``: done/set (done alone when the run set none: an attached script); ``steps``: optimizer steps done.
TABLE_COLUMNS = ("name", "started", "model", "dataset", "epochs", "steps", "best val loss", "best val acc", "state")


def format_time(t: object) -> str:
    """``YYYY-mm-dd HH:MM`` local time of ``time.time()`` seconds; ``"-"`` for anything a clock cannot show.

    Never raises: NaN, infinities, 1e20 or -1e18 (``time.localtime`` raises "Value too large for defined data
    type" or OverflowError on those) are ``"-"``.
    """
    if not is_time(t):
        return "-"
    try:
        return time.strftime("%Y-%m-%d %H:%M", time.localtime(float(t)))  # type: ignore[arg-type]
    except (OverflowError, OSError, ValueError):
        return "-"


def _number(v: float, spec: str) -> str:
    if not isinstance(v, (int, float)) or math.isnan(v):
        return "-"
    try:
        return format(v, spec)
    except (ValueError, OverflowError):
        return "-"


def run_cell(s: RunSummary, column: str) -> str:
    """The text of one cell of a runs table (:data:`TABLE_COLUMNS`), unescaped; never raises."""
    if column == "name":
        return s.name
    if column == "started":
        return format_time(s.started)
    if column == "model":
        return s.model or "-"
    if column == "dataset":
        if s.kind == ATTACHED:
            return f"{ATTACHED} {s.dataset}".rstrip()
        return s.dataset or "-"
    if column == "epochs":
        return f"{s.epochs_done}/{s.epochs}" if s.epochs > 0 or s.kind != ATTACHED else str(s.epochs_done)
    if column == "steps":
        return str(s.steps)
    if column == "best val loss":
        return _number(s.best_val_loss, ".4f")
    if column == "best val acc":
        return _number(s.best_val_acc, ".1%")
    return s.state_text()


def runs_table(runs: list[RunSummary], metrics: tuple[str, ...] | list[str] = ()) -> str:
    """The aligned table ``workbench runs`` prints: a header and one run per line.

    Every cell is escaped (:func:`~workbench.core.run_folder.printable.printable`): a folder
    name holding a terminal escape sequence shows it as ``\\x1b...``, never sends it. Each of
    ``metrics`` (any of :func:`metric_names`: ``val_r2``, ``step/train_loss``...) adds a column
    before the state: its last value in each run (:func:`metric_last`; ``-``: none).
    """
    metrics = list(dict.fromkeys(metrics))
    header = (*TABLE_COLUMNS[:-1], *metrics, TABLE_COLUMNS[-1])
    rows = [header]
    for s in runs:
        values = [_number(metric_last(s.path, m), ".4g") for m in metrics]
        cells = [run_cell(s, c) for c in TABLE_COLUMNS]
        rows.append(tuple(printable(c) for c in (*cells[:-1], *values, cells[-1])))
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    return "\n".join("  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip() for r in rows)


def read_metrics(folder: str | Path, problems: list[str] | None = None) -> dict[str, np.ndarray]:
    """``metrics.csv`` of a run as float64 columns (one value per epoch; blanks are NaN; no file: no columns).

    Read in blocks, but the columns are whole: for a long file, :func:`read_curve`
    keeps memory bounded. At most :data:`~workbench.core.run_folder.metrics_csv.MAX_COLUMNS`
    columns are read (in time linear in the columns). Damaged lines are skipped
    (never raises); the first problem (damaged lines, columns left unread) is
    appended to ``problems`` when given.
    """
    parts: dict[str, list[np.ndarray]] = {}
    blocks = MetricsBlocks(folder)
    for cols in blocks:
        for k, v in cols.items():
            parts.setdefault(k, []).append(v)
    if problems is not None and blocks.problem:
        problems.append(blocks.problem)
    return {k: np.concatenate(v) for k, v in parts.items()}


def read_curve(folder: str | Path, x_key: str, metric: str, progress: Progress | None = None,
               max_points: int = CURVE_POINTS) -> MinMaxPyramid | None:
    """One metric of a run against one x axis, read in blocks into a min/max pyramid (bounded memory).

    Parameters
    ----------
    folder : str or Path
    x_key : str
        One of :data:`X_AXES`; ``"epoch"`` gives epochs completed (``epoch + 1``), as the Training plots
        (for a ``step/...`` metric, the epochs done at that step: ``epoch_float``, else the epoch's index).
    metric : str
        A ``metrics.csv`` column (:data:`METRICS`, a task's ``val_r2``...) or ``step/<column>`` of
        ``steps.csv`` (:func:`metric_names`).
    progress : callable, optional
        ``progress(fraction of the file read)``.
    max_points : int
        Points kept (:class:`~workbench.core.plot_lod.PyramidBuilder`): a longer curve keeps only bins.

    Returns
    -------
    MinMaxPyramid or None
        None when the file is missing or unreadable, has no such columns or no rows. Rows whose x is
        blank are left out (and, of ``steps.csv``, rows whose value is blank).
    """
    builder = PyramidBuilder(max_points)
    if metric.startswith(STEP_PREFIX):
        column = metric[len(STEP_PREFIX):]
        xs = ("epoch_float", "epoch") if x_key == "epoch" else (x_key,)
        blocks = MetricsBlocks(folder, (*xs, column), progress, name=STEPS_FILE)
        shift, finite_only = 0, True
    else:
        column, xs = metric, (x_key,)
        blocks = MetricsBlocks(folder, (x_key, metric), progress)
        shift, finite_only = (1 if x_key == "epoch" else 0), False
    for cols in blocks:
        x = next((cols[k] for k in xs if k in cols), None)
        y = cols.get(column)
        if x is None or y is None:
            break
        keep = ~np.isnan(x) & (~np.isnan(y) if finite_only else True)
        if not keep.all():
            x, y = x[keep], y[keep]
        builder.add(x + shift if shift else x, y)
    return builder.finish() if builder.n else None


def metric_last(folder: str | Path, metric: str) -> float:
    """The last value of ``metric`` (as :func:`read_curve` names it) in a run (NaN: none), read in blocks."""
    last = math.nan
    file = curve_file(metric)
    column = metric[len(STEP_PREFIX):] if file == STEPS_FILE else metric
    for cols in MetricsBlocks(folder, (column,), name=file):
        values = cols.get(column)
        if values is None:
            break
        finite = values[~np.isnan(values)]
        if len(finite):
            last = float(finite[-1])
    return last


def _flatten(d: dict, prefix: str = "") -> dict[str, object]:
    out = {}
    for k, v in d.items():
        key = f"{prefix}{k}"
        if isinstance(v, dict):
            out.update(_flatten(v, key + "."))
        else:
            out[key] = v
    return out


def _settings(folder: str | Path) -> dict[str, object]:
    """The flattened run.toml of a run folder; ``{}`` when it is missing or cannot be read."""
    try:
        return _flatten(read_toml(folder) or {})
    except (RunFileError, RecursionError):
        return {}


def config_diff(folders: list[str | Path]) -> list[tuple[str, list]]:
    """The run.toml settings whose values differ between ``folders``: ``[(dotted key, [value per run]), ...]``.

    A key missing from a run's file shows as None; keys are sorted. A run.toml that
    cannot be read counts as empty (its run's summary says why).
    """
    flat = [_settings(folder) for folder in folders]
    keys = sorted(set().union(*flat)) if flat else []

    def same(k: str) -> bool:
        return len({json.dumps(f.get(k), sort_keys=True, default=str) for f in flat}) <= 1

    return [(k, [f.get(k) for f in flat]) for k in keys if not same(k)]


#: The metrics export_metrics writes first, in this order within each block of rows (then every other column of
#: metrics.csv: a task's own metrics; then the steps.csv columns as ``step/<name>``).
EXPORTED = ("train_loss", "val_loss", "val_acc", "lr", "samples_per_s", "input_wait", "time_s")


def _int_text(v: float) -> str:
    return "" if math.isnan(v) else str(int(v))


def _export_file(w, folder: str | Path, file: str) -> None:
    """The tidy rows of one file of a run, block by block (blank step or epoch: empty cell)."""
    name = Path(folder).name
    steps_file = file == STEPS_FILE
    for cols in MetricsBlocks(folder, name=file):
        n = len(next(iter(cols.values()))) if cols else 0
        steps, epochs = cols.get("step", np.full(n, math.nan)), cols.get("epoch", np.full(n, math.nan))
        if steps_file:
            order = [(c, STEP_PREFIX + c) for c in cols if c not in NOT_METRICS]
        else:
            order = [(m, m) for m in EXPORTED if m in cols]
            order += [(c, c) for c in cols if c not in EXPORTED and c not in ("step", "epoch", "best")]
        for column, metric in order:
            values = cols[column]
            for i in np.flatnonzero(~np.isnan(values)):
                w.writerow([name, _int_text(steps[i]), _int_text(epochs[i]), metric, repr(float(values[i]))])


def _export_run(w, folder: str | Path) -> None:
    """The tidy rows of one run: its metrics.csv, then its steps.csv."""
    _export_file(w, folder, METRICS_FILE)
    _export_file(w, folder, STEPS_FILE)


def export_metrics(folders: list[str | Path], path: str | Path) -> Path:
    """Write the runs' metrics as one tidy CSV (``run,step,epoch,metric,value``) atomically; returns the path.

    Every metric of each ``metrics.csv`` (:data:`EXPORTED` first, then a task's own), then each
    ``steps.csv`` column as ``step/<name>``; ``step`` and ``epoch`` are as in each file (``epoch`` counts from 0).
    Rows go run by run, and within a run metric by metric over each block of
    about 1 MB of its metrics.csv (one block for any file under ~12,000 rows), so
    memory is bounded whatever the files' lengths. Lines that cannot be read are
    left out.
    """
    from workbench.core.files import atomic_write

    def write(f) -> None:
        text = io.TextIOWrapper(f, encoding="utf-8", errors="surrogateescape", newline="")
        w = csv_cells.writer(text, lineterminator="\n")
        w.writerow(["run", "step", "epoch", "metric", "value"])
        for folder in folders:
            _export_run(w, folder)
        text.flush()
        text.detach()

    return Path(atomic_write(path, write))


def run_checkpoint(folder: str | Path) -> Path | None:
    """The checkpoint to open or resume a run folder from: ``last.pt``, else ``best.pt``; None without either."""
    for name in ("last.pt", "best.pt"):
        path = Path(folder) / name
        if path.is_file():
            return path
    return None


def rename_run(folder: str | Path, new_name: str) -> Path:
    """Rename a run folder within its runs root; the new path.

    Raises
    ------
    ValueError
        ``new_name`` is empty, ``.``/``..`` or holds a path separator.
    FileExistsError
        A folder or file of that name is already there (nothing is overwritten).
    FileNotFoundError
        ``folder`` is gone.
    RunIsTraining
        A live process is training in ``folder`` (an OSError; its message says to stop the run first).
    """
    name = new_name.strip()
    if not name or name in (".", "..") or "/" in name or os.sep in name or (os.altsep and os.altsep in name):
        raise ValueError(f"{new_name!r} is not a folder name: use letters, digits, '-', '_' or '.' "
                         "without a path separator")
    src = Path(folder)
    if not src.is_dir():
        raise FileNotFoundError(f"{src}: no such run folder")
    refuse_if_training(src, "rename")
    dst = src.with_name(name)
    if dst.exists():
        raise FileExistsError(f"{dst} already exists: choose another name")
    src.rename(dst)
    return dst
