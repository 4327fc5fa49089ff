"""A real one-node SLURM cluster on 127.0.0.1 for the tests, as root: munged, slurmctld and slurmd of our own.

Facts it relies on (measured on these machines, /work/shared/REMOTE-TEST-HOSTS.md): no cgroups are needed
(``proctrack/linuxproc``, ``task/none``, no accounting); the node is named by the machine's short hostname
with its real CPU count and a ``RealMemory`` a little under what ``slurmd -C`` reports (else it is drained
as "Low RealMemory"); ``select/cons_tres`` with ``CR_Core`` runs two 1-CPU jobs side by side; ``KillWait``
gives a cancelled run time to save.

Everything is private to one folder made for the session (world-readable: the test user's ``sbatch`` reads
the config): the munge key and socket (``AuthInfo=socket=...``), the config (``SLURM_CONF``, which the test
sshd passes to the test user's commands), state, spool, logs and pid files; the daemons listen on free ports.
The system's ``/etc/slurm`` and ``/etc/munge`` are left alone. The daemons run in the foreground under the
session (``-D`` / ``-F``) and are stopped by their pids at the end.

``tests/hosts/install.sh`` installs ``slurm-wlm`` and ``munge`` when missing (``.ci/run`` calls it as root).
"""

from __future__ import annotations

import contextlib
import os
import pwd
import shutil
import socket
import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from tests.hosts.sshd import USER

#: Seconds the daemons may take until the node is idle (about 2 s here).
START_TIMEOUT_S = 30.0
#: Seconds between SLURM's SIGTERM and its SIGKILL when a job is cancelled: a run reaches a step boundary and
#: writes last.pt in well under this on the test node.
KILL_WAIT_S = 60
#: MiB kept off the memory ``slurmd -C`` reports (a node whose RealMemory exceeds what it finds is drained).
MEMORY_MARGIN_MB = 512
#: The partition every test job goes to (the default one).
PARTITION = "wbtest"
PROGRAMS = ("/usr/sbin/munged", "/usr/sbin/mungekey", "/usr/sbin/slurmctld", "/usr/sbin/slurmd", "sbatch",
            "squeue", "scancel", "srun", "sinfo")


def missing_programs() -> list[str]:
    """The SLURM and munge programs this machine lacks (empty: all there)."""
    return [p for p in PROGRAMS if not (Path(p).is_file() if p.startswith("/") else shutil.which(p))]


def skip_reason() -> str | None:
    """Why the SLURM tests cannot run here, or None: only when not root AND the programs are missing.

    As root (CI), missing programs are a failure the fixture reports (run tests/hosts/install.sh), never a skip.
    """
    missing = missing_programs()
    if missing and os.geteuid() != 0:
        return (f"no {', '.join(missing)} and not root: the SLURM test cluster needs slurm-wlm and munge "
                "(tests/hosts/install.sh as root)")
    return None


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def node_line() -> str:
    """``NodeName=... CPUs=... RealMemory=...`` for this machine, from ``slurmd -C`` (memory a little under)."""
    out = subprocess.run(["slurmd", "-C"], capture_output=True, text=True, check=True).stdout
    words = dict(w.split("=", 1) for w in out.split() if "=" in w)
    memory = max(256, int(words["RealMemory"]) - MEMORY_MARGIN_MB)
    keep = ("CPUs", "Boards", "SocketsPerBoard", "CoresPerSocket", "ThreadsPerCore")
    return (f"NodeName={socket.gethostname().split('.')[0]} NodeAddr=127.0.0.1 "
            + " ".join(f"{k}={words[k]}" for k in keep if k in words) + f" RealMemory={memory} State=UNKNOWN")


@dataclass
class SlurmCluster:
    """The running cluster.

    Attributes
    ----------
    folder : Path
        Its private folder (config, state, logs).
    conf : Path
        ``slurm.conf`` (``SLURM_CONF`` of every client).
    procs : list of Popen
        munged, slurmctld, slurmd (stopped by :meth:`close`, last first).
    """

    folder: Path
    conf: Path
    procs: list[subprocess.Popen] = field(default_factory=list)

    def env(self) -> dict[str, str]:
        """This process's environment with ``SLURM_CONF`` set (for ``squeue``/``sinfo`` run here)."""
        return {**os.environ, "SLURM_CONF": str(self.conf)}

    def log_tail(self, chars: int = 600) -> str:
        """The ends of the daemons' logs, for a failure message."""
        parts = []
        for name in ("munge/munged.log", "slurmctld.log", "slurmd.log"):
            p = self.folder / name
            if p.is_file():
                parts.append(f"{name}: {p.read_text(errors='replace')[-chars:]!r}")
        return "; ".join(parts)

    def close(self) -> None:
        """Cancel what is left, stop slurmd, slurmctld, munged by their pids, and remove the folder."""
        with contextlib.suppress(OSError, subprocess.SubprocessError):
            subprocess.run(["scancel", "--quiet", f"--user={USER}"], env=self.env(), capture_output=True,
                           check=False, timeout=30)
        for proc in reversed(self.procs):
            if proc.poll() is None:
                proc.terminate()
                try:
                    proc.wait(timeout=15)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait()
        shutil.rmtree(self.folder, ignore_errors=True)


def cluster_folder() -> Path:
    """A new private folder for a cluster, readable by all (the test user's ``sbatch`` reads its ``slurm.conf``).

    Made before the cluster starts: the test sshd passes ``SLURM_CONF=<folder>/slurm.conf`` to the test user.
    """
    folder = Path(tempfile.mkdtemp(prefix="wb-slurm-"))
    folder.chmod(0o755)
    return folder


def start_cluster(folder: Path) -> SlurmCluster:
    """Start munged, slurmctld and slurmd for one CPU node on 127.0.0.1; the cluster once the node is idle.

    Parameters
    ----------
    folder : Path
        An empty folder of :func:`cluster_folder`; its ``slurm.conf`` is written (removed by ``close``).

    Raises
    ------
    RuntimeError
        Not root, a program is missing (run ``tests/hosts/install.sh``), or the node did not come up (the
        daemons' logs quoted).
    """
    missing = missing_programs()
    if missing:
        raise RuntimeError(f"no {', '.join(missing)} on this machine: run tests/hosts/install.sh as root")
    if os.geteuid() != 0:
        raise RuntimeError("the SLURM test cluster is started as root (slurmd runs jobs as their users)")
    munge = pwd.getpwnam("munge")
    munge_dir = folder / "munge"
    munge_dir.mkdir(mode=0o755)
    key = munge_dir / "munge.key"
    subprocess.run(["mungekey", "--create", f"--keyfile={key}"], check=True, capture_output=True)
    os.chown(munge_dir, munge.pw_uid, munge.pw_gid)
    os.chown(key, munge.pw_uid, munge.pw_gid)
    key.chmod(0o600)
    sock = munge_dir / "munge.socket"
    for sub in ("state", "spool"):
        (folder / sub).mkdir(mode=0o755)
    ctld_port, slurmd_port = _free_port(), _free_port()
    conf = folder / "slurm.conf"
    conf.write_text("\n".join([
        "ClusterName=wbtest", f"SlurmctldHost={socket.gethostname().split('.')[0]}(127.0.0.1)",
        f"SlurmctldPort={ctld_port}", f"SlurmdPort={slurmd_port}", "SlurmUser=root", "SlurmdUser=root",
        "AuthType=auth/munge", "CredType=cred/munge", f"AuthInfo=socket={sock}",
        f"StateSaveLocation={folder / 'state'}", f"SlurmdSpoolDir={folder / 'spool'}",
        f"SlurmctldPidFile={folder / 'slurmctld.pid'}", f"SlurmdPidFile={folder / 'slurmd.pid'}",
        f"SlurmctldLogFile={folder / 'slurmctld.log'}", f"SlurmdLogFile={folder / 'slurmd.log'}",
        "ProctrackType=proctrack/linuxproc", "TaskPlugin=task/none", "JobAcctGatherType=jobacct_gather/none",
        "AccountingStorageType=accounting_storage/none", "JobCompType=jobcomp/none",
        "SelectType=select/cons_tres", "SelectTypeParameters=CR_Core", "MpiDefault=none",
        "ReturnToService=2", "SchedulerType=sched/backfill", f"KillWait={KILL_WAIT_S}", "InactiveLimit=0",
        "MinJobAge=300", "SlurmctldTimeout=30", "SlurmdTimeout=30", "SchedulerParameters=sched_interval=1",
        node_line(), f"PartitionName={PARTITION} Nodes=ALL Default=YES MaxTime=INFINITE State=UP", ""]))
    conf.chmod(0o644)
    cluster = SlurmCluster(folder, conf)
    env = cluster.env()
    try:
        cluster.procs.append(subprocess.Popen(  # as the munge user, our own child (reaped when stopped)
            ["munged", "-F", f"--socket={sock}", f"--key-file={key}",
             f"--pid-file={munge_dir / 'munged.pid'}", f"--log-file={munge_dir / 'munged.log'}",
             f"--seed-file={munge_dir / 'munged.seed'}"],
            user=munge.pw_uid, group=munge.pw_gid, extra_groups=[], stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
        _wait(lambda: sock.exists(), "munged's socket", cluster)
        for daemon in ("slurmctld", "slurmd"):
            cluster.procs.append(subprocess.Popen(
                [daemon, "-D", "-f", str(conf)], env=env, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                stderr=open(folder / f"{daemon}.err", "wb")))
        _wait(lambda: _node_idle(env), "the node idle (sinfo)", cluster)
    except BaseException:
        cluster.close()
        raise
    return cluster


def _node_idle(env: dict) -> bool:
    done = subprocess.run(["sinfo", "-h", "-N", "-o", "%t"], env=env, capture_output=True, text=True, timeout=10)
    return done.returncode == 0 and done.stdout.strip() == "idle"


def _wait(condition, what: str, cluster: SlurmCluster) -> None:
    deadline = time.monotonic() + START_TIMEOUT_S
    while not condition():
        dead = [p.args[0] for p in cluster.procs if p.poll() is not None]
        if dead or time.monotonic() > deadline:
            why = f"{', '.join(dead)} exited" if dead else f"not within {START_TIMEOUT_S:.0f} s"
            raise RuntimeError(f"the SLURM test cluster did not start ({what}: {why}); {cluster.log_tail()}")
        time.sleep(0.2)
