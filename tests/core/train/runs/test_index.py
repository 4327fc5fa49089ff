"""``workbench runs``: one line per run folder with its model, dataset, epochs, best metrics and state; damaged run
folders listed and marked, escaped names, trusted pids, refused renames of live runs, long metrics.csv streamed."""

from __future__ import annotations

import csv
import json
import math
import os
import subprocess
import sys
import time
import tracemalloc

import numpy as np
import pytest

from tests.processes import program_sleeper, python_sleeper, workbench_module_child
from tests.core.train.damaged_runs import (
    DAMAGES,
    INFO,
    damaged_root,
    good_run,
    isolated_trash,
    set_status,
    within,
    write_long_metrics,
)
from workbench.core.model.demo import DigitsCNN
from workbench.core.plot_lod import MinMaxPyramid
from workbench.core.run_folder.processes import process_start_time
from workbench.core.train.config import DataConfig, TrainConfig
from workbench.core.train.trainer.hooks import Callback
from workbench.core.train.trainer.loop import Trainer
from workbench.core.train.runs.index import (
    RunIsTraining,
    config_diff,
    export_metrics,
    list_runs,
    read_curve,
    read_metrics,
    rename_run,
    runs_table,
)
from workbench.core.train.runs.trash import trash_run
from workbench.core.train.runs.folder import write_status


class StopAt(Callback):
    def on_step_end(self, trainer, metrics):
        if metrics["step"] == 30:
            trainer.request_stop()


def _run(root, name, epochs, callbacks=()):
    cfg = TrainConfig(data=DataConfig(dataset="digits", batch_size=64), epochs=epochs, lr=1e-3,
                      run_dir=str(root / name), tensorboard=False)
    return Trainer(DigitsCNN(), cfg, list(callbacks)).fit()


def test_runs_are_listed_with_their_state_and_best_metrics(tmp_path):
    root = tmp_path / "runs"
    assert _run(root, "a-finished", 2) == "completed"
    assert _run(root, "b-stopped", 3, [StopAt()]) == "stopped"
    assert _run(root, "c-crashed", 1) == "completed"
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    status = json.loads((root / "c-crashed" / "status.json").read_text())
    (root / "c-crashed" / "status.json").write_text(json.dumps({**status, "state": "running", "reason": None,
                                                                "pid": int(dead.stdout)}))
    (root / "not-a-run").mkdir()

    runs = list_runs(root)
    assert [(r.name, r.state, r.epochs_done, r.epochs) for r in runs] == [
        ("a-finished", "finished", 2, 2), ("b-stopped", "stopped", 1, 3), ("c-crashed", "crashed", 1, 1)]
    a = runs[0]
    assert a.model == "digits_cnn" and a.dataset == "digits" and 0 < a.best_val_loss < 3 and 0 < a.best_val_acc <= 1
    assert runs[0].started <= runs[1].started <= runs[2].started

    out = subprocess.run([sys.executable, "-m", "workbench", "runs", str(root)], capture_output=True, text=True,
                         timeout=120)
    assert out.returncode == 0, out.stderr
    lines = out.stdout.strip().splitlines()
    assert lines[0].split()[:3] == ["name", "started", "model"] and len(lines) == 4
    assert lines[1].startswith("a-finished") and lines[1].rstrip().endswith("finished")
    assert lines[3].rstrip().endswith("crashed")
    js = json.loads(subprocess.run([sys.executable, "-m", "workbench", "runs", str(root), "--json"],
                                   capture_output=True, text=True, timeout=120).stdout)
    assert [r["state"] for r in js] == ["finished", "stopped", "crashed"]
    assert math.isclose(js[0]["best_val_loss"], a.best_val_loss)
    missing = subprocess.run([sys.executable, "-m", "workbench", "runs", str(tmp_path / "nope")],
                             capture_output=True, text=True, timeout=120)
    assert missing.returncode == 1 and "no such runs folder" in missing.stderr


# ------------------------------------------------------------------------------------------ damaged run folders
needs_proc = pytest.mark.skipif(not os.path.exists("/proc/self/stat"), reason="checks /proc (Linux)")


@pytest.mark.parametrize("kind", sorted(DAMAGES))
def test_a_damaged_run_is_listed_marked_and_the_others_as_usual(tmp_path, kind):
    root = damaged_root(tmp_path, kind)
    runs = within(lambda: list_runs(root))  # a FIFO must not block the list
    by_name = {r.name: r for r in runs}
    assert sorted(by_name) == ["a-good", "b-bad", "c-good"]
    for name in ("a-good", "c-good"):
        r = by_name[name]
        assert (r.state, r.problem, r.epochs_done, r.model, r.best_val_loss) == (
            "finished", "", 3, "digits_cnn", pytest.approx(1.1 / 3))
    bad = by_name["b-bad"]
    marker = DAMAGES[kind][1]
    assert marker in bad.state_text() and bad.problem in bad.state_text()
    if not kind.startswith("status"):  # the state still comes from a readable status.json
        assert bad.state_text().startswith("finished; unreadable: ")
    line = next(line for line in runs_table(runs).splitlines() if line.startswith("b-bad"))
    assert marker in line
    assert json.loads(json.dumps([r.to_dict() for r in runs]))[0]["problem"] in (None, bad.problem)


def test_the_cli_lists_every_run_of_a_root_full_of_damaged_ones(tmp_path):
    root = tmp_path / "runs"
    good_run(root, "good", 1e9)
    for kind, (damage, _marker) in DAMAGES.items():
        damage(good_run(root, kind, 1e9 + 1))
    good_run(root, "evil\x1b]0;pwned\x07", 1e9 + 2)
    out = subprocess.run([sys.executable, "-m", "workbench", "runs", str(root)], capture_output=True, text=True,
                         timeout=120)
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert len(lines) == 1 + 1 + len(DAMAGES) + 1
    for kind, (_damage, marker) in DAMAGES.items():
        assert marker in next(line for line in lines if line.startswith(kind + " "))
    assert "\x1b" not in out.stdout and "\x07" not in out.stdout
    assert any(line.startswith("evil\\x1b]0;pwned\\x07 ") for line in lines)
    js = subprocess.run([sys.executable, "-m", "workbench", "runs", str(root), "--json"], capture_output=True,
                        text=True, timeout=120)
    assert js.returncode == 0, js.stderr
    assert {r["name"]: r["problem"] is None for r in json.loads(js.stdout)}["good"]


BAD_STARTED = {"huge": b'{"state":"finished","started":1e20}', "negative": b'{"state":"finished","started":-1e18}',
               "infinity": b'{"state":"finished","started":Infinity}', "nan": b'{"state":"finished","started":NaN}',
               "ended-huge": b'{"state":"finished","started":1e9,"ended":1e300}'}


def _bad_started_root(tmp_path):
    root = tmp_path / "runs"
    good_run(root, "good", 1e9)
    for name, text in BAD_STARTED.items():
        (good_run(root, name, 1e9) / "status.json").write_bytes(text)
    return root


def _strict_json(text):
    def refuse(constant):
        raise ValueError(f"{constant} is not JSON")
    return json.loads(text, parse_constant=refuse)


def test_a_time_out_of_range_marks_only_its_run_and_never_breaks_the_list(tmp_path, capsys):
    from workbench.cli import main

    root = _bad_started_root(tmp_path)
    runs = {r.name: r for r in list_runs(root)}
    assert runs["good"].problem == "" and runs["good"].state == "finished"
    for name in BAD_STARTED:
        key = "ended" if name.startswith("ended") else "started"
        assert runs[name].state == "unreadable" and math.isnan(runs[name].started)
        assert runs[name].problem.startswith(f"status.json: '{key}' is ") and "not a time" in runs[name].problem
    table = runs_table(list(runs.values()))
    assert len(table.splitlines()) == 1 + len(runs)
    assert main(["runs", str(root)]) == 0
    out = capsys.readouterr().out
    assert "Value too large" not in out and all(name in out for name in runs)
    assert main(["runs", str(root), "--json"]) == 0
    listed = _strict_json(capsys.readouterr().out)
    assert {r["name"] for r in listed} == set(runs) and all(r["started"] is None for r in listed if r["name"] != "good")


def test_formatters_never_raise_and_json_never_holds_nan_or_infinity(tmp_path, capsys):
    from workbench.cli import main
    from workbench.core.train.runs.index import RunSummary, format_time, run_cell

    for t in (1e20, -1e18, math.inf, -math.inf, math.nan, 0.0, 10**400):
        assert format_time(t) == "-"
    assert format_time(1e9) == time.strftime("%Y-%m-%d %H:%M", time.localtime(1e9))
    odd = RunSummary("odd", "/x", started=1e20, best_val_loss=-math.inf, best_val_acc=math.inf)
    assert [run_cell(odd, c) for c in ("started", "best val loss")] == ["-", "-inf"]
    assert runs_table([odd]).splitlines()[1].split()[1] == "-"
    assert _strict_json(json.dumps(odd.to_dict()))["best_val_loss"] is None
    d = good_run(tmp_path / "runs", "inf-loss", 1e9)  # a cell "-inf" in metrics.csv: a best loss of -inf
    (d / "metrics.csv").write_text((d / "metrics.csv").read_text().replace(",0.55,", ",-inf,", 1))
    assert list_runs(d.parent)[0].best_val_loss == -math.inf
    assert main(["runs", str(d.parent), "--json"]) == 0
    assert _strict_json(capsys.readouterr().out)[0]["best_val_loss"] is None


def test_read_metrics_of_a_very_wide_header_is_linear_and_says_the_columns_left_out(tmp_path):
    (tmp_path / "metrics.csv").write_text(",".join(f"c{i}" for i in range(60_000)) + "\n"
                                          + ",".join(map(str, range(60_000))) + "\n")
    problems = []
    start = time.monotonic()
    cols = within(lambda: read_metrics(tmp_path, problems), timeout=30)  # took 46 s
    assert time.monotonic() - start < 5
    assert len(cols) == 1000 and cols["c0"].tolist() == [0.0] and cols["c999"].tolist() == [999.0]
    assert problems == ["metrics.csv: has 60,000 columns: only the first 1,000 are read"]


def test_names_and_text_from_a_run_folder_are_printed_escaped(tmp_path):
    root = tmp_path / "runs"
    d = good_run(root, "evil\x1b]0;pwned\x07", 1e9)
    set_status(d, model="cnn\x1b[2J", dataset="digits\u202etxt")
    table = runs_table(list_runs(root))
    assert "\x1b" not in table and "\x07" not in table and "\u202e" not in table
    line = table.splitlines()[1]
    assert line.startswith("evil\\x1b]0;pwned\\x07 ") and "cnn\\x1b[2J" in line and "digits\\u202etxt" in line


@needs_proc
def test_running_is_trusted_only_for_a_live_workbench_process(tmp_path):
    root = tmp_path / "runs"
    me = good_run(root, "me", 1e9)
    write_status(me, None, 1e9, INFO)  # this (Python) process is training there
    for name, pid in (("pid-0", 0), ("pid-minus-1", -1)):
        set_status(good_run(root, name, 1e9), state="running", reason=None, pid=pid, pid_start=None)
    reused = good_run(root, "reused", 1e9)
    set_status(reused, state="running", reason=None, pid=os.getpid(), pid_start=process_start_time(os.getpid()) - 1)
    sleeper, python = program_sleeper(), python_sleeper(40)
    child = workbench_module_child()
    try:
        set_status(good_run(root, "sleep", 1e9), state="running", reason=None, pid=sleeper.pid, pid_start=None)
        # any python that took a dead run's pid, recorded without pid_start (an older status.json): not trusted
        set_status(good_run(root, "python", 1e9), state="running", reason=None, pid=python.pid, pid_start=None)
        set_status(good_run(root, "python-start", 1e9), state="running", reason=None, pid=python.pid,
                   pid_start=process_start_time(python.pid))
        set_status(good_run(root, "child", 1e9), state="running", reason=None, pid=child.pid,
                   pid_start=process_start_time(child.pid))
        set_status(good_run(root, "child-no-start", 1e9), state="running", reason=None, pid=child.pid,
                   pid_start=None)
        states = {r.name: r.state for r in list_runs(root)}
        assert states == {"me": "running", "pid-0": "crashed", "pid-minus-1": "crashed", "reused": "crashed",
                          "sleep": "crashed", "python": "crashed", "python-start": "crashed", "child": "running",
                          "child-no-start": "running"}
        assert rename_run(root / "python", "python-renamed").is_dir()  # not refused: no Workbench process there
        with pytest.raises(RunIsTraining):
            rename_run(root / "child-no-start", "other")
    finally:
        for p in (sleeper, python, child):
            p.kill()
            p.wait()
    assert {r.name: r.state for r in list_runs(root)}["child"] == "crashed"  # it died: reconciled when read


@needs_proc
def test_rename_and_delete_refuse_a_run_that_is_training(tmp_path, monkeypatch):
    trash = isolated_trash(monkeypatch, tmp_path)
    root = tmp_path / "runs"
    live = good_run(root, "live", 1e9)
    write_status(live, None, 1e9, INFO)  # running, in this process
    with pytest.raises(RunIsTraining, match=r"live is training \(process \d+\): stop the run before you rename it"):
        rename_run(live, "other")
    with pytest.raises(RunIsTraining, match=r"stop the run before you delete it"):
        trash_run(live)
    assert live.is_dir() and not (root / "other").exists()
    child = workbench_module_child()
    try:
        set_status(live, pid=child.pid, pid_start=process_start_time(child.pid))
        with pytest.raises(RunIsTraining, match=f"process {child.pid}"):
            rename_run(live, "other")
    finally:
        child.kill()
        child.wait()
    renamed = rename_run(live, "other")  # its process is gone: a crashed run, renamed
    assert renamed == root / "other" and renamed.is_dir()
    assert trash_run(renamed).original == renamed and not renamed.exists() and (trash / "files" / "other").is_dir()


# ------------------------------------------------------------------------------------------ long metrics.csv
def _csv_curve(path, x_key, metric):
    xs, ys = [], []
    with open(path, newline="") as f:
        for row in csv.DictReader(f):
            xs.append(float(row[x_key]))
            ys.append(float(row[metric]) if row[metric] else np.nan)
    return np.asarray(xs), np.asarray(ys)


@pytest.mark.parametrize("blank_every", [0, 4])
def test_a_long_metrics_csv_streams_into_the_pyramid_of_its_whole_curve(tmp_path, blank_every):
    d = good_run(tmp_path / "runs", "long", 1e9)
    write_long_metrics(d / "metrics.csv", 200_000, blank_every)
    x, y = _csv_curve(d / "metrics.csv", "step", "val_loss")
    whole = MinMaxPyramid(x, y)
    streamed = read_curve(d, "step", "val_loss")  # 200,000 points: all kept
    assert streamed.base == 1 and np.array_equal(streamed.x, x) and np.array_equal(streamed.y, y, equal_nan=True)
    assert len(streamed.levels) == len(whole.levels)
    for (s1, x1, y1), (s2, x2, y2) in zip(streamed.levels, whole.levels):
        assert s1 == s2 and np.array_equal(x1, x2) and np.array_equal(y1, y2, equal_nan=True)
    bounded = read_curve(d, "step", "val_loss", max_points=4096)  # only bins kept
    assert bounded.n == 200_000 and bounded.base == 128 and bounded.x is None  # 1,562 bins: 3,125 points kept
    levels = {size: (lx, ly) for size, lx, ly in whole.levels}
    for size, lx, ly in bounded.levels:
        assert np.array_equal(lx, levels[size][0]) and np.array_equal(ly, levels[size][1], equal_nan=True)
    assert np.array_equal(read_curve(d, "epoch", "train_loss").x, np.arange(1, 200_001))  # epochs completed
    assert read_curve(d, "step", "no_such_metric") is None
    (summary,) = list_runs(d.parent)
    assert summary.epochs_done == 200_000 and summary.best_val_loss == np.nanmin(y) and not summary.problem


def test_reading_a_long_curve_takes_memory_bounded_by_the_pyramid_not_the_file(tmp_path):
    d = good_run(tmp_path / "runs", "long", 1e9)
    write_long_metrics(d / "metrics.csv", 400_000)
    assert (d / "metrics.csv").stat().st_size > 30e6
    tracemalloc.start()
    try:
        read_curve(d, "step", "val_loss", max_points=8192)
        _, streamed = tracemalloc.get_traced_memory()
        tracemalloc.reset_peak()
        read_metrics(d)
        _, whole = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert streamed < 20e6 and whole > 30e6 and streamed < whole / 2


def test_export_and_config_diff_read_damaged_runs_without_raising(tmp_path):
    root = tmp_path / "runs"
    good = good_run(root, "good", 1e9)
    bad_metrics = good_run(root, "bad-metrics", 1e9)
    DAMAGES["metrics_0xff_byte"][0](bad_metrics)
    fifo = good_run(root, "fifo", 1e9)
    DAMAGES["metrics_fifo"][0](fifo)
    DAMAGES["toml_fifo"][0](fifo)
    model3 = good_run(root, "model3", 1e9)
    DAMAGES["toml_model_3"][0](model3)
    (model3 / "run.toml").write_text("model = 3\nwhen = 2024-01-02T03:04:05\n")  # a date: not JSON, still compared
    path = within(lambda: export_metrics([good, bad_metrics, fifo], tmp_path / "x.csv"))
    with open(path, newline="") as f:
        rows = list(csv.DictReader(f))
    assert {r["run"] for r in rows} == {"good", "bad-metrics"}
    assert sum(1 for r in rows if r["run"] == "bad-metrics" and r["metric"] == "val_loss") == 2  # one line skipped
    diff = dict(within(lambda: config_diff([good, fifo, model3])))
    assert diff["model"][2] == 3 and diff["model"][1] is None and "when" in diff


def _epochs(path):
    return [line.split(",")[0] for line in path.read_text().splitlines()[1:]]


def test_a_resumed_runs_damaged_metrics_csv_keeps_its_readable_rows_and_a_fifo_never_blocks(tmp_path):
    from workbench.core.train.runs.folder import MetricsCSV

    d = good_run(tmp_path / "runs", "resumed", 1e9)
    DAMAGES["metrics_0xff_byte"][0](d)  # epoch 1's line
    damaged = (d / "metrics.csv").read_bytes()
    rows = MetricsCSV(d / "metrics.csv")
    assert [r["epoch"] for r in rows.rows] == ["0", "2"] and "not UTF-8" in rows.problem
    (aside,) = d.glob("metrics.csv.damaged-*")  # the damaged file, byte for byte: its 0xFF line is not lost
    assert aside.read_bytes() == damaged and rows.damaged == aside and f"kept as {aside.name}" in rows.problem
    rows.append({"epoch": 3, "step": 40, "val_loss": 0.2})
    assert _epochs(d / "metrics.csv") == ["0", "2", "3"]
    DAMAGES["metrics_fifo"][0](d)
    rows = within(lambda: MetricsCSV(d / "metrics.csv"))
    assert rows.rows == [] and "a FIFO" in rows.problem
    rows.append({"epoch": 0, "step": 10})  # the FIFO is set aside, and a regular file written atomically
    assert (d / "metrics.csv").is_file() and len((d / "metrics.csv").read_text().splitlines()) == 2
    assert len(list(d.glob("metrics.csv.damaged-*"))) == 2


def test_resuming_over_a_line_of_nul_bytes_loses_no_row(tmp_path):
    """The reviewer's file: rows 0 and 1, a line of NUL bytes, rows 2 and 3; a resumed run appends epoch 4."""
    from workbench.core.train.runs.folder import MetricsCSV

    d = good_run(tmp_path / "runs", "resumed", 1e9, epochs=2)
    with open(d / "metrics.csv", "ab") as f:
        f.write(b"\0" * 4096 + b"\r\n2,30,0.8,0.7,0.7,0.1,3,1,,\r\n3,40,0.7,0.6,0.8,0.1,4,1,,1\r\n")
    damaged = (d / "metrics.csv").read_bytes()
    (before,) = list_runs(d.parent)
    assert before.epochs_done == 4 and "NUL bytes on line 4" in before.problem  # the list reads past them too
    rows = MetricsCSV(d / "metrics.csv")
    assert "NUL bytes" in rows.problem and "its 4 readable row(s) carried over" in rows.problem
    assert _epochs(d / "metrics.csv") == ["0", "1", "2", "3"]  # rewritten at once: every readable row
    rows.append({"epoch": 4, "step": 50})
    assert _epochs(d / "metrics.csv") == ["0", "1", "2", "3", "4"]
    (aside,) = d.glob("metrics.csv.damaged-*")
    assert aside.read_bytes() == damaged
    (after,) = list_runs(d.parent)  # the list says a damaged file was set aside in this run
    assert after.epochs_done == 5 and after.problem.startswith(f"{aside.name}: a damaged metrics.csv set aside")
    assert aside.name in runs_table([after])


def test_a_resumed_metrics_csv_keeps_columns_it_does_not_know(tmp_path):
    from workbench.core.train.runs.folder import METRICS_COLUMNS, MetricsCSV

    d = tmp_path / "run"
    d.mkdir()
    (d / "metrics.csv").write_text(",".join([*METRICS_COLUMNS, "grad_norm"]) + "\n0,10,1,,,,,,,,0.5\n")
    rows = MetricsCSV(d / "metrics.csv")
    rows.append({"epoch": 1, "step": 20})
    assert (d / "metrics.csv").read_text().splitlines() == [
        ",".join([*METRICS_COLUMNS, "grad_norm"]), "0,10,1,,,,,,,,0.5", "1,20,,,,,,,,,"]
    assert rows.problem == "" and not list(d.glob("metrics.csv.damaged-*"))


def test_a_damaged_metrics_csv_that_cannot_be_set_aside_is_not_overwritten(tmp_path, monkeypatch):
    from workbench.core.train.runs import folder as runs
    from workbench.core.train.runs.folder import MetricsCSV

    d = good_run(tmp_path / "runs", "resumed", 1e9)
    DAMAGES["metrics_0xff_byte"][0](d)
    damaged = (d / "metrics.csv").read_bytes()

    def refused(src, dst):  # as a folder the user may not write in (tests may run as root: chmod would not do)
        raise PermissionError(13, "Permission denied", str(src))

    monkeypatch.setattr(runs.os, "rename", refused)
    with pytest.raises(OSError, match="could not be set aside \\(Permission denied\\): not overwritten"):
        MetricsCSV(d / "metrics.csv")
    monkeypatch.undo()
    assert (d / "metrics.csv").read_bytes() == damaged and not list(d.glob("metrics.csv.damaged-*"))
