"""Listing run folders (issue "Experiments").

Figures:

``runs_table_1000_s``
    :func:`~workbench.core.train.runs.index.list_runs` + ``runs_table`` over 1,000
    run folders, each with a real ``run.toml``, a 20-epoch ``metrics.csv`` and a
    ``status.json`` as the trainer writes them; median of 3, s (page cache warm after the first; what the list
    keeps of the files it read is dropped before each, as ``workbench runs`` starts afresh). Target <= 1 s.
``overlay_20_runs_redraw_ms``
    The Runs dock's overlay of 20 runs x 100,000 points: a view change (zoom
    between the whole x range and its first half: each curve is clipped to the
    view and downsampled to its pixels) plus a synchronous repaint of the plot's
    viewport, median of 15, ms. Target <= 30 ms.
``overlay_20_runs_set_data_ms``
    :meth:`RunsPanel.draw` with new data for all 20 curves (another metric
    chosen) plus the repaint, median of 15, ms.
``runs_dock_10m_rows_s``
    A run folder whose ``metrics.csv`` has 10,000,000 rows (the trainer's
    columns, every epoch validated, ~0.9 GB, page cache warm) opened in the Runs
    dock: :meth:`RunsPanel.refresh` (the list reads its rows and best metrics)
    and selecting the run (its val loss curve read into a bounded pyramid, drawn),
    in a fresh process, s. Target: seconds, with the progress bar moving.
``runs_dock_10m_rows_peak_mb``
    The peak resident memory of that process during the same, above its resident
    memory before (``VmHWM`` reset through ``/proc/self/clear_refs``), MB. Target < 300.
``runs_dock_10m_rows_max_frame_ms``
    The longest time the window's event loop did not run during the same (a 5 ms
    timer's longest gap between ticks), ms: how long the window may look frozen.
"""

from __future__ import annotations

import json
import statistics
import tempfile
import time
from pathlib import Path


def make_runs(root: Path, n: int = 1000, epochs: int = 20) -> Path:
    """``n`` run folders under ``root`` (written with the product's own config writer)."""
    from workbench.core.train.config import DataConfig, ModelConfig, TrainConfig
    from workbench.core.train.runs.folder import METRICS_COLUMNS

    toml = TrainConfig(data=DataConfig(dataset="digits"), epochs=epochs, model=ModelConfig(arch="digits_cnn")).to_toml()
    header = ",".join(METRICS_COLUMNS)
    rows = "\n".join(f"{e},{(e + 1) * 23},{2.0 / (e + 1)},{2.1 / (e + 1)},{0.5 + e / 50},0.001,{e},5000,0.01,"
                     for e in range(epochs))
    for i in range(n):
        d = root / f"run-{i:04d}"
        d.mkdir(parents=True)
        (d / "run.toml").write_text(toml)
        (d / "metrics.csv").write_text(f"{header}\n{rows}\n")
        (d / "status.json").write_text(json.dumps({"state": "finished", "reason": "completed", "started": 1e9 + i,
                                                  "ended": 1e9 + i + 60, "pid": 1, "model": "digits_cnn",
                                                  "dataset": "digits", "epochs": epochs}))
    return root


def run() -> dict[str, float]:
    """The figure (see the module docstring)."""
    from workbench.core.train.runs.index import forget_cached, list_runs, runs_table

    root = make_runs(Path(tempfile.mkdtemp(prefix="bench-runs-")))
    times = []
    for _ in range(3):
        forget_cached()
        t = time.perf_counter()
        table = runs_table(list_runs(root))
        times.append(time.perf_counter() - t)
    assert table.count("\n") == 1000
    redraw, replace = overlay_redraw()
    return {"runs_table_1000_s": statistics.median(times), "overlay_20_runs_redraw_ms": redraw,
            "overlay_20_runs_set_data_ms": replace, **dock_long_metrics()}


def _digits(values, width: int):
    """uint8 ASCII digits of non-negative integers, zero-padded to ``width``: shape (N, width)."""
    import numpy as np

    powers = 10 ** np.arange(width - 1, -1, -1, dtype=np.int64)
    return ((values[:, None] // powers) % 10 + ord("0")).astype(np.uint8)


def write_long_metrics(path: Path, rows: int = 10_000_000, block: int = 500_000) -> Path:
    """A ``metrics.csv`` of ``rows`` rows in the trainer's columns, written in blocks with numpy (seconds, not
    minutes): fixed-width numbers (``00000042``, ``1.234567``), the ``best`` column blank as the trainer leaves
    it on most epochs."""
    import numpy as np

    from workbench.core.train.runs.folder import METRICS_COLUMNS

    def fixed(v, decimals=6):  # "d.dddddd"
        q = np.round(v * 10**decimals).astype(np.int64)
        return np.hstack([_digits(q // 10**decimals, 1), np.full((len(v), 1), ord("."), np.uint8),
                          _digits(q % 10**decimals, decimals)])

    comma = None
    with open(path, "wb") as f:
        f.write((",".join(METRICS_COLUMNS) + "\n").encode())
        for start in range(0, rows, block):
            e = np.arange(start, min(rows, start + block), dtype=np.int64)
            comma = np.full((len(e), 1), ord(","), np.uint8)
            t = e.astype(np.float64)
            cells = [_digits(e, 8), _digits((e + 1) * 23, 10), fixed(2.0 / (1 + t / 1e4)),
                     fixed(2.1 / (1 + t / 1e4) * (1 + 0.05 * np.sin(t))), fixed(0.5 + 0.4 * t / rows),
                     fixed(0.001 + 0 * t), _digits(e, 8), _digits(5000 + e % 7, 5), fixed(0.01 + 0 * t)]
            parts = []
            for c in cells:
                parts += [c, comma]
            parts.append(np.full((len(e), 1), ord("\n"), np.uint8))  # the blank best column, then the line end
            f.write(np.hstack(parts).tobytes())
    return path


def dock_long_metrics(rows: int = 10_000_000) -> dict[str, float]:
    """``runs_dock_10m_rows_s`` and ``runs_dock_10m_rows_peak_mb`` (see the module docstring)."""
    import shutil
    import subprocess
    import sys

    from workbench.core.train.config import DataConfig, ModelConfig, TrainConfig

    root = Path(tempfile.mkdtemp(prefix="bench-runs-long-"))
    try:
        run = root / "long"
        run.mkdir()
        (run / "run.toml").write_text(TrainConfig(data=DataConfig(dataset="digits"), epochs=rows,
                                                  model=ModelConfig(arch="digits_cnn")).to_toml())
        (run / "status.json").write_text(json.dumps({"state": "finished", "reason": "completed", "started": 1e9,
                                                     "ended": 1e9 + 60, "pid": 1}))
        write_long_metrics(run / "metrics.csv", rows)
        with open(run / "metrics.csv", "rb") as f:  # the page cache warm, as for a file just written
            while f.read(1 << 24):
                pass
        code = f"from benchmarks.bench_runs import _open_in_dock; _open_in_dock({str(root)!r}, {rows})"
        out = subprocess.run([sys.executable, "-c", code],
                             cwd=Path(__file__).resolve().parent.parent, capture_output=True, text=True, timeout=900)
        if out.returncode != 0:
            raise RuntimeError(f"the dock's process failed:\n{out.stderr}")
        figures = json.loads(out.stdout.strip().splitlines()[-1])
    finally:
        shutil.rmtree(root, ignore_errors=True)
    return figures


def _kib(field: str) -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    raise RuntimeError(f"no {field} in /proc/self/status")


def _open_in_dock(root: str, rows: int) -> None:
    """In a fresh process: open the run under ``root`` in the Runs dock; print the figures as JSON."""
    import gc
    import os

    os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
    from PySide6.QtCore import QTimer
    from PySide6.QtWidgets import QApplication

    from workbench.ui.runs.runs_panel import RunsPanel

    app = QApplication.instance() or QApplication([])
    panel = RunsPanel(root)
    panel.resize(1200, 900)
    panel.show()
    app.processEvents()
    ticks = []
    timer = QTimer()
    timer.timeout.connect(lambda: ticks.append(time.perf_counter()))
    timer.start(5)
    gc.collect()
    before = _kib("VmRSS")
    Path("/proc/self/clear_refs").write_text("5")  # VmHWM := VmRSS from here on
    t = time.perf_counter()
    panel.refresh()
    panel.select(["long"])
    panel.plot.viewport().repaint()
    seconds = time.perf_counter() - t
    peak = _kib("VmHWM")
    timer.stop()
    stamps = [t, *ticks, time.perf_counter()]
    frame = max(b - a for a, b in zip(stamps, stamps[1:]))
    run = panel.table_model.runs[0]
    assert run.epochs_done == rows and not run.problem, (run.epochs_done, run.problem)
    assert panel.pyramids["long"].n == rows
    print(json.dumps({"runs_dock_10m_rows_s": seconds, "runs_dock_10m_rows_peak_mb": (peak - before) / 1024,
                      "runs_dock_10m_rows_max_frame_ms": frame * 1e3}))


def overlay_redraw(runs: int = 20, points: int = 100_000) -> tuple[float, float]:
    """Median ms of a view change + repaint, and of RunsPanel.draw (new data) + repaint, of ``runs`` x ``points``."""
    import os

    import numpy as np

    os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
    from PySide6.QtWidgets import QApplication

    from workbench.ui.runs.runs_panel import RunsPanel

    app = QApplication.instance() or QApplication([])
    panel = RunsPanel(tempfile.mkdtemp())
    panel.resize(1200, 900)
    panel.show()
    x = np.arange(points, dtype=np.float64)
    rng = np.random.default_rng(0)
    series = {f"run-{i}": (x, 2.0 * np.exp(-x / (2e4 * (i + 1))) + 0.05 * rng.random(points)) for i in range(runs)}
    panel.draw(series)
    panel.plot.viewport().repaint()
    app.processEvents()
    redraw, replace = [], []
    for i in range(15):
        t = time.perf_counter()  # a view change (zoom / pan): re-clip, re-downsample, repaint
        panel.plot.setXRange(0, points * (0.5 if i % 2 else 1.0), padding=0)
        panel.plot.viewport().repaint()
        redraw.append((time.perf_counter() - t) * 1e3)
        t = time.perf_counter()  # new data for every curve (another metric chosen) + repaint
        panel.draw(series)
        panel.plot.viewport().repaint()
        replace.append((time.perf_counter() - t) * 1e3)
    panel.close()
    return statistics.median(redraw), statistics.median(replace)


if __name__ == "__main__":
    print(run())
