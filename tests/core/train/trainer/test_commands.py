"""The commands a run takes from other threads (``workbench.core.train.trainer.commands``), applied to a Trainer."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from workbench.core.errors import TrainingError
from workbench.core.train.config import TrainConfig
from workbench.core.train.trainer.commands import Call, EmptyCudaCache, SaveNow, SetLR, SetTrainable, apply_command
from workbench.core.train.trainer.loop import Trainer


def _trainer(tmp_path) -> Trainer:
    model = nn.Sequential(nn.Linear(4, 3), nn.ReLU(), nn.Linear(3, 2))
    model[0].requires_grad_(False)
    x, y = torch.randn(8, 4), torch.randint(0, 2, (8,))
    trainer = Trainer(model, TrainConfig(run_dir=str(tmp_path / "run"), lr=0.1), data=([(x, y)], [(x, y)]))
    trainer.prepare()
    return trainer


def test_unfreezing_adds_a_param_group_and_keeps_the_others(tmp_path):
    trainer = _trainer(tmp_path)
    before = len(trainer.optimizer.param_groups)
    cmd = SetTrainable("0", True, lr_factor=0.5)
    apply_command(trainer, cmd)
    assert cmd.changed == ["0.weight", "0.bias"] and cmd.error is None
    assert len(trainer.optimizer.param_groups) == before + 1
    added = trainer.optimizer.param_groups[-1]
    assert added["lr"] == pytest.approx(0.05) and added["wb_lr_factor"] == 0.5
    assert trainer.group_names[-1] == ["0.weight", "0.bias"]


def test_freezing_drops_gradients_and_an_unknown_name_changes_nothing(tmp_path):
    trainer = _trainer(tmp_path)
    trainer.model[2].weight.grad = torch.ones_like(trainer.model[2].weight)
    apply_command(trainer, SetTrainable(["2"], False))
    assert not trainer.model[2].weight.requires_grad and trainer.model[2].weight.grad is None
    bad = SetTrainable(["nope"], True)
    apply_command(trainer, bad)
    assert bad.error and bad.changed == [] and not trainer.model[2].weight.requires_grad


def test_set_lr_of_the_head_and_of_one_group(tmp_path):
    trainer = _trainer(tmp_path)
    apply_command(trainer, SetLR(0.02))
    assert trainer.config.lr == 0.02 and trainer.lr_used == 0.02 and trainer.lr == pytest.approx(0.02)
    apply_command(trainer, SetLR(0.5, group=0))
    assert trainer.optimizer.param_groups[0]["lr"] == 0.5
    with pytest.raises(TrainingError, match="param group 9"):
        apply_command(trainer, SetLR(0.5, group=9))


def test_save_now_writes_the_payload_and_says_where(tmp_path):
    trainer = _trainer(tmp_path)
    cmd = SaveNow()
    apply_command(trainer, cmd)
    assert cmd.saved_to == str(trainer.run_dir / "last.pt") and cmd.nonfinite == []
    assert "model_state_dict" in torch.load(cmd.saved_to, weights_only=True)


def test_a_call_runs_on_the_run_and_an_unknown_command_is_an_error(tmp_path):
    trainer = _trainer(tmp_path)
    call = Call(lambda run: run.step + 41)
    apply_command(trainer, call)
    apply_command(trainer, EmptyCudaCache())
    assert call.result == 41
    with pytest.raises(TrainingError, match="unknown command"):
        apply_command(trainer, "jump")
