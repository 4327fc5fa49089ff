"""A run as a SLURM job: its batch script, ``sbatch``, ``squeue`` states, ``scancel``. Qt-free.

The job runs in the run's remote folder (:mod:`.jobs`): ``job.sbatch`` (the script), ``job`` (the job id
``sbatch --parsable`` printed), ``train.log`` (``--output``, stdout and stderr) and ``run/`` (the run
folder). One process: the script ``exec``s ``workbench train run.toml``, so SLURM's SIGTERM (``scancel``,
the time limit) reaches the run itself, which stops at the next step and saves ``last.pt`` within SLURM's
``KillWait``. More processes: one ``srun`` task per node runs ``python -m torch.distributed.run --nnodes
$SLURM_NNODES --nproc-per-node N --rdzv-backend c10d --rdzv-endpoint HEAD:PORT`` with Workbench's rank
module (the one ``workbench train --nproc-per-node`` runs), HEAD the job's first node.

Every value that reaches the script is checked (numbers, a partition name, a SLURM time) and every word is
quoted: a run name with a space, a quote or ``;`` is data.
"""

from __future__ import annotations

import re
import shlex
import time as _time

from workbench.core.remote.ssh import RemoteError, Ssh

__all__ = ["SCRIPT_FILE", "JOB_FILE", "CANCELLED_FILE", "RDZV_PORT_BASE", "RDZV_PORT_SPAN", "CANCEL_WAIT_S",
           "check_partition", "check_time", "batch_script", "submit_line", "cancel", "job_states", "state_of",
           "SQUEUE_QUEUED", "SQUEUE_RUNNING"]

#: Files of a SLURM run's remote folder: its batch script, its job id, the mark that ``cancel`` ended it.
SCRIPT_FILE, JOB_FILE, CANCELLED_FILE = "job.sbatch", "job", "cancelled"
#: The c10d rendezvous port on the job's first node is ``RDZV_PORT_BASE + job id % RDZV_PORT_SPAN``: two jobs
#: sharing a node (common with ``--nodes 1``) rarely pick the same port, and it stays below the ephemeral range.
RDZV_PORT_BASE, RDZV_PORT_SPAN = 29500, 2000
#: Seconds ``cancel`` waits for the job to end: SLURM's SIGTERM, the run's save of ``last.pt`` at its next step,
#: then SIGKILL after the cluster's KillWait (30 s by default); a large checkpoint on a slow disk takes longer.
CANCEL_WAIT_S = 180.0
#: ``squeue`` states (``%T``) of a job waiting for its nodes, and of a job on them.
SQUEUE_QUEUED = ("PENDING", "CONFIGURING", "REQUEUED", "REQUEUE_HOLD", "REQUEUE_FED", "RESV_DEL_HOLD",
                 "SPECIAL_EXIT")
SQUEUE_RUNNING = ("RUNNING", "COMPLETING", "SUSPENDED", "STOPPED", "SIGNALING", "STAGE_OUT", "RESIZING")
#: ``squeue`` states of a job that ended without completing.
_CRASHED = ("FAILED", "NODE_FAIL", "OUT_OF_MEMORY", "BOOT_FAIL", "DEADLINE")
_PARTITION = re.compile(r"[A-Za-z0-9_.-]+(,[A-Za-z0-9_.-]+)*")
#: SLURM's time formats: MM, MM:SS, HH:MM:SS, D-HH, D-HH:MM, D-HH:MM:SS.
_TIME = re.compile(r"\d+(:\d{1,2}){0,2}|\d+-\d+(:\d{1,2}){0,2}")


def check_partition(partition: str) -> str:
    """``partition`` when it is a partition name (or a comma-separated list of them).

    Raises
    ------
    RemoteError
        It is not (letters, digits, ``_.-`` only).
    """
    if not _PARTITION.fullmatch(partition or ""):
        raise RemoteError(f"--partition {partition!r}: give a partition name (letters, digits, _ . -; sinfo "
                          "lists them)")
    return partition


def check_time(value: str) -> str:
    """``value`` when it is a SLURM time limit (``HH:MM:SS``, ``MM``, ``D-HH:MM:SS``...).

    Raises
    ------
    RemoteError
        It is not.
    """
    if not _TIME.fullmatch(value or ""):
        raise RemoteError(f"--time {value!r}: give a time limit as HH:MM:SS (or D-HH:MM:SS, or minutes)")
    return value


def _whole(value: int | None, what: str) -> int | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise RemoteError(f"{what} {value!r}: give a whole number >= 1")
    return value


def batch_script(name: str, *, nodes: int = 1, nproc_per_node: int = 1, gpus_per_node: int | None = None,
                 partition: str | None = None, time: str | None = None, trust: bool = False) -> str:
    """The ``sbatch`` script of a run whose folder holds ``run.toml``; it is submitted from that folder.

    Parameters
    ----------
    name : str
        The run's name (the job is named ``wb-`` and its letters, digits and ``_.-``).
    nodes : int
        ``--nodes``.
    nproc_per_node : int
        Processes per node (default 1; with GPUs, one per GPU). One process in all: ``workbench train``;
        more: ``srun`` and ``torch.distributed.run`` on every node.
    gpus_per_node, partition, time
        ``--gpus-per-node``, ``--partition``, ``--time`` (None: the cluster's default).
    trust : bool
        ``--trust`` for the run (the caller decided to run the code its run file names).

    Raises
    ------
    RemoteError
        A value that is not a count, a partition name or a time limit.
    """
    nodes, nproc = _whole(nodes, "--nodes"), _whole(nproc_per_node, "--nproc-per-node")
    gpus = _whole(gpus_per_node, "--gpus-per-node")
    job_name = "wb-" + (re.sub(r"[^A-Za-z0-9_.-]+", "_", name).strip("_") or "run")[:64]
    lines = ["#!/bin/sh", f"#SBATCH --job-name={job_name}", f"#SBATCH --nodes={nodes}",
             "#SBATCH --ntasks-per-node=1", "#SBATCH --output=train.log", "#SBATCH --open-mode=append"]
    if gpus:
        lines.append(f"#SBATCH --gpus-per-node={gpus}")
    if partition:
        lines.append(f"#SBATCH --partition={check_partition(partition)}")
    if time:
        lines.append(f"#SBATCH --time={check_time(time)}")
    trust_arg = ["--trust"] if trust else []
    lines += ["# written by Workbench (workbench submit --slurm); runs in the run's folder",
              "export PYTHONUNBUFFERED=1",
              "command -v workbench >/dev/null || { echo 'workbench is not on the PATH of the job; "
              "pip install workbench on the cluster' >&2; exit 127; }"]
    if nodes * nproc == 1:
        lines.append(f"exec {shlex.join(['workbench', 'train', 'run.toml', *trust_arg])}")
    else:
        rank = ["-m", "workbench.core.attach.torchrun_rank", "run.toml", *trust_arg]
        lines += ['head=$(scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n 1)',
                  f"port=$(({RDZV_PORT_BASE} + SLURM_JOB_ID % {RDZV_PORT_SPAN}))",
                  'py=$(command -v python || command -v python3)',
                  'exec srun --nodes="$SLURM_NNODES" --ntasks-per-node=1 --kill-on-bad-exit=1 '
                  '"$py" -m torch.distributed.run --nnodes="$SLURM_NNODES" '
                  f'--nproc-per-node={nproc} --rdzv-backend=c10d --rdzv-endpoint="$head:$port" '
                  f'--rdzv-id="$SLURM_JOB_ID" {shlex.join(rank)}']
    return "\n".join(lines) + "\n"


def submit_line() -> str:
    """The shell line, run in the run's folder, that submits ``job.sbatch``, keeps the job id in ``job``, prints it."""
    return (f"command -v sbatch >/dev/null || {{ echo 'no sbatch on the host: is it a SLURM login node?' >&2; "
            f"exit 127; }}; sbatch --parsable {SCRIPT_FILE} > {JOB_FILE}.new && mv {JOB_FILE}.new {JOB_FILE} "
            f"&& cat {JOB_FILE}")


def job_states(ssh: Ssh, host: str) -> dict[str, str]:
    """Job id -> ``squeue`` state of every job of the remote user that the cluster still lists.

    Ended jobs leave ``squeue`` after the cluster's MinJobAge (300 s by default); a run's state then comes
    from its ``status.json`` (:func:`state_of`).

    Raises
    ------
    RemoteError
        ssh failed, or ``squeue`` did.
    """
    out = ssh.run(host, 'squeue -h --states=all -u "$(id -un)" -o "%i %T"', what="list the SLURM jobs (squeue)")
    return dict(line.split(None, 1) for line in out.splitlines() if len(line.split()) == 2)


def state_of(squeue_state: str | None, status_state: str | None, status_reason: str | None, *,
             cancelled: bool, alive: bool | None = None) -> str:
    """A remote run's state: ``queued``, ``running``, ``completed``, ``stopped``, ``crashed`` or ``cancelled``.

    Parameters
    ----------
    squeue_state : str or None
        The job's state in ``squeue`` (None: not a SLURM run, or the cluster has forgotten the job).
    status_state, status_reason : str or None
        The run folder's ``status.json`` (``running`` / ``finished`` / ``stopped`` / ``crashed``; ``completed``
        / ``stopped`` / ``error``...); None before the run wrote it.
    cancelled : bool
        ``cancel`` ended it.
    alive : bool, optional
        A run on a plain host: its process lives.
    """
    if squeue_state in SQUEUE_QUEUED:
        return "queued"
    if squeue_state in SQUEUE_RUNNING or alive:
        return "running"
    if cancelled or squeue_state == "CANCELLED":
        return "cancelled"
    if status_state == "finished" and status_reason == "completed":
        return "completed"
    if status_state == "stopped" or squeue_state in ("TIMEOUT", "PREEMPTED"):
        return "stopped"
    if squeue_state == "COMPLETED" and status_state is None:
        return "completed"  # the job ended well and its run wrote no status (nothing to contradict it)
    return "crashed"


def cancel(ssh: Ssh, host: str, folder: str, *, wait_s: float = CANCEL_WAIT_S) -> None:
    """``scancel`` the job of the run in ``folder`` (its ``job`` file), marked ``cancelled``; wait until it ends.

    SLURM sends SIGTERM to every process of the job, which stops the run at its next step with ``last.pt``
    saved, then SIGKILL after the cluster's KillWait.

    Raises
    ------
    RemoteError
        No job id in the folder, ``scancel`` failed, ssh failed, or the job still runs after ``wait_s``.
    """
    q = shlex.quote(folder)
    script = (f"cd -- {q} 2>/dev/null || {{ echo 'no such run folder' >&2; exit 3; }}; "
              f"job=$(head -c 32 {JOB_FILE} 2>/dev/null | tr -d '[:space:]'); job=${{job%%;*}}; "
              f"case \"$job\" in ''|*[!0-9]*) echo 'no SLURM job id in the run folder' >&2; exit 4;; esac; "
              f": > {CANCELLED_FILE}; scancel \"$job\" && echo \"$job\"")
    job = ssh.run(host, f"sh -c {shlex.quote(script)}", what=f"cancel the SLURM job of {folder}").strip()
    deadline = _time.monotonic() + wait_s
    while True:
        state = job_states(ssh, host).get(job)
        if state not in SQUEUE_QUEUED + SQUEUE_RUNNING:
            return
        if _time.monotonic() > deadline:
            raise RemoteError(f"{host}: job {job} is still {state} {wait_s:.0f} s after scancel; check squeue")
        _time.sleep(0.5)
