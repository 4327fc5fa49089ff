"""core.train.launch.ddp_ranks: the window's data-parallel run has a training process's interface before and after.

A run on real ranks is :mod:`tests.ui.train.test_ddp_window` and ``test_run_kinds`` (slow);
these check what the window's :class:`~workbench.core.train.launch.training_process.ProcessRun`
relies on without starting torchrun.
"""

from __future__ import annotations

import os
import stat

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
