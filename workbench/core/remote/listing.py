"""The runs on a host, read in one ssh command: each run folder's job or process, ``status.json``, state. Qt-free.

A run folder of :mod:`.jobs` holds ``run.toml``; a SLURM run (:mod:`.slurm`) has a ``job`` file with its job
id, a run on a plain host a ``pid`` file. One remote ``sh`` script lists them all (or one), with the user's
``squeue`` when a SLURM run is among them, and :func:`probe` turns its output into :class:`Probe` records whose
:attr:`Probe.state` is one of ``queued``, ``running``, ``completed``, ``stopped``, ``crashed``, ``cancelled``.
"""

from __future__ import annotations

import json
import shlex
from dataclasses import dataclass

from workbench.core.remote import jobs, slurm
from workbench.core.remote.ssh import RemoteError, Ssh, home_relative

__all__ = ["Probe", "probe"]

_RUN, _SQUEUE = "--workbench-run--", "--workbench-squeue--"


@dataclass(frozen=True)
class Probe:
    """One remote run as the host reported it.

    Attributes
    ----------
    name : str
    folder : str
        Its remote folder, absolute.
    job : str or None
        Its SLURM job id (None: a run on a plain host).
    pid : int or None
        Its training process on a plain host.
    alive : bool
        That process lives.
    cancelled : bool
        ``cancel`` ended it.
    status : dict
        Its ``status.json`` (empty before the run wrote one).
    squeue : str or None
        Its job's ``squeue`` state (None: not SLURM, or no longer listed).
    """

    name: str
    folder: str
    job: str | None
    pid: int | None
    alive: bool
    cancelled: bool
    status: dict
    squeue: str | None

    @property
    def state(self) -> str:
        """``queued``, ``running``, ``completed``, ``stopped``, ``crashed`` or ``cancelled``."""
        st, reason = self.status.get("state"), self.status.get("reason")
        return slurm.state_of(self.squeue, st if isinstance(st, str) else None,
                              reason if isinstance(reason, str) else None, cancelled=self.cancelled,
                              alive=None if self.job else self.alive)


def _script(remote_dir: str, name: str | None) -> str:
    q = shlex.quote(home_relative(remote_dir))
    names = shlex.quote(jobs.check_name(name)) if name is not None else "*"
    return (f"cd -- {q} 2>/dev/null || exit 0; pwd; nl='\n'; slurm=; "
            f"for d in {names}; do [ -f \"$d/run.toml\" ] || continue; case \"$d\" in *\"$nl\"*) continue;; esac; "
            f"echo {_RUN}; printf '%s\\n' \"$d\"; ( cd -- \"$d\" || exit 0; "
            f"job=$(head -c 32 {slurm.JOB_FILE} 2>/dev/null | tr -d '[:space:]'); job=${{job%%;*}}; "
            f"case \"$job\" in *[!0-9]*) job= ;; esac; echo \"$job\"; {jobs.READ_PID}; echo \"$pid\"; "
            f"if {jobs.alive_test()}; then echo alive; else echo gone; fi; "
            f"if [ -e {slurm.CANCELLED_FILE} ]; then echo cancelled; else echo -; fi; "
            f"head -c 65536 {jobs.RUN_SUBDIR}/status.json 2>/dev/null | tr '\\n' ' '; echo ); "
            f"[ -f \"$d/{slurm.JOB_FILE}\" ] && slurm=1; done; "
            f"if [ -n \"$slurm\" ] && command -v squeue >/dev/null; then echo {_SQUEUE}; "
            f"squeue -h --states=all -u \"$(id -un)\" -o '%i %T' 2>/dev/null; fi; true")


def probe(ssh: Ssh, host: str, remote_dir: str = jobs.DEFAULT_REMOTE_DIR, name: str | None = None) -> list[Probe]:
    """The runs under ``remote_dir`` on ``host`` (only ``name`` when given), sorted by name.

    Raises
    ------
    RemoteError
        ssh failed, or ``name`` is given and there is no such run.
    """
    out = ssh.run(host, jobs.sh(_script(remote_dir, name)), what="list the runs")
    head, _, squeue_text = out.partition(f"{_SQUEUE}\n")
    states = dict(line.split(None, 1) for line in squeue_text.splitlines() if len(line.split()) == 2)
    base, *records = head.split(f"{_RUN}\n")
    base = base.strip() or home_relative(remote_dir)
    found = []
    for record in records:
        lines = record.split("\n") + [""] * 6
        run_name, job, pid, alive, mark, status_text = lines[:6]
        try:
            status = json.loads(status_text) if status_text.strip() else {}
        except ValueError:
            status = {}
        found.append(Probe(run_name, f"{base.rstrip('/')}/{run_name}", job or None,
                           int(pid) if pid.isdigit() else None, alive == "alive", mark == "cancelled",
                           status if isinstance(status, dict) else {}, states.get(job) if job else None))
    if name is not None and not found:
        raise RemoteError(f"{host}: no run {name!r} in {home_relative(remote_dir)}; check the name "
                          f"(workbench runs --host {shlex.quote(host)})")
    return sorted(found, key=lambda p: p.name)
