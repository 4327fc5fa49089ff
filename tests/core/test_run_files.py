"""The total readers of a run folder's files (``workbench.core.run_files``), on real files on disk."""

from __future__ import annotations

import csv
import json
import os
import subprocess
import sys
import threading

import numpy as np
import pytest

from workbench.core.run_files import (
    MAX_SMALL_BYTES,
    MetricsBlocks,
    RunFileError,
    is_training_process,
    printable,
    process_start_time,
    read_run_info,
    read_small,
    read_status,
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


def test_nul_bytes_end_the_reading_and_the_rows_before_them_are_kept(tmp_path):
    _write_metrics(tmp_path / "metrics.csv", _rows(10))
    with open(tmp_path / "metrics.csv", "ab") as f:
        f.write(b"10,253,0.1" + b"\0" * 100_000)  # a power loss: the last write's pages are zeros
    blocks = MetricsBlocks(tmp_path, ["step"])
    steps = np.concatenate([b["step"] for b in blocks])
    assert list(steps) == [(e + 1) * 23 for e in range(10)]
    assert blocks.problem == "metrics.csv: holds NUL bytes from line 12 on (a write cut short by a power loss?)"


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


# ------------------------------------------------------------------------------------------ processes
def test_pid_zero_minus_one_and_the_wrong_types_are_never_a_training_process():
    for pid in (0, -1, -os.getpid(), None, "1", True, 1.5):
        assert not is_training_process(pid)


@needs_proc
def test_a_live_process_counts_only_if_it_is_python_and_started_when_recorded(tmp_path):
    me = os.getpid()
    assert is_training_process(me, process_start_time(me)) and is_training_process(me)
    assert not is_training_process(me, process_start_time(me) + 1)  # the pid was reused
    sleeper = subprocess.Popen(["sleep", "60"])
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        assert process_start_time(sleeper.pid) is not None
        assert not is_training_process(sleeper.pid)  # alive, but not Python nor Workbench
        assert is_training_process(child.pid, process_start_time(child.pid))
    finally:
        for p in (sleeper, child):
            p.kill()
            p.wait()
    assert not is_training_process(child.pid) and process_start_time(child.pid) is None


@needs_proc
def test_training_pid_trusts_running_only_for_a_live_workbench_process(tmp_path):
    def status(**fields):
        (tmp_path / "status.json").write_text(json.dumps({"state": "running", **fields}))
        return training_pid(tmp_path)

    me = os.getpid()
    assert status(pid=me, pid_start=process_start_time(me)) == me
    assert status(pid=0) is None and status(pid=-1) is None and status(pid=me, pid_start=1) is None
    (tmp_path / "status.json").write_text(json.dumps({"state": "finished", "pid": me}))
    assert training_pid(tmp_path) is None
    (tmp_path / "status.json").write_text("{")
    assert training_pid(tmp_path) is None  # unreadable: no evidence of a live run
