"""core.train.launch.ddp_ranks: the window's data-parallel run has a training process's interface before and after.

A run on real ranks is :mod:`tests.ui.train.test_ddp_window` and ``test_run_kinds`` (slow);
these check what the window's :class:`~workbench.core.train.launch.training_process.ProcessRun`
relies on without starting torchrun.
"""

from __future__ import annotations

import multiprocessing
import os
import stat

import pytest

from workbench.core.train.launch.ddp_ranks import DistributedTrainingProcess


def test_before_its_job_nothing_runs_and_every_call_answers_without_raising():
    ranks = DistributedTrainingProcess(2, timeout_s=5.0)
    try:
        assert ranks.processes == 2 and ranks.wait_ready() is True  # torchrun starts with the job, never ahead
        assert not ranks.ready and not ranks.is_alive() and ranks.exitcode is None
        assert ranks.send(("control", "pause", ())) is False  # no rank 0 to send to
        assert ranks.recv(0.01) is None
        assert ranks.log_tail() == ""
        # the job will hold the user's model: its folder is the user's alone
        assert stat.S_IMODE(os.stat(ranks.log_path.parent).st_mode) == 0o700
    finally:
        folder = ranks.log_path.parent
        ranks.end(timeout=0.1)
        ranks.end(timeout=0.1)  # a second end is harmless
    assert not folder.exists()


def test_the_log_tail_names_the_rank_that_died_first():
    ranks = DistributedTrainingProcess(2)
    try:
        ranks.log_path.write_text("line 1\nline 2\nline 3\n")
        ranks.problem = "rank 1 (pid 42) died: signal 9"
        assert ranks.log_tail(lines=2) == "rank 1 (pid 42) died: signal 9\nline 2\nline 3"
    finally:
        ranks.end(timeout=0.1)


class _SeenLate:
    """A rank watch whose reader notices rank 1's death only after rank 0's error arrived (a loaded machine)."""

    def __init__(self, conn, noticed_after: int):
        self.main_conn, self.ranks, self.killed = conn, {}, False
        self._calls, self._after = 0, noticed_after

    def check(self):
        self._calls += 1
        return "rank 1 (pid 42) ended without finishing, at step 7" if self._calls > self._after else None

    def kill(self):
        self.killed = True


def _error_from_rank_0(text: str) -> tuple:
    return ("event", "RunError", {"text": text})


def test_rank_0_ended_by_torchruns_signal_names_the_rank_that_died_instead():
    here, there = multiprocessing.Pipe()
    ranks = DistributedTrainingProcess(2)
    try:
        ranks.run = _SeenLate(here, noticed_after=1)  # recv's own check comes too early to see it
        there.send(_error_from_rank_0("Traceback ...\ntorch.distributed.elastic.multiprocessing.api."
                                      "SignalException: Process 7 got signal: 15"))
        with pytest.raises(EOFError, match=r"rank 1 \(pid 42\) ended without finishing"):
            ranks.recv(1.0)
        assert ranks.run.killed and ranks.log_tail().startswith("rank 1 (pid 42)")
    finally:
        ranks.run = None
        ranks.end(timeout=0.1)


def test_rank_0_s_own_error_reaches_the_window_as_it_is():
    here, there = multiprocessing.Pipe()
    ranks = DistributedTrainingProcess(2)
    try:
        ranks.run = _SeenLate(here, noticed_after=10**6)
        error = _error_from_rank_0("Traceback ...\nRuntimeError: mat1 and mat2 shapes cannot be multiplied")
        there.send(error)
        assert ranks.recv(1.0) == error and not ranks.run.killed and ranks.problem is None
    finally:
        ranks.run = None
        ranks.end(timeout=0.1)
