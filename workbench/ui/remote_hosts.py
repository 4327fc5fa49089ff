"""The hosts the window remembers (QSettings): where Training › Run on starts a run, whose runs the Runs dock lists.

A host is what ``ssh`` accepts (an alias of the user's ssh config, ``user@server``); with it the window keeps
whether it is a SLURM login node, the job's shape (nodes, GPUs per node, partition, time limit) and the folder of
runs there. No password, key or token is ever stored: ssh reads the user's own configuration each time.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, fields, replace

from workbench.core.remote.jobs import DEFAULT_REMOTE_DIR

__all__ = ["one_line", "HostEntry", "HOSTS_KEY", "MAX_HOSTS", "load_hosts", "save_hosts", "remember_host", "destination_problem"]

#: QSettings key: the remembered hosts, a JSON list of :class:`HostEntry` fields (INI keeps a string whole).
HOSTS_KEY = "remote/hosts"
#: At most this many hosts are remembered (the newest kept): the Run on list stays one screen tall.
MAX_HOSTS = 20


@dataclass(frozen=True)
class HostEntry:
    """One remembered host and how runs are started there.

    Attributes
    ----------
    host : str
        The ssh destination (``gpu-box``, ``me@login.cluster``).
    slurm : bool
        A SLURM login node: runs are submitted with ``sbatch``.
    nodes, gpus_per_node : int
        The job's ``--nodes`` and ``--gpus-per-node`` (0: not given); SLURM only.
    partition, time : str
        The job's ``--partition`` and ``--time`` (``HH:MM:SS``); empty: the cluster's default.
    remote_dir : str
        The folder of runs on the host.
    """

    host: str
    slurm: bool = False
    nodes: int = 1
    gpus_per_node: int = 0
    partition: str = ""
    time: str = ""
    remote_dir: str = DEFAULT_REMOTE_DIR

    def submit_options(self) -> dict:
        """The keyword arguments of :func:`workbench.remote.submit` for a run on this host."""
        options = {"remote_dir": self.remote_dir.strip() or DEFAULT_REMOTE_DIR}
        if self.slurm:
            options.update(slurm=True, nodes=max(1, int(self.nodes)), gpus_per_node=int(self.gpus_per_node) or None,
                           partition=self.partition.strip() or None, time=self.time.strip() or None)
        return options


def one_line(exc: BaseException) -> str:
    """``exc`` as one line for the window (ssh's reasons come over several lines); its type when it says nothing."""
    return " ".join(str(exc).split()) or type(exc).__name__


def destination_problem(text: str) -> str | None:
    """Why ``text`` is not an ssh destination the window can remember (None when it is)."""
    if not text:
        return "give an ssh destination: an alias of your ssh config (gpu-box) or user@server"
    if text.startswith("-") or any(c.isspace() or ord(c) < 32 for c in text):
        return f"{text!r} is not an ssh destination: no spaces, not starting with '-' (gpu-box, user@server)"
    return None


def _entry(value) -> HostEntry | None:
    if not isinstance(value, dict) or not isinstance(value.get("host"), str) or destination_problem(value["host"]):
        return None
    known = {f.name for f in fields(HostEntry)}  # a key from a later version is left out
    kept = {k: v for k, v in value.items() if k in known}
    try:
        entry = HostEntry(**kept)
        return replace(entry, slurm=bool(entry.slurm), nodes=int(entry.nodes), gpus_per_node=int(entry.gpus_per_node),
                       partition=str(entry.partition), time=str(entry.time), remote_dir=str(entry.remote_dir))
    except (TypeError, ValueError):
        return None


def load_hosts(qsettings) -> list[HostEntry]:
    """The remembered hosts, in the order they were added; an unreadable entry is left out, never raised."""
    try:
        values = json.loads(str(qsettings.value(HOSTS_KEY, "[]") or "[]"))
    except ValueError:
        return []
    entries = [e for e in map(_entry, values if isinstance(values, list) else []) if e is not None]
    return list({e.host: e for e in entries}.values())[-MAX_HOSTS:]


def save_hosts(qsettings, hosts: list[HostEntry]) -> None:
    """Remember ``hosts`` (the last :data:`MAX_HOSTS`)."""
    qsettings.setValue(HOSTS_KEY, json.dumps([asdict(h) for h in hosts[-MAX_HOSTS:]]))
    qsettings.sync()


def remember_host(qsettings, entry: HostEntry) -> list[HostEntry]:
    """Remember ``entry`` (replacing the host's earlier one in place); the hosts now remembered."""
    hosts = load_hosts(qsettings)
    at = next((i for i, h in enumerate(hosts) if h.host == entry.host), None)
    if at is None:
        hosts.append(entry)
    else:
        hosts[at] = entry
    save_hosts(qsettings, hosts)
    return load_hosts(qsettings)
