"""One scripted session, three kinds of run: the window cannot tell them apart.

``RunLauncher.make_run`` makes a thread run, a run in a training process and a
data-parallel run (2 Gloo ranks on CPU) of the digits demo; the same
:class:`~workbench.ui.train.run_controller.RunController` script drives each:
start, freeze ``features`` and set the LR mid-run, pause, resume, stop. Each kind
must report the same events: both commands applied in the order queued (the
freeze naming what it changed), a pause, steps that only go up and carry on from
the paused step, ``Finished("stopped")`` last; and afterwards the window's model
has ``features`` frozen and the run folder holds its ``metrics.csv``.
"""

from __future__ import annotations

import numpy as np
import pytest
from PySide6.QtCore import QObject, Slot

from workbench.core.model.spec import ArchSpec
from workbench.core.model.demo import DigitsCNN
from workbench.core.train.config import DataConfig, TrainConfig
from workbench.core.train.events import (
    CommandApplied, EpochEnded, Finished, Metrics, Paused, RunError, StateSynced, apply_state,
)
from workbench.core.train.launch import RunLauncher, RunRequest
from workbench.core.train.trainer.commands import SetLR, SetTrainable
from workbench.ui.train.run_controller import RunController

pytestmark = pytest.mark.usefixtures("no_dangling_qthreads")

#: ms to wait for a run's first step (a training process imports torch; torchrun starts two ranks)
START_MS = {"thread": 60_000, "process": 120_000, "ddp": 180_000}
WAIT_MS = 120_000


class Recorder(QObject):
    """Every event of the controller, in the order the GUI thread got them."""

    def __init__(self, controller):
        super().__init__()
        self.events: list = []
        self.ended = False
        controller.event.connect(self.on_event)
        controller.ended.connect(self.on_ended)

    @Slot(object)
    def on_event(self, event):
        self.events.append(event)

    @Slot()
    def on_ended(self):
        self.ended = True

    def of(self, cls, since=0):
        return [e for e in self.events[since:] if isinstance(e, cls)]

    def steps(self, since=0):
        return [int(s) for m in self.of(Metrics, since) for s in m.values["step"]]


def _script(qtbot, controller, rec, kind) -> int:
    """Freeze and set the LR mid-run, pause, resume until an epoch ends, stop; the paused step."""
    qtbot.waitUntil(lambda: bool(rec.of(Metrics)) or rec.ended, timeout=START_MS[kind])
    assert not rec.ended, rec.of(RunError)
    controller.queue(SetTrainable(["features"], False))  # mid-run: steps are under way
    controller.queue(SetLR(1e-4))
    controller.pause()
    qtbot.waitUntil(lambda: bool(rec.of(Paused)) or rec.ended, timeout=WAIT_MS)
    assert not rec.ended, rec.of(RunError)
    resumed_at = len(rec.events)
    controller.resume()
    qtbot.waitUntil(lambda: bool(rec.of(EpochEnded, resumed_at)) or rec.ended, timeout=WAIT_MS)  # a metrics.csv row
    controller.stop()
    qtbot.waitUntil(lambda: rec.ended, timeout=WAIT_MS)
    return rec.of(Paused)[0].step


@pytest.mark.parametrize("kind", ["thread", "process", "ddp"])
def test_the_same_session_reads_the_same_on_every_kind_of_run(qtbot, tmp_path, kind):
    model = DigitsCNN()
    run_dir = tmp_path / kind
    config = TrainConfig(data=DataConfig(dataset="digits", batch_size=32), epochs=1000, lr=1e-2, seed=7,
                         device="cpu", run_dir=str(run_dir), tensorboard=False)
    request = RunRequest(model, config, ArchSpec("digits_cnn"), processes=2 if kind == "ddp" else 1,
                         in_process=kind == "thread")
    controller = RunController()
    rec = Recorder(controller)
    controller.start(RunLauncher().make_run(request))
    try:
        assert controller.kind == kind
        paused_step = _script(qtbot, controller, rec, kind)
    finally:  # a failed wait must not leave the run (and its processes) behind
        if controller.is_running():
            controller.stop_and_save()
            if not controller.wait(30_000):
                controller.end()
            qtbot.waitUntil(lambda: rec.ended, timeout=WAIT_MS)
    assert not controller.is_running() and controller.handle is None

    assert not rec.of(RunError), rec.of(RunError)
    finished = rec.of(Finished)
    assert len(finished) == 1 and rec.events[-1] is finished[0] and finished[0].reason == "stopped"
    applied = rec.of(CommandApplied)
    assert [type(e.command) for e in applied] == [SetTrainable, SetLR]  # in the order queued
    freeze, lr = applied
    assert freeze.command.error is None and freeze.command.changed
    assert all(name.startswith("features.") for name in freeze.command.changed)
    assert lr.command.lr == pytest.approx(1e-4)
    assert 0 < freeze.step <= lr.step <= paused_step
    assert len(rec.of(Paused)) == 1
    steps = rec.steps()
    assert np.all(np.diff(steps) > 0), "metrics steps must strictly increase"
    after = rec.steps(next(i for i, e in enumerate(rec.events) if isinstance(e, Paused)))
    assert after and after[0] == paused_step + 1  # carries on from the pause, no restart

    if kind != "thread":  # the window's copy is untouched until it follows the run through StateSynced
        assert all(p.requires_grad for p in model.parameters())
        apply_state(model, rec.of(StateSynced)[-1].state)
    params = dict(model.named_parameters())
    assert all(not params[name].requires_grad for name in freeze.command.changed)
    assert not any(p.requires_grad for p in model.features.parameters())
    assert all(p.requires_grad for p in model.classifier.parameters())
    assert run_dir.is_dir()
    rows = (run_dir / "metrics.csv").read_text().splitlines()
    assert len(rows) >= 2  # header and at least the epoch that ended after the resume
