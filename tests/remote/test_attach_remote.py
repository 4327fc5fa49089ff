"""``RemoteRun.attach()`` against a real sshd on 127.0.0.1: the tunnel Workbench makes and closes, steering through
it, and a reconnection after the ssh connection is killed mid-run. One run on the test host serves the module."""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess

import pytest

from tests.hosts.sshd import ALIAS
from tests.remote.polling import wait_until
from workbench import cli, remote
from workbench.core.attach.notice import Notice
from workbench.core.remote.attached import BACK, LOST, RETRY_S
from workbench.core.remote.ssh import RemoteError, Ssh
from workbench.core.train.events import Metrics

pytestmark = pytest.mark.remote

#: Seconds a condition is waited for (a remote `workbench train` listens ~3 s after its start here).
WAIT_S = 60.0


def _accepts(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=1.0):
            return True
    except OSError:
        return False


def attach_when_listening(run, **kwargs):
    """``run.attach()`` once the run listens (its discovery file is written at its first step's start)."""
    def attempt():
        try:
            return run.attach(**kwargs)
        except RemoteError as e:
            if "does not wait for a window" in str(e):
                return None
            raise
    return wait_until(attempt, f"{run.id} listens for a window", WAIT_S)


@pytest.fixture(scope="module")
def going(ssh_host, remote_dir, tmp_path_factory):
    """A digits run training on the test host until the module ends (then cancelled)."""
    folder = tmp_path_factory.mktemp("attach-remote")
    toml = folder / "run.toml"
    toml.write_text("epochs = 10000\ntensorboard = false\n[data]\ndataset = \"digits\"\nbatch_size = 256\n")
    run = remote.submit(toml, ALIAS, name="attach me", remote_dir=remote_dir, ssh_config=ssh_host.config)
    yield run
    try:
        run.cancel()
    except RemoteError:
        pass


def _module(handle) -> str:
    """A module of the run's model that holds parameters (the first one), by its qualified name."""
    params = [p[0] for p in handle.info["model"]["params"]]
    return params[0].rpartition(".")[0]


def test_attach_steers_through_a_tunnel_that_closes_with_the_handle(going, tmp_path, capsys):
    handle = attach_when_listening(going)
    try:
        assert handle.info["name"] == "run" and handle.steering
        port = handle.tunnel.local_port
        assert _accepts(port)
        module = _module(handle)
        freeze, lr = handle.freeze(module), handle.set_lr(0.0123)
        assert handle.wait_ack(freeze, timeout=30)["ok"] and handle.wait_ack(lr, timeout=30)["ok"]
    finally:
        handle.close()
    assert handle.tunnel is None and not _accepts(port)  # the forward is gone with the handle
    assert going.state() == "running"  # detaching leaves the run training
    edits = [json.loads(line) for line in (going.pull(tmp_path) / "edits.jsonl").read_text().splitlines()]
    assert any(e["op"] == "set_trainable" and e["flag"] is False and e["names"]
               and all(n.startswith(f"{module}.") for n in e["names"]) for e in edits), edits
    assert any(e.get("op") == "set_lr" and abs(e.get("lr", 0) - 0.0123) < 1e-9 for e in edits), edits


def _master_pid(ssh_host) -> int:
    ssh = Ssh(ssh_host.config)
    done = subprocess.run(ssh.ssh_argv(ALIAS) + ["-O", "check", "--", ALIAS], capture_output=True, text=True)
    return int(re.search(r"pid=(\d+)", done.stderr + done.stdout).group(1))


def test_a_killed_ssh_connection_is_a_reconnection_not_a_crash(going, ssh_host):
    handle = attach_when_listening(going)
    try:
        events = handle.events(timeout=WAIT_S)
        os.kill(_master_pid(ssh_host), signal.SIGKILL)  # the connection and its forward drop without a goodbye
        notices, steps = [], []  # steps: (after the loss?, step) of every step row drawn
        for event in events:
            if isinstance(event, Metrics):
                steps += [(bool(notices), s) for s in event.values["step"]]
            if isinstance(event, Notice):
                notices.append(event.kind)
            if notices[-1:] == [BACK] and any(after for after, _ in steps):
                break
        assert notices[:1] == [LOST] and BACK in notices, notices
        drawn = [s for _, s in steps]
        assert drawn == sorted(set(drawn))  # the history sent again fills the gap without drawing a step twice
        assert going.state() == "running"  # the run trained on
        assert handle.steering and handle.tunnel.is_open()  # a new forward on a new shared connection
        cid = handle.set_lr(0.02)
        assert handle.wait_ack(cid, timeout=30)["ok"]
    finally:
        handle.close()
    assert RETRY_S <= 5  # a host that is back is found within seconds


def test_cli_lists_scripts_and_attach_keeps_the_tunnel_until_interrupted(going, ssh_host, remote_dir, capsys):
    found = wait_until(lambda: [s for s in remote.scripts(ALIAS, remote_dir=remote_dir, ssh_config=ssh_host.config)
                                if s.run_dir.endswith("/attach me/run")], "the run among the host's scripts", WAIT_S)
    assert found[0].port > 0 and not hasattr(found[0], "token")
    code = cli.main(["attach", "--host", ALIAS, "attach me", "--ssh-config", str(ssh_host.config),
                     "--remote-dir", remote_dir, "--for", "0"])
    out = capsys.readouterr().out
    assert code == 0 and "attached to 'attach me' on wb-test-host" in out and "step" in out


@pytest.mark.usefixtures("no_dangling_qthreads")
def test_the_window_lists_the_host_s_run_attaches_and_reconnects(going, ssh_host, remote_dir, main_window, qtbot,
                                                                 monkeypatch, tmp_path):
    from workbench.core.remote.waiting import read_waiting
    from workbench.ui.attaching import RECONNECTING, attach_remote_window
    from workbench.ui.remote_attach_dialog import RemoteAttachDialog

    monkeypatch.setenv("WORKBENCH_SSH_CONFIG", str(ssh_host.config))
    win, panel = main_window
    assert win.attach_host_action.text() == "Attach to a run on a &host…"
    attach_when_listening(going).close()
    dialog = RemoteAttachDialog(win)
    qtbot.addWidget(dialog)
    dialog.host.setEditText(ALIAS)
    dialog.remote_dir.setText(remote_dir)
    assert dialog.refresh()
    rows = [dialog.list.item(i).text() for i in range(dialog.list.count())]
    assert any(row.startswith("attach me  ·  running") for row in rows), rows
    target, steer = dialog.target()
    assert (target.id, steer) == ("attach me", True)
    again = RemoteAttachDialog(win)  # the host is remembered, its token never
    qtbot.addWidget(again)
    assert again.host.itemText(0) == ALIAS and again.remote_dir.text() == remote_dir
    tokens = [w["token"] for w in read_waiting(Ssh(ssh_host.config), ALIAS, remote_dir)]
    ini = (tmp_path / "settings" / "workbench.ini").read_text()
    assert tokens and not any(t in ini for t in tokens)

    assert attach_remote_window(win, target, steer), win.prompts.errors
    assert panel.is_attached()
    handle = panel.run.handle
    port = handle.tunnel.local_port
    os.kill(_master_pid(ssh_host), signal.SIGKILL)
    qtbot.waitUntil(lambda: RECONNECTING in win.windowTitle() and RECONNECTING in panel.run_progress.bar.format()
                    and RECONNECTING in win.statusBar().currentMessage(), timeout=30_000)
    assert "crashed" not in win.windowTitle() and not win.prompts.errors
    qtbot.waitUntil(lambda: RECONNECTING not in win.windowTitle() and handle.connected, timeout=30_000)
    assert panel.is_attached() and panel.run_progress.bar.format().count(RECONNECTING) == 0
    assert win.detach()
    qtbot.waitUntil(lambda: not panel.is_running(), timeout=30_000)
    assert handle.tunnel is None and not _accepts(port)
    assert going.state() == "running"
