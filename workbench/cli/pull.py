"""``workbench pull --host HOST RUN [--to DIR]``: copy a run's folder back from a host (rsync: again later, only what
changed), into the local runs root by default, where the window and ``workbench runs`` list it."""

from __future__ import annotations

import argparse

from workbench.cli.output import escaped, write_out
from workbench.cli.remote import add_host_options

__all__ = ["NAME", "USAGE", "SUMMARY", "add_arguments", "run"]

NAME = "pull"
USAGE = "--host HOST RUN [--to DIR]"
SUMMARY = "copy a run's folder back from a host (again: only what changed)"
DESCRIPTION = "Copy a run's folder (metrics, checkpoints, status, train.log) back from a host into DIR/RUN."
EPILOG = None
SUBJECT = "name"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """``--host``, the run's name, ``--to``, ``--ssh-config``, ``--remote-dir``."""
    add_host_options(parser, host="required")
    parser.add_argument("name", metavar="RUN", help="the run's name (workbench runs --host HOST lists them)")
    parser.add_argument("--to", default=None, metavar="DIR", help="where (default: the local runs root)")


def run(args: argparse.Namespace) -> int:
    """Pull run ``args.name`` from ``args.host`` into ``args.to``; print where; 0."""
    from workbench.core.remote import jobs
    from workbench.core.remote.ssh import Ssh

    target = jobs.pull(Ssh.from_env(args.ssh_config), args.host, args.name, args.to, remote_dir=args.remote_dir)
    write_out(escaped([f"pulled {args.name} from {args.host} into {target}"]))
    return 0
