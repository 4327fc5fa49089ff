"""``workbench runs``: every metric a run has can be shown (a task's own, a per-step one), as a column or in JSON."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from workbench.core.model.demo import DigitsCNN
from workbench.core.train.config import DataConfig, TrainConfig
from workbench.core.train.trainer.loop import Trainer

pytestmark = pytest.mark.timeout(120)


def _workbench(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "workbench", "runs", *args], capture_output=True, text=True,
                          timeout=120)


def test_a_tasks_own_metric_and_a_step_metric_are_columns_and_json(tmp_path):
    cfg = TrainConfig(data=DataConfig(dataset="digits", batch_size=64), epochs=1, run_dir=str(tmp_path / "r"),
                      tensorboard=False)
    assert Trainer(DigitsCNN(), cfg).fit() == "completed"
    out = _workbench(str(tmp_path), "--metric", "val_top5", "--metric", "step/train_loss", "--metric", "val_r2")
    assert out.returncode == 0, out.stderr
    header, line = out.stdout.splitlines()
    assert header.split() == ["name", "started", "model", "dataset", "epochs", "steps", "best", "val", "loss",
                              "best", "val", "acc", "val_top5", "step/train_loss", "val_r2", "state"]
    cells = line.split()
    assert cells[-1] == "finished" and cells[-2] == "-"  # no val_r2 in a classification run
    assert 0 < float(cells[-4]) <= 1 and float(cells[-3]) > 0
    js = json.loads(_workbench(str(tmp_path), "--json", "--metric", "val_top5").stdout)
    assert {"val_top5", "val_loss", "step/train_loss"} <= set(js[0]["metrics"]) and js[0]["steps"] == 23
    assert 0 < js[0]["last"]["val_top5"] <= 1
