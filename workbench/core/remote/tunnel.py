"""A local port forwarded to a run's attach port on a host: :class:`Tunnel`, made and closed by Workbench. Qt-free.

A run listens on its own ``127.0.0.1`` (:class:`~workbench.core.attach.trainer_attach.TrainerAttach`), so a window
on another machine reaches it through ssh: ``127.0.0.1:LOCAL`` here forwards to ``127.0.0.1:PORT`` there.
"""

from __future__ import annotations

import shlex
import socket
import subprocess
import time

from workbench.core.remote.ssh import CONNECT_TIMEOUT_S, RemoteError, Ssh

__all__ = ["Tunnel", "OPEN_TIMEOUT_S"]

#: Seconds a new tunnel may take to accept a connection (an ssh handshake through a jump host is ~1 s; a host that
#: does not answer is said after ssh's own ConnectTimeout).
OPEN_TIMEOUT_S = CONNECT_TIMEOUT_S + 5



def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _accepts(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=1.0):
            return True
    except OSError:
        return False


class Tunnel:
    """``127.0.0.1:LOCAL`` on this machine forwarded to ``127.0.0.1:PORT`` on ``host`` (or on ``node`` behind it).

    On a plain host the forward is added to the host's shared connection (``ssh -O forward -L``, the
    ``ControlMaster`` of :meth:`Ssh.control_options`; no new login) and :meth:`close` cancels it
    (``ssh -O cancel``). When there is no shared connection, or the run is on a compute node of a SLURM cluster
    (``node``: the run listens on the node's own 127.0.0.1, which the login node cannot reach), it is an
    ``ssh -N -L`` child of this process, reaching the node through ``host`` (``ProxyCommand ssh ... -W``: the
    login node's shared connection, the node's host key checked as any other), ended by :meth:`close`.

    Parameters
    ----------
    ssh : Ssh
        How hosts are reached (the user's ssh configuration).
    host : str
        The ssh destination (the login node on SLURM).
    port : int
        The attach port on the host (or the node), from the run's discovery file.
    node : str, optional
        The compute node the run is on, reached through ``host``; None: the run is on ``host``.

    Attributes
    ----------
    local_port : int or None
        The local end once :meth:`open` returned (None before and after :meth:`close`).
    """

    def __init__(self, ssh: Ssh, host: str, port: int, node: str | None = None):
        self.ssh, self.host, self.port, self.node = ssh, host, int(port), node
        self.local_port: int | None = None
        self._child: subprocess.Popen | None = None
        self._forward: str | None = None  # the -L spec added to the host's master

    @property
    def address(self) -> str:
        """``"127.0.0.1:LOCAL"``, what :func:`workbench.connect` takes (``""`` while closed)."""
        return f"127.0.0.1:{self.local_port}" if self.local_port else ""

    def open(self) -> str:
        """Make the forward; its local address (``"127.0.0.1:LOCAL"``). Again after :meth:`close`: a new one.

        Raises
        ------
        RemoteError
            ssh could not connect or forward (its own last line quoted), or the local end did not answer within
            :data:`OPEN_TIMEOUT_S` seconds.
        """
        self.close()
        local = _free_port()
        spec = f"127.0.0.1:{local}:127.0.0.1:{self.port}"
        control = self.ssh.control_options(self.host)
        if self.node is None and control:
            # the master, if none yet; its keepalives (Ssh.ssh_argv) notice a dead network (a sleeping
            # laptop) and end it, which closes the forwarded connection and lets the handle reconnect
            self.ssh.run(self.host, "true", what="open the shared connection", timeout=OPEN_TIMEOUT_S)
            self.ssh.run_argv(self.host, self.ssh.ssh_argv(self.host) + ["-O", "forward", "-L", spec, "--", self.host],
                              what=f"forward the run's port {self.port}", timeout=OPEN_TIMEOUT_S)
            self._forward, self.local_port = spec, local
        else:
            self._child = subprocess.Popen(self._child_argv(spec), stdin=subprocess.DEVNULL,
                                           stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
            self.local_port = local
        self._wait_open()
        return self.address

    def _child_argv(self, spec: str) -> list[str]:
        """``ssh -N -L SPEC`` to the host, or to the node through the host's shared connection."""
        opts = ["-N", "-o", "ExitOnForwardFailure=yes", "-L", spec]  # keepalives: Ssh.ssh_argv
        if self.node is None:
            return self.ssh.ssh_argv() + opts + ["--", self.host]
        jump = self.ssh.ssh_argv(self.host) + ["-W", "%h:%p", "--", self.host]
        proxy = " ".join(w if w == "%h:%p" else shlex.quote(w).replace("%", "%%") for w in jump)
        return self.ssh.ssh_argv() + ["-o", f"ProxyCommand={proxy}"] + opts + ["--", self.node]

    def _wait_open(self) -> None:
        deadline = time.monotonic() + OPEN_TIMEOUT_S
        while not _accepts(self.local_port):
            if self._child is not None and self._child.poll() is not None:
                err = self._child.stderr.read() if self._child.stderr else ""
                code = self._child.returncode
                self.close()
                raise self.ssh.error(self.node or self.host, f"forward the run's port {self.port}", code or 255, err)
            if time.monotonic() > deadline:
                self.close()
                raise RemoteError(f"{self.host}: the tunnel to the run's port {self.port} did not open within "
                                  f"{OPEN_TIMEOUT_S} s; check the host")
            time.sleep(0.05)

    def is_open(self) -> bool:
        """The forward is there: the child lives, or the host's shared connection still answers (``ssh -O check``)."""
        if self._child is not None:
            return self._child.poll() is None
        if self._forward is None:
            return False
        argv = self.ssh.ssh_argv(self.host) + ["-O", "check", "--", self.host]
        try:
            return subprocess.run(argv, capture_output=True, stdin=subprocess.DEVNULL, timeout=10).returncode == 0
        except (OSError, subprocess.TimeoutExpired):
            return False

    def close(self) -> None:
        """Stop forwarding (the local port is free afterwards); nothing when closed already. Never raises."""
        child, forward, self._child, self._forward, self.local_port = self._child, self._forward, None, None, None
        if child is not None:
            if child.poll() is None:
                child.terminate()
                try:
                    child.wait(timeout=5)
                except subprocess.TimeoutExpired:
                    child.kill()
                    child.wait()
            if child.stderr is not None:
                child.stderr.close()
        if forward is not None:
            argv = self.ssh.ssh_argv(self.host) + ["-O", "cancel", "-L", forward, "--", self.host]
            try:  # a master that is gone took its forward with it
                subprocess.run(argv, capture_output=True, stdin=subprocess.DEVNULL, timeout=10)
            except (OSError, subprocess.TimeoutExpired):
                pass

    def __enter__(self) -> Tunnel:
        self.open()
        return self

    def __exit__(self, *exc) -> None:
        self.close()
