"""Nothing outlives its owner: a training process whose window is SIGKILLed ends, and says how its run ended.

A small script plays the window (``WINDOW``): it starts a real
:class:`~workbench.core.train.launch.training_process.TrainingProcess` (multiprocessing, spawn),
hands it a run of the digits demo, and prints its pid once the run is where the
test wants it; the test then SIGKILLs the script and watches its children by pid.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from tests.core.train.procs import descendants, wait_gone
from workbench.core.train.launch.training_process_main import ORPHAN_GRACE_S, ORPHAN_REASON

ROOT = Path(__file__).resolve().parents[4]
#: Seconds within which every child of a killed window must be gone (the brief's bound).
GONE_S = 15.0

WINDOW = r"""
import json, sys, time
from tests.ui.train.faulty import FaultyDigitsCNN
from workbench.core.train.config import DataConfig, TrainConfig
from workbench.core.train.launch.training_process import TrainingProcess, make_job

fault, after, run_dir = sys.argv[1], int(sys.argv[2]), sys.argv[3]
cfg = TrainConfig(data=DataConfig(dataset="digits", batch_size=32), epochs=200, lr=3e-3, seed=7,
                  run_dir=run_dir, tensorboard=False)
proc = TrainingProcess()
assert proc.wait_ready(), proc.log_tail()
assert proc.start_job(make_job(FaultyDigitsCNN(fault, after=after), cfg))
steps, said = 0, False
while True:  # keep reading, as the window does: a full pipe would stall the run
    msg = proc.recv(0.1)
    if msg is not None and msg[1] == "Metrics":
        steps = max(steps, int(msg[2]["values"]["step"][-1]))
    hung = fault == "hang" and f"forward {after}: hang" in proc.log_tail()
    if not said and (hung or (fault != "hang" and steps >= after)):
        print(json.dumps({"pid": proc.process.pid, "step": steps, "log": str(proc.log_path)}), flush=True)
        said = True
"""


def _start_window(tmp_path, fault: str, after: int):
    """The window script, once it said its training process's pid: ``(Popen, info)``."""
    window = subprocess.Popen([sys.executable, "-c", WINDOW, fault, str(after), str(tmp_path / "run")],
                              cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    line = window.stdout.readline()  # blocks until the run is where the test wants it (or the script died)
    if not line:
        window.kill()
        pytest.fail(f"the window script ended early:\n{window.stderr.read()[-3000:]}")
    return window, json.loads(line)


def _status(run: Path) -> dict:
    return json.loads((run / "status.json").read_text())


pytestmark = [pytest.mark.slow, pytest.mark.skipif(not sys.platform.startswith("linux"), reason="/proc")]


def test_a_window_killed_while_a_step_hangs_leaves_no_process_and_no_running_status(tmp_path):
    window, info = _start_window(tmp_path, "hang", after=30)
    children = descendants(window.pid)
    assert info["pid"] in children
    os.kill(window.pid, signal.SIGKILL)
    window.wait(10)
    t0 = time.monotonic()
    assert wait_gone(children, GONE_S) == set(), "a child of the killed window is still running"
    took = time.monotonic() - t0
    assert ORPHAN_GRACE_S - 1 < took  # the hung step was given its grace, not a kill at once
    status = _status(tmp_path / "run")
    assert status["state"] == "crashed" and status["reason"] == ORPHAN_REASON == "the window's process ended", status
    assert not Path(info["log"]).exists()  # no one is left to read the process's output


def test_a_window_killed_mid_run_leaves_a_stopped_run_with_its_last_checkpoint(tmp_path):
    window, info = _start_window(tmp_path, "none", after=50)  # past epoch 1's end (45 steps of 32)
    children = descendants(window.pid)
    os.kill(window.pid, signal.SIGKILL)
    window.wait(10)
    assert wait_gone(children, GONE_S) == set(), "a child of the killed window is still running"
    run = tmp_path / "run"
    status = _status(run)
    assert status["state"] == "stopped" and status["reason"] == "the window's process ended", status
    saved = torch.load(run / "last.pt", weights_only=True)
    # the state at the stop: not epoch 1's end (step 45) nor epoch 2's (90)
    assert info["step"] <= saved["step"] < 90, (info, saved["step"])


def test_a_training_process_started_from_a_thread_that_ended_lives_on():
    """The window may start its process from a QThread: that thread's end fires the death signal, which the
    process must not take for the window's end."""
    import threading

    from workbench.core.train.launch.training_process import TrainingProcess

    box = []

    def start():
        proc = TrainingProcess()
        box.append(proc)
        proc.wait_ready()  # the process has set its death signal before it says it is ready

    starter = threading.Thread(target=start)
    starter.start()
    starter.join()  # the thread that forked the process ends: the kernel sends it the death signal
    proc = box[0]
    try:
        assert proc.ready, proc.log_tail()
        time.sleep(1.0)  # the death signal came when the thread ended; the watch's check takes well under this
        assert proc.is_alive() and "stopping the run" not in proc.log_tail()
    finally:
        proc.end()
    assert proc.exitcode == 0  # idle, asked to quit
