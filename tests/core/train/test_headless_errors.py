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
