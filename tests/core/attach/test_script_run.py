"""What the steering parts act on in a user's loop (``workbench.core.attach.script_run.ScriptRun``)."""

from __future__ import annotations

import math

import torch
from torch import nn

from workbench.core.attach.script_run import ScriptRun
from workbench.core.train.trainer.commands import SaveNow, SetTrainable, apply_command
from workbench.core.train.trainer.control import RunControl
from workbench.core.train.trainer.edit_log import EDITS_FILE
from workbench.core.train.trainer.types import LockstepRun, SteeredRun


def _model() -> nn.Module:
    return nn.Sequential(nn.Linear(4, 3), nn.ReLU(), nn.Linear(3, 2))


def _members(protocol) -> set[str]:
    return {n for n in vars(protocol) if not n.startswith("_")} | set(protocol.__annotations__)


def test_it_holds_what_the_protocols_ask_and_no_placeholder_trainer_members(tmp_path):
    model = _model()
    run = ScriptRun(model, torch.optim.SGD(model.parameters(), lr=0.1), None, tmp_path, RunControl(), "s")
    wanted = _members(SteeredRun) | _members(LockstepRun)
    assert all(hasattr(run, name) for name in wanted), wanted - {n for n in wanted if hasattr(run, n)}
    for absent in ("task", "train_loader", "scaler", "best_val_loss", "net", "callbacks", "tensorboard"):
        assert not hasattr(run, absent)


def test_lr_group_names_and_the_edit_log_of_rank_zero_only(tmp_path):
    model = _model()
    opt = torch.optim.SGD([{"params": model[0].parameters(), "lr": 0.1}, {"params": model[2].parameters()}], lr=0.5)
    run = ScriptRun(model, opt, None, tmp_path, RunControl(), "s")
    assert run.lr == 0.1 and run.lr_used == 0.1 and run.is_main
    assert run.group_names == [["0.weight", "0.bias"], ["2.weight", "2.bias"]]
    assert run.edit_log is not None and run.edit_log.path == tmp_path / EDITS_FILE
    other = ScriptRun(model, None, None, tmp_path, RunControl(), "s", rank=1, world_size=2)
    assert not other.is_main and other.edit_log is None and math.isnan(other.lr) and other.group_names == []


def test_commands_apply_to_it_through_the_command_applier(tmp_path):
    model = _model()
    run = ScriptRun(model, torch.optim.SGD(model.parameters(), lr=0.1), None, tmp_path, RunControl(), "s")
    freeze = SetTrainable(["0"], False)
    run.apply_one(freeze)  # alone (no Attached around it): the applier itself
    assert freeze.changed == ["0.weight", "0.bias"] and not model[0].weight.requires_grad
    run.step, run.epoch = 7, 1
    run.history.append({"epoch": 0, "val_loss": 0.5})
    save = SaveNow(str(tmp_path / "now.pt"))
    apply_command(run, save)
    assert save.saved_to == str(tmp_path / "now.pt") and save.nonfinite == []
    raw = torch.load(tmp_path / "now.pt", weights_only=True)
    assert raw["step"] == 7 and raw["epoch"] == 1 and raw["attached_script"] == "s"
    assert raw["history"] == [{"epoch": 0, "val_loss": 0.5}] and "optimizer_state_dict" in raw


def test_the_lockstep_members_call_the_owner_or_do_nothing(tmp_path):
    applied, paused = [], []
    run = ScriptRun(_model(), None, None, tmp_path, RunControl(), "s", rank=0, world_size=2,
                    apply_one=applied.append, lockstep_paused=lambda: paused.append(True))
    run.apply_one("cmd")
    run.lockstep_paused()
    run.lockstep_resumed()
    run.heartbeat()
    run.wrap_ddp()
    run.prepare()
    run.apply_bn_policy()
    run.wait_for_saves()
    assert applied == ["cmd"] and paused == [True] and run.world_size == 2
