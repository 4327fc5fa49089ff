"""A run on a host or a SLURM cluster as one object: :func:`submit`, :func:`runs`, :class:`RemoteRun`. Qt-free.

:func:`submit` copies a run file and what it needs into a new run folder on the host (:func:`.jobs.upload`),
then starts it detached (``setsid nohup workbench train``, :func:`.jobs.start`) or submits it with ``sbatch``
(:mod:`.slurm`). :class:`RemoteRun` reads its state, attaches a window or a notebook to it through a tunnel
Workbench manages (:meth:`RemoteRun.attach`), pulls its run folder, cancels it; :func:`runs` lists a host's runs
(:func:`.waiting.scripts` what waits for a window there, scripts included). ``workbench.remote`` is the public name
of this module's API.
"""

from __future__ import annotations

import contextlib
import shlex
from dataclasses import dataclass, field
from pathlib import Path

from workbench.core.remote import jobs, listing, slurm, waiting
from workbench.core.remote.ssh import RemoteError, Ssh

__all__ = ["RemoteRun", "submit", "runs", "runs_with_states", "from_probe", "STATES"]

#: What :meth:`RemoteRun.state` answers.
STATES = ("queued", "running", "completed", "stopped", "crashed", "cancelled")


@dataclass(frozen=True)
class RemoteRun:
    """A run on ``host``: what :func:`submit` returns and :func:`runs` lists.

    Attributes
    ----------
    id : str
        The run's name (its folder's name on the host); ``workbench pull/cancel --host HOST ID``.
    host : str
        The ssh destination.
    run_dir : str
        The run folder on the host (absolute): ``metrics.csv``, ``last.pt``, ``status.json``...
    folder : str
        Its remote folder: ``run.toml``, what it needs, ``train.log``, and ``run_dir``.
    job : str or None
        Its SLURM job id (None: a process on a plain host).
    remote_dir : str
        The folder of runs it was found in.
    ssh : Ssh
        How the host is reached.
    """

    id: str
    host: str
    run_dir: str
    folder: str
    job: str | None = None
    remote_dir: str = jobs.DEFAULT_REMOTE_DIR
    ssh: Ssh = field(default_factory=Ssh.from_env, repr=False, compare=False)

    def probe(self) -> listing.Probe:
        """What the host says of this run now (its job or process, ``status.json``).

        Raises
        ------
        RemoteError
            ssh failed, or the run's folder is gone.
        """
        return listing.probe(self.ssh, self.host, self.remote_dir, self.id)[0]

    def state(self) -> str:
        """``queued``, ``running``, ``completed``, ``stopped``, ``crashed`` or ``cancelled`` (one ssh command).

        Raises
        ------
        RemoteError
            ssh failed, or the run's folder is gone.
        """
        return self.probe().state

    def attach(self, steer: bool | str = True, *, callbacks=(), timeout: float | None = None):
        """Attach to the run through a tunnel Workbench makes and closes; the handle :func:`workbench.connect` gives.

        Reads the run's discovery file on the host over ssh (its port and token: read each time, never stored
        here), forwards a free local port to it (:class:`~workbench.core.remote.tunnel.Tunnel`: through the host's
        shared connection; on SLURM, to the compute node the job runs on, through the login node) and connects.
        The handle (:class:`~workbench.core.remote.attached.RemoteAttachedRun`) has ``AttachedRun``'s methods and
        attributes; a lost connection is a ``"disconnected"`` notice and it reconnects by itself; ``close()``
        detaches (the run trains on) and closes the tunnel.

        Parameters
        ----------
        steer : bool or "take"
            As :func:`workbench.connect`: steer, watch read-only (False), or take the steering over.
        callbacks : sequence of ProbeCallback
            Live probes run in the remote run (the window's).
        timeout : float, optional
            Seconds to connect and be welcomed once the tunnel is open.

        Raises
        ------
        RemoteError
            ssh failed, or the run does not listen (queued, not started yet, ended, or ``--no-attach``).
        AttachError
            The run refused the token or did not answer through the tunnel.
        """
        from workbench.core.remote.attached import RemoteAttachedRun

        return RemoteAttachedRun.open(self.ssh, self.host, self._locate, self.state, steer=steer,
                                      callbacks=callbacks, timeout=timeout, what=f"the run {self.id!r}",
                                      run_name=self.id)

    def _locate(self) -> tuple[dict, str | None] | None:
        """The run's discovery dict (token included) and its compute node (None: the host), or None: not listening.

        On the host first (a plain host; a SLURM node that is the login node or shares its ``/tmp``); else, for a
        running job, on the job's nodes (``srun --overlap`` in the job's allocation).
        """
        found = waiting.find_run(waiting.read_waiting(self.ssh, self.host, self.remote_dir), self.run_dir, self.id)
        if found is not None or not self.job:
            return (found, None) if found is not None else None
        for node, infos in waiting.read_waiting_on_nodes(self.ssh, self.host, self.job).items():
            found = waiting.find_run(infos, self.run_dir, self.id)
            if found is not None:
                # a run that began listening between the two reads, on a node that is the login host itself
                # (or shares its /tmp): reached through the host, as the first read would have
                here = waiting.find_run(waiting.read_waiting(self.ssh, self.host, self.remote_dir), self.run_dir,
                                        self.id)
                return (here, None) if here is not None else (found, node)
        return None

    def pull(self, dest: str | Path | None = None) -> Path:
        """Copy the run folder (and ``train.log``) into ``dest/ID``; that folder. Again later: only what changed.

        ``dest`` defaults to the local runs root, where the window and ``workbench runs`` list it.

        Raises
        ------
        RemoteError
            The run has not written its folder yet, or ssh / rsync failed.
        """
        return jobs.pull(self.ssh, self.host, self.id, dest, remote_dir=self.remote_dir)

    def cancel(self, *, wait_s: float | None = None) -> str:
        """End the run, ``last.pt`` saved at the step it reached; its state afterwards (``cancelled``).

        On SLURM, ``scancel``: SIGTERM to the job, SIGKILL after the cluster's KillWait. On a plain host,
        SIGTERM to the training process, as Ctrl+C. Waits until it has ended (``wait_s``, default
        :data:`.slurm.CANCEL_WAIT_S` / :data:`.jobs.STOP_WAIT_S`).

        Raises
        ------
        RemoteError
            It is not running (nothing to cancel), ssh failed, or it still runs after ``wait_s``.
        """
        if self.job:
            slurm.cancel(self.ssh, self.host, self.folder, wait_s=wait_s or slurm.CANCEL_WAIT_S)
        else:
            st = jobs.stop(self.ssh, self.host, self.id, remote_dir=self.remote_dir,
                           wait_s=wait_s or jobs.STOP_WAIT_S, mark=slurm.CANCELLED_FILE)
            if st.alive:
                raise RemoteError(f"{self.host}: {self.id!r} is still stopping after {wait_s or jobs.STOP_WAIT_S:.0f}"
                                  f" s; check again: workbench runs --host {shlex.quote(self.host)}")
        return self.state()


def from_probe(p: listing.Probe, host: str, remote_dir: str, ssh: Ssh) -> RemoteRun:
    """The :class:`RemoteRun` of a run :func:`.listing.probe` found under ``remote_dir`` on ``host``."""
    return RemoteRun(p.name, host, f"{p.folder}/{jobs.RUN_SUBDIR}", p.folder, p.job, remote_dir, ssh)


def runs(host: str, *, remote_dir: str = jobs.DEFAULT_REMOTE_DIR, ssh_config: str | Path | None = None
         ) -> list[RemoteRun]:
    """The runs on ``host`` under ``remote_dir``, sorted by name (one ssh command).

    Raises
    ------
    RemoteError
        ssh failed.
    """
    ssh = Ssh.from_env(ssh_config)
    return [from_probe(p, host, remote_dir, ssh) for p in listing.probe(ssh, host, remote_dir)]


def runs_with_states(host: str, *, remote_dir: str = jobs.DEFAULT_REMOTE_DIR, ssh_config: str | Path | None = None
                     ) -> list[tuple[RemoteRun, str]]:
    """The runs on ``host`` as :func:`runs` lists them, each with its state at that moment (one ssh command).

    Raises
    ------
    RemoteError
        ssh failed.
    """
    ssh = Ssh.from_env(ssh_config)
    return [(from_probe(p, host, remote_dir, ssh), p.state) for p in listing.probe(ssh, host, remote_dir)]


def submit(run_toml: str | Path, host: str, *, slurm: bool = False, nodes: int = 1,
           gpus_per_node: int | None = None, partition: str | None = None, time: str | None = None,
           sync=(), trust: bool = False, nproc_per_node: int | None = None, name: str | None = None,
           remote_dir: str = jobs.DEFAULT_REMOTE_DIR, ssh_config: str | Path | None = None) -> RemoteRun:
    """Copy ``run_toml`` and what it needs to ``host`` and start it there, detached or as a SLURM job.

    Parameters
    ----------
    run_toml : str or Path
        The run file. The files it names (starting weights, data, code) travel with it; a path it names
        that is not on this machine is refused before anything is copied, naming the key.
    host : str
        What ``ssh`` accepts: an alias of your ssh config (or of ``ssh_config`` / ``$WORKBENCH_SSH_CONFIG``),
        ``user@host``.
    slurm : bool
        Submit with ``sbatch`` (the host is a login node) instead of starting a process.
    nodes, gpus_per_node, partition, time
        The job's ``--nodes``, ``--gpus-per-node``, ``--partition``, ``--time`` (``HH:MM:SS``); SLURM only,
        except ``gpus_per_node`` (processes per node on a plain host too).
    sync : sequence of path
        Local folders copied beside the run file (what the run reads without its run file naming it).
    trust : bool
        The run file names code (an architecture, a dataset, a step): run it (as ``workbench train --trust``).
    nproc_per_node : int, optional
        Processes per node (default ``gpus_per_node``, else 1); more than one in all runs data-parallel.
    name : str, optional
        The run's folder name on the host (default: the run file's folder and the time); taken is refused.
    remote_dir : str
        The folder of runs on the host (default ``~/workbench-runs``).
    ssh_config : str or Path, optional
        ssh's configuration file (``ssh -F``).

    Returns
    -------
    RemoteRun

    Raises
    ------
    TrustRequired
        The run file names code and ``trust`` is False (nothing was copied).
    RemoteError
        A bad value (nodes, partition, time...), a missing file, a taken name, no ``workbench`` or no
        ``sbatch`` on the host, or ssh / rsync / sbatch failed (sbatch's own reason quoted; no run folder left).
    """
    from workbench.core.train.launch.headless import check_run_trust

    nproc = nproc_per_node or gpus_per_node or 1
    if not slurm and (nodes != 1 or partition or time):
        raise RemoteError("--nodes, --partition and --time are for a SLURM cluster: add --slurm (or leave them out "
                          "to run on the host itself)")
    if slurm:  # every value checked before anything is copied
        slurm_mod.batch_script("x", nodes=nodes, nproc_per_node=nproc, gpus_per_node=gpus_per_node,
                               partition=partition, time=time)
    check_run_trust(run_toml, trust=trust)  # refused here, before anything is copied
    ssh = Ssh.from_env(ssh_config)
    sync = tuple(sync)
    if not slurm:
        s = jobs.start(ssh, host, run_toml, remote_dir=remote_dir, name=name, trust=trust, sync=sync,
                       nproc_per_node=nproc)
        return RemoteRun(s.name, host, f"{s.folder}/{jobs.RUN_SUBDIR}", s.folder, None, remote_dir, ssh)
    name = jobs.check_name(name or jobs.default_name(run_toml))
    script = slurm_mod.batch_script(name, nodes=nodes, nproc_per_node=nproc, gpus_per_node=gpus_per_node,
                                    partition=partition, time=time, trust=trust)
    name, folder = jobs.upload(ssh, host, run_toml, remote_dir=remote_dir, name=name, sync=sync,
                               extra={slurm_mod.SCRIPT_FILE: script})
    q = shlex.quote(folder)
    try:
        out = ssh.run(host, jobs.sh(f"cd -- {q} && pwd && {slurm_mod.submit_line()}"), what="submit the job (sbatch)")
    except RemoteError:
        with contextlib.suppress(RemoteError):  # no run folder without a job, listed as crashed
            ssh.run(host, jobs.sh(f"rm -rf -- {q}"), what=f"remove {folder}")
        raise
    lines = out.strip().splitlines()
    job = lines[-1].split(";")[0].strip() if lines else ""
    if len(lines) < 2 or not job.isdigit():
        raise RemoteError(f"{host}: sbatch gave no job id (it said {out.strip()[-200:]!r}); see {folder}")
    return RemoteRun(name, host, f"{lines[0]}/{jobs.RUN_SUBDIR}", lines[0], job, remote_dir, ssh)


slurm_mod = slurm  # the module, under a name the ``slurm`` parameter of submit does not hide
