"""The total readers of a run folder's files (``workbench.core.run_files``), on real files on disk."""

from __future__ import annotations

import csv
import json
import math
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pytest

from tests.processes import (SAY_READY, program_sleeper, python_sleeper, ready_then_sleep, started,
                             workbench_module_child)
from workbench.core.run_files import (
    MAX_COLUMNS,
    MAX_SMALL_BYTES,
    MetricsBlocks,
    NotATextFile,
    RunFileError,
    is_time,
    is_training_process,
    printable,
    process_start_time,
    read_csv_rows,
    read_run_info,
    read_small,
    read_status,
    read_text_file,
    training_pid,
)

HEADER = "epoch,step,train_loss,val_loss,val_acc,lr,time_s,samples_per_s,input_wait,best"
needs_proc = pytest.mark.skipif(not os.path.exists("/proc/self/stat"), reason="checks /proc (Linux)")
needs_fifo = pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="no FIFOs here")


def _in_thread(fn, timeout=5.0):
    """``fn()`` on a thread; its result or exception, failing the test if it does not return within ``timeout``."""
    box = {}

    def run():
        try:
            box["result"] = fn()
        except BaseException as exc:  # noqa: BLE001 - handed to the test
            box["error"] = exc

    t = threading.Thread(target=run, daemon=True)
    t.start()
    t.join(timeout)
    assert not t.is_alive(), f"{fn} blocked for {timeout} s"
    if "error" in box:
        raise box["error"]
    return box["result"]


def test_a_missing_file_is_none_not_an_error(tmp_path):
    assert read_status(tmp_path) is None and read_run_info(tmp_path) is None
    blocks = MetricsBlocks(tmp_path, ["val_loss"])
    assert list(blocks) == [] and not blocks.exists and blocks.problem == ""


@needs_fifo
def test_a_fifo_is_refused_at_once_never_read(tmp_path):
    os.mkfifo(tmp_path / "status.json")
    os.mkfifo(tmp_path / "metrics.csv")
    with pytest.raises(RunFileError, match="status.json: a FIFO, not a regular file"):
        _in_thread(lambda: read_status(tmp_path))
    blocks = MetricsBlocks(tmp_path, ["val_loss"])
    assert _in_thread(lambda: list(blocks)) == [] and blocks.problem == "metrics.csv: a FIFO, not a regular file"


def test_a_link_out_of_the_run_folder_is_refused_a_link_within_it_is_read(tmp_path):
    (tmp_path / "status.json").symlink_to("/dev/zero")
    with pytest.raises(RunFileError, match="status.json: a link out of the run folder \\(to /dev/zero\\)"):
        _in_thread(lambda: read_status(tmp_path))
    outside = tmp_path.parent / f"{tmp_path.name}-outside.toml"
    outside.write_text('[model]\narch = "mlp"\n')
    (tmp_path / "run.toml").symlink_to(outside)
    with pytest.raises(RunFileError, match="link out of the run folder"):
        read_run_info(tmp_path)
    (tmp_path / "run.toml").unlink()
    (tmp_path / "real.toml").write_text('[model]\narch = "mlp"\n')
    (tmp_path / "run.toml").symlink_to("real.toml")
    assert read_run_info(tmp_path).model == "mlp"


def test_a_device_and_a_folder_are_not_regular_files(tmp_path):
    (tmp_path / "status.json").mkdir()
    with pytest.raises(RunFileError, match="a folder, not a regular file"):
        read_status(tmp_path)
    link = tmp_path / "sub"
    link.mkdir()
    (link / "dev").symlink_to("/dev/null")  # a link inside a linked folder still resolves out: refused
    with pytest.raises(RunFileError, match="link out of the run folder"):
        read_small(link, "dev")


def test_nul_bytes_non_utf8_and_a_huge_file_are_said(tmp_path):
    (tmp_path / "status.json").write_bytes(b'{"state": "fini\0\0\0\0')
    with pytest.raises(RunFileError, match="holds NUL bytes \\(from offset 15"):
        read_status(tmp_path)
    (tmp_path / "status.json").write_bytes(b'{"state": "fin\xffished"}')
    with pytest.raises(RunFileError, match="not UTF-8 \\(byte 0xff at offset 14\\)"):
        read_status(tmp_path)
    with open(tmp_path / "status.json", "wb") as f:  # sparse: 1 GB on paper, nothing on disk
        f.truncate(2**30)
    with pytest.raises(RunFileError, match="larger than 4 MB"):
        read_status(tmp_path)
    assert MAX_SMALL_BYTES == 4 * 2**20


@pytest.mark.parametrize("text, match", [
    ('{"state": 3}', "'state' is an integer, not a string"),
    ('{"state": "running", "pid": "123"}', "'pid' is a string, not an integer"),
    ('{"state": "running", "pid": true}', "'pid' is a boolean, not an integer"),
    ('{"started": "yesterday"}', "'started' is a string, not a number"),
    ('{"epochs": -2}', "'epochs' is -2, not a count"),
    ('["state", "finished"]', "a list, not a JSON object"),
    ('{"state": "finis', "not JSON .*truncated"),
    ('', "not JSON"),
    ("[" * 100_000 + "]" * 100_000, "not JSON"),
])
def test_status_json_of_the_wrong_shape_is_said(tmp_path, text, match):
    (tmp_path / "status.json").write_text(text)
    with pytest.raises(RunFileError, match=match):
        read_status(tmp_path)


@pytest.mark.parametrize("text, shown", [
    ('{"state": "finished", "started": 1e20}', "1e+20"),
    ('{"state": "finished", "started": -1e18}', "-1e+18"),
    ('{"state": "finished", "started": Infinity}', "inf"),
    ('{"state": "finished", "started": -Infinity}', "-inf"),
    ('{"state": "finished", "started": NaN}', "nan"),
    ('{"state": "finished", "started": 0}', "0"),
    ('{"state": "finished", "started": 1' + "0" * 400 + "}", "an integer of about 401 digits"),
    ('{"state": "finished", "started": 1e9, "ended": 4e10}', "4e+10"),
])
def test_a_time_a_clock_cannot_show_is_said(tmp_path, text, shown):
    (tmp_path / "status.json").write_text(text)
    key = "ended" if "ended" in text else "started"
    with pytest.raises(RunFileError) as err:
        read_status(tmp_path)
    assert str(err.value) == (f"status.json: '{key}' is {shown}, not a time (seconds since 1970, before the "
                              "year 3000)")


def test_times_a_clock_can_show_are_read():
    assert all(is_time(t) for t in (1e9, 1, 1_700_000_000, 32503679999.0))
    assert not any(is_time(t) for t in (0, -1.0, 32503680000.0, math.inf, math.nan, 10**400, True, "1e9", None))


@pytest.mark.parametrize("text, match", [
    ("model = 3\n", r"model is an integer, not a table \(\[model\]\)"),
    ("[model]\narch = 3\n", r"\[model\] arch is an integer, not a string"),
    ('data = "digits"\n', "data is a string, not a table"),
    ('epochs = "ten"\n', "epochs is a string, not an integer"),
    ("epochs = -1\n", "epochs is -1, not a count"),
    ("[model\n", "not TOML"),
])
def test_run_toml_of_the_wrong_shape_is_said(tmp_path, text, match):
    (tmp_path / "run.toml").write_text(text)
    with pytest.raises(RunFileError, match=match):
        read_run_info(tmp_path)


def test_a_good_run_toml_gives_its_model_dataset_and_epochs(tmp_path):
    (tmp_path / "run.toml").write_text('epochs = 7\n[model]\narch = "mlp"\n[data]\ndataset = "digits"\n')
    info = read_run_info(tmp_path)
    assert (info.model, info.dataset, info.epochs) == ("mlp", "digits", 7)


def test_printable_escapes_controls_bidi_overrides_and_undecodable_bytes():
    assert printable("run-1 é 学") == "run-1 é 学"
    assert printable("\x1b]0;pwned\x07") == "\\x1b]0;pwned\\x07"
    assert printable("a\nb\tc\x00") == "a\\x0ab\\x09c\\x00"
    assert printable("evil\u202etxt") == "evil\\u202etxt"
    assert printable(os.fsdecode(b"bad\xffname")) == "bad\\xffname"
    assert all(ch.isprintable() for ch in printable("".join(map(chr, range(0x20)))))


# ------------------------------------------------------------------------------------------ metrics.csv
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
    (cols,) = _in_thread(lambda: list(blocks), timeout=20)
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


@needs_fifo
def test_read_text_file_refuses_a_fifo_a_device_and_a_folder_promptly_and_names_the_file(tmp_path):
    os.mkfifo(tmp_path / "fifo.toml")
    (tmp_path / "zero.toml").symlink_to("/dev/zero")
    (tmp_path / "dir.toml").mkdir()
    for name, kind in (("fifo.toml", "a FIFO"), ("zero.toml", "a character device"), ("dir.toml", "a folder")):
        with pytest.raises(NotATextFile, match=f"^{tmp_path / name}: {kind}, not a regular file$"):
            _in_thread(lambda name=name: read_text_file(tmp_path / name))
    (tmp_path / "bad.toml").write_bytes(b"epochs = 1\n# caf\xff\n")
    with pytest.raises(ValueError, match=f"^{tmp_path / 'bad.toml'}: not UTF-8 \\(byte 0xff at offset 16\\)$"):
        read_text_file(tmp_path / "bad.toml")
    with open(tmp_path / "big.toml", "wb") as f:
        f.truncate(MAX_SMALL_BYTES + 1)
    with pytest.raises(NotATextFile, match="larger than 4 MB"):
        read_text_file(tmp_path / "big.toml")
    with pytest.raises(FileNotFoundError):
        read_text_file(tmp_path / "missing.toml")
    elsewhere = tmp_path.parent / f"{tmp_path.name}-shared.toml"
    elsewhere.write_text("epochs = 2\n")
    (tmp_path / "linked.toml").symlink_to(elsewhere)  # a link the user made to a regular file anywhere: read
    assert read_text_file(tmp_path / "linked.toml") == "epochs = 2\n"


# ------------------------------------------------------------------------------------------ processes
def test_pid_zero_minus_one_and_the_wrong_types_are_never_a_training_process():
    for pid in (0, -1, -os.getpid(), None, "1", True, 1.5):
        assert not is_training_process(pid)


def _console_script_child(folder):
    """A live process started as the ``workbench`` console script is (``python .../bin/workbench ARGS``)."""
    script = folder / "bin" / "workbench"
    script.parent.mkdir(exist_ok=True)
    script.write_text(f"{SAY_READY}\nimport time\ntime.sleep(60)\n")
    return started([sys.executable, str(script), "train", "run.toml"])


_SPAWN_GRANDCHILD = """
import multiprocessing, sys
from tests.processes import ready_then_sleep
if __name__ == "__main__":
    ctx = multiprocessing.get_context("spawn")
    ready = ctx.Event()
    p = ctx.Process(target=ready_then_sleep, args=(ready, 60), daemon=True)
    p.start()
    assert ready.wait(60)
    print(p.pid, flush=True)
    sys.stdin.read()
"""


def _stop(*procs):
    for p in procs:
        p.kill()
        p.wait()


@needs_proc
def test_a_live_process_counts_only_if_it_is_workbench_and_started_when_recorded(tmp_path):
    me = os.getpid()
    assert is_training_process(me, process_start_time(me)) and is_training_process(me)  # this process runs Workbench
    assert not is_training_process(me, process_start_time(me) + 1)  # the pid was reused
    sleeper, python = program_sleeper(), python_sleeper()
    module, script = workbench_module_child(), _console_script_child(tmp_path)
    try:
        for p in (sleeper, python):  # alive, but not Workbench: with or without its start time
            assert process_start_time(p.pid) is not None
            assert not is_training_process(p.pid) and not is_training_process(p.pid, process_start_time(p.pid))
        for p in (module, script):
            assert is_training_process(p.pid) and is_training_process(p.pid, process_start_time(p.pid))
            assert not is_training_process(p.pid, process_start_time(p.pid) + 1)
    finally:
        _stop(sleeper, python, module, script)
    assert not is_training_process(module.pid) and process_start_time(module.pid) is None


@needs_proc
def test_a_multiprocessing_child_counts_only_when_its_parent_is_workbench(tmp_path):
    import multiprocessing

    ctx = multiprocessing.get_context("spawn")
    ready = ctx.Event()
    mine = ctx.Process(target=ready_then_sleep, args=(ready, 60), daemon=True)
    mine.start()  # the window's training process is such a child of the window
    assert ready.wait(60)
    root = str(Path(__file__).resolve().parents[2])  # the grandchild's target is tests.processes'
    outer = subprocess.Popen([sys.executable, "-c", _SPAWN_GRANDCHILD], stdin=subprocess.PIPE,
                             stdout=subprocess.PIPE, text=True, env=dict(os.environ, PYTHONPATH=root))
    try:
        theirs = int(outer.stdout.readline())  # a spawn child of a plain python, running
        assert process_start_time(theirs) is not None
        assert is_training_process(mine.pid, process_start_time(mine.pid))
        assert not is_training_process(theirs) and not is_training_process(theirs, process_start_time(theirs))
    finally:
        mine.kill()
        mine.join()
        outer.kill()
        outer.wait()


@pytest.mark.parametrize("pid", [2**31, 10**30])
def test_a_pid_beyond_any_process_id_is_no_process(pid):
    assert not is_training_process(pid)


@needs_proc
def test_training_pid_trusts_running_only_for_a_live_workbench_process(tmp_path):
    def status(**fields):
        (tmp_path / "status.json").write_text(json.dumps({"state": "running", **fields}))
        return training_pid(tmp_path)

    me = os.getpid()
    assert status(pid=me, pid_start=process_start_time(me)) == me
    assert status(pid=0) is None and status(pid=-1) is None and status(pid=me, pid_start=1) is None
    python = python_sleeper()
    module = workbench_module_child()
    try:  # a plain python that took a dead run's pid is not trusted; a Workbench process is, with or without start
        assert status(pid=python.pid) is None and status(pid=python.pid, pid_start=None) is None
        assert status(pid=module.pid) == module.pid
        assert status(pid=module.pid, pid_start=process_start_time(module.pid)) == module.pid
    finally:
        _stop(python, module)
    (tmp_path / "status.json").write_text(json.dumps({"state": "finished", "pid": me}))
    assert training_pid(tmp_path) is None
    (tmp_path / "status.json").write_text("{")
    assert training_pid(tmp_path) is None  # unreadable: no evidence of a live run
