"""The ranks' agreement (``workbench.core.train.trainer.rank_sync``) on a LockstepRun, collectives faked."""

from __future__ import annotations

import pytest

from workbench.core.train.trainer import rank_sync
from workbench.core.train.trainer.commands import SetLR, SetTrainable
from workbench.core.train.trainer.control import RunControl
from workbench.core.train.trainer.rank_sync import RankSync


class _Run:
    """The members of a LockstepRun, recording what the agreement calls."""

    def __init__(self, rank: int = 0):
        self.control = RunControl()
        self.edit_log = _Log()
        self.step = 5
        self.rank = rank
        self.world_size = 2
        self.calls: list = []

    def apply_one(self, cmd) -> None:
        self.calls.append(("apply", cmd))

    def wrap_ddp(self) -> None:
        self.calls.append(("wrap",))

    def lockstep_paused(self) -> None:
        self.calls.append(("paused",))

    def lockstep_resumed(self) -> None:
        self.calls.append(("resumed",))

    def heartbeat(self) -> None:
        self.calls.append(("beat",))


class _Log:
    def __init__(self):
        self.lines: list = []

    def write(self, step: int, entry: dict) -> None:
        self.lines.append((step, entry))


@pytest.fixture
def one_rank(monkeypatch):
    """Rank 0 alone: a broadcast returns what rank 0 sent."""
    monkeypatch.setattr(RankSync, "_broadcast", staticmethod(lambda objs: objs))
    monkeypatch.setattr(rank_sync, "PAUSE_TICK_S", 0.01)


def test_agreed_commands_apply_at_the_boundary_and_a_freeze_rewraps(one_rank):
    run = _Run()
    sync = RankSync(run)
    freeze, lr = SetTrainable(["fc"], False, changed=["fc.weight"]), SetLR(0.1)
    sync.agreed = [freeze, lr]
    sync.boundary()
    assert run.calls == [("apply", freeze), ("apply", lr), ("wrap",)] and sync.agreed == []


def test_a_pause_is_lockstep_recorded_and_ends_on_resume(one_rank):
    run = _Run()
    sync = RankSync(run)
    run.control.pause()
    sync.pause_agreed = True
    queued = SetLR(0.2)
    run.control.queue(queued)  # given during the pause: applied on every rank while paused
    original = run.control.wait_for_change

    def resume_after_a_tick(timeout):
        original(timeout)
        run.control.resume()

    run.control.wait_for_change = resume_after_a_tick
    sync.boundary()
    kinds = [c[0] for c in run.calls]
    assert kinds[0] == "paused" and "beat" in kinds and ("apply", queued) in run.calls
    assert kinds[-1] == "resumed"
    assert run.edit_log.lines == [(5, {"op": "pause"}), (5, {"op": "resume"})] and not sync.stop


def test_a_stop_during_the_pause_is_agreed_and_not_recorded_as_a_resume(one_rank):
    run = _Run()
    sync = RankSync(run)
    run.control.pause()
    sync.pause_agreed = True
    run.control.request_stop()
    sync.boundary()
    assert sync.stop and run.edit_log.lines == [(5, {"op": "pause"})] and run.calls[-1] == ("resumed",)


def test_the_nonfinite_decision_is_rank_zeros(one_rank):
    run = _Run()
    run.control.resolve_nonfinite("lower_lr")
    assert RankSync(run).decide(True) == "lower_lr"
    assert RankSync(_Run()).decide(False) == "end"  # no one to ask


def test_reset_forgets_the_agreement():
    sync = RankSync(_Run())
    sync.stop, sync.agreed, sync.pause_agreed = True, [SetLR(1.0)], True
    sync.reset()
    assert (sync.stop, sync.agreed, sync.pause_agreed) == (False, [], False)
