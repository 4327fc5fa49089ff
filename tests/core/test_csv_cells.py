"""CSV injection: a run folder named as a formula exports as text; numbers stay numbers; Workbench reads its own back."""

from __future__ import annotations

import csv
import io

import pytest

from tests.core.train.damaged_runs import good_run
from workbench.core import csv_cells
from workbench.core.csv_cells import escape_cell, unescape_cell
from workbench.core.run_folder.metrics_csv import MetricsBlocks, read_header
from workbench.core.train.runs.folder import MetricsCSV, StepsCSV
from workbench.core.train.runs.index import export_metrics

FORMULA = "=cmd|' -C calc'!A0"


@pytest.mark.parametrize("text", [FORMULA, "+1+2", "-1+cmd|x", "@SUM(A1)", "\tx", "\rx", "'=x", "''-y"])
def test_a_formula_is_quoted_and_reads_back(text):
    cell = escape_cell(text)
    assert cell == "'" + text
    assert unescape_cell(cell) == text


@pytest.mark.parametrize("value", ["-0.5", "+3", "-1e-05", "-inf", "nan", "plain", "", "a=b", "'quoted", -0.5, 3, None])
def test_numbers_and_plain_text_are_left_alone(value):
    assert escape_cell(value) == value
    if isinstance(value, str):
        assert unescape_cell(value) == value


def test_the_writer_escapes_every_cell_of_a_row():
    buf = io.StringIO()
    csv_cells.writer(buf, lineterminator="\n").writerows([[FORMULA, -0.5, "-0.5"], ["@x", 1, "ok"]])
    assert list(csv.reader(io.StringIO(buf.getvalue()))) == [["'" + FORMULA, "-0.5", "-0.5"], ["'@x", "1", "ok"]]


def test_a_run_named_as_a_formula_exports_as_text_and_its_own_csvs_read_back(tmp_path):
    """Before: the Runs dock's Export CSV wrote the folder name as a cell a spreadsheet runs."""
    run = good_run(tmp_path / "runs", FORMULA, 1e9)
    metrics = MetricsCSV(run / "metrics.csv")
    metrics.append({"epoch": 3, "step": 40, "train_loss": 0.1, "val_loss": -0.5, "@SUM(A1)": -2.0, "-x": 1.5})
    header, row = (run / "metrics.csv").read_text().splitlines()[0], (run / "metrics.csv").read_text().splitlines()[-1]
    assert header.endswith(",'@SUM(A1),'-x") and ",-0.5," in row and row.endswith(",-2.0,1.5")
    steps = StepsCSV(run / "steps.csv")
    steps.append([{"step": 1, "epoch": 0, "loss": -0.25, "+grad": 2.0}])
    assert read_header(run, "steps.csv")[-1] == "+grad"

    again = MetricsCSV(run / "metrics.csv")  # a resume reads the names back as written, and keeps them
    assert again.problem == "" and again.columns[-2:] == ["@SUM(A1)", "-x"]
    again.append({"epoch": 4, "step": 50, "val_loss": 0.25, "@SUM(A1)": 3.0, "-x": 0.5})
    assert (run / "metrics.csv").read_text().splitlines()[0] == header
    (block,) = list(MetricsBlocks(run))
    assert block["-x"].tolist()[-2:] == [1.5, 0.5] and block["val_loss"].tolist()[-2:] == [-0.5, 0.25]

    path = export_metrics([run], tmp_path / "runs.csv")
    with open(path, newline="") as f:
        rows = list(csv.reader(f))
    assert rows[0] == ["run", "step", "epoch", "metric", "value"]
    assert {r[0] for r in rows[1:]} == {"'" + FORMULA}
    assert ["'" + FORMULA, "40", "3", "val_loss", "-0.5"] in rows
    assert ["'" + FORMULA, "50", "4", "'@SUM(A1)", "3.0"] in rows
    assert ["'" + FORMULA, "1", "0", "step/train_loss", "-0.25"] in rows
    for cell in (c for r in rows for c in r):  # nothing a spreadsheet would run
        assert not cell.startswith(csv_cells.FORMULA_STARTS) or float(cell) == float(cell), cell
