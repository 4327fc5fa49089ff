"""``metrics.csv`` read in bounded memory, damaged lines skipped (``workbench.core.run_folder.metrics_csv``)."""

from __future__ import annotations

import csv
import time

import numpy as np
import pytest

from tests.core.run_folder.threads import in_thread
from workbench.core.run_folder.metrics_csv import MAX_COLUMNS, MetricsBlocks, read_csv_rows


HEADER = "epoch,step,train_loss,val_loss,val_acc,lr,time_s,samples_per_s,input_wait,best"


def _write_metrics(path, rows, newline="\r\n"):
    with open(path, "w", newline="") as f:
        f.write(HEADER + newline)
        f.writelines(",".join("" if v is None else str(v) for v in r) + newline for r in rows)


def _reference(path, column):
    """What the csv module reads: the plain, slow reading the blocks must agree with."""
    out = []
    with open(path, newline="", encoding="utf-8") as f:
        for row in csv.DictReader(f):
            v = row[column]
            out.append(float(v) if v.strip() else np.nan)
    return np.asarray(out)


def _rows(n, blank_every=0):
    return [(e, (e + 1) * 23, 2.0 / (e + 1), None if blank_every and e % blank_every else 2.1 / (e + 1),
             0.5 + e / (2 * n), 0.001, e * 0.5, 5000, 0.01, 1 if e == n - 1 else None) for e in range(n)]


@pytest.mark.parametrize("blank_every", [0, 3])
def test_blocks_read_what_the_csv_module_reads(tmp_path, blank_every):
    _write_metrics(tmp_path / "metrics.csv", _rows(30_000, blank_every))
    blocks = MetricsBlocks(tmp_path, ["step", "val_loss", "best", "nope"], block_bytes=64 * 1024)
    parts = list(blocks)
    assert len(parts) > 10 and set(parts[0]) == {"step", "val_loss", "best"}
    for col in ("step", "val_loss", "best"):
        got = np.concatenate([p[col] for p in parts])
        assert np.array_equal(got, _reference(tmp_path / "metrics.csv", col), equal_nan=True)
    assert blocks.rows == 30_000 and blocks.problem == ""


def test_blocks_report_progress_up_to_one(tmp_path):
    _write_metrics(tmp_path / "metrics.csv", _rows(5_000))
    seen = []
    list(MetricsBlocks(tmp_path, ["val_loss"], progress=seen.append, block_bytes=16 * 1024))
    assert len(seen) > 5 and seen == sorted(seen) and seen[-1] == 1.0


def test_a_non_utf8_line_is_skipped_and_said(tmp_path):
    _write_metrics(tmp_path / "metrics.csv", _rows(10))
    data = (tmp_path / "metrics.csv").read_bytes().replace(b"\r\n3,92,", b"\r\n3,9\xff2,", 1)
    (tmp_path / "metrics.csv").write_bytes(data)
    blocks = MetricsBlocks(tmp_path, ["step"])
    (cols,) = list(blocks)
    assert blocks.rows == 9 and 92 not in cols["step"] and 115 in cols["step"]
    assert blocks.problem == "metrics.csv: not UTF-8 (byte 0xff at offset 3) on line 5: skipped"


def test_nul_bytes_at_the_end_skip_their_line_and_the_rows_before_them_are_kept(tmp_path):
    _write_metrics(tmp_path / "metrics.csv", _rows(10))
    with open(tmp_path / "metrics.csv", "ab") as f:
        f.write(b"10,253,0.1" + b"\0" * 100_000)  # a power loss: the last write's pages are zeros
    blocks = MetricsBlocks(tmp_path, ["step"])
    steps = np.concatenate([b["step"] for b in blocks])
    assert list(steps) == [(e + 1) * 23 for e in range(10)]
    assert blocks.problem == "metrics.csv: NUL bytes on line 12 (a write cut short by a power loss?): skipped"


@pytest.mark.parametrize("block_bytes", [1024, 2**20])
def test_a_line_of_nul_bytes_inside_the_file_skips_that_line_only_the_rows_after_it_are_read(tmp_path, block_bytes):
    rows = _rows(200)
    _write_metrics(tmp_path / "metrics.csv", rows[:100])
    with open(tmp_path / "metrics.csv", "ab") as f:
        f.write(b"\0" * 3000 + b"\r\n")
    with open(tmp_path / "metrics.csv", "a", newline="") as f:
        f.writelines(",".join("" if v is None else str(v) for v in r) + "\r\n" for r in rows[100:])
    blocks = MetricsBlocks(tmp_path, ["step"], block_bytes=block_bytes)
    steps = np.concatenate([b["step"] for b in blocks])
    assert steps.tolist() == [(e + 1) * 23 for e in range(200)] and blocks.rows == 200
    assert blocks.problem == "metrics.csv: NUL bytes on line 102 (a write cut short by a power loss?): skipped"


def test_all_columns_of_a_very_wide_header_read_in_linear_time_the_first_thousand_kept(tmp_path):
    n = 60_000  # took 46 s when each column was looked up in the header tuple
    (tmp_path / "metrics.csv").write_text(",".join(f"c{i}" for i in range(n)) + "\n"
                                          + ",".join(str(i) for i in range(n)) + "\n")
    blocks = MetricsBlocks(tmp_path)
    start = time.monotonic()
    (cols,) = in_thread(lambda: list(blocks), timeout=20)
    assert time.monotonic() - start < 5
    assert len(cols) == MAX_COLUMNS == 1000 and list(cols)[-1] == "c999" and cols["c999"].tolist() == [999.0]
    assert blocks.problem == "metrics.csv: has 60,000 columns: only the first 1,000 are read" and blocks.rows == 1
    few = MetricsBlocks(tmp_path, ["c59999", "c3", "nope"])  # named columns: any of them, no problem
    (cols,) = list(few)
    assert list(cols) == ["c59999", "c3"] and cols["c59999"].tolist() == [59999.0] and few.problem == ""


def test_a_truncated_last_line_and_a_cell_too_many_are_skipped_and_said(tmp_path):
    _write_metrics(tmp_path / "metrics.csv", _rows(10))
    with open(tmp_path / "metrics.csv", "a") as f:
        f.write("10,253,0.1")
    blocks = MetricsBlocks(tmp_path, ["step"])
    assert np.concatenate([b["step"] for b in blocks]).tolist() == [(e + 1) * 23 for e in range(10)]
    assert blocks.problem == "metrics.csv: line 12 has 3 of 10 cells (the file ends there: truncated?): skipped"
    _write_metrics(tmp_path / "metrics.csv", _rows(4))
    data = (tmp_path / "metrics.csv").read_bytes().replace(b"\r\n2,69,", b"\r\n2,69,,,", 1)
    (tmp_path / "metrics.csv").write_bytes(data)
    blocks = MetricsBlocks(tmp_path, ["step"])
    assert np.concatenate([b["step"] for b in blocks]).tolist() == [23, 46, 92]
    assert blocks.problem == "metrics.csv: line 4 has 12 of 10 cells: skipped"


def test_cells_that_are_not_numbers_are_nan_and_a_quoted_cell_is_read(tmp_path):
    (tmp_path / "metrics.csv").write_text(HEADER + "\n0,1,abc,2,,,,,,\n1,\"2\",0.5,3,,,,,,\n")
    blocks = MetricsBlocks(tmp_path, ["step", "train_loss"])
    (cols,) = list(blocks)
    assert cols["step"].tolist() == [1.0, 2.0] and np.isnan(cols["train_loss"][0]) and cols["train_loss"][1] == 0.5
    assert blocks.problem == ""


def test_an_endless_line_is_skipped_in_bounded_memory(tmp_path):
    with open(tmp_path / "metrics.csv", "w") as f:
        f.write(HEADER + "\n0,1,0.5,,,,,,,\n" + "9" * (3 * 2**20) + "\n1,2,0.4,,,,,,,\n")
    blocks = MetricsBlocks(tmp_path, ["step"], block_bytes=2**20)
    assert np.concatenate([b["step"] for b in blocks]).tolist() == [1.0, 2.0]
    assert blocks.problem == "metrics.csv: line 3 is longer than 1 MB: skipped"


def test_an_empty_or_headerless_file_is_said(tmp_path):
    (tmp_path / "metrics.csv").write_bytes(b"")
    blocks = MetricsBlocks(tmp_path, ["step"])
    assert list(blocks) == [] and blocks.problem == "metrics.csv: empty (truncated?)"
    (tmp_path / "metrics.csv").write_bytes(b"\xff\xfe,step\n1,2\n")
    blocks = MetricsBlocks(tmp_path, ["step"])
    assert list(blocks) == [] and blocks.problem.startswith("metrics.csv: not UTF-8") and "header" in blocks.problem


def test_read_csv_rows_keeps_every_readable_row_and_says_each_damaged_line(tmp_path):
    rows = _rows(6)
    text = b"".join((",".join("" if v is None else str(v) for v in r) + "\r\n").encode() for r in rows)
    lines = text.splitlines(keepends=True)
    data = (HEADER.encode() + b"\r\n" + lines[0] + lines[1] + b"\0" * 40 + b"\r\n" + lines[2]
            + lines[3].replace(b",", b",\xff", 1) + lines[4] + b"5,1,2\r\n" + lines[5])
    (tmp_path / "metrics.csv").write_bytes(data)
    got, problem = read_csv_rows(tmp_path)
    assert [r["epoch"] for r in got] == ["0", "1", "2", "4", "5"]  # those after the damage too
    assert problem == ("metrics.csv: NUL bytes (a write cut short by a power loss?) on line 4: left out "
                       "(and 2 more damaged line(s))")
    (tmp_path / "metrics.csv").write_bytes(b"\0" * 20 + b"\r\n" + lines[0] + lines[1])  # the header lost
    assert read_csv_rows(tmp_path)[0] == []
    got, problem = read_csv_rows(tmp_path, header=HEADER.split(","))
    assert [r["step"] for r in got] == ["23", "46"] and "on its header line" in problem
