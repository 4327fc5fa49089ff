"""``workbench train`` says where it is between epoch lines: step N/M, samples/s and an ETA, at most every few s."""

from __future__ import annotations

import re

from workbench.core.train.launch import headless
from workbench.core.train.launch.headless import train_from_toml

PROGRESS = re.compile(r"^step (\d+)/(\d+)  epoch (\d+)/2  loss \d+\.\d{4}  \d+ samples/s  ETA \d+:\d\d$")


def _run(tmp_path, monkeypatch, every_s: float) -> list[str]:
    monkeypatch.setattr(headless, "PROGRESS_EVERY_S", every_s)
    path = tmp_path / "run.toml"
    path.write_text(f'epochs = 2\nrun_dir = "{tmp_path / "run"}"\ntensorboard = false\nemit_every_ms = 0.0\n'
                    '[data]\ndataset = "digits"\nbatch_size = 128\n')
    lines: list[str] = []
    assert train_from_toml(path, out=lines.append) == 0, lines
    return lines


def test_progress_lines_count_steps_up_to_the_total(tmp_path, monkeypatch):
    lines = _run(tmp_path, monkeypatch, every_s=0.0)
    progress = [PROGRESS.match(line) for line in lines if line.startswith("step ")]
    assert progress and all(progress), [line for line in lines if line.startswith("step ")]
    steps = [int(m.group(1)) for m in progress]
    total = {int(m.group(2)) for m in progress}
    assert total == {24}  # 2 epochs x 12 steps of 128 of the 1437 training digits
    assert steps == sorted(steps) and 1 <= steps[0] and steps[-1] <= 24
    # printed between the epoch lines, not after them
    first_epoch = next(i for i, line in enumerate(lines) if line.startswith("epoch 1/2"))
    assert any(line.startswith("step ") for line in lines[:first_epoch])


def test_no_progress_line_within_the_interval(tmp_path, monkeypatch):
    lines = _run(tmp_path, monkeypatch, every_s=3600.0)
    assert not [line for line in lines if line.startswith("step ")]
    assert [line for line in lines if line.startswith("epoch ")]
