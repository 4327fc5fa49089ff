"""Nothing outlives its owner, and a completed data-parallel run exits 0 (CPU, Gloo, 2 ranks, digits).

Real launchers, torchrun and ranks, ended from outside (SIGTERM, SIGKILL); each
test collects their pids from ``/proc`` and checks that none runs 15 s later.
What the launcher says when a rank dies after every rank completed is checked
without processes (the order in which a rank ends its life: ``test_torchrun_rank.py``).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from tests.core.train.procs import descendants, running, wait_gone
from workbench.core.train.config import DataConfig, ModelConfig, TrainConfig
from workbench.core.train.launch.torchrun import DistributedRun, RankState

ROOT = Path(__file__).resolve().parents[4]
#: Seconds within which torchrun and every rank must be gone.
GONE_S = 15.0

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="/proc")


def _run_file(tmp_path, epochs=300, name="run") -> Path:
    cfg = TrainConfig(data=DataConfig(dataset="digits", batch_size=64), epochs=epochs, lr=3e-3, seed=7,
                      run_dir=str(tmp_path / name), tensorboard=False, model=ModelConfig(arch="digits_cnn"))
    path = tmp_path / f"{name}.toml"
    cfg.to_toml(path)
    return path


def _status(run: Path) -> dict:
    import json

    return json.loads((run / "status.json").read_text())


def _launcher(path: Path) -> subprocess.Popen:
    """``workbench train PATH --nproc-per-node 2``, once rank 0 printed its first epoch line."""
    proc = subprocess.Popen([sys.executable, "-m", "workbench", "train", str(path), "--nproc-per-node", "2"],
                            cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            env={**os.environ, "OMP_NUM_THREADS": "1"})
    seen = []
    for line in proc.stdout:
        seen.append(line)
        if line.startswith("epoch 1/"):
            return proc
    proc.kill()
    pytest.fail("the launcher ended before the first epoch:\n" + "".join(seen[-40:]))


@pytest.mark.slow
def test_a_launcher_ended_by_sigterm_stops_the_ranks_and_leaves_no_process(tmp_path):
    launcher = _launcher(_run_file(tmp_path))
    pids = descendants(launcher.pid)
    assert len(pids) >= 3, pids  # torchrun and its 2 ranks (in sessions of their own)
    t0 = time.monotonic()
    launcher.send_signal(signal.SIGTERM)
    out, _ = launcher.communicate(timeout=60)
    assert wait_gone(pids, GONE_S - (time.monotonic() - t0)) == set(), out[-3000:]
    assert launcher.returncode == 128 + signal.SIGTERM, out[-3000:]
    assert "got SIGTERM: stopping every rank" in out
    run = tmp_path / "run"
    assert _status(run)["state"] == "stopped"  # every rank stopped at one step; rank 0 saved it
    saved = torch.load(run / "last.pt", weights_only=True)
    rows = (run / "metrics.csv").read_text().splitlines()
    assert saved["step"] >= 23 * (len(rows) - 1)  # at the stop, after the last epoch's end


@pytest.mark.slow
def test_a_launcher_killed_outright_leaves_no_torchrun_and_no_rank(tmp_path):
    """SIGKILL: no handler runs in the launcher; torchrun's parent watch ends it and its ranks."""
    launcher = _launcher(_run_file(tmp_path))
    pids = descendants(launcher.pid)
    assert len(pids) >= 3, pids
    launcher.kill()
    assert wait_gone(pids, GONE_S) == set()
    launcher.communicate(timeout=30)  # every holder of its output pipe has ended


@pytest.mark.slow
def test_ranks_whose_torchrun_is_killed_stop_at_one_step_and_end(tmp_path):
    """torchrun SIGKILLed: each rank's own watch sees it; they agree on a stop, rank 0 saves, both end."""
    lines = []
    run = DistributedRun(_run_file(tmp_path), 2, out=lines.append, timeout_s=60)
    run.start()
    try:
        assert run.wait_until(lambda r: len(r) == 2 and all(s.step >= 3 for s in r.values()), 120), lines
        ranks = [s.pid for s in run.ranks.values()]
        os.kill(run.proc.pid, signal.SIGKILL)
        assert wait_gone(ranks, GONE_S) == set()
        assert run.wait(timeout=60) == 130  # the ranks stopped: torchrun's death is not theirs
    finally:
        run.kill()
    assert {s.reason for s in run.ranks.values()} == {"stopped"}, lines
    assert {s.exit_code for s in run.ranks.values()} == {130}  # each ended by itself, in order
    steps = {s.step for s in run.ranks.values()}
    assert _status(tmp_path / "run")["state"] == "stopped"
    assert torch.load(tmp_path / "run" / "last.pt", weights_only=True)["step"] >= max(steps)


@pytest.mark.slow
def test_a_completed_run_ends_every_rank_in_order_and_says_its_exit_code(tmp_path):
    """One epoch to the end: every rank passed the final barrier and destroy_process_group, and said so."""
    lines = []
    run = DistributedRun(_run_file(tmp_path, epochs=1), 2, out=lines.append)
    run.start()
    try:
        assert run.wait(timeout=180) == 0, lines
    finally:
        run.kill()
    assert {r: (s.reason, s.exit_code) for r, s in run.ranks.items()} == {0: ("completed", 0), 1: ("completed", 0)}
    assert not [s.pid for s in run.ranks.values() if running(s.pid)]


# ---------------------------------------------------------------- without processes

def _finished_run(tmp_path, fault_text: str | None) -> DistributedRun:
    """A DistributedRun (never started) whose 2 ranks both reported ``completed`` with equal weights;
    rank 1 then died without its exit message."""
    cfg = TrainConfig(data=DataConfig(dataset="digits"), run_dir=str(tmp_path / "run"))
    run = DistributedRun(None, 2, config=cfg, rank_args=[], out=lambda line: None)
    run.ranks = {0: RankState(pid=4241, reason="completed", digest="abc", exit_code=0),
                 1: RankState(pid=4242, reason="completed", digest="abc")}
    if fault_text is not None:
        (run._fault_dir / "rank1.txt").write_text(fault_text)
    return run


@pytest.mark.parametrize("fault_text, said", [
    ("Fatal Python error: Aborted\n\nThread 0x1 (most recent call first):\n", "(Fatal Python error: Aborted)"),
    (None, "(by a signal: torchrun's report above names it)"),
])
def test_a_death_at_shutdown_after_every_rank_completed_is_named_and_exits_0(tmp_path, fault_text, said):
    run = _finished_run(tmp_path, fault_text)
    try:
        assert run._summary(1) == 0
    finally:
        run.close()
    assert "all 2 ranks end with identical weights" in run.messages
    assert run.messages[-1].startswith("every rank completed with identical weights; then rank 1 (pid 4242) "
                                       f"died during its shutdown {said}; torchrun exited with code 1")


def test_a_death_before_every_rank_completed_is_still_a_failure(tmp_path):
    run = _finished_run(tmp_path, None)
    run.ranks[1].reason = None
    run.ranks[1].digest = ""
    try:
        assert run._summary(1) == 1
    finally:
        run.close()
    assert run.messages[-1] == "torchrun exited with code 1; rank(s) 1 ended without finishing"


def test_a_rank_that_crashed_mid_run_is_named_with_its_native_crash_report(tmp_path):
    run = _finished_run(tmp_path, "Fatal Python error: Segmentation fault\n\nCurrent thread 0x1:\n")
    run.ranks[1].reason, run.ranks[1].step, run.ranks[1].gone_at = None, 17, time.monotonic()
    try:
        assert run.check() == ("rank 1 (pid 4242) ended without finishing, at step 17 "
                               "(Fatal Python error: Segmentation fault): ending the other ranks")
    finally:
        run.close()


@pytest.mark.slow
def test_sigterm_to_torchrun_and_every_rank_at_once_stops_them_at_one_step_with_last_pt(tmp_path):
    """What SLURM's scancel does (every process of the job signalled at once, torchrun forwarding its own
    SIGTERM after): the ranks agree on a stop, rank 0 saves ``last.pt``, and both end "stopped"."""
    lines = []
    run = DistributedRun(_run_file(tmp_path), 2, out=lines.append, timeout_s=60)
    run.start()
    try:
        assert run.wait_until(lambda r: len(r) == 2 and all(s.step >= 3 for s in r.values()), 120), lines
        ranks = [s.pid for s in run.ranks.values()]
        for pid in [run.proc.pid, *ranks]:
            os.kill(pid, signal.SIGTERM)
        assert wait_gone(ranks, GONE_S) == set()
        run.wait(timeout=60)
    finally:
        run.kill()
    assert {s.reason for s in run.ranks.values()} == {"stopped"}, lines
    steps = {s.step for s in run.ranks.values()}
    assert _status(tmp_path / "run")["state"] == "stopped"
    assert torch.load(tmp_path / "run" / "last.pt", weights_only=True)["step"] >= max(steps)
