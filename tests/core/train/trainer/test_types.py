"""What the parts ask of the trainer (``workbench.core.train.trainer.types``): both runs give every member."""

from __future__ import annotations

from torch import nn

from workbench.core.attach.script_run import ScriptRun
from workbench.core.train.config import TrainConfig
from workbench.core.train.trainer.control import RunControl
from workbench.core.train.trainer.loop import Trainer
from workbench.core.train.trainer.types import LockstepRun, SteeredRun, TrainerLike


def _members(protocol) -> set[str]:
    names = set()
    for cls in protocol.__mro__:
        if cls.__name__ in ("Protocol", "Generic", "object"):
            continue
        names |= {n for n in vars(cls) if not n.startswith("_")} | set(getattr(cls, "__annotations__", {}))
    return names


def test_the_narrow_protocols_are_parts_of_the_trainers():
    assert _members(SteeredRun) <= _members(TrainerLike) and _members(LockstepRun) <= _members(TrainerLike)
    assert {"model", "optimizer", "control", "run_dir", "step"} <= _members(SteeredRun)
    assert len(_members(SteeredRun) | _members(LockstepRun)) < len(_members(TrainerLike)) / 2


def test_the_trainer_has_every_member_its_parts_ask(tmp_path):
    trainer = Trainer(nn.Linear(2, 2), TrainConfig(run_dir=str(tmp_path)))
    assert {n for n in _members(TrainerLike) if not hasattr(trainer, n)} == set()


def test_a_script_run_has_every_member_the_steering_parts_ask(tmp_path):
    run = ScriptRun(nn.Linear(2, 2), None, None, tmp_path, RunControl(), "s")
    assert {n for n in _members(SteeredRun) | _members(LockstepRun) if not hasattr(run, n)} == set()
