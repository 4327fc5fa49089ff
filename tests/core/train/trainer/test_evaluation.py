"""Validation and the best epoch (``workbench.core.train.trainer.evaluation``)."""

from __future__ import annotations

import math
from types import SimpleNamespace

import pytest
import torch
from torch import nn

from workbench.core.errors import TrainingError
from workbench.core.train.config import TaskConfig, TrainConfig
from workbench.core.train.trainer.evaluation import is_best, monitor_key, validate
from workbench.core.train.trainer.loop import Trainer


def _run(monitor: str = "", mode: str = "min"):
    return SimpleNamespace(config=TrainConfig(task=TaskConfig(monitor=monitor, mode=mode)), best_score=math.nan)


def test_the_monitored_column():
    assert monitor_key(TrainConfig()) == "val_loss"
    assert monitor_key(TrainConfig(task=TaskConfig(monitor="val_accuracy"))) == "val_acc"
    assert monitor_key(TrainConfig(task=TaskConfig(monitor="val_f1"))) == "val_f1"


def test_the_best_epoch_follows_the_mode_and_skips_nan():
    run = _run("val_acc", "max")
    assert is_best(run, {"val_acc": 0.5}) and run.best_score == 0.5
    assert not is_best(run, {"val_acc": 0.4}) and not is_best(run, {"val_acc": math.nan})
    assert is_best(run, {"val_acc": 0.6}) and run.best_score == 0.6
    low = _run()
    assert is_best(low, {"val_loss": 1.0}) and is_best(low, {"val_loss": 0.5}) and not is_best(low, {"val_loss": 2.0})


def test_a_monitor_the_run_does_not_report_names_the_metrics_it_has():
    with pytest.raises(TrainingError, match="choose one of val_loss"):
        is_best(_run("val_f1"), {"val_loss": 0.5, "time": 3.0})


def test_validate_gives_the_loss_and_metrics_and_restores_train_mode(tmp_path):
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 3), nn.BatchNorm1d(3), nn.Linear(3, 2))
    x, y = torch.randn(8, 4), torch.randint(0, 2, (8,))
    trainer = Trainer(model, TrainConfig(run_dir=str(tmp_path)), data=([(x, y)], [(x, y), (x, y)]))
    trainer.prepare()
    model.train()
    result = validate(trainer)
    assert model.training
    expected = nn.functional.cross_entropy(model.eval()(x), y).item()
    assert result["val_loss"] == pytest.approx(expected, rel=1e-5) and 0 <= result["val_acc"] <= 1
