"""The script's side of attaching (``workbench.core.attach.script``): steps, epochs, commands, the run folder."""

from __future__ import annotations

import csv
import json

import pytest
import torch
from torch import nn

import workbench
from workbench.core.attach.script import PUBLISHED, Attached
from workbench.core.attach.script_run import ScriptRun
from workbench.core.attach.wire import DATACLASSES
from workbench.core.train.events import CommandApplied, EpochEnded, Finished, FitStarted, Metrics
from workbench.core.train.trainer.commands import SetLR, SetTrainable
from workbench.core.train.trainer.edit_log import EDITS_FILE, read_edits

pytestmark = pytest.mark.timeout(60)


def _attached(tmp_path, optimizer: bool = True) -> tuple[Attached, nn.Module, torch.optim.Optimizer | None]:
    model = nn.Sequential(nn.Linear(4, 3), nn.ReLU(), nn.Linear(3, 2))
    opt = torch.optim.SGD(model.parameters(), lr=0.1) if optimizer else None
    return workbench.attach(model, opt, run_dir=tmp_path / "run", name="t"), model, opt


def _published(att: Attached) -> list:
    return list(att.server.history.events)


def test_every_published_event_and_command_crosses_the_socket():
    assert {cls.__name__ for cls in PUBLISHED} <= set(DATACLASSES)
    assert {"SetTrainable", "SetLR", "SaveNow"} <= set(DATACLASSES)
    assert not {"StateSynced", "ExtrasReady", "Call"} & set(DATACLASSES)


def test_steps_and_epochs_fill_the_run_folder_and_the_events(tmp_path):
    att, _, _ = _attached(tmp_path)
    assert isinstance(att.state, ScriptRun) and att.sync is None
    status = json.loads((att.run_dir / "status.json").read_text())
    assert status["state"] == "running" and status["attached"] is True
    for epoch in range(2):
        for _ in range(3):
            att.step(torch.tensor(0.5), acc=0.25)
        att.epoch_end(val_loss=torch.tensor(0.4))
    att.close()
    assert att.step_count == 6 and att.state.epoch == 2
    rows = list(csv.DictReader(open(att.run_dir / "metrics.csv")))
    assert [int(r["epoch"]) for r in rows] == [0, 1] and float(rows[0]["train_loss"]) == pytest.approx(0.5)
    assert float(rows[1]["val_loss"]) == pytest.approx(0.4)
    assert json.loads((att.run_dir / "status.json").read_text())["reason"] == "completed"
    events = _published(att)
    assert isinstance(events[0], FitStarted) and isinstance(events[-1], Finished)
    assert [e.metrics["epoch"] for e in events if isinstance(e, EpochEnded)] == [0, 1]
    steps = att.server.history.metrics()
    assert steps["step"].tolist() == [1, 2, 3, 4, 5, 6] and steps["acc"].tolist() == [0.25] * 6


def test_a_command_applies_at_the_step_is_recorded_and_told(tmp_path):
    att, model, opt = _attached(tmp_path)
    try:
        att.step(1.0)
        att.apply_one(SetTrainable(["0"], False))
        att.apply_one(SetLR(0.01))
        assert not model[0].weight.requires_grad and opt.param_groups[0]["lr"] == pytest.approx(0.01)
        edits = read_edits(att.run_dir / EDITS_FILE)
        assert edits == [{"step": 1, "op": "set_trainable", "names": ["0.weight", "0.bias"], "flag": False},
                         {"step": 1, "op": "set_lr", "lr": 0.01}]
        told = [e for e in _published(att) if isinstance(e, CommandApplied)]
        assert [type(e.command) for e in told] == [SetTrainable, SetLR] and told[0].step == 1
    finally:
        att.close()


def test_a_command_that_cannot_apply_is_neither_recorded_nor_told(tmp_path):
    att, _, _ = _attached(tmp_path, optimizer=False)
    try:
        att.apply_one(SetLR(0.01))  # no optimizer: logged, the script goes on
        assert not (att.run_dir / EDITS_FILE).exists()
        assert not [e for e in _published(att) if isinstance(e, CommandApplied)]
    finally:
        att.close()


def test_a_window_command_with_a_bad_value_is_refused(tmp_path):
    att, _, opt = _attached(tmp_path)
    run = workbench.connect(att.address, att.token)
    try:
        assert run.wait_ack(run.set_lr(-1.0), timeout=10)["error"] == "lr must be a positive number"
        att.step(1.0)
        assert opt.param_groups[0]["lr"] == 0.1
    finally:
        run.close()
        att.close()


def test_rows_are_sent_as_one_metrics_batch_with_lr_epoch_and_time(tmp_path):
    att, _, _ = _attached(tmp_path)
    try:
        att.step(torch.tensor(2.0))
        att.step(3.0)
        att.flush()
        batch = att.server.history.metrics()
        assert batch["loss"].tolist() == [2.0, 3.0] and batch["lr"].tolist() == [0.1, 0.1]
        assert batch["epoch"].tolist() == [0, 0] and (batch["time"] >= 0).all()
        assert not [e for e in _published(att) if isinstance(e, Metrics)]  # kept as rows, not as events
    finally:
        att.close()
