"""A run's checkpoints (``workbench.core.train.trainer.checkpoints``): payload, save, save_last, resume."""

from __future__ import annotations

import math

import pytest
import torch
from torch import nn

from workbench.core.errors import TrainingError
from workbench.core.train.config import TrainConfig
from workbench.core.train.trainer.loop import Trainer


def _trainer(tmp_path, run: str = "run") -> Trainer:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 3), nn.ReLU(), nn.Linear(3, 2))
    x, y = torch.randn(8, 4), torch.randint(0, 2, (8,))
    return Trainer(model, TrainConfig(run_dir=str(tmp_path / run), epochs=2, tensorboard=False),
                   data=([(x, y)] * 3, [(x, y)]))


def test_the_payload_holds_the_state_a_resume_needs(tmp_path):
    trainer = _trainer(tmp_path)
    assert trainer.fit() == "completed"
    payload = trainer.checkpoints.payload(loss=0.5)
    assert payload["step"] == 6 and payload["epoch"] == 2 and payload["loss"] == 0.5
    assert {"model_state_dict", "optimizer_state_dict"} <= set(payload)


def test_save_and_resume_continue_from_the_same_step(tmp_path):
    first = _trainer(tmp_path)
    first.config.epochs = 1
    first.fit()
    path = first.checkpoints.save(tmp_path / "mid.pt")
    second = _trainer(tmp_path, "second")
    second.resume_from(path)
    assert second.step == 3 and second.epoch == 1 and second.resumed
    assert all(torch.equal(a, b) for a, b in zip(first.model.state_dict().values(),
                                                  second.model.state_dict().values()))
    assert second.fit() == "completed" and second.step == 6


def test_save_last_never_writes_nonfinite_weights(tmp_path):
    trainer = _trainer(tmp_path)
    trainer.prepare()
    assert trainer.checkpoints.save_last() == trainer.run_dir / "last.pt"
    with torch.no_grad():
        trainer.model[0].weight.fill_(math.nan)
    (trainer.run_dir / "last.pt").unlink()
    assert trainer.checkpoints.save_last() is None and not (trainer.run_dir / "last.pt").exists()


def test_a_file_that_is_not_a_training_checkpoint_is_refused(tmp_path):
    torch.save({"weights": torch.zeros(2)}, tmp_path / "other.pt")
    with pytest.raises(TrainingError):
        _trainer(tmp_path).resume_from(tmp_path / "other.pt")
