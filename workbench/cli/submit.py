"""``workbench submit RUN.toml --host HOST [--slurm ...]``: copy a run to an SSH host and start it there, detached
or as a SLURM job (:func:`workbench.remote.submit`)."""

from __future__ import annotations

import argparse
import shlex

from workbench.cli.arguments import RUN_TRUST, add_trust
from workbench.cli.output import escaped, write_out
from workbench.cli.remote import add_host_options

__all__ = ["NAME", "USAGE", "SUMMARY", "add_arguments", "run"]

NAME = "submit"
USAGE = "RUN.toml --host HOST [--slurm] [--nodes N] [--gpus-per-node G] ..."
SUMMARY = "run on an SSH host or a SLURM cluster: copy the run and what it needs, start it detached (or sbatch)"
DESCRIPTION = ("Copy a run file, the files it names (starting weights, data, code) and the --sync folders into a new "
               "run folder on HOST, then start `workbench train` there detached (it survives the connection), or "
               "submit it with sbatch (--slurm). HOST is what ssh accepts: your keys, ports, ProxyJump and known "
               "hosts apply. The host needs `pip install workbench` and rsync.")
EPILOG = """examples:
  workbench submit run.toml --host gpu-box                       start it on gpu-box; prints its NAME
  workbench submit run.toml --host login --slurm --nodes 2 --gpus-per-node 4 --time 04:00:00
  workbench runs --host gpu-box                                  its runs and their states
  workbench pull --host gpu-box NAME --to runs/                  the run folder, here
  workbench cancel --host gpu-box NAME                           scancel / stop, last.pt saved"""
SUBJECT = "config"


def _count(text: str) -> int:
    try:
        n = int(text)
    except ValueError:
        n = 0
    if n < 1:
        raise argparse.ArgumentTypeError(f"{text!r}: give a whole number >= 1")
    return n


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The run file, the host options, the SLURM options, ``--sync``, ``--name``, ``--trust``."""
    parser.add_argument("config", metavar="RUN.toml")
    add_host_options(parser, host="required")
    parser.add_argument("--name", default=None, help="the run's folder name on the host (default: the run file's "
                                                     "folder and the time)")
    parser.add_argument("--sync", action="append", default=[], metavar="DIR",
                        help="a local folder copied beside the run file (data the run file does not name); "
                             "repeatable")
    add_trust(parser, RUN_TRUST)
    job = parser.add_argument_group("SLURM (the host is a login node)")
    job.add_argument("--slurm", action="store_true", help="submit with sbatch instead of starting a process")
    job.add_argument("--nodes", type=_count, default=1, metavar="N", help="#SBATCH --nodes (default 1)")
    job.add_argument("--gpus-per-node", type=_count, default=None, metavar="G",
                     help="#SBATCH --gpus-per-node, and one process per GPU (on a plain host: N processes)")
    job.add_argument("--nproc-per-node", type=_count, default=None, metavar="P",
                     help="processes per node (default: --gpus-per-node, else 1); more than one in all is "
                          "data-parallel (torch.distributed.run)")
    job.add_argument("--partition", default=None, metavar="P", help="#SBATCH --partition")
    job.add_argument("--time", default=None, metavar="HH:MM:SS", help="#SBATCH --time (the job's time limit)")


def run(args: argparse.Namespace) -> int:
    """Submit ``args.config`` to ``args.host``; print its name, where it is and the commands that follow it; 0."""
    from workbench.core.remote.handle import submit

    r = submit(args.config, args.host, slurm=args.slurm, nodes=args.nodes, gpus_per_node=args.gpus_per_node,
               partition=args.partition, time=args.time, sync=args.sync, trust=args.trust,
               nproc_per_node=args.nproc_per_node, name=args.name, remote_dir=args.remote_dir,
               ssh_config=args.ssh_config)
    how = f"SLURM job {r.job}" if r.job else "started detached"
    h, n = shlex.quote(r.host), shlex.quote(r.id)
    write_out(escaped([f"submitted {r.id} to {r.host}: {how}, run folder {r.run_dir}",
                       f"  workbench runs --host {h}", f"  workbench pull --host {h} {n}",
                       f"  workbench cancel --host {h} {n}"]))
    return 0
