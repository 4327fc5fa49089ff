"""``workbench cancel --host HOST RUN``: end a run on a host (``scancel`` on SLURM, SIGTERM on a plain host); it
saves ``last.pt`` at the step it reached (:meth:`workbench.remote.RemoteRun.cancel`)."""

from __future__ import annotations

import argparse

from workbench.cli.output import escaped, write_out
from workbench.cli.remote import add_host_options

__all__ = ["NAME", "USAGE", "SUMMARY", "add_arguments", "run"]

NAME = "cancel"
USAGE = "--host HOST RUN"
SUMMARY = "end a run on a host or a SLURM cluster (scancel / a clean stop), last.pt saved"
DESCRIPTION = "End a run on a host: SLURM's scancel, or SIGTERM to its process; it stops at a step with last.pt saved."
EPILOG = None
SUBJECT = "name"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """``--host``, the run's name, ``--ssh-config``, ``--remote-dir``."""
    add_host_options(parser, host="required")
    parser.add_argument("name", metavar="RUN", help="the run's name (workbench runs --host HOST lists them)")


def run(args: argparse.Namespace) -> int:
    """Cancel run ``args.name`` on ``args.host``, wait until it ended, print its state; 0."""
    from workbench.core.remote.handle import RemoteRun
    from workbench.core.remote.listing import probe
    from workbench.core.remote.ssh import Ssh

    ssh = Ssh.from_env(args.ssh_config)
    p = probe(ssh, args.host, args.remote_dir, args.name)[0]
    r = RemoteRun(p.name, args.host, f"{p.folder}/run", p.folder, p.job, args.remote_dir, ssh)
    state = r.cancel()
    write_out(escaped([f"{r.id} on {r.host}: {state}"]))
    return 0
