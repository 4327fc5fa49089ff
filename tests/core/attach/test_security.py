"""A real attached script (tests/attach_scripts/plain_loop.py in a subprocess) under hostile or broken windows.

Every attack must be refused or answered with ``ok: False``, run nothing (a
pickle whose unpickling would create a marker file leaves it absent), be logged
by the script ("refused" in its output), and leave the script training: a fresh
``workbench.connect`` afterwards receives new metrics with larger steps.
One script serves the whole module (starting one imports torch and builds a
resnet18: seconds on 2 cores); each test checks the script is still training.
"""

from __future__ import annotations

import json
import os
import pickle
import signal
import socket
import stat
import struct
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

import workbench
from tests.attach_scripts.common import SCRIPTS, start_script
from workbench.core.attach.client import AttachError, parse_address
from workbench.core.attach.discovery import discovery_dir, list_waiting, write_discovery
from workbench.core.attach.wire import MAGIC, encode, recv_message, send_message
from workbench.core.train.events import CommandApplied, Finished, FitStarted, Metrics

pytestmark = pytest.mark.timeout(300)

WAIT_S = 60.0  # the longest any one wait below lasts before the test fails (a bound, not a timing claim)


class _Output:
    """A started script's output lines (``start_script`` reads them on a thread: the pipe never fills)."""

    def __init__(self, proc):
        self.lines: list[str] = proc.lines
        self._proc = proc

    def text(self, start: int = 0) -> str:
        return "".join(self.lines[start:])

    def wait_for(self, *fragments: str, start: int = 0, timeout: float = WAIT_S) -> str:
        """The first line from ``start`` on that holds every fragment (fails after ``timeout`` s)."""
        end = time.monotonic() + timeout
        while True:
            for line in self.lines[start:]:
                if all(f in line for f in fragments):
                    return line
            if time.monotonic() > end:
                raise AssertionError(f"no line with {fragments} in:\n{self.text(start)}")
            time.sleep(0.05)

    def join(self, timeout: float) -> None:
        self._proc.wait(timeout)


@dataclass
class Script:
    proc: subprocess.Popen
    info: dict
    out: _Output
    run_dir: Path

    @property
    def address(self) -> str:
        return self.info["address"]

    @property
    def token(self) -> str:
        return self.info["token"]


def _steering(script: Script, timeout: float = WAIT_S):
    """A steering connection (a window that just let go may take a moment to be dropped by the script)."""
    end = time.monotonic() + timeout
    while True:
        run = workbench.connect(script.address, script.token)
        if run.steering:
            return run
        run.close()
        if time.monotonic() > end:
            raise AssertionError("another window still steers")
        time.sleep(0.1)


@pytest.fixture(scope="module")
def script(tmp_path_factory):
    folder = tmp_path_factory.mktemp("security")
    with pytest.MonkeyPatch.context() as mp:  # the per-test folder of conftest is not set up yet at module scope
        mp.setenv("WORKBENCH_ATTACH_DIR", str(folder / "attach"))
        proc, info = start_script("plain_loop", folder / "run")
    s = Script(proc, info, _Output(proc), folder / "run")
    try:
        yield s
    finally:
        try:
            run = _steering(s, timeout=20)
            run.stop()
            for event in run.events(timeout=WAIT_S):
                if isinstance(event, Finished):
                    break
            run.close()
            proc.wait(WAIT_S)
        except Exception:  # noqa: BLE001 - the tests said what failed; never leave the script behind
            pass
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        s.out.join(10)


def _max_step(event: Metrics) -> float:
    steps = event.values.get("step", ())
    return max(steps) if len(steps) else -1


def _step_now(script: Script) -> int:
    run = workbench.connect(script.address, script.token, steer=False)
    try:
        return int(run.info["step"])
    finally:
        run.close()


def _trains_on(script: Script, before: int) -> None:
    """A fresh connect works and receives Metrics of steps past ``before`` and past its own welcome."""
    assert script.proc.poll() is None, f"the script exited:\n{script.out.text()}"
    run = workbench.connect(script.address, script.token, steer=False)
    try:
        at_welcome = int(run.info["step"])
        assert at_welcome >= before
        for event in run.events(timeout=WAIT_S):
            if isinstance(event, Metrics) and _max_step(event) > max(at_welcome, before):
                return
        raise AssertionError(f"no new Metrics after step {at_welcome}:\n{script.out.text()}")
    finally:
        run.close()


def _raw(script: Script) -> socket.socket:
    host, port = parse_address(script.address)
    return socket.create_connection((host, port), timeout=WAIT_S)


def _hello(script: Script, steer: bool = True) -> socket.socket:
    """A raw connection past a correct hello (the welcome read)."""
    s = _raw(script)
    send_message(s, {"type": "hello", "token": script.token, "steer": steer, "version": 1})
    welcome = recv_message(s)
    assert isinstance(welcome, dict) and welcome["type"] == "welcome"
    return s


def _closed_by_peer(s: socket.socket, timeout: float = WAIT_S) -> bool:
    """Read until the script closes the connection: True, or False when it stays open ``timeout`` s."""
    s.settimeout(timeout)
    try:
        while s.recv(1 << 16):
            pass
        return True
    except (ConnectionResetError, BrokenPipeError):
        return True
    except TimeoutError:
        return False
    finally:
        s.close()


def _ack(s: socket.socket, cid: int) -> dict:
    """The script's reply to command ``cid`` on a raw connection (events before it are skipped)."""
    s.settimeout(WAIT_S)
    while True:
        msg = recv_message(s)
        assert msg is not None, "the script closed the connection instead of answering"
        if isinstance(msg, dict) and msg.get("type") == "ack" and msg.get("id") == cid:
            return msg


class _OpensFile:
    """Unpickling this opens (creates) ``path``: code run by whoever loads the bytes."""

    def __init__(self, path: Path):
        self.path = str(path)

    def __reduce__(self):
        return (open, (self.path, "w"))


def _payload(marker: Path) -> bytes:
    return pickle.dumps(_OpensFile(marker))


def _assert_payload_was_live(payload: bytes, marker: Path) -> None:
    """The payload does what it says when unpickled: the marker's absence above meant something."""
    assert not marker.exists()
    pickle.loads(payload).close()
    assert marker.exists()


def _frame_body(body: bytes) -> bytes:
    return MAGIC + struct.pack(">I", len(body)) + body


def _json_body(tree, *buffers: bytes) -> bytes:
    text = json.dumps(tree).encode()
    return _frame_body(struct.pack(">I", len(text)) + text + b"".join(buffers))


# ------------------------------------------------------------------ attacks
def _wrong_token(script, marker):
    with pytest.raises(AttachError, match="wrong token"):
        workbench.connect(script.address, "not-the-token")
    return "wrong token", None


def _pickle_raw(script, marker):
    s = _raw(script)
    s.sendall(_payload(marker))
    assert _closed_by_peer(s)
    return "bad magic", _payload(marker)


def _pickle_as_framed_body(script, marker):
    s = _raw(script)
    s.sendall(_frame_body(_payload(marker)))
    assert _closed_by_peer(s)
    return "truncated", _payload(marker)


def _pickle_as_json_text(script, marker):
    payload = _payload(marker)
    s = _raw(script)
    s.sendall(_frame_body(struct.pack(">I", len(payload)) + payload))
    assert _closed_by_peer(s)
    return "not a message", payload


def _pickle_in_unregistered_dataclass_hello(script, marker):
    payload = _payload(marker)
    s = _raw(script)  # a correct token, but the message holds a type the script never rebuilds
    s.sendall(_json_body({"type": "hello", "token": script.token, "steer": True,
                          "x": {"$dc": "_OpensFile", "f": {"blob": {"$b": 0, "n": len(payload)}}}}, payload))
    assert _closed_by_peer(s)
    return "unknown type", payload


def _pickle_in_unregistered_dataclass_command(script, marker):
    payload = _payload(marker)
    s = _hello(script)
    s.sendall(_json_body({"type": "command", "op": "freeze", "id": 1,
                          "path": {"$dc": "os.system", "f": {"blob": {"$b": 0, "n": len(payload)}}}}, payload))
    assert _closed_by_peer(s)
    return "unknown type", payload


def _truncated_hello(script, marker):
    s = _raw(script)
    frame = encode({"type": "hello", "token": script.token, "steer": True})
    s.sendall(frame[:-5])
    s.shutdown(socket.SHUT_WR)
    assert _closed_by_peer(s)
    return "truncated", None


def _truncated_command(script, marker):
    s = _hello(script)
    s.sendall(encode({"type": "command", "op": "pause", "id": 1})[:-3])
    s.shutdown(socket.SHUT_WR)
    assert _closed_by_peer(s)
    return "truncated", None


def _gigabyte_length(script, marker):
    s = _raw(script)
    s.sendall(MAGIC + struct.pack(">I", 2**30))  # the header alone: the 1 GB body never comes
    assert _closed_by_peer(s)  # refused at once; reading the body would wait (and hold the memory)
    return "limit", None


def _gigabyte_length_after_hello(script, marker):
    s = _hello(script)
    s.sendall(MAGIC + struct.pack(">I", 2**30))
    assert _closed_by_peer(s)
    return "limit", None


def _unknown_op(script, marker):
    s = _hello(script)
    code = f"open({str(marker)!r}, 'w')"
    try:
        for cid, op in enumerate(("exec", "__init__", "_on_command", "close"), start=1):
            send_message(s, {"type": "command", "op": op, "id": cid, "code": code, "args": [code]})
            ack = _ack(s, cid)
            assert ack["ok"] is False and "unknown command" in ack["error"], ack
        # a callback method outside the allowed ones
        send_message(s, {"type": "command", "op": "callback", "id": 9, "index": 0, "method": "__reduce__",
                         "args": [code]})
        ack = _ack(s, 9)
        assert ack["ok"] is False and "refused" in ack["error"], ack
    finally:
        s.close()
    return "unknown command", None


ATTACKS = [_wrong_token, _pickle_raw, _pickle_as_framed_body, _pickle_as_json_text,
           _pickle_in_unregistered_dataclass_hello, _pickle_in_unregistered_dataclass_command, _truncated_hello,
           _truncated_command, _gigabyte_length, _gigabyte_length_after_hello, _unknown_op]


@pytest.mark.parametrize("attack", ATTACKS, ids=[a.__name__.strip("_") for a in ATTACKS])
def test_attack_is_refused_logged_and_the_script_trains_on(script, attack, tmp_path):
    marker = tmp_path / "pwned"
    before = _step_now(script)
    start = len(script.out.lines)
    fragment, payload = attack(script, marker)
    script.out.wait_for("refused", fragment, start=start)
    _trains_on(script, before)
    assert not marker.exists()
    if payload is not None:
        _assert_payload_was_live(payload, marker)


# ------------------------------------------------------------------ a second window, a killed window
def test_a_second_window_is_read_only_and_cannot_freeze(script):
    steering = _steering(script)
    try:
        start = len(script.out.lines)
        second = workbench.connect(script.address, script.token)  # asks to steer
        try:
            assert not second.steering
            second.freeze("layer1")
            ack = second.wait_ack(timeout=WAIT_S)
            assert ack is not None and ack["ok"] is False and "read-only" in ack["error"]
        finally:
            second.close()
        script.out.wait_for("refused", "freeze", "read-only", start=start)
        # the steering window's next command applies after the refused one: nothing was frozen in between
        at = int(steering.info["step"])
        steering.set_lr(0.05)  # the script's own LR
        for event in steering.events(timeout=WAIT_S):
            if isinstance(event, CommandApplied) and event.step >= at:
                assert type(event.command).__name__ == "SetLR"
                break
        else:
            raise AssertionError("the steering window's command was not applied")
    finally:
        steering.close()
    edits = [json.loads(line) for line in (script.run_dir / "edits.jsonl").read_text().splitlines()]
    assert "set_lr" in [e["op"] for e in edits]
    assert "set_trainable" not in [e["op"] for e in edits]
    _trains_on(script, at)


KILLED_WINDOW = """
import sys, time
import workbench
from workbench.core.train.events import Paused

end = time.monotonic() + 60
while True:
    run = workbench.connect(sys.argv[1], sys.argv[2])
    if run.steering:
        break
    run.close()
    assert time.monotonic() < end, "another window steers"
    time.sleep(0.1)
at = run.info["step"]
run.pause()
for event in run.events(timeout=60):
    if isinstance(event, Paused) and event.step >= at:
        print("PAUSED", event.step, flush=True)
        break
time.sleep(600)  # a window that hangs here until it is killed: it never detaches
"""


def test_a_killed_window_lets_the_script_resume_and_a_new_window_sees_the_history(script, tmp_path):
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(SCRIPTS.parent.parent), env.get("PYTHONPATH", "")])
    window = subprocess.Popen([sys.executable, "-c", KILLED_WINDOW, script.address, script.token], env=env,
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    window.lines = []
    threading.Thread(target=lambda: window.lines.extend(iter(window.stdout.readline, "")), daemon=True).start()
    out = _Output(window)
    try:
        start = len(script.out.lines)
        paused_at = int(out.wait_for("PAUSED").split()[1])
        watcher = workbench.connect(script.address, script.token, steer=False)
        assert watcher.info["paused"] and watcher.info["step"] == paused_at  # it waits for the window
        watcher.close()
        window.send_signal(signal.SIGKILL)
        window.wait(WAIT_S)
        assert window.returncode == -signal.SIGKILL
    finally:
        if window.poll() is None:
            window.kill()
            window.wait()
        out.join(10)
    script.out.wait_for("went away", "resuming", start=start)
    _trains_on(script, paused_at)
    run = workbench.connect(script.address, script.token, steer=False)
    try:
        first = []
        for event in run.events(timeout=WAIT_S):
            first.append(event)
            if len(first) == 2:
                break
    finally:
        run.close()
    assert isinstance(first[0], FitStarted)
    assert isinstance(first[1], Metrics) and first[1].values["step"][0] == 1 and _max_step(first[1]) > paused_at
    ops = [json.loads(line)["op"] for line in (script.run_dir / "edits.jsonl").read_text().splitlines()]
    assert "pause" in ops and ops[ops.index("pause") + 1:].count("resume") >= 1


# ------------------------------------------------------------------ discovery files
def test_the_discovery_file_is_private_to_the_user(script):
    path = Path(script.info["path"])
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert stat.S_IMODE(path.parent.stat().st_mode) == 0o700
    assert json.loads(path.read_text())["token"] == script.token


def test_a_fresh_discovery_folder_and_file_are_private_whatever_the_umask(tmp_path, monkeypatch):
    folder = tmp_path / "fresh" / "attach"
    monkeypatch.setenv("WORKBENCH_ATTACH_DIR", str(folder))
    old = os.umask(0)
    try:
        path = write_discovery({"address": "127.0.0.1:9", "port": 9, "pid": os.getpid(), "token": "t"})
    finally:
        os.umask(old)
    assert path.parent == folder == discovery_dir()
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert stat.S_IMODE(folder.stat().st_mode) == 0o700


def test_list_waiting_drops_the_files_of_dead_processes():
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()
    dead = write_discovery({"address": "127.0.0.1:9", "port": 9, "pid": gone.pid, "token": "t", "started": 2.0})
    alive = write_discovery({"address": "127.0.0.1:8", "port": 8, "pid": os.getpid(), "token": "t",
                             "started": 1.0})
    (discovery_dir() / "junk.json").write_text("{not json")
    waiting = list_waiting()
    assert [w["path"] for w in waiting] == [str(alive)]
    assert not dead.exists() and alive.exists()
