"""Text data files read by ``datasets`` (CSV, JSON Lines, Parquet, .txt, save_to_disk) and their errors."""

from __future__ import annotations

import pytest

import datasets  # noqa: E402 - in the test extra: fails if missing, never skips

from workbench.core.errors import DataError  # noqa: E402
from workbench.core.train.data.text_files import load_tokenizer, read_splits, read_table, row_name  # noqa: E402


def test_every_format_reads_the_same_rows(tmp_path):
    rows = {"text": ["a b", "c d", "e"], "label": ["x", "y", "x"]}
    ds = datasets.Dataset.from_dict(rows)
    ds.to_csv(str(tmp_path / "t.csv"), index=False)
    ds.to_json(str(tmp_path / "t.jsonl"))
    ds.to_parquet(str(tmp_path / "t.parquet"))
    datasets.DatasetDict({"train": ds, "validation": ds.select([0])}).save_to_disk(str(tmp_path / "saved"))
    for name in ("t.csv", "t.jsonl", "t.parquet"):
        assert read_table(tmp_path / name).to_dict() == rows
    train, val = read_splits(tmp_path / "saved")
    assert train.to_dict() == rows and len(val) == 1
    (tmp_path / "t.txt").write_text("one line\nanother\n")
    assert read_table(tmp_path / "t.txt")["text"] == ["one line", "another"]
    assert (row_name("a.csv", 0), row_name("a.jsonl", 0), row_name("a.parquet", 0)) == ("line 2", "line 1", "row 1")


def test_bad_paths_are_one_line(tmp_path):
    with pytest.raises(DataError, match="file not found; fix \\[data\\] root"):
        read_table(tmp_path / "missing.csv")
    (tmp_path / "t.xlsx").write_text("x")
    with pytest.raises(DataError, match="is not a text data file Workbench reads"):
        read_table(tmp_path / "t.xlsx")
    (tmp_path / "empty").mkdir()
    with pytest.raises(DataError, match="no tokenizer in this folder"):
        load_tokenizer(tmp_path / "empty")
    with pytest.raises(DataError, match="not a folder"):
        load_tokenizer(tmp_path / "nowhere")
