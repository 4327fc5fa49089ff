""":class:`RemoteAttachedRun` without a host: what it refuses, what it leaves out of a history sent again, how its
reconnection loop ends. Through a real sshd (a killed connection, a reconnection): tests/remote/test_attach_remote.py."""

from __future__ import annotations

import numpy as np
import pytest

from workbench.core.attach.client import AttachError
from workbench.core.attach.notice import Notice
from workbench.core.remote import attached
from workbench.core.remote.attached import RemoteAttachedRun
from workbench.core.remote.ssh import RemoteError, Ssh
from workbench.core.train.events import EpochEnded, FitStarted, Metrics


def _run(locate=lambda: None, state=lambda: "running") -> RemoteAttachedRun:
    return RemoteAttachedRun(Ssh(), "gpu-box", locate, state, what="the run 'x'")


def test_a_run_that_does_not_listen_is_refused_in_one_line():
    with pytest.raises(RemoteError, match=r"^gpu-box: the run 'x' does not wait for a window .*--no-attach"):
        RemoteAttachedRun.open(Ssh(), "gpu-box", lambda: None, lambda: "completed", what="the run 'x'")


def test_a_history_sent_again_draws_only_what_is_new():
    run = _run()
    run._seen(Metrics({"step": np.array([1.0, 2.0, 3.0]), "loss": np.array([3.0, 2.0, 1.0])}))
    run._seen(EpochEnded({"epoch": 1, "step": 3}))
    assert run._fresh(FitStarted({})) is None
    assert run._fresh(Metrics({"step": np.array([1.0, 2.0]), "loss": np.array([3.0, 2.0])})) is None
    newer = run._fresh(Metrics({"step": np.array([2.0, 3.0, 4.0, 5.0]), "loss": np.array([2.0, 1.0, 0.5, 0.4])}))
    assert newer.values["step"].tolist() == [4.0, 5.0] and newer.values["loss"].tolist() == [0.5, 0.4]
    assert run._fresh(EpochEnded({"epoch": 1})) is None and run._fresh(EpochEnded({"epoch": 2})) is not None


def test_reconnecting_ends_with_the_run_s_state_once_it_ended(monkeypatch):
    monkeypatch.setattr(attached, "RETRY_S", 0.01)
    states = iter(["running", "running", "completed"])
    assert _run(state=lambda: next(states))._reconnect() == "completed"
    flaky = iter([RemoteError("gpu-box: could not connect"), None])

    def locate():
        value = next(flaky)
        if isinstance(value, Exception):
            raise value  # the host is not back yet: try again
        return value

    assert _run(locate, state=lambda: "stopped")._reconnect() == "stopped"
    closed = _run()
    closed.close()
    assert closed._reconnect() is None  # closed: no retry at all


def test_commands_while_disconnected_are_refused_or_said():
    run = _run()
    with pytest.raises(AttachError, match="disconnected from the run 'x' on gpu-box"):
        run.set_lr(0.1)
    assert run.pause() is None  # the window's Pause: a line in the status bar instead of an error
    notice = next(run.events(timeout=1))
    assert isinstance(notice, Notice) and notice.kind == "command_failed" and "not sent" in notice.text
