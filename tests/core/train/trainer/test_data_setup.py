"""A run's data and task before its first step (``workbench.core.train.trainer.data_setup``)."""

from __future__ import annotations

import torch
from torch import nn

from workbench.core.train.config import DataConfig, TrainConfig
from workbench.core.train.trainer.data_setup import build_data, settle_task, take_skipped, wants_channels_last


class _Skipping(list):
    def __init__(self, names):
        super().__init__()
        self.names = list(names)

    def take_skipped(self):
        names, self.names = self.names, []
        return names


def test_skipped_files_are_taken_once_from_every_loader():
    a, b = _Skipping(["x.png"]), _Skipping(["y.png", "z.png"])
    assert take_skipped(a, [], b) == ["x.png", "y.png", "z.png"]
    assert take_skipped(a, b) == []


def test_channels_last_auto_is_for_a_conv_model_on_cuda():
    conv, linear = nn.Sequential(nn.Conv2d(1, 2, 3)), nn.Linear(2, 2)
    assert wants_channels_last("auto", torch.device("cuda"), conv)
    assert not wants_channels_last("auto", torch.device("cpu"), conv)
    assert not wants_channels_last("auto", torch.device("cuda"), linear)
    assert wants_channels_last(True, torch.device("cpu"), linear)


def test_the_task_kind_is_the_first_batchs_when_nothing_says():
    batches = [(torch.randn(4, 3), torch.randn(4, 2))]
    kind, task = settle_task(TrainConfig(), None, batches)
    assert kind == "regression" and task is not None
    kind, _ = settle_task(TrainConfig(), None, [(torch.randn(4, 3), torch.tensor([0, 1, 1, 0]))])
    assert kind == "classification"


def test_build_data_gives_loaders_a_task_and_runs_the_preflight():
    cfg = TrainConfig(data=DataConfig(dataset="fake", fake_shape=[1, 8, 8], fake_size=64, batch_size=16))
    model = nn.Sequential(nn.Flatten(), nn.Linear(64, 10))
    seen: list[str] = []
    data = build_data(cfg, model, torch.device("cpu"), (0, 1), seen.append)
    assert data.kind == "classification" and len(data.train_loader) > 0 and data.task is not None
    x, _ = next(iter(data.train_loader))
    assert tuple(x.shape[1:]) == (1, 8, 8)
