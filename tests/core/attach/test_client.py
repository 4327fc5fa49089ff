"""The window's side of attaching (``workbench.core.attach.client``): addresses, refusals, events, commands."""

from __future__ import annotations

import socket

import pytest

from workbench.core.attach import script as attach_script
from workbench.core.attach.client import SCRIPT_EVENTS, AttachError, connect, drive, parse_address
from workbench.core.attach.server import AttachServer
from workbench.core.train.events import Finished, FitStarted, Paused, ProgressText, RunError

pytestmark = pytest.mark.timeout(60)


@pytest.mark.parametrize("address, expected", [("10.0.0.2:5678", ("10.0.0.2", 5678)), (":80", ("127.0.0.1", 80)),
                                               ("5678", ("127.0.0.1", 5678)), ("[::1]:9", ("::1", 9)),
                                               (("h", "7"), ("h", 7))])
def test_parse_address(address, expected):
    assert parse_address(address) == expected


@pytest.mark.parametrize("address", ["host:port", "host:0", "host:70000"])
def test_parse_address_refuses_what_is_not_an_address(address):
    with pytest.raises(AttachError):
        parse_address(address)


def test_the_events_a_window_takes_are_those_a_script_publishes():
    assert SCRIPT_EVENTS == {cls.__name__ for cls in attach_script.PUBLISHED}
    assert not SCRIPT_EVENTS & {"StateSynced", "ExtrasReady"}  # their bytes are never read from a socket


@pytest.fixture
def server():
    acked: list = []

    def on_command(msg, steering):
        acked.append(msg["op"])
        return None if msg["op"] == "pause" else "refused here"

    srv = AttachServer("secret", lambda: {"name": "s"}, on_command, lambda clean: None)
    srv.acked = acked
    yield srv
    srv.close()


def test_a_wrong_token_or_nothing_listening_is_an_attach_error(server):
    with pytest.raises(AttachError, match="refused to attach: wrong token"):
        connect(server.address, "wrong")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        free = s.getsockname()[1]
    with pytest.raises(AttachError, match="cannot reach"):
        connect(f"127.0.0.1:{free}", "secret")


def test_events_come_typed_history_first_and_end_with_finished(server):
    server.publish(FitStarted({"epoch": 0}))
    run = connect(server.address, "secret")
    try:
        assert run.info == {"name": "s"} and run.steering
        server.publish(Paused(3))
        server.publish(Finished("completed"))
        assert list(run.events(timeout=10)) == [FitStarted({"epoch": 0}), Paused(3), Finished("completed")]
    finally:
        run.close()


def test_a_refused_command_is_acked_and_said(server):
    run = connect(server.address, "secret")
    try:
        run.pause()
        assert run.wait_ack(timeout=10)["ok"]
        ack = run.wait_ack(run.save_now(), timeout=10)
        assert not ack["ok"] and ack["error"] == "refused here"
        said = next(run.events(timeout=10))
        assert isinstance(said, ProgressText) and "refused here" in said.text
        assert server.acked == ["pause", "save_now"]
    finally:
        run.close()


class _Listed:
    """What :func:`drive` needs of a run: ``events()`` (an exception in the list is raised), ``close()``, ``reason``."""

    def __init__(self, events, log):
        self._events, self.log, self.reason = events, log, None

    def events(self):
        for event in self._events:
            if isinstance(event, Exception):
                raise event
            yield event

    def close(self):
        self.log.append("closed")


@pytest.mark.parametrize("events, unfinished, said, reason", [
    ([Paused(1), Finished("completed"), Paused(2)], None, [Paused(1)], "completed"),
    ([Paused(1)], ("crashed", RunError("lost")), [Paused(1), RunError("lost")], "crashed"),
    ([Paused(1)], ("error", None), [Paused(1)], "error"),
    ([Paused(1), ValueError("boom")], None, [Paused(1), RunError("Label: ValueError: boom")], "error"),
])
def test_drive_emits_until_finished_then_closes_and_finishes_last(events, unfinished, said, reason):
    log: list = []
    run = _Listed(events, log)
    assert drive(run, log.append, unfinished=lambda: unfinished, label="Label") == reason
    assert log == said + ["closed", Finished(reason)] and run.reason == reason
