"""``workbench remote`` against a real OpenSSH server on 127.0.0.1 (tests/hosts/sshd.py): start, status, stop, pull.

The local side runs in process (``workbench.cli.main``); the host runs ``workbench train`` as the test user.
"""

from __future__ import annotations

import os
import shlex
import signal
import subprocess
from pathlib import Path

import pytest

from tests.hosts.sshd import ALIAS, UNKNOWN_ALIAS
from tests.remote.polling import wait_until
from workbench import cli, remote
from workbench.core.remote import jobs
from workbench.core.remote.bundle import bundle, stage
from workbench.core.remote.ssh import Ssh

pytestmark = pytest.mark.remote

#: A digits run that ends in a few seconds on 2 busy cores, and one that runs until stopped.
SHORT_EPOCHS, LONG_EPOCHS = 1, 10_000
#: Seconds a condition is waited for before the test fails (a remote `workbench train` starts in ~3 s here).
WAIT_S = 60.0


def _run_toml(tmp_path: Path, epochs: int) -> Path:
    path = tmp_path / "run.toml"
    path.write_text(f"epochs = {epochs}\ntensorboard = false\n[data]\ndataset = \"digits\"\nbatch_size = 256\n")
    return path


def _wait(condition, what: str, timeout: float = WAIT_S):
    return wait_until(condition, what, timeout)


def _cli(host, remote_dir, *argv) -> int:
    action, rest = argv[0], list(argv[1:])
    return cli.main(["remote", action, rest.pop(0) if rest and rest[0] in (ALIAS, UNKNOWN_ALIAS) else ALIAS, *rest,
                     "--ssh-config", str(host.config), "--remote-dir", remote_dir])


def _status(host, remote_dir, name) -> jobs.RemoteStatus:
    return jobs.status(Ssh(host.config), ALIAS, name, remote_dir=remote_dir)


def _epochs_logged(host, remote_dir, name) -> int:
    log = host.home / remote_dir / name / jobs.LOG_FILE
    return sum(line.startswith("epoch ") for line in log.read_text(errors="replace").splitlines()) \
        if log.is_file() else 0


def test_start_runs_detached_then_pull_brings_a_run_folder_that_lists(ssh_host, remote_dir, tmp_path, capsys):
    name = "it's a; run $(touch pwned)"  # a name with a space, a quote, ';' and $( ): data, never a command
    assert _cli(ssh_host, remote_dir, "start", str(_run_toml(tmp_path, SHORT_EPOCHS)), "--name", name) == 0
    out = capsys.readouterr().out
    assert f"started {name} on {ALIAS}" in out and "pid " in out
    st = _wait(lambda: (s := _status(ssh_host, remote_dir, name)).state == "finished" and not s.alive and s,
               "the remote run finished")
    assert st.reason == "completed" and st.log_line == "finished: completed"
    assert _cli(ssh_host, remote_dir, "status", name) == 0
    assert "not running" in (out := capsys.readouterr().out) and "state: finished (completed)" in out
    dest = tmp_path / "pulled"
    assert _cli(ssh_host, remote_dir, "pull", name, "--to", str(dest)) == 0
    pulled = dest / name
    assert {"metrics.csv", "last.pt", "status.json", "run.toml", jobs.LOG_FILE} <= {p.name for p in pulled.iterdir()}
    assert pulled.stat().st_uid == os.getuid()  # files are the puller's, not the remote user's uid
    capsys.readouterr()
    assert cli.main(["runs", str(dest)]) == 0
    table = capsys.readouterr().out
    assert name in table and "finished" in table
    assert not list(ssh_host.home.rglob("pwned")) and not list(tmp_path.rglob("pwned"))


def test_a_dropped_connection_leaves_the_run_training(ssh_host, remote_dir, tmp_path):
    """The launch line run inside a terminal session (``ssh -tt``) whose ssh is killed: the pty's SIGHUP to that
    session does not reach the run (its own session, nohup)."""
    name, ssh = "dropped", Ssh(ssh_host.config)
    folder = jobs.remote_folder(remote_dir, name)
    stage(bundle(_run_toml(tmp_path, LONG_EPOCHS)), tmp_path / "stage")
    ssh.run(ALIAS, f"mkdir -p -- {shlex.quote(folder)}", what="make the folder")
    ssh.rsync(ALIAS, [f"{tmp_path / 'stage'}/"], f"{ALIAS}:{folder}/", what="copy", options=("--copy-links",))
    session = subprocess.Popen(
        ssh.ssh_argv() + ["-tt", ALIAS, f"cd -- {shlex.quote(folder)} && {jobs.launch_line()}; exec sleep 30"],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
    try:
        pid = int(session.stdout.readline().strip())  # the launch line prints the run's pid first
        _wait(lambda: _epochs_logged(ssh_host, remote_dir, name) >= 1, "a first epoch on the host")
        session.send_signal(signal.SIGKILL)  # the connection drops: no goodbye to the server
        session.wait(timeout=10)
    finally:
        if session.poll() is None:
            session.kill()
            session.wait()
    # the server ended that session (its `sleep` got the pty's hangup)...
    _wait(lambda: not [p for p in ssh_host.user_pids() if _cmdline(p).startswith("sleep")],
          "the dropped session ended on the host")
    # ...and the run trains on
    before = _epochs_logged(ssh_host, remote_dir, name)
    _wait(lambda: _epochs_logged(ssh_host, remote_dir, name) > before, "more epochs after the connection dropped")
    st = _status(ssh_host, remote_dir, name)
    assert st.alive and st.pid == pid and st.state == "running"
    jobs.stop(ssh, ALIAS, name, remote_dir=remote_dir)


def _cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""


def test_cancel_ends_the_run_at_a_step_with_last_pt_saved(ssh_host, remote_dir, tmp_path, capsys):
    """``workbench submit`` to a plain host (with a ``--sync`` folder) starts it detached; ``cancel`` stops it as
    Ctrl+C (SIGTERM)."""
    name = "to stop"
    host_args = ["--host", ALIAS, "--ssh-config", str(ssh_host.config), "--remote-dir", remote_dir]
    extra = tmp_path / "extra data"
    extra.mkdir()
    (extra / "labels.txt").write_text("a\nb\n")
    assert cli.main(["submit", str(_run_toml(tmp_path, LONG_EPOCHS)), "--name", name, "--sync", str(extra),
                     *host_args]) == 0
    assert (ssh_host.home / remote_dir / name / "extra data" / "labels.txt").read_text() == "a\nb\n"
    assert f"submitted {name} to {ALIAS}: started detached" in capsys.readouterr().out
    [run] = [r for r in remote.runs(ALIAS, remote_dir=remote_dir, ssh_config=ssh_host.config) if r.id == name]
    assert run.job is None and run.run_dir == f"{ssh_host.home / remote_dir / name}/run"
    _wait(lambda: _epochs_logged(ssh_host, remote_dir, name) >= 1, "a first epoch on the host")
    assert run.state() == "running"
    assert cli.main(["cancel", name, *host_args]) == 0
    assert capsys.readouterr().out.strip() == f"{name} on {ALIAS}: cancelled"
    st = _status(ssh_host, remote_dir, name)
    assert not st.alive and (st.state, st.reason) == ("stopped", "stopped")
    run = ssh_host.home / remote_dir / name / "run"
    assert (run / "last.pt").is_file()
    log = (ssh_host.home / remote_dir / name / jobs.LOG_FILE).read_text()
    assert "stopping at the next step (SIGTERM" in log and "finished: stopped" in log
    assert _cli(ssh_host, remote_dir, "stop", name) == 1  # nothing left to stop: said, exit 1
    assert "is not running; nothing to stop" in capsys.readouterr().err


def test_an_unknown_host_key_is_refused_with_ssh_s_message(ssh_host, remote_dir, tmp_path, capsys):
    runs = ssh_host.home / remote_dir
    before = set(runs.iterdir()) if runs.is_dir() else set()
    assert _cli(ssh_host, remote_dir, "start", UNKNOWN_ALIAS, str(_run_toml(tmp_path, SHORT_EPOCHS))) == 1
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and err.startswith(f"error: {UNKNOWN_ALIAS}: could not connect")
    assert "Host key verification failed." in err
    assert (set(runs.iterdir()) if runs.is_dir() else set()) == before  # nothing was made on the host
