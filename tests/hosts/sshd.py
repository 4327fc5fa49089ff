"""A real OpenSSH server on 127.0.0.1 for the tests, as root: a test user, its key, a private sshd, a client config.

Facts it relies on (measured on these machines, /work/shared/REMOTE-TEST-HOSTS.md): a second sshd of our own
(its own config, host key, pid file, port) leaves the system's alone; ``/run/sshd`` must exist; ``UsePAM no``
and ``usermod -p '*'`` let a key log in; ``SetEnv PATH=...`` gives non-interactive commands the venv's
``workbench``; the test user needs ``--x`` on the directories that block its way to the venv's interpreter.

The client side is what a user has: a ``Host`` alias in an ssh config file (passed as ``ssh -F``) and the
server's host key in a known_hosts file. Host keys are checked: the alias :data:`UNKNOWN_ALIAS` points at the
same server under a ``HostKeyAlias`` no known_hosts line names, and ssh refuses it.

``tests/hosts/install.sh`` installs the server when missing (``.ci/run`` calls it as root).
"""

from __future__ import annotations

import os
import pwd
import shutil
import signal
import socket
import stat
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

#: The test user the server lets in.
USER = "wbtest"
#: The alias of the test host in the client config.
ALIAS = "wb-test-host"
#: An alias of the same server whose host key is unknown (a ``HostKeyAlias`` that no known_hosts line names).
UNKNOWN_ALIAS = "wb-unknown-key"
#: Seconds the server may take to accept its first login (it starts in well under one here).
START_TIMEOUT_S = 20.0
SSHD = "/usr/sbin/sshd"


def missing_programs() -> list[str]:
    """What the server and the client side need and this machine lacks (empty: all there)."""
    need = {SSHD: Path(SSHD).is_file(), "ssh": shutil.which("ssh"), "rsync": shutil.which("rsync"),
            "ssh-keygen": shutil.which("ssh-keygen"), "setfacl": shutil.which("setfacl")}
    return [name for name, found in need.items() if not found]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _keygen(path: Path) -> str:
    """A new ed25519 key pair at ``path`` (no passphrase); the public key line."""
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(path)], check=True)
    return path.with_suffix(".pub").read_text().strip()


def _blocking_dirs(target: Path) -> list[Path]:
    """The directories above ``target`` that others cannot traverse (no o+x)."""
    return [p for p in reversed(target.parents) if p.is_dir() and not p.stat().st_mode & stat.S_IXOTH]


@dataclass
class SshHost:
    """The running server and the files a client uses to reach it.

    Attributes
    ----------
    config : Path
        The client's ssh config (``ssh -F config ALIAS``).
    port : int
    home : Path
        The test user's home (runs go under it).
    proc : Popen
        The sshd (``-D``, stopped by :meth:`close`).
    """

    config: Path
    port: int
    home: Path
    proc: subprocess.Popen
    acl_dirs: list[tuple[Path, bool]] = field(default_factory=list)

    def ssh(self, *remote: str, alias: str = ALIAS, **kwargs) -> subprocess.CompletedProcess:
        """``ssh -F config ALIAS REMOTE...`` (batch mode), its output as text."""
        argv = ["ssh", "-F", str(self.config), "-o", "BatchMode=yes", alias, *remote]
        return subprocess.run(argv, capture_output=True, text=True, timeout=60, **kwargs)

    def user_pids(self) -> list[int]:
        """Live processes of the test user (zombies left out: their pid 1 here reaps nothing)."""
        uid, out = pwd.getpwnam(USER).pw_uid, []
        for entry in Path("/proc").iterdir():
            try:
                if entry.name.isdigit() and entry.stat().st_uid == uid and (entry / "cmdline").read_bytes():
                    out.append(int(entry.name))
            except OSError:
                continue
        return out

    def close(self) -> None:
        """Stop the test user's processes and the server by pid, and take the ACL entries back."""
        for pid in self.user_pids():
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        for d, had_acl in self.acl_dirs:  # back as it was: without an ACL, or with its own entries only
            subprocess.run(["setfacl", "-x", f"u:{USER}", str(d)] if had_acl else ["setfacl", "-b", str(d)],
                           check=False)


def start_host(tmp: Path, venv_bin: Path, env: dict[str, str] | None = None) -> SshHost:
    """Create the test user and keys, start a private sshd on 127.0.0.1, write the client config; the host.

    Parameters
    ----------
    tmp : Path
        An empty folder for the server's and the client's files (root's).
    venv_bin : Path
        The ``bin`` folder whose ``workbench`` the test user runs (first on its PATH).
    env : dict of str to str, optional
        More variables of the test user's commands (``SLURM_CONF`` of the test cluster); no spaces in values.

    Raises
    ------
    RuntimeError
        Not root, a program is missing (run ``tests/hosts/install.sh``), or the server did not start.
    """
    missing = missing_programs()
    if missing:
        raise RuntimeError(f"no {', '.join(missing)} on this machine: run tests/hosts/install.sh as root")
    if os.geteuid() != 0:
        raise RuntimeError("the ssh test host is started as root (a test user, a private sshd)")
    try:
        pwd.getpwnam(USER)
    except KeyError:
        subprocess.run(["useradd", "-m", "-s", "/bin/bash", USER], check=True)
    subprocess.run(["usermod", "-p", "*", USER], check=True)  # unlocked for keys, no password matches
    entry = pwd.getpwnam(USER)
    home = Path(entry.pw_dir)
    server, client = tmp / "server", tmp / "client"
    server.mkdir(mode=0o700)
    client.mkdir(mode=0o700)
    host_pub = _keygen(server / "host_ed25519")
    user_pub = _keygen(client / "id_ed25519")
    dot_ssh = home / ".ssh"
    dot_ssh.mkdir(mode=0o700, exist_ok=True)
    (dot_ssh / "authorized_keys").write_text(user_pub + "\n")
    for p in (dot_ssh, dot_ssh / "authorized_keys"):
        os.chown(p, entry.pw_uid, entry.pw_gid)
    (dot_ssh / "authorized_keys").chmod(0o600)
    acl_dirs = []
    for target in (Path(sys.executable).resolve(), venv_bin.resolve()):
        for d in _blocking_dirs(target):
            if d not in [a for a, _ in acl_dirs]:
                extended = subprocess.run(["getfacl", "-c", "--skip-base", str(d)], capture_output=True, text=True)
                subprocess.run(["setfacl", "-m", f"u:{USER}:--x", str(d)], check=True)
                acl_dirs.append((d, bool(extended.stdout.strip())))
    port = _free_port()
    path = f"{venv_bin}:/usr/local/bin:/usr/bin:/bin"
    extra = "".join(f" {k}={v}" for k, v in (env or {}).items())
    (server / "sshd_config").write_text(
        f"Port {port}\nListenAddress 127.0.0.1\nHostKey {server / 'host_ed25519'}\nPidFile {server / 'sshd.pid'}\n"
        f"UsePAM no\nPasswordAuthentication no\nKbdInteractiveAuthentication no\nPubkeyAuthentication yes\n"
        f"AllowUsers {USER}\nAuthorizedKeysFile .ssh/authorized_keys\nStrictModes yes\n"
        f"SetEnv PATH={path} OMP_NUM_THREADS=1{extra}\nSubsystem sftp internal-sftp\nLogLevel ERROR\n")
    (client / "known_hosts").write_text(f"[127.0.0.1]:{port} {host_pub}\n")
    common = (f"  HostName 127.0.0.1\n  Port {port}\n  User {USER}\n  IdentityFile {client / 'id_ed25519'}\n"
              f"  IdentitiesOnly yes\n  UserKnownHostsFile {client / 'known_hosts'}\n")
    config = client / "config"
    config.write_text(f"Host {ALIAS}\n{common}\nHost {UNKNOWN_ALIAS}\n{common}  HostKeyAlias {UNKNOWN_ALIAS}\n")
    Path("/run/sshd").mkdir(mode=0o755, exist_ok=True)
    proc = subprocess.Popen([SSHD, "-D", "-e", "-f", str(server / "sshd_config")], stdin=subprocess.DEVNULL,
                            stdout=subprocess.DEVNULL, stderr=open(server / "sshd.log", "wb"))
    host = SshHost(config, port, home, proc, acl_dirs)
    deadline = time.monotonic() + START_TIMEOUT_S
    while True:
        done = host.ssh("true")
        if done.returncode == 0:
            return host
        if proc.poll() is not None or time.monotonic() > deadline:
            log = (server / "sshd.log").read_text(errors="replace")[-400:]
            host.close()
            raise RuntimeError(f"the test sshd did not let {USER} in: {done.stderr.strip()!r}; sshd: {log!r}")
        time.sleep(0.1)
