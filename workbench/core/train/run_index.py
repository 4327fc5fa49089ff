"""The run folders under a runs root, one summary each: what ``workbench runs`` prints.

A summary comes from the folder's own files (``run.toml``, ``metrics.csv``,
``status.json``: :mod:`workbench.core.train.runs`); nothing is loaded with
torch, so 1,000 folders list in well under a second. A folder whose
``status.json`` says ``running`` but whose process is gone is ``crashed``.
"""

from __future__ import annotations

import csv
import io
import json
import math
import os
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
import tomllib

__all__ = ["METRICS", "X_AXES", "RunSummary", "config_diff", "export_metrics", "list_runs", "read_metrics", "runs_table",
           "rename_run", "run_checkpoint"]

#: The metrics.csv columns a comparison overlays, and the x axes it offers.
METRICS = ("train_loss", "val_loss", "val_acc", "lr")
X_AXES = ("step", "epoch", "time_s")


@dataclass
class RunSummary:
    """One run folder.

    Attributes
    ----------
    name : str
        The folder's name.
    path : str
    started : float
        ``time.time()`` of the start (NaN: unknown; the folder's creation time is not used).
    model : str
        ``[model] arch`` (``""``: not recorded).
    dataset : str
    epochs_done : int
        Rows of ``metrics.csv``.
    epochs : int
        Epochs the run was set to.
    best_val_loss : float
        NaN when no epoch was validated.
    best_val_acc : float
        Accuracy in [0, 1] (NaN: none).
    state : str
        ``finished``, ``stopped``, ``crashed``, ``running`` or ``unknown`` (no ``status.json``).
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

    def to_dict(self) -> dict:
        """JSON-ready dict (NaN as None)."""
        return {k: (None if isinstance(v, float) and math.isnan(v) else v) for k, v in asdict(self).items()}


def _alive(pid) -> bool:
    try:
        os.kill(int(pid), 0)
    except (OSError, TypeError, ValueError):
        return False
    return True


def _float(text) -> float:
    try:
        return float(text)
    except (TypeError, ValueError):
        return math.nan


def summarize(folder: Path) -> RunSummary | None:
    """The summary of one run folder, or None when it holds no ``run.toml``."""
    toml = folder / "run.toml"
    if not toml.is_file():
        return None
    s = RunSummary(folder.name, str(folder))
    try:
        status = json.loads((folder / "status.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        status = None
    if not isinstance(status, dict):
        status = None
    if status is not None and "model" in status:  # written by the trainer: no run.toml to parse
        s.model, s.dataset, s.epochs = str(status["model"] or ""), str(status.get("dataset") or ""), int(
            status.get("epochs") or 0)
    else:
        try:
            cfg = tomllib.loads(toml.read_text(encoding="utf-8"))
        except (OSError, tomllib.TOMLDecodeError, UnicodeDecodeError):
            cfg = {}
        s.model = str((cfg.get("model") or {}).get("arch") or "")
        s.dataset = str((cfg.get("data") or {}).get("dataset") or "")
        s.epochs = int(cfg.get("epochs") or 0)
    try:
        with open(folder / "metrics.csv", newline="", encoding="utf-8") as f:
            rows = list(csv.DictReader(f))
    except OSError:
        rows = []
    s.epochs_done = len(rows)
    losses = [v for v in (_float(r.get("val_loss")) for r in rows) if not math.isnan(v)]
    accs = [v for v in (_float(r.get("val_acc")) for r in rows) if not math.isnan(v)]
    s.best_val_loss = min(losses) if losses else math.nan
    s.best_val_acc = max(accs) if accs else math.nan
    if status is not None:
        s.started = _float(status.get("started"))
        s.state = str(status.get("state") or "unknown")
        if s.state == "running" and not _alive(status.get("pid")):
            s.state = "crashed"
    return s


def list_runs(root: str | Path) -> list[RunSummary]:
    """Summaries of the run folders directly under ``root``, oldest start first (unknown starts last).

    Raises
    ------
    FileNotFoundError
        ``root`` does not exist.
    """
    root = Path(root)
    if not root.is_dir():
        raise FileNotFoundError(f"{root}: no such runs folder")
    out = [s for s in (summarize(p) for p in sorted(root.iterdir()) if p.is_dir()) if s is not None]
    return sorted(out, key=lambda s: (math.isnan(s.started), s.started if not math.isnan(s.started) else 0, s.name))


def runs_table(runs: list[RunSummary]) -> str:
    """The aligned table ``workbench runs`` prints: a header and one run per line."""
    def fmt_time(t: float) -> str:
        return "-" if math.isnan(t) else time.strftime("%Y-%m-%d %H:%M", time.localtime(t))

    rows = [("name", "started", "model", "dataset", "epochs", "best val loss", "best val acc", "state")]
    for s in runs:
        rows.append((s.name, fmt_time(s.started), s.model or "-", s.dataset or "-", f"{s.epochs_done}/{s.epochs}",
                     "-" if math.isnan(s.best_val_loss) else f"{s.best_val_loss:.4f}",
                     "-" if math.isnan(s.best_val_acc) else f"{s.best_val_acc:.1%}", s.state))
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    return "\n".join("  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip() for r in rows)


def read_metrics(folder: str | Path) -> dict[str, np.ndarray]:
    """``metrics.csv`` of a run as float64 columns (one value per epoch; blanks are NaN; no file: empty columns)."""
    columns: dict[str, list[float]] = {}
    try:
        with open(Path(folder) / "metrics.csv", newline="", encoding="utf-8") as f:
            for row in csv.DictReader(f):
                for k, v in row.items():
                    columns.setdefault(k, []).append(_float(v))
    except OSError:
        pass
    return {k: np.asarray(v, dtype=np.float64) for k, v in columns.items()}


def _flatten(d: dict, prefix: str = "") -> dict[str, object]:
    out = {}
    for k, v in d.items():
        key = f"{prefix}{k}"
        if isinstance(v, dict):
            out.update(_flatten(v, key + "."))
        else:
            out[key] = v
    return out


def config_diff(folders: list[str | Path]) -> list[tuple[str, list]]:
    """The run.toml settings whose values differ between ``folders``: ``[(dotted key, [value per run]), ...]``.

    A key missing from a run's file shows as None; keys are sorted.
    """
    flat = []
    for folder in folders:
        try:
            flat.append(_flatten(tomllib.loads((Path(folder) / "run.toml").read_text(encoding="utf-8"))))
        except (OSError, tomllib.TOMLDecodeError, UnicodeDecodeError):
            flat.append({})
    keys = sorted(set().union(*flat)) if flat else []
    return [(k, [f.get(k) for f in flat]) for k in keys if len({json.dumps(f.get(k), sort_keys=True) for f in flat}) > 1]


def export_metrics(folders: list[str | Path], path: str | Path) -> Path:
    """Write the runs' metrics as one tidy CSV (``run,step,epoch,metric,value``) atomically; returns the path.

    ``step`` and ``epoch`` are as in each ``metrics.csv`` (``epoch`` counts from 0).
    """
    from workbench.core.files import atomic_write_text

    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(["run", "step", "epoch", "metric", "value"])
    for folder in folders:
        cols = read_metrics(folder)
        steps, epochs = cols.get("step", np.zeros(0)), cols.get("epoch", np.zeros(0))
        for metric in ("train_loss", "val_loss", "val_acc", "lr", "samples_per_s", "input_wait", "time_s"):
            for i, v in enumerate(cols.get(metric, ())):
                if not math.isnan(v):
                    w.writerow([Path(folder).name, int(steps[i]), int(epochs[i]), metric, repr(float(v))])
    return Path(atomic_write_text(path, buf.getvalue()))


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
    """
    name = new_name.strip()
    if not name or name in (".", "..") or "/" in name or os.sep in name or (os.altsep and os.altsep in name):
        raise ValueError(f"{new_name!r} is not a folder name: use letters, digits, '-', '_' or '.' "
                         "without a path separator")
    src = Path(folder)
    if not src.is_dir():
        raise FileNotFoundError(f"{src}: no such run folder")
    dst = src.with_name(name)
    if dst.exists():
        raise FileExistsError(f"{dst} already exists: choose another name")
    src.rename(dst)
    return dst
