"""Who steers an attached script: a second window takes over (``connect(steer="take")``); a window that attaches
to a paused script is told it is paused."""

from __future__ import annotations

import threading

import pytest
import torch
from torch import nn

import workbench
from tests.attach_scripts.common import until
from workbench.core.attach.notice import Notice

pytestmark = pytest.mark.timeout(60)


@pytest.fixture
def att(tmp_path):
    model = nn.Linear(4, 2)
    a = workbench.attach(model, torch.optim.SGD(model.parameters(), lr=0.1), run_dir=tmp_path / "run", name="t",
                         pause_lease_s=0.3)
    yield a
    a.control.request_stop()
    a.close()


def test_a_second_window_takes_over_and_the_first_is_told(att):
    first = workbench.connect(att.address, att.token)
    second = workbench.connect(att.address, att.token)
    taker = None
    try:
        assert first.steering and not second.steering and second.steered_elsewhere
        assert second.wait_ack(second.set_lr(0.5), timeout=10)["error"] == "read-only: another window steers this run"
        taker = workbench.connect(att.address, att.token, steer="take")
        assert taker.steering and taker.steered_elsewhere
        told = until(first, Notice, lambda e: e.kind == "read_only", timeout=20)
        assert "took over steering" in told.text and not first.steering
        assert first.wait_ack(first.set_lr(0.5), timeout=10)["error"].startswith("read-only")
        assert taker.wait_ack(taker.set_lr(0.01), timeout=10)["ok"]
        att.step(1.0)
        assert att.state.optimizer.param_groups[0]["lr"] == pytest.approx(0.01)
        with pytest.raises(ValueError, match="steer must be"):
            workbench.connect(att.address, att.token, steer="always")
    finally:
        for run in (first, second, taker):
            if run is not None:
                run.close()


def test_a_window_attaching_to_a_paused_script_sees_the_pause(att):
    first = workbench.connect(att.address, att.token)
    training = threading.Thread(target=att.step, args=(1.0,), daemon=True)
    try:
        assert first.info["paused"] is False and first.info["pause_lease_s"] == 0.3
        assert first.wait_ack(first.pause(), timeout=10)["ok"]
        training.start()
        assert att.control.wait_until_blocked(10)
        first.close()  # detached on purpose: the pause stays, and no lease counts for it
        training.join(1.0)  # three leases of 0.3 s
        assert training.is_alive()
        again = workbench.connect(att.address, att.token)
        assert again.steering and again.info["paused"] is True and again.info["step"] == 1
        assert again.info["stopping"] is False and again.info["problems"] == []
        assert again.wait_ack(again.resume(), timeout=10)["ok"]
        training.join(10)
        assert not training.is_alive()
        again.close()
    finally:
        first.close()
