"""``workbench runs [ROOT]``: the run folders, one per line (model, dataset, epochs, steps, best, state), or JSON.

``--metric NAME`` (repeatable) adds a column of any metric the runs have: a task's own (``val_r2``,
``val_f1``...) or a per-step one (``step/train_loss``); the JSON lists each run's metrics.
"""

from __future__ import annotations

import argparse
import json
import math

from workbench.cli.guard import CommandFailed
from workbench.cli.output import write_out

__all__ = ["NAME", "USAGE", "SUMMARY", "add_arguments", "run"]

NAME = "runs"
USAGE = "[ROOT] [--metric NAME]... [--json]"
SUMMARY = "list the run folders (model, dataset, epochs, steps, best, state, any metric)"
DESCRIPTION = "List the run folders: one run per line."
EPILOG = None
SUBJECT = "root"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The arguments of ``workbench runs``: the runs folder, ``--metric``, ``--json``."""
    parser.add_argument("root", nargs="?", default=None, help="runs folder (default: the runs root)")
    parser.add_argument("--metric", action="append", default=[], metavar="NAME",
                        help="add a column of this metric's last value: any metrics.csv column (val_r2, val_f1, "
                             "val_top5...) or step/NAME of steps.csv (step/train_loss); repeatable. The metrics "
                             "of each run are listed by --json")
    parser.add_argument("--json", action="store_true", help="the same as a JSON list")


def run(args: argparse.Namespace) -> int:
    """Print the runs under ``args.root`` (default: the runs root) as a table or a JSON list; 0.

    Raises
    ------
    CommandFailed
        The folder does not exist.
    """
    from workbench.core.train.runs.folder import default_runs_root
    from workbench.core.train.runs.index import list_runs, metric_last, runs_table

    try:
        runs = list_runs(args.root or default_runs_root())
    except FileNotFoundError as exc:
        raise CommandFailed(f"{exc}: give an existing runs folder") from exc
    if not args.json:
        write_out(runs_table(runs, args.metric))
        return 0
    rows = [r.to_dict() for r in runs]
    if args.metric:  # each asked metric's last value (None: the run has none)
        for r, row in zip(runs, rows):
            values = {m: metric_last(r.path, m) for m in dict.fromkeys(args.metric)}
            row["last"] = {m: v if math.isfinite(v) else None for m, v in values.items()}
    write_out(json.dumps(rows, indent=1))
    return 0
