"""One process or one rank of a data-parallel run (``workbench.core.train.trainer.strategy``)."""

from __future__ import annotations

import json
import threading

import torch
from torch import nn

from workbench.core.train.config import TrainConfig
from workbench.core.train.trainer.commands import SetLR
from workbench.core.train.trainer.hooks import Callback
from workbench.core.train.trainer.loop import Trainer
from workbench.core.train.trainer.strategy import SingleProcess, process_group, strategy_for


def _trainer(tmp_path, callbacks=()) -> Trainer:
    x, y = torch.randn(8, 4), torch.randint(0, 2, (8,))
    return Trainer(nn.Linear(4, 2), TrainConfig(run_dir=str(tmp_path / "run"), lr=0.1, tensorboard=False),
                   callbacks, data=([(x, y)] * 4, [(x, y)]))


def test_without_a_process_group_a_run_is_one_process(tmp_path):
    trainer = _trainer(tmp_path)
    assert process_group() == (0, 1)
    strategy = strategy_for(trainer)
    assert type(strategy) is SingleProcess and strategy.sync is None and (trainer.rank, trainer.world_size) == (0, 1)
    loss = torch.tensor(0.5)
    assert strategy.reduce(loss, 4, deferred=False) == (loss, 4)
    assert not strategy.stop_agreed
    trainer.control.request_stop()
    assert strategy.stop_agreed


def test_the_boundary_applies_commands_and_pauses_until_resumed(tmp_path):
    class PauseOnce(Callback):
        paused = 0

        def on_pause(self, trainer):
            PauseOnce.paused += 1
            trainer.queue(SetLR(0.01))  # given while paused: applied before the run goes on
            threading.Timer(0.05, trainer.resume).start()

    trainer = _trainer(tmp_path, [PauseOnce()])
    trainer.prepare()
    trainer.queue(SetLR(0.05))
    trainer.pause()
    trainer.strategy.boundary()
    assert PauseOnce.paused == 1 and trainer.lr == 0.01 and not trainer.is_paused
    ops = [json.loads(line)["op"] for line in (trainer.run_dir / "edits.jsonl").read_text().splitlines()]
    assert ops == ["set_lr", "pause", "set_lr", "resume"]
