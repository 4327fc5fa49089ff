"""What a run writes in its folder (``workbench.core.train.runs.folder``): status.json, metrics.csv, new folders."""

from __future__ import annotations

import csv
import json
import os

from workbench.core.run_folder.processes import process_start_time
from workbench.core.run_folder.status import read_status
from workbench.core.train.runs.folder import (DAMAGED_INFIX, METRICS_COLUMNS, MetricsCSV, default_runs_root,
                                              new_run_dir, write_status)


def test_status_json_says_running_then_how_the_run_ended(tmp_path):
    write_status(tmp_path, None, 100.0, {"model": "m", "epochs": 3})
    running = read_status(tmp_path)
    assert running["state"] == "running" and running["ended"] is None and running["pid"] == os.getpid()
    assert running["pid_start"] == process_start_time(os.getpid()) and running["model"] == "m"
    for reason, state in (("completed", "finished"), ("stopped", "stopped"), ("oom", "crashed"), ("odd", "crashed")):
        write_status(tmp_path, reason, 100.0)
        status = json.loads((tmp_path / "status.json").read_text())
        assert (status["state"], status["reason"]) == (state, reason) and status["ended"] >= 100.0


def test_new_run_folders_get_unique_names(tmp_path, monkeypatch):
    first = new_run_dir(tmp_path, "exp")
    second = new_run_dir(tmp_path, "exp")
    assert (first.name, second.name) == ("exp", "exp-2") and first.is_dir() and second.is_dir()
    monkeypatch.setenv("WORKBENCH_DATA_DIR", str(tmp_path / "data"))
    assert default_runs_root() == tmp_path / "data" / "runs"


def test_metrics_csv_appends_rows_and_a_resumed_run_keeps_the_earlier_ones(tmp_path):
    path = tmp_path / "metrics.csv"
    out = MetricsCSV(path)
    out.append({"epoch": 0, "step": 10, "train_loss": 0.5, "time": 1.0, "epoch_time": 1.0, "time_s": 1.0})
    again = MetricsCSV(path)
    again.append({"epoch": 1, "step": 20, "train_loss": 0.25, "val_top5": 0.9})
    rows = list(csv.DictReader(open(path)))
    assert [r["step"] for r in rows] == ["10", "20"] and again.problem == ""
    assert list(rows[0])[:len(METRICS_COLUMNS)] == list(METRICS_COLUMNS) and rows[1]["val_top5"] == "0.9"
    assert "time" not in rows[0] and "epoch_time" not in rows[0]


def test_a_damaged_metrics_csv_is_set_aside_and_said(tmp_path):
    path = tmp_path / "metrics.csv"
    path.write_bytes(b"epoch,step\n0,10\n\xff\xfe,\x00\n1,20\n")
    out = MetricsCSV(path)
    assert out.problem and [r["step"] for r in out.rows] == ["10", "20"]
    assert [p.name for p in tmp_path.iterdir() if DAMAGED_INFIX in p.name]
