"""Run folders written by the product's own writers, and the ways one can be damaged (shared by the core and the
Runs dock tests)."""

from __future__ import annotations

import csv
import json
import os
import threading
import time
from pathlib import Path

from workbench.core.train.config import DataConfig, ModelConfig, TrainConfig
from workbench.core.train.runs.folder import METRICS_COLUMNS, MetricsCSV, write_status

INFO = {"model": "digits_cnn", "dataset": "digits", "epochs": 3}


def good_run(root: Path, name: str, started: float, epochs: int = 3) -> Path:
    """A finished run of ``epochs`` epochs: run.toml, metrics.csv and status.json as the trainer writes them."""
    d = root / name
    d.mkdir(parents=True)
    TrainConfig(data=DataConfig(dataset="digits"), epochs=epochs, model=ModelConfig(arch="digits_cnn")).to_toml(
        d / "run.toml")
    rows = MetricsCSV(d / "metrics.csv")
    for e in range(epochs):
        rows.append({"epoch": e, "step": (e + 1) * 10, "train_loss": 1.0 / (e + 1), "val_loss": 1.1 / (e + 1),
                     "val_acc": 0.5 + e / 10, "lr": 0.01, "time_s": float(e)})
    write_status(d, "completed", started, {**INFO, "epochs": epochs})
    return d


def write_long_metrics(path: Path, rows: int, blank_every: int = 0) -> None:
    """A metrics.csv of ``rows`` rows in the trainer's columns (val_loss blank but every ``blank_every``-th)."""
    with open(path, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(METRICS_COLUMNS)
        for e in range(rows):
            val = "" if blank_every and e % blank_every else 2.1 / (1 + e / 1000) + 0.01 * ((e * 7919) % 13)
            w.writerow([e, (e + 1) * 23, 2.0 / (1 + e / 1000), val, 0.5 + e / (4 * rows), 0.001, e * 0.25, 5000,
                        0.01, ""])


def _replace(path: Path, old: bytes, new: bytes) -> None:
    data = path.read_bytes()
    assert old in data, (path, old)
    path.write_bytes(data.replace(old, new, 1))


def _status(d: Path, text: bytes) -> None:
    (d / "status.json").write_bytes(text)


def _append(path: Path, data: bytes) -> None:
    with open(path, "ab") as f:
        f.write(data)


def _fifo(d: Path, name: str) -> None:
    (d / name).unlink()
    os.mkfifo(d / name)


def _link(d: Path, name: str, target: str) -> None:
    (d / name).unlink()
    (d / name).symlink_to(target)


def _sparse(d: Path, name: str) -> None:
    with open(d / name, "wb") as f:
        f.truncate(2**31)  # 2 GB on paper, nothing on disk


#: kind -> (damage(run folder), what the run's state text must then hold)
DAMAGES = {
    "status_wrong_types": (lambda d: _status(d, b'{"state": 3, "started": "noon", "pid": "12"}'),
                           "unreadable: status.json: 'state' is an integer, not a string"),
    "status_nul_bytes": (lambda d: _status(d, b'{"state": "finished", "sta\0\0\0\0\0\0'),
                         "unreadable: status.json: holds NUL bytes"),
    "status_truncated": (lambda d: _status(d, (d / "status.json").read_bytes()[:25]),
                         "unreadable: status.json: not JSON"),
    "status_fifo": (lambda d: _fifo(d, "status.json"), "unreadable: status.json: a FIFO, not a regular file"),
    "status_link_to_dev_zero": (lambda d: _link(d, "status.json", "/dev/zero"),
                                "unreadable: status.json: a link out of the run folder (to /dev/zero)"),
    "status_huge": (lambda d: _sparse(d, "status.json"), "unreadable: status.json: larger than 4 MB"),
    "status_a_folder": (lambda d: ((d / "status.json").unlink(), (d / "status.json").mkdir()),
                        "unreadable: status.json: a folder, not a regular file"),
    "metrics_0xff_byte": (lambda d: _replace(d / "metrics.csv", b"\r\n1,20,", b"\r\n1,2\xff0,"),
                          "unreadable: metrics.csv: not UTF-8 (byte 0xff"),
    "metrics_nul_bytes": (lambda d: _append(d / "metrics.csv", b"3,40,0.2" + b"\0" * 8192),
                          "unreadable: metrics.csv: NUL bytes on line 5 (a write cut short by a power loss?)"),
    "metrics_nul_line_inside": (lambda d: _replace(d / "metrics.csv", b"\r\n1,20,",
                                                   b"\r\n" + b"\0" * 64 + b"\r\n1,20,"),
                                "unreadable: metrics.csv: NUL bytes on line 3"),
    "metrics_truncated": (lambda d: _append(d / "metrics.csv", b"3,40,0.2"),
                          "unreadable: metrics.csv: line 5 has 3 of 10 cells (the file ends there: truncated?)"),
    "metrics_fifo": (lambda d: _fifo(d, "metrics.csv"), "unreadable: metrics.csv: a FIFO, not a regular file"),
    "metrics_link_to_dev_zero": (lambda d: _link(d, "metrics.csv", "/dev/zero"),
                                 "unreadable: metrics.csv: a link out of the run folder (to /dev/zero)"),
    "toml_model_3": (lambda d: (d / "run.toml").write_text("model = 3\n"),
                     "unreadable: run.toml: model is an integer, not a table ([model])"),
    "toml_not_utf8": (lambda d: _replace(d / "run.toml", b"digits_cnn", b"digits\xffcnn"),
                      "unreadable: run.toml: not UTF-8 (byte 0xff"),
    "toml_fifo": (lambda d: _fifo(d, "run.toml"), "unreadable: run.toml: a FIFO, not a regular file"),
}


def damaged_root(tmp_path: Path, kind: str) -> Path:
    """``tmp_path/runs`` with ``a-good``, ``b-bad`` (damaged by ``kind``) and ``c-good``."""
    root = tmp_path / "runs"
    good_run(root, "a-good", 1e9)
    bad = good_run(root, "b-bad", 1e9 + 1)
    good_run(root, "c-good", 1e9 + 2)
    DAMAGES[kind][0](bad)
    return root


def within(fn, timeout: float = 10.0):
    """``fn()`` on a thread: its result, or the test fails if it blocks longer than ``timeout`` s (a FIFO read)."""
    box = {}

    def run():
        try:
            box["result"] = fn()
        except BaseException as exc:  # noqa: BLE001 - re-raised in the test
            box["error"] = exc

    t = threading.Thread(target=run, daemon=True)
    start = time.monotonic()
    t.start()
    t.join(timeout)
    assert not t.is_alive(), f"blocked for more than {timeout} s"
    if "error" in box:
        raise box["error"]
    assert time.monotonic() - start < timeout
    return box["result"]


def status_json(d: Path) -> dict:
    return json.loads((d / "status.json").read_text())


def set_status(d: Path, **fields) -> None:
    (d / "status.json").write_text(json.dumps({**status_json(d), **fields}))


def isolated_trash(monkeypatch, folder: Path) -> Path:
    """The freedesktop.org home trash moved into ``folder/xdg`` (never the user's); its path.

    send2trash reads ``XDG_DATA_HOME`` once, when first imported: its module's copy is patched too, so the
    order in which tests first import it does not matter.
    """
    import send2trash.plat_other as plat

    xdg = folder / "xdg"
    monkeypatch.setenv("XDG_DATA_HOME", str(xdg))
    monkeypatch.setattr(plat, "XDG_DATA_HOME", os.fsencode(xdg))
    monkeypatch.setattr(plat, "HOMETRASH_B", os.fsencode(xdg / "Trash"))
    monkeypatch.setattr(plat, "HOMETRASH", str(xdg / "Trash"))
    return xdg / "Trash"
