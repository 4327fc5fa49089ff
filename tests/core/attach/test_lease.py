"""A pause is a lease (``workbench.core.attach.lease``): renewed while its window lives, lapsed when it does not."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time

import pytest
import torch
from torch import nn

import workbench
from tests.attach_scripts.common import SCRIPTS, finish, output, start_script, until
from workbench.core.attach.lease import PAUSE_LEASE_S, PauseLease, check_lease, renew_interval
from workbench.core.attach.notice import Notice
from workbench.core.train.events import Finished, Metrics, Paused
from workbench.core.train.trainer.edit_log import EDITS_FILE, read_edits

pytestmark = pytest.mark.timeout(120)


def test_a_lease_lapses_once_its_renewals_stop():
    lapsed = threading.Event()
    lease = PauseLease(0.3, lapsed.set, lambda: True)
    try:
        lease.arm()
        end = time.monotonic() + 0.9
        while time.monotonic() < end:  # renewed three times a lease: it holds
            lease.renew()
            assert not lapsed.wait(0.05)
        assert lapsed.wait(5) and not lease.armed  # no renewal: it lapses once
    finally:
        lease.close()


def test_lease_settings_are_checked():
    assert check_lease(PAUSE_LEASE_S, "hold") == (120.0, "hold") and renew_interval(2) == 0.5
    for bad in (0, -1, float("nan"), True, "2"):
        with pytest.raises(ValueError, match="pause_lease_s"):
            check_lease(bad, "resume")
    with pytest.raises(ValueError, match="pause_lease must be one of"):
        workbench.attach(nn.Linear(2, 2), pause_lease="wait")


@pytest.mark.parametrize("mode", ["resume", "hold"])
def test_a_window_that_stops_renewing_loses_its_pause(tmp_path, mode):
    model = nn.Linear(4, 2)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    att = workbench.attach(model, opt, run_dir=tmp_path / "run", name="t", pause_lease_s=0.4, pause_lease=mode)
    first = workbench.connect(att.address, att.token)
    training = threading.Thread(target=att.step, args=(1.0,), daemon=True)
    try:
        assert first.wait_ack(first.pause(), timeout=10)["ok"]
        training.start()  # the step blocks: paused
        assert att.control.wait_until_blocked(10)
        training.join(1.2)  # three leases: the window's renewals hold the pause
        assert training.is_alive()
        first._no_renew.set()  # this window stops renewing (a laptop gone to sleep)
        lapsed = until(first, Notice, lambda e: e.kind == "lease_lapsed", timeout=20)
        if mode == "resume":
            assert lapsed.text == "pause lease lapsed after 0.4 s: resumed"
            training.join(10)
            assert not training.is_alive() and first.steering  # the window still steers: it only slept
            assert read_edits(att.run_dir / EDITS_FILE)[-1] == {"step": 1, "op": "resume", "why": lapsed.text}
        else:
            told = until(first, Notice, lambda e: e.kind == "read_only", timeout=20)
            assert "still paused" in told.text and not first.steering
            assert training.is_alive() and att.control.is_paused  # held, the steering free
            second = workbench.connect(att.address, att.token)
            assert second.steering and second.info["paused"] is True
            assert second.wait_ack(second.resume(), timeout=10)["ok"]
            training.join(10)
            assert not training.is_alive()
            second.close()
    finally:
        first.close()
        att.control.request_stop()
        training.join(10)
        att.close()


def _lines(proc: subprocess.Popen) -> tuple[list, threading.Condition]:
    """The lines ``proc`` prints, read on a thread, and a condition notified at each."""
    lines, cond = [], threading.Condition()

    def read() -> None:
        for line in iter(proc.stdout.readline, ""):
            with cond:
                lines.append(line.strip())
                cond.notify_all()

    threading.Thread(target=read, daemon=True).start()
    return lines, cond


def test_a_pause_whose_window_is_stopped_resumes_after_the_lease(tmp_path):
    """A script paused by a window in another process; that process is stopped (SIGSTOP, a laptop asleep):
    two seconds after its last renewal the script trains on, says so in its log and edits.jsonl, and tells
    the window once it runs again."""
    run_dir = tmp_path / "run"
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(SCRIPTS.parent.parent), os.environ.get("PYTHONPATH", "")]))
    window = subprocess.Popen([sys.executable, str(SCRIPTS / "pausing_window.py")], env=env, stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, text=True)  # it imports while the script starts
    said, cond = _lines(window)
    watcher = None
    proc = None
    try:
        proc, info = start_script("lease_loop", run_dir, "2")
        window.stdin.write(f"{info['address']} {info['token']}\n")
        window.stdin.flush()
        watcher = workbench.connect(info["address"], info["token"], steer=False)
        assert not watcher.steering
        with cond:
            assert cond.wait_for(lambda: "paused" in said, 60), said
        paused_at = until(watcher, Paused).step
        os.kill(window.pid, signal.SIGSTOP)
        lapsed = until(watcher, Notice, lambda e: e.kind == "lease_lapsed", timeout=30)
        assert lapsed.text == "pause lease lapsed after 2 s: resumed"
        until(watcher, Metrics, lambda e: e.values["step"].max() > paused_at + 3)  # it trains on
        os.kill(window.pid, signal.SIGCONT)
        with cond:  # the window, running again, is told
            assert cond.wait_for(lambda: "notice lease_lapsed" in said, 30), said
        window.stdin.close()
        window.wait(30)
        stopper = workbench.connect(info["address"], info["token"], steer="take")  # its detach may be in flight
        assert stopper.steering
        stopper.stop()
        assert until(stopper, Finished).reason == "stopped"
        stopper.close()
    finally:
        if window.poll() is None:
            os.kill(window.pid, signal.SIGCONT)
            window.kill()
            window.wait()
        if watcher is not None:
            watcher.close()
        if proc is not None:
            code, out = finish(proc)
    assert code == 0, out
    assert "pause lease lapsed after 2 s: resumed" in output(proc)  # the script's log (stderr)
    edits = [json.loads(line) for line in (run_dir / EDITS_FILE).read_text().splitlines()]
    assert [e["op"] for e in edits] == ["pause", "resume"] and edits[1]["why"] == lapsed.text
