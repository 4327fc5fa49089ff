"""The system ssh as Workbench runs it: its own reason quoted in one line, host-relative paths, rsync's reasons."""

from __future__ import annotations

import os
import socket
from pathlib import Path

import pytest

from tests.core.remote.fake_ssh import fake_ssh
from workbench.core.remote.ssh import RemoteError, Ssh, _rsync_reason, home_relative


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]  # closed again when this returns: nothing listens there


def test_a_host_that_refuses_is_one_line_with_ssh_s_reason(tmp_path):
    config = tmp_path / "config"
    config.write_text(f"Host nothing-here\n  HostName 127.0.0.1\n  Port {_closed_port()}\n"
                      f"  UserKnownHostsFile {tmp_path / 'known_hosts'}\n")
    with pytest.raises(RemoteError) as e:
        Ssh(config).run("nothing-here", "true", what="start the run")
    text = str(e.value)
    assert "\n" not in text and text.startswith("nothing-here: could not connect to start the run: ssh said ")
    assert "Connection refused" in text


def test_the_config_comes_from_the_option_then_the_environment(monkeypatch, tmp_path):
    monkeypatch.setenv("WORKBENCH_SSH_CONFIG", str(tmp_path / "env_config"))
    assert Ssh.from_env().ssh_argv()[:3] == ["ssh", "-F", str(tmp_path / "env_config")]
    assert Ssh.from_env(tmp_path / "given").ssh_argv()[:3] == ["ssh", "-F", str(tmp_path / "given")]
    monkeypatch.delenv("WORKBENCH_SSH_CONFIG")
    argv = Ssh.from_env().ssh_argv()
    assert "-F" not in argv and "BatchMode=yes" in argv  # never a password prompt; host keys untouched
    assert not any("StrictHostKeyChecking" in a or "UserKnownHostsFile" in a for a in argv)


@pytest.mark.parametrize("given, expected", [("~/workbench-runs", "workbench-runs"), ("~", "."),
                                             ("/scratch/me", "/scratch/me"), ("runs", "runs")])
def test_remote_folders_are_home_relative(given, expected):
    assert home_relative(given) == expected


def test_rsync_s_reason_is_the_cause_not_its_summary():
    missing = ('rsync: [sender] link_stat "/x" failed: No such file or directory (2)\n'
               "rsync error: some files/attrs were not transferred (see previous errors) (code 23) at main.c(1338)\n")
    assert _rsync_reason(missing) == ('rsync: [sender] link_stat "/x" failed: No such file or directory (2)', False)
    refused = ("Host key verification failed.\nrsync: connection unexpectedly closed (0 bytes received so far)\n"
               "rsync error: unexplained error (code 255) at io.c(232)\n")
    assert _rsync_reason(refused) == ("Host key verification failed.", True)


def test_commands_to_one_host_share_a_private_connection_and_two_aliases_never_do():
    a, b = Ssh("cfg").control_options("gpu-box"), Ssh("cfg").control_options("gpu-box-2")
    assert "ControlMaster=auto" in a and Ssh("cfg").control_options("gpu-box") == a
    path_a = next(o for o in a if o.startswith("ControlPath="))
    assert path_a != next(o for o in b if o.startswith("ControlPath="))  # each alias checks its own host key
    assert path_a != next(o for o in Ssh("other").control_options("gpu-box") if o.startswith("ControlPath="))
    folder = Path(path_a.partition("=")[2]).parent
    assert folder.stat().st_mode & 0o777 == 0o700 and folder.stat().st_uid == os.getuid()
    assert Ssh("cfg").ssh_argv("gpu-box")[-len(a):] == a and "ControlMaster=auto" not in Ssh("cfg").ssh_argv()


def test_run_argv_gives_stdout_and_says_a_failure_or_a_missing_ssh_in_one_line(tmp_path, monkeypatch):
    fake_ssh(tmp_path, monkeypatch, '[ "$1" = ok ] && { echo out; exit 0; }\necho first >&2\necho boom >&2\nexit 3\n',
             only=True)
    assert Ssh().run_argv("gpu-box", ["ssh", "ok"], what="say out") == "out\n"
    with pytest.raises(RemoteError, match=r"^gpu-box: could not forward the port \(exit 3\): 'boom'$"):
        Ssh().run_argv("gpu-box", ["ssh", "-O", "forward"], what="forward the port")
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    with pytest.raises(RemoteError, match=r"^ssh: the OpenSSH client is not installed here"):
        Ssh().run_argv("gpu-box", ["ssh", "ok"], what="say out")
