"""Listing run folders (issue "Experiments").

Figures:

``runs_table_1000_s``
    :func:`~workbench.core.train.run_index.list_runs` + ``runs_table`` over 1,000
    run folders, each with a real ``run.toml``, a 20-epoch ``metrics.csv`` and a
    ``status.json`` as the trainer writes them; median of 3, s (page cache warm after the first). Target <= 1 s.
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
    return {"runs_table_1000_s": statistics.median(times)}


if __name__ == "__main__":
    print(run())
