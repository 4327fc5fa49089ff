""":class:`Tunnel` without a host: the command lines it builds and what a failed ssh says. Real tunnels (a forward on
the shared connection, closed with the handle) are in tests/remote/test_attach_remote.py."""

from __future__ import annotations

import shlex

import pytest

from tests.core.remote.fake_ssh import fake_ssh
from workbench.core.remote.ssh import RemoteError, Ssh
from workbench.core.remote.tunnel import Tunnel


def test_a_compute_node_is_reached_through_the_login_node_s_shared_connection(tmp_path):
    config = tmp_path / "my 100% config"
    argv = Tunnel(Ssh(config), "login", 4321, node="node07")._child_argv("127.0.0.1:5000:127.0.0.1:4321")
    assert argv[-2:] == ["--", "node07"] and "-N" in argv and argv[argv.index("-L") + 1].endswith(":4321")
    proxy = next(a for a in argv if a.startswith("ProxyCommand="))
    words = shlex.split(proxy.removeprefix("ProxyCommand=").replace("%%", "%"))
    assert words[0] == "ssh" and words[-4:] == ["-W", "%h:%p", "--", "login"]
    assert str(config) in words and any(w.startswith("ControlPath=") for w in words)  # the login node's master
    assert "100%% config" in proxy  # ssh expands % tokens in a ProxyCommand: a literal % is doubled


def test_a_failed_ssh_is_one_line_naming_the_node_and_the_local_port_stays_closed(tmp_path, monkeypatch):
    fake_ssh(tmp_path, monkeypatch, "echo 'ssh: connect to host node07 port 22: Connection refused' >&2\nexit 255\n")
    tunnel = Tunnel(Ssh(), "login", 4321, node="node07")
    with pytest.raises(RemoteError, match=r"^node07: could not connect to forward the run's port 4321: ssh said "
                                          r"'ssh: connect to host node07 port 22: Connection refused'"):
        tunnel.open()
    assert tunnel.local_port is None and tunnel.address == "" and not tunnel.is_open()
    tunnel.close()  # again: nothing to do, no error
