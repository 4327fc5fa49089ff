"""What waits for a window on a host: the attach discovery files there, read over ssh. Qt-free.

Every ``workbench train`` and every script that called :func:`workbench.attach` writes a discovery file on the
machine it runs on (:mod:`workbench.core.attach.discovery`: its address, port, token, pid, name, run folder).
:func:`read_waiting` reads them on a host in one ssh command, with the care the window takes here: only the
user's own regular files in the user's own folders, no link followed, at most
:data:`~workbench.core.attach.discovery.MAX_DISCOVERY_BYTES` each, only those of a live process, fields checked.
The token travels in memory only (never written here); :class:`RemoteScript` keeps none and reads it again at
each attach.
"""

from __future__ import annotations

import json
import posixpath
import shlex
from dataclasses import dataclass, field
from pathlib import Path

from workbench.core.attach.discovery import MAX_DISCOVERY_BYTES, MAX_DISCOVERY_FILES
from workbench.core.remote import jobs
from workbench.core.remote.ssh import Ssh, home_relative

__all__ = ["RemoteScript", "read_waiting", "read_waiting_on_nodes", "find_run", "scripts"]

_FILE = "--workbench-discovery--"
#: Each field of a discovery file used here, and its type (a file with another type in one is skipped).
_FIELDS = {"address": str, "token": str, "pid": int, "port": int, "name": str, "run_dir": str, "model": str,
           "started": (int, float)}

#: The remote folders a discovery file may be in, as :func:`workbench.core.attach.discovery.discovery_dir` picks
#: them on the host (``$WORKBENCH_ATTACH_DIR``, ``$XDG_RUNTIME_DIR/workbench-attach``,
#: ``$TMPDIR/workbench-attach-UID``).
_FOLDERS = ('"$WORKBENCH_ATTACH_DIR" "${XDG_RUNTIME_DIR:+$XDG_RUNTIME_DIR/workbench-attach}" '
            '"${TMPDIR:-/tmp}/workbench-attach-$(id -u)"')


def _script(remote_dir: str | None = None) -> str:
    """The remote ``sh`` script: for each live process's discovery file, a marker line, the process's working
    folder (``/proc/PID/cwd``: a relative ``run_dir`` starts there) and the file on one line. With
    ``remote_dir``, the detached runs' own folders under it (:data:`.jobs.ATTACH_SUBDIR`) are read too."""
    folders = _FOLDERS
    if remote_dir is not None:
        folders += f" {shlex.quote(home_relative(remote_dir).rstrip('/') or '/')}/*/{jobs.ATTACH_SUBDIR}"
    return (f"n=0; for d in {folders}; do [ -n \"$d\" ] && [ -d \"$d\" ] && [ ! -L \"$d\" ] && [ -O \"$d\" ] "
            f"|| continue; for f in \"$d\"/*.json; do [ -f \"$f\" ] && [ ! -L \"$f\" ] && [ -O \"$f\" ] || continue; "
            f"p=${{f##*/}}; p=${{p%%-*}}; case \"$p\" in ''|*[!0-9]*) continue;; esac; "
            f"kill -0 \"$p\" 2>/dev/null || continue; n=$((n+1)); [ $n -le {MAX_DISCOVERY_FILES} ] || break; "
            f"echo {_FILE}; readlink /proc/$p/cwd 2>/dev/null | tr -d '\\n'; echo; "
            f"head -c {MAX_DISCOVERY_BYTES + 1} -- \"$f\" | tr '\\n' ' '; echo; done; done; true")


def _parse(chunk: str) -> dict | None:
    cwd, _, text = chunk.partition("\n")
    if len(text.encode()) > MAX_DISCOVERY_BYTES:
        return None
    try:
        info = json.loads(text)
    except (ValueError, RecursionError):
        return None
    if not isinstance(info, dict) or not all(isinstance(info.get(k), t) and not isinstance(info.get(k), bool)
                                             for k, t in _FIELDS.items() if k in info):
        return None
    if not all(k in info for k in ("token", "port", "pid")):
        return None
    run_dir = info.get("run_dir")
    if run_dir and not run_dir.startswith("/") and cwd.startswith("/"):  # ``workbench train`` writes ``run``
        info["run_dir"] = posixpath.normpath(posixpath.join(cwd, run_dir))
    return info


def read_waiting(ssh: Ssh, host: str, remote_dir: str | None = jobs.DEFAULT_REMOTE_DIR) -> list[dict]:
    """The discovery files of live runs and scripts on ``host``, newest first (each a dict, token included),
    in the host's discovery folders and the detached runs' own under ``remote_dir`` (None: not those).

    Raises
    ------
    RemoteError
        ssh failed.
    """
    return _parse_all(ssh.run(host, jobs.sh(_script(remote_dir)),
                              what="list the runs and scripts waiting for a window"))


def _parse_all(out: str) -> list[dict]:
    found, seen = [], set()
    for chunk in out.split(f"{_FILE}\n")[1:]:
        info = _parse(chunk.rstrip("\n"))
        if info is not None and (info["pid"], info["port"]) not in seen:  # two folders may be one ($TMPDIR...)
            seen.add((info["pid"], info["port"]))
            found.append(info)
    found.sort(key=lambda i: -float(i.get("started") or 0))
    return found


def read_waiting_on_nodes(ssh: Ssh, host: str, job: str) -> dict[str, list[dict]]:
    """The discovery files on each node of SLURM job ``job`` (node name -> dicts), read through the login node
    ``host`` with one ``srun --overlap`` step in the job's allocation (a compute node's ``/tmp`` is its own).

    Raises
    ------
    RemoteError
        ssh failed (a job that no longer runs gives ``{}``).
    """
    job = str(int(job))
    inner = shlex.quote(f"hostname -s; {_script()}")
    out = ssh.run(host, jobs.sh(
        f"n=$(squeue -h -j {job} -t RUNNING -o %D 2>/dev/null | head -n 1); case \"$n\" in ''|*[!0-9]*) exit 0;; "
        f"esac; srun --jobid={job} --overlap -N \"$n\" --ntasks-per-node=1 --label --quiet sh -c {inner} "
        "2>/dev/null; true"), what=f"read the discovery files on the nodes of job {job} (srun)")
    tasks: dict[str, list[str]] = {}
    for line in out.splitlines():
        task, sep, text = line.partition(": ")
        if sep and task.strip().isdigit():
            tasks.setdefault(task.strip(), []).append(text)
    return {lines[0].strip(): _parse_all("\n".join(lines[1:]) + "\n") for lines in tasks.values() if lines}


def find_run(waiting: list[dict], run_dir: str, run_id: str) -> dict | None:
    """The discovery file of the run whose run folder is ``run_dir`` (or, the home folder spelled another way,
    ends in ``/RUN_ID/run``); None when it has none (not started yet, ended, or ``--no-attach``)."""
    exact = [w for w in waiting if w.get("run_dir") == run_dir]
    tail = f"/{run_id}/{jobs.RUN_SUBDIR}"
    return (exact or [w for w in waiting if str(w.get("run_dir", "")).endswith(tail)] or [None])[0]


@dataclass(frozen=True)
class RemoteScript:
    """A run or a script waiting for a window on ``host`` (its discovery file, without the token).

    Attributes
    ----------
    host : str
    name : str
        The script's name (``workbench.attach(name=...)``, or a run folder's name).
    pid, port : int
        Its process on the host and the port it listens on there (its own 127.0.0.1).
    run_dir : str
        Its run folder on the host (``""``: none said).
    model : str
        Its model's class name.
    started : float
        When it started listening (seconds since the epoch, the host's clock).
    remote_dir : str
        The folder of runs on the host whose detached runs' own discovery folders are read too.
    """

    host: str
    name: str
    pid: int
    port: int
    run_dir: str = ""
    model: str = ""
    started: float = 0.0
    ssh: Ssh = field(default_factory=Ssh.from_env, repr=False, compare=False)
    remote_dir: str = jobs.DEFAULT_REMOTE_DIR

    def attach(self, steer: bool | str = True, *, callbacks=(), timeout: float | None = None):
        """Attach through a tunnel Workbench makes and closes: see :meth:`workbench.remote.RemoteRun.attach`.

        Raises
        ------
        RemoteError
            ssh failed, or the script no longer waits.
        AttachError
            The script refused or did not answer.
        """
        from workbench.core.remote.attached import RemoteAttachedRun

        def locate():
            for w in read_waiting(self.ssh, self.host, self.remote_dir):
                if (w["pid"], w["port"]) == (self.pid, self.port):
                    return w, None
            return None

        return RemoteAttachedRun.open(self.ssh, self.host, locate, lambda: "stopped", steer=steer,
                                      callbacks=callbacks, timeout=timeout, what=f"{self.name!r} (pid {self.pid})")


def scripts(host: str, *, remote_dir: str = jobs.DEFAULT_REMOTE_DIR, ssh_config: str | Path | None = None
            ) -> list[RemoteScript]:
    """What waits for a window on ``host``: every ``workbench train`` that listens and every script that called
    :func:`workbench.attach`, newest first (one ssh command); the detached runs under ``remote_dir`` keep their
    discovery files in their own folders (:data:`.jobs.ATTACH_SUBDIR`). A submitted run is also among
    :func:`workbench.remote.runs`; its :meth:`~workbench.remote.RemoteRun.attach` finds its entry here.

    Raises
    ------
    RemoteError
        ssh failed.
    """
    ssh = Ssh.from_env(ssh_config)
    return [RemoteScript(host, str(w.get("name", "?")), w["pid"], w["port"], str(w.get("run_dir", "")),
                         str(w.get("model", "")), float(w.get("started") or 0.0), ssh, remote_dir)
            for w in read_waiting(ssh, host, remote_dir)]

