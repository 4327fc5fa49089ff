"""core.train.launch.torchrun_rank: one rank of a data-parallel run, without processes.

The ranks as real processes started by torchrun are ``test_torchrun.py`` and ``test_ddp_lifetime.py``.
"""

from __future__ import annotations

import os
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

from workbench.core.errors import TrainingError
from workbench.core.train.launch import torchrun_rank as rank_mod
from workbench.core.train.runs import folder


class _Log:
    def __init__(self):
        self.calls = []

    def __call__(self, name, result=None):
        def record(*args, **kwargs):
            self.calls.append(name)
            return result
        return record


class _Reporter:
    def __init__(self, log):
        self.log = log

    def send(self, *msg):
        self.log.calls.append(msg[0])

    def close(self):
        self.log.calls.append("close")


class _Exited(Exception):
    pass


@pytest.mark.parametrize("reason, barrier", [("completed", True), ("stopped", True), ("nonfinite", True),
                                             ("error", False), ("oom", False)])
def test_a_rank_ends_barrier_destroy_atexit_exit_message_then_exit(monkeypatch, reason, barrier):
    """The order that keeps a completed run at exit 0; an error skips the barrier (the others may be gone)."""
    import atexit

    import torch.distributed as dist

    log = _Log()
    monkeypatch.setattr(dist, "is_initialized", lambda: True)
    monkeypatch.setattr(rank_mod, "final_barrier", log("barrier", True))
    monkeypatch.setattr(dist, "destroy_process_group", log("destroy"))
    monkeypatch.setattr(atexit, "_run_exitfuncs", log("atexit"))

    def fake_exit(code):
        log.calls.append(("os._exit", code))
        raise _Exited

    monkeypatch.setattr(rank_mod.os, "_exit", fake_exit)
    life = rank_mod.RankLife()
    life.rank = 1
    life.reporters = [_Reporter(log)]
    code = life.finish(reason)
    with pytest.raises(_Exited):
        life.exit(code)
    expected = {"completed": 0, "stopped": 130}.get(reason, 1)
    assert log.calls == (["barrier"] if barrier else []) + ["destroy", "atexit", "exit", "close",
                                                             ("os._exit", expected)]


def test_the_state_digest_is_the_same_for_equal_weights_and_differs_otherwise():
    torch.manual_seed(0)
    a = torch.nn.Linear(3, 2)
    b = torch.nn.Linear(3, 2)
    b.load_state_dict(a.state_dict())
    assert rank_mod.state_digest(a) == rank_mod.state_digest(b)
    with torch.no_grad():
        b.bias.add_(1.0)
    assert rank_mod.state_digest(a) != rank_mod.state_digest(b)


@pytest.fixture
def one_rank_group(tmp_path):
    """A Gloo process group of this process alone (rank 0 of 1), destroyed after the test."""
    import torch.distributed as dist

    dist.init_process_group("gloo", init_method=f"file://{tmp_path / 'store'}", rank=0, world_size=1)
    yield
    dist.destroy_process_group()


def test_share_run_dir_sends_rank_0_s_new_folder_or_says_why_there_is_none(one_rank_group, monkeypatch):
    cfg = SimpleNamespace(run_dir=None)
    rank_mod.share_run_dir(cfg)
    made = Path(cfg.run_dir)
    assert made.is_dir() and made.parent == Path(os.environ["WORKBENCH_DATA_DIR"]) / "runs"
    rank_mod.share_run_dir(cfg)
    assert cfg.run_dir == str(made)  # a folder named already stays

    def full_disk(*args, **kwargs):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(folder, "new_run_dir", full_disk)
    with pytest.raises(TrainingError, match=r"^the run folder could not be made \(.*No space left on device\); set "
                                            r"run_dir in the run file$"):
        rank_mod.share_run_dir(SimpleNamespace(run_dir=None))
