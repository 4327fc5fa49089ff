"""The socket a script listens on (``workbench.core.attach.server``): the token, one steering window, the history."""

from __future__ import annotations

import socket
import threading

import numpy as np
import pytest

from workbench.core.attach import script as _script  # noqa: F401 - registers the events for the wire
from workbench.core.attach.server import AttachServer, History
from workbench.core.attach.wire import recv_message, send_message
from workbench.core.train.events import Finished, FitStarted, Metrics, Paused, Sink

pytestmark = pytest.mark.timeout(60)
WAIT_S = 10.0


class _Script:
    """The script's side of a server: what it was asked and told."""

    def __init__(self):
        self.commands: list[tuple[dict, bool]] = []
        self.lost: list[bool] = []
        self.changed = threading.Condition()  # notified when the server reports a lost window

    def welcome(self) -> dict:
        return {"name": "test", "step": 0}

    def on_command(self, msg: dict, steering: bool) -> str | None:
        self.commands.append((msg, steering))
        return None if msg["op"] == "pause" else f"unknown command {msg['op']!r}"

    def on_lost(self, clean: bool) -> None:
        with self.changed:
            self.lost.append(clean)
            self.changed.notify_all()


@pytest.fixture
def served():
    script = _Script()
    server = AttachServer("the-token", script.welcome, script.on_command, script.on_lost)
    yield server, script
    server.close()


def _hello(server: AttachServer, token: str, steer: bool = True) -> tuple[socket.socket, dict]:
    s = socket.create_connection(("127.0.0.1", server.port), timeout=WAIT_S)
    send_message(s, {"type": "hello", "token": token, "steer": steer})
    return s, recv_message(s)


def _next(s: socket.socket, kind: str) -> dict:
    while True:
        msg = recv_message(s)
        assert msg is not None, "the server closed the connection"
        if msg.get("type") == kind:
            return msg


def test_a_wrong_token_is_refused_and_the_connection_closed(served):
    server, script = served
    s, reply = _hello(server, "not-the-token")
    try:
        assert reply == {"type": "refused", "reason": "wrong token"}
        assert recv_message(s) is None  # closed after the refusal
        assert server.windows == 0 and not script.commands
    finally:
        s.close()


def test_a_message_that_is_not_a_hello_is_refused(served):
    server, _ = served
    s = socket.create_connection(("127.0.0.1", server.port), timeout=WAIT_S)
    try:
        send_message(s, {"type": "command", "op": "pause", "token": "the-token"})
        assert recv_message(s) == {"type": "refused", "reason": "wrong token"}
    finally:
        s.close()


def test_a_window_is_welcomed_with_the_history_then_the_events(served):
    server, _ = served
    server.publish(FitStarted({"epoch": 0, "step": 0}))
    server.publish(Metrics({"step": np.array([1.0, 2.0]), "loss": np.array([0.5, 0.4])}))
    server.publish(Sink(0, ["a live report"]))  # live only: not kept
    server.publish(Paused(2))
    s, welcome = _hello(server, "the-token")
    try:
        assert welcome["type"] == "welcome" and welcome["info"] == {"name": "test", "step": 0}
        assert welcome["steering"] is True and welcome["history"] == 3
        replay = [recv_message(s)["event"] for _ in range(3)]
        assert [type(e) for e in replay] == [FitStarted, Metrics, Paused]
        assert replay[1].values["loss"].tolist() == [0.5, 0.4]
        server.publish(Finished("completed"))
        assert _next(s, "event")["event"] == Finished("completed")
    finally:
        s.close()


def test_one_window_steers_the_next_watches_and_every_command_is_answered(served):
    server, script = served
    first, welcome = _hello(server, "the-token")
    second, watcher = _hello(server, "the-token")
    try:
        assert welcome["steering"] and not watcher["steering"] and watcher["steered_elsewhere"]
        send_message(first, {"type": "command", "op": "pause", "id": 1})
        assert _next(first, "ack") == {"type": "ack", "id": 1, "ok": True, "error": None}
        send_message(second, {"type": "command", "op": "jump", "id": 2})
        ack = _next(second, "ack")
        assert ack["id"] == 2 and not ack["ok"] and "jump" in ack["error"]
        assert script.commands == [({"type": "command", "op": "pause", "id": 1}, True),
                                   ({"type": "command", "op": "jump", "id": 2}, False)]
    finally:
        first.close()
        second.close()


def test_the_steering_window_that_detaches_is_lost_cleanly_one_that_vanishes_is_not(served):
    server, script = served
    s, _ = _hello(server, "the-token")
    send_message(s, {"type": "command", "op": "detach"})
    s.close()
    _wait_for(script, lambda: len(script.lost) == 1)
    s, welcome = _hello(server, "the-token")
    assert welcome["steering"]  # the steering was freed
    s.close()
    _wait_for(script, lambda: len(script.lost) == 2)
    assert script.lost == [True, False]


def _wait_for(script: _Script, done) -> None:
    with script.changed:
        assert script.changed.wait_for(done, WAIT_S), "timed out"


def test_the_history_keeps_every_other_row_once_full_and_replays_in_chunks():
    history = History(max_rows=8)
    history.add(FitStarted({}))
    for start in range(0, 12, 4):
        steps = np.arange(start, start + 4, dtype=np.float64)
        history.add(Metrics({"step": steps, "loss": steps / 10}))
    kept = history.metrics()["step"]
    assert len(kept) <= 8 and kept[0] == 0 and np.all(np.diff(kept) == 2)  # evenly over the whole run
    replay = history.replay(chunk=3)
    assert isinstance(replay[0], FitStarted)
    assert sum(len(e.values["step"]) for e in replay[1:]) == len(kept)
    assert all(len(e.values["step"]) <= 3 for e in replay[1:])
