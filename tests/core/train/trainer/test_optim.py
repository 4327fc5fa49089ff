"""Loss, optimizer, scheduler and LR changes (``workbench.core.train.trainer.optim``)."""

from __future__ import annotations

import math

import pytest
import torch
from torch import nn

from workbench.core.errors import TrainingError
from workbench.core.train.config import TrainConfig
from workbench.core.train.trainer import optim


def _model() -> nn.Module:
    model = nn.Sequential(nn.Linear(4, 3), nn.ReLU(), nn.Linear(3, 2))
    model[0].bias.requires_grad_(False)
    return model


def test_only_trainable_parameters_go_to_the_groups_with_their_role_lr():
    cfg = TrainConfig(lr=0.1, backbone_lr_mult=0.1)
    groups = optim.param_groups(_model(), cfg)
    names = {g["wb_role"]: g["wb_names"] for g in groups}
    assert names == {"backbone": ["0.weight"], "head": ["2.weight", "2.bias"]}
    assert {g["wb_role"]: g["lr"] for g in groups} == {"backbone": pytest.approx(0.01), "head": 0.1}


def test_named_groups_rebuild_a_checkpoints_groups_or_name_what_is_missing():
    model, cfg = _model(), TrainConfig(lr=0.2, backbone_lr_mult=0.5)
    groups = optim.named_groups(model, cfg, [["0.weight"], ["2.weight"]], ["backbone", "head"])
    assert [g["params"][0] is p for g, p in zip(groups, (model[0].weight, model[2].weight))] == [True, True]
    assert [g["lr"] for g in groups] == [0.1, 0.2]
    with pytest.raises(TrainingError, match="lacks: 9.weight"):
        optim.named_groups(model, cfg, [["9.weight"]])


def test_set_group_lr_scales_the_others_and_the_schedule():
    model = _model()
    opt = torch.optim.SGD([{"params": [model[0].weight], "lr": 0.1}, {"params": [model[2].weight], "lr": 0.4}])
    sched = torch.optim.lr_scheduler.StepLR(opt, step_size=10)
    assert optim.set_group_lr(opt, sched, 0.05) == [0, 1]  # every group in proportion to the first's
    assert [g["lr"] for g in opt.param_groups] == [pytest.approx(0.05), pytest.approx(0.2)]
    assert sched.base_lrs == [pytest.approx(0.05), pytest.approx(0.2)]
    assert optim.set_group_lr(opt, sched, 1.0, group=1) == [1]
    assert [g["lr"] for g in opt.param_groups] == [pytest.approx(0.05), 1.0]
    for bad, group in ((-1.0, None), (math.nan, None), (0.1, 5)):
        with pytest.raises(ValueError):
            optim.set_group_lr(opt, sched, bad, group)


def test_the_head_lr_and_a_per_epoch_scheduler():
    model = _model()
    opt = optim.build_optimizer(optim.param_groups(model, TrainConfig(lr=0.3)), TrainConfig(lr=0.3))
    assert optim.head_lr(opt) == pytest.approx(0.3)
    plateau = optim.build_scheduler(opt, TrainConfig(scheduler="plateau"), steps_per_epoch=5)
    assert optim.is_per_epoch(plateau)


def test_a_regression_loss_takes_class_targets_as_one_hot():
    loss = optim.build_loss("mse")
    out = torch.zeros(2, 3)
    assert loss(out, torch.tensor([0, 2])).item() == pytest.approx(2 / 6)
