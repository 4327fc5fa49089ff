"""The system ``ssh`` and ``rsync``, run for Workbench: one place that builds their command lines and says their errors.

A host is whatever ``ssh`` accepts (an alias of the user's ``~/.ssh/config``,
``user@host``); its port, key, ProxyJump and known host keys come from the
user's own OpenSSH configuration, or from the file ``--ssh-config`` /
``$WORKBENCH_SSH_CONFIG`` names (passed as ``ssh -F``). Host keys are always
checked (``StrictHostKeyChecking`` is never touched: an unknown key is refused
by ssh, and its message is what the user reads), ``BatchMode=yes`` makes a
missing key or agent an error instead of a password prompt, and every word
sent to the remote shell is quoted with :func:`shlex.quote`. The commands to one
host share one connection (``ControlMaster``, :meth:`Ssh.control_options`).
"""

from __future__ import annotations

import hashlib
import os
import shlex
import stat
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

from workbench.core.errors import WorkbenchError

__all__ = ["RemoteError", "Ssh", "SSH_CONFIG_ENV", "CONNECT_TIMEOUT_S", "CONTROL_PERSIST_S", "home_relative"]

#: The environment variable naming the ssh client configuration (``ssh -F``) when ``--ssh-config`` is not given.
SSH_CONFIG_ENV = "WORKBENCH_SSH_CONFIG"
#: Seconds ssh waits for a host to answer (``ConnectTimeout``): a host that is down is said in seconds, not minutes.
CONNECT_TIMEOUT_S = 15
#: ssh's ``ServerAliveInterval`` (s) and ``ServerAliveCountMax``: a connection whose peer stops answering
#: (a suspended laptop's network, a dead route) is closed after 30 s, so an attached window's tunnel is
#: known lost and reopened instead of hanging until TCP's own timeout (minutes to hours).
SERVER_ALIVE_S = 10
SERVER_ALIVE_COUNT = 3
#: Seconds a host's shared connection stays open after its last command (``ControlPersist``).
CONTROL_PERSIST_S = 60
#: Seconds a short remote command (status, stop, start) may take before it is abandoned.
COMMAND_TIMEOUT_S = 120


class RemoteError(WorkbenchError):
    """ssh or rsync failed, or the host answered something unexpected; the message names the host and what to do."""


def home_relative(path: str) -> str:
    """A remote folder as ssh and rsync both read it: ``~/x`` becomes ``x`` (both start in the home folder).

    A remote shell expands no ``~`` inside quotes and rsync sends its paths
    protected (``--protect-args``), so a path is written relative to the home
    folder instead. An absolute path stays.

    Parameters
    ----------
    path : str
        A folder on the remote host (``~/workbench-runs``, ``runs``, ``/scratch/me``).
    """
    path = path.strip()
    if path in ("~", "~/", ""):
        return "."
    return path[2:] if path.startswith("~/") else path


def _control_folder() -> Path | None:
    """This user's folder of shared-connection sockets (0700, made once), or None when it is not this user's alone."""
    folder = Path(tempfile.gettempdir()) / f"workbench-ssh-{os.getuid()}"
    try:
        folder.mkdir(mode=0o700, exist_ok=True)
        st = folder.lstat()
    except OSError:
        return None
    if not stat.S_ISDIR(st.st_mode) or st.st_uid != os.getuid() or st.st_mode & 0o077:
        return None  # someone else's, or open to others: no socket of ours goes there
    return folder


def _last_line(text: str) -> str:
    """The last non-empty line of ``text`` (ssh's and rsync's reason comes last), or ``""``."""
    lines = [line.strip() for line in (text or "").splitlines() if line.strip()]
    return lines[-1] if lines else ""


@dataclass(frozen=True)
class Ssh:
    """How to reach hosts: the ssh client configuration file (None: the user's ``~/.ssh/config``).

    Parameters
    ----------
    config : str or Path, optional
        Passed as ``ssh -F CONFIG``.
    """

    config: str | Path | None = None

    @classmethod
    def from_env(cls, config: str | Path | None = None) -> Ssh:
        """``config`` if given, else ``$WORKBENCH_SSH_CONFIG`` if set, else the user's own configuration."""
        return cls(config or os.environ.get(SSH_CONFIG_ENV) or None)

    def ssh_argv(self, host: str | None = None) -> list[str]:
        """``ssh`` and its options (no host): ``-F`` when a configuration is named, batch mode, a connect timeout,
        keepalives (a dead network or a sleeping peer ends the connection, and so a tunnel through it, after
        :data:`SERVER_ALIVE_S` x :data:`SERVER_ALIVE_COUNT` seconds instead of when TCP gives up).

        With ``host``, the options that share one connection to it (:meth:`control_options`).
        """
        argv = ["ssh"]
        if self.config:
            argv += ["-F", str(Path(self.config).expanduser())]
        argv += ["-o", "BatchMode=yes", "-o", f"ConnectTimeout={CONNECT_TIMEOUT_S}",
                 "-o", f"ServerAliveInterval={SERVER_ALIVE_S}", "-o", f"ServerAliveCountMax={SERVER_ALIVE_COUNT}"]
        return argv + (self.control_options(host) if host is not None else [])

    def control_options(self, host: str) -> list[str]:
        """ssh options that multiplex every command to ``host`` over one connection (``ControlMaster``).

        The first command opens it and it stays :data:`CONTROL_PERSIST_S` seconds after the last (a status
        poll then costs ~50 ms instead of a new handshake, ~0.5 s). Its socket is in a folder of this user's
        alone, named by a hash of the ssh configuration and the host as written: two aliases of one server
        never share a connection (each has its own host key check). Empty (no multiplexing) when that folder
        cannot be made private.
        """
        folder = _control_folder()
        if folder is None:
            return []
        key = hashlib.sha256(f"{Path(self.config).expanduser() if self.config else ''}\0{host}".encode())
        return ["-o", "ControlMaster=auto", "-o", f"ControlPath={folder / key.hexdigest()[:20]}",
                "-o", f"ControlPersist={CONTROL_PERSIST_S}"]

    def run(self, host: str, script: str, *, what: str, timeout: float = COMMAND_TIMEOUT_S) -> str:
        """Run ``script`` (a POSIX shell command line, already quoted) on ``host``; its stdout.

        Parameters
        ----------
        host : str
            What ``ssh`` accepts as a destination.
        script : str
            The remote command line; every word taken from input must be quoted by the caller.
        what : str
            What is being done, for the error (``"start the run"``).
        timeout : float
            Seconds before it is abandoned.

        Raises
        ------
        RemoteError
            ssh could not connect (its own last line quoted), or the command exited non-zero.
        """
        return self.run_argv(host, self.ssh_argv(host) + ["--", host, script], what=what, timeout=timeout)

    def run_argv(self, host: str, argv: list[str], *, what: str, timeout: float = COMMAND_TIMEOUT_S) -> str:
        """Run ``argv``, an ssh command line to ``host`` (:meth:`ssh_argv` and more: ``-O forward``...); its stdout.

        Parameters
        ----------
        host : str
            The destination ``argv`` reaches, for the error.
        argv : list of str
            The whole command line, ``ssh`` first.
        what : str
            What is being done, for the error (``"open the shared connection"``).
        timeout : float
            Seconds before it is abandoned.

        Raises
        ------
        RemoteError
            ssh is not installed, did not answer within ``timeout``, could not connect (its own last line quoted),
            or the command exited non-zero.
        """
        try:
            done = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, stdin=subprocess.DEVNULL)
        except FileNotFoundError:
            raise RemoteError("ssh: the OpenSSH client is not installed here; install it (openssh-client)") from None
        except subprocess.TimeoutExpired:
            raise RemoteError(f"{host}: no answer within {timeout:.0f} s while trying to {what}; check the host") \
                from None
        if done.returncode != 0:
            raise self.error(host, what, done.returncode, done.stderr)
        return done.stdout

    def error(self, host: str, what: str, code: int, stderr: str) -> RemoteError:
        """The one-line error for a failed ssh or rsync: the host, what failed, the tool's own last line quoted."""
        reason = _last_line(stderr)
        if code == 255:  # ssh's own failure: no connection, a refused or unknown host key, no usable key
            hint = "check the host in your ssh config, its host key (known_hosts) and your key"
            return RemoteError(f"{host}: could not connect to {what}: ssh said {reason!r}; {hint}")
        return RemoteError(f"{host}: could not {what} (exit {code})" + (f": {reason!r}" if reason else ""))

    def rsync(self, host: str, sources: list[str], dest: str, *, what: str, options: tuple[str, ...] = ()) -> None:
        """``rsync -a`` through this configuration's ssh; remote paths are written ``host:path`` by the caller.

        Transfers resume what is there already (``--partial``); sizes and times decide what is sent again. Paths
        travel as data (``--protect-args``): a space, a quote or ``;`` in a name runs nothing.

        Parameters
        ----------
        options : tuple of str
            More rsync options (``--copy-links``).

        Raises
        ------
        RemoteError
            rsync is missing or failed (ssh's or rsync's own reason quoted).
        """
        # files arrive owned by whoever runs this (as root, -a alone would keep the other side's uid)
        argv = ["rsync", "-a", "--no-owner", "--no-group", "--partial", "--protect-args", *options,
                "-e", shlex.join(self.ssh_argv(host)), "--",
                *sources, dest]
        try:
            done = subprocess.run(argv, capture_output=True, text=True, stdin=subprocess.DEVNULL)
        except FileNotFoundError:
            raise RemoteError("rsync: not installed here; install rsync (on this machine and on the host)") from None
        if done.returncode != 0:
            reason, by_ssh = _rsync_reason(done.stderr)
            raise self.error(host, what, 255 if by_ssh else done.returncode, reason)


def _rsync_reason(stderr: str) -> tuple[str, bool]:
    """The line that says why rsync failed, and whether ssh said it (no connection: rsync's own lines follow).

    rsync ends with its summary (``rsync error: ... (code 23)``); the cause is ssh's last line when ssh
    failed, else rsync's first ``rsync: ...`` line (``link_stat "x" failed: No such file or directory``).
    """
    lines = [line.strip() for line in (stderr or "").splitlines() if line.strip()]
    by_ssh = [line for line in lines if not line.startswith("rsync")]
    if by_ssh and any("connection unexpectedly closed" in line for line in lines):
        return by_ssh[-1], True
    own = [line for line in lines if line.startswith("rsync:")]
    return (own[0] if own else (lines[-1] if lines else "")), False
