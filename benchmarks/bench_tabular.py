"""A 1M-row, 20-column CSV to the first batch (issue 26).

Figures:

``csv_1m_rows_load_s``
    Seconds from ``table_datasets`` (``[data] dataset = "csv"``: ``pandas.read_csv``,
    the split, the training-split standardisation of 19 float features, the
    regression target) to the first batch of 64 rows as tensors; median of
    ``REPEATS`` runs in one process (the file is in the page cache after it is
    written). Writing the CSV (``ROWS`` rows of 19 normal features and a
    linear target, 5 decimals, about 170 MB) is not timed. Report only.
``csv_1m_rows_load_min_s`` / ``csv_1m_rows_load_max_s``
    The fastest and slowest of those runs.
"""

from __future__ import annotations

import statistics
import tempfile
import time
from pathlib import Path

ROWS = 1_000_000
FEATURES = 19
REPEATS = 3
BATCH = 64


def write_table(path: Path, rows: int = ROWS, features: int = FEATURES) -> Path:
    """``rows`` x (``features`` + 1) CSV: columns ``f0..f{features-1}`` (standard normal) and ``y``."""
    import numpy as np
    import pandas as pd

    rng = np.random.default_rng(0)
    x = rng.standard_normal((rows, features)).astype(np.float32)
    frame = pd.DataFrame(x, columns=[f"f{i}" for i in range(features)])
    frame["y"] = x @ rng.standard_normal(features).astype(np.float32) + rng.standard_normal(rows).astype(np.float32)
    frame.to_csv(path, index=False, float_format="%.5f")
    return path


def _load_once(path: Path) -> float:
    from workbench.core.train.config import DataConfig
    from workbench.core.train.data.tabular import table_datasets

    t0 = time.perf_counter()
    train, _, _ = table_datasets(DataConfig(dataset="csv", root=str(path), target=["y"]))
    x, y = train.tensors[0][:BATCH].contiguous(), train.tensors[1][:BATCH].contiguous()
    elapsed = time.perf_counter() - t0
    assert x.shape == (BATCH, FEATURES) and y.shape == (BATCH, 1)
    return elapsed


def run() -> dict[str, float]:
    """Write the table, then time :func:`_load_once` ``REPEATS`` times."""
    import workbench.core.train.data.tabular  # noqa: F401  (imports out of the timing)

    with tempfile.TemporaryDirectory() as tmp:
        path = write_table(Path(tmp) / "table_1m.csv")
        times = [_load_once(path) for _ in range(REPEATS)]
    return {
        "csv_1m_rows_load_s": round(statistics.median(times), 3),
        "csv_1m_rows_load_min_s": round(min(times), 3),
        "csv_1m_rows_load_max_s": round(max(times), 3),
    }
