"""`workbench train` on a disk it cannot write: one `error:` line naming the file, no traceback."""

from __future__ import annotations

import errno
import sys

import pytest

from workbench import cli
from workbench.core.train.config import DataConfig, ModelConfig, TrainConfig


def _config(tmp_path, run_dir) -> str:
    cfg = TrainConfig(data=DataConfig(batch_size=128), epochs=1, run_dir=str(run_dir), tensorboard=False,
                      model=ModelConfig(arch="digits_cnn"))
    cfg.to_toml(tmp_path / "run.toml")
    return str(tmp_path / "run.toml")


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="/proc is Linux's read-only file system")
def test_a_run_folder_that_cannot_be_made_is_one_line(tmp_path, capsys):
    assert cli.main(["train", _config(tmp_path, "/proc/workbench-run")]) == 1
    out = capsys.readouterr().out
    assert "Traceback" not in out
    (line,) = [ln for ln in out.splitlines() if ln.startswith("error: ")]
    assert "/proc/workbench-run" in line and "run_dir" in line


def test_a_full_disk_is_one_line_and_debug_adds_the_traceback(tmp_path, capsys, monkeypatch):
    import workbench.core.files as files

    def full(*_args, **_kwargs):
        raise OSError(errno.ENOSPC, "No space left on device", str(tmp_path / "out" / "init.pt"))

    path = _config(tmp_path, tmp_path / "out")
    monkeypatch.setattr(files.os, "fsync", full)
    assert cli.main(["train", path]) == 1
    out = capsys.readouterr().out
    assert "Traceback" not in out and "No space left on device" in out and "free disk space" in out
    assert cli.main(["train", path, "--debug"]) == 1
    assert "Traceback" in capsys.readouterr().out


def test_sigterm_stops_a_headless_run_at_a_step_and_saves_last_pt(tmp_path):
    """A service manager's SIGTERM ends `workbench train` as Ctrl-C does: last.pt at the step it stopped, exit 143."""
    import json
    import signal
    import subprocess
    import time

    import torch

    cfg = TrainConfig(data=DataConfig(batch_size=16), epochs=500, run_dir=str(tmp_path / "out"), tensorboard=False,
                      model=ModelConfig(arch="digits_cnn"))
    cfg.to_toml(tmp_path / "run.toml")
    proc = subprocess.Popen([sys.executable, "-m", "workbench", "train", str(tmp_path / "run.toml")],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        for line in proc.stdout:  # wait until it trains: "epoch 1/500  step 91  ..."
            if line.startswith("epoch 1/"):
                first_epoch_steps = int(line.split()[3])
                break
        proc.send_signal(signal.SIGTERM)
        started = time.monotonic()
        rest, _ = proc.communicate(timeout=60)
    finally:
        proc.kill()
    assert proc.returncode == 128 + signal.SIGTERM, rest
    assert time.monotonic() - started < 30 and "stopping at the next step (SIGTERM" in rest
    last = torch.load(tmp_path / "out" / "last.pt", weights_only=True)
    assert last["step"] >= first_epoch_steps > 0  # saved where it stopped, after the first epoch
    assert json.loads((tmp_path / "out" / "status.json").read_text())["state"] == "stopped"
