"""Hostile tables: `workbench train` on a 1 GB one-line CSV or a million columns says one line, in bounded time and
memory, and writes nothing; a message quotes a few dozen characters of a cell or column name, never all of it."""

from __future__ import annotations

import gzip
import sys
from pathlib import Path

import pytest

from tests.limited import run_limited
from workbench.core.errors import DataError
from workbench.core.quoting import MAX_QUOTED_CHARS
from workbench.core.train.config import DataConfig, ModelConfig, TrainConfig
from workbench.core.train.data import preflight, tabular
from workbench.core.train.data.tabular import MAX_COLUMNS, MAX_LINE_BYTES, table_datasets


def _run_toml(tmp_path: Path, table: Path) -> Path:
    cfg = TrainConfig(data=DataConfig(dataset="csv", root=str(table), target="y"), epochs=1,
                      run_dir=str(tmp_path / "out"), tensorboard=False, model=ModelConfig(arch="tabular_mlp"))
    cfg.to_toml(tmp_path / "run.toml")
    return tmp_path / "run.toml"


def _one_line_gigabyte(path: Path) -> Path:
    """A 1 GB CSV of one line (sparse: 40 bytes written, the rest a hole that reads as NUL bytes)."""
    with open(path, "wb") as f:
        f.write(b"x" * 40)
        f.truncate(2**30)
    return path


def _million_columns(path: Path) -> Path:
    """2 MB: a header of a million one-character columns (the 1 GB file had 537 million)."""
    path.write_bytes(b",".join([b"a"] * 1_000_000) + b"\n")
    return path


@pytest.mark.skipif(sys.platform != "linux", reason="RLIMIT_AS and ru_maxrss in KiB are Linux's")
@pytest.mark.parametrize("make, words", [
    (_one_line_gigabyte, f"its header line is longer than {MAX_LINE_BYTES / 2**20:g} MB"),
    (_million_columns, f"has 1,000,000 columns, more than the {MAX_COLUMNS:,}"),
])
def test_a_hostile_table_is_one_line_in_bounded_time_and_memory(tmp_path, make, words):
    """Before: the 1 GB line took pandas to 4.4 GB (1 GB of message); a million columns ran for minutes."""
    table = make(tmp_path / "table.csv")
    run_toml = _run_toml(tmp_path, table)
    status, elapsed, peak = run_limited([sys.executable, "-m", "workbench", "train", str(run_toml)],
                                        tmp_path / "out.txt")
    output = (tmp_path / "out.txt").read_bytes()
    assert status == 1, output[:2000]
    assert len(output) < 1000, len(output)  # one line, not the cell
    (line,) = output.decode().splitlines()
    assert line.startswith("error: table.csv") and words in line, line
    assert elapsed < 60, elapsed  # ~5 s here, most of it imports
    assert peak < 1.25 * 2**30, peak  # 0.75 GB here (imports); before, 1.7 GB and a MemoryError under the limit
    assert not (tmp_path / "out").exists()  # nothing written: no run folder


def test_a_long_column_name_is_quoted_short(tmp_path):
    """Before: the message held the whole name (a 1 GB one made a 1 GB line)."""
    path = tmp_path / "long.csv"
    name = "n" * 100_000
    path.write_text(f"{name},b\n1,2\n3,4\n")
    with pytest.raises(DataError) as err:
        table_datasets(DataConfig(dataset="csv", root=str(path), target="y"))
    message = str(err.value)
    assert len(message) < 400, len(message)
    assert "n" * MAX_QUOTED_CHARS + "… (100,000 chars)" in message and "has no column 'y'" in message
    with pytest.raises(DataError) as err:
        table_datasets(DataConfig(dataset="csv", root=str(path), target="b", features=["b" * 10_000]))
    assert len(str(err.value)) < 400 and "…' (10,000 chars)" in str(err.value)


def test_a_long_first_row_is_refused_and_compressed_tables_are_checked(tmp_path, monkeypatch):
    monkeypatch.setattr(tabular, "MAX_LINE_BYTES", 1000)
    path = tmp_path / "row.csv.gz"
    with gzip.open(path, "wt") as f:
        f.write("a,y\n" + "1" * 2000 + ",0\n1,1\n")
    with pytest.raises(DataError, match=r"row.csv.gz: its first row is longer than"):
        table_datasets(DataConfig(dataset="csv", root=str(path), target="y"))
    monkeypatch.setattr(tabular, "MAX_COLUMNS", 4)
    wide = tmp_path / "wide.csv"
    wide.write_text('a,"b,c,d",e,y\n1,2,3,0\n4,5,6,1\n')  # 4 columns: commas inside quotes do not count
    train, _, _ = table_datasets(DataConfig(dataset="csv", root=str(wide), target="y", val_fraction=0.5))
    assert train.table.columns == ["a", "b,c,d", "e"]
    wide.write_text("a,b,c,d,y\n1,2,3,4,0\n5,6,7,8,1\n")
    with pytest.raises(DataError, match="wide.csv has 5 columns, more than the 4"):
        table_datasets(DataConfig(dataset="csv", root=str(wide), target="y"))
    # the window's class count before Start reads nothing of such a file
    assert preflight.data_class_count(DataConfig(dataset="csv", root=str(wide), target="y")) is None
