"""``workbench runs [ROOT]``: the run folders, one per line (model, dataset, epochs, best, state), or JSON."""

from __future__ import annotations

import argparse
import json

from workbench.cli.guard import CommandFailed
from workbench.cli.output import write_out

__all__ = ["NAME", "USAGE", "SUMMARY", "add_arguments", "run"]

NAME = "runs"
USAGE = "[ROOT]"
SUMMARY = "list the run folders (model, dataset, epochs, best, state)"
DESCRIPTION = "List the run folders: one run per line."
EPILOG = None
SUBJECT = "root"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The arguments of ``workbench runs``: the runs folder, ``--json``."""
    parser.add_argument("root", nargs="?", default=None, help="runs folder (default: the runs root)")
    parser.add_argument("--json", action="store_true", help="the same as a JSON list")


def run(args: argparse.Namespace) -> int:
    """Print the runs under ``args.root`` (default: the runs root) as a table or a JSON list; 0.

    Raises
    ------
    CommandFailed
        The folder does not exist.
    """
    from workbench.core.train.runs.folder import default_runs_root
    from workbench.core.train.runs.index import list_runs, runs_table

    try:
        runs = list_runs(args.root or default_runs_root())
    except FileNotFoundError as exc:
        raise CommandFailed(f"{exc}: give an existing runs folder") from exc
    write_out(json.dumps([r.to_dict() for r in runs], indent=1) if args.json else runs_table(runs))
    return 0
