"""Listing run folders (issue "Experiments").

Figures:

``runs_table_1000_s``
    :func:`~workbench.core.train.run_index.list_runs` + ``runs_table`` over 1,000
    run folders, each with a real ``run.toml``, a 20-epoch ``metrics.csv`` and a
    ``status.json`` as the trainer writes them; median of 3, s (page cache warm after the first). Target <= 1 s.
``overlay_20_runs_redraw_ms``
    The Runs dock's overlay of 20 runs x 100,000 points: a view change (zoom
    between the whole x range and its first half: each curve is clipped to the
    view and downsampled to its pixels) plus a synchronous repaint of the plot's
    viewport, median of 15, ms. Target <= 30 ms.
``overlay_20_runs_set_data_ms``
    :meth:`RunsPanel.draw` with new data for all 20 curves (another metric
    chosen) plus the repaint, median of 15, ms.
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
    from workbench.core.train.runs import METRICS_COLUMNS

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
    from workbench.core.train.run_index import list_runs, runs_table

    root = make_runs(Path(tempfile.mkdtemp(prefix="bench-runs-")))
    times = []
    for _ in range(3):
        t = time.perf_counter()
        table = runs_table(list_runs(root))
        times.append(time.perf_counter() - t)
    assert table.count("\n") == 1000
    redraw, replace = overlay_redraw()
    return {"runs_table_1000_s": statistics.median(times), "overlay_20_runs_redraw_ms": redraw,
            "overlay_20_runs_set_data_ms": replace}


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
