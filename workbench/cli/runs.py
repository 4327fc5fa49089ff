"""``workbench runs [ROOT]``: the run folders, one per line (model, dataset, epochs, steps, best, state), or JSON.

``--host HOST`` lists the runs on an SSH host or a SLURM cluster instead (:func:`workbench.remote.runs`): name,
state (queued, running, completed, stopped, crashed, cancelled), SLURM job or process, remote run folder.

``--metric NAME`` (repeatable) adds a column of any metric the runs have: a task's own (``val_r2``,
``val_f1``...) or a per-step one (``step/train_loss``); the JSON lists each run's metrics.
"""

from __future__ import annotations

import argparse
import json
import math

from workbench.cli.guard import CommandFailed
from workbench.cli.output import escaped, write_out

__all__ = ["NAME", "USAGE", "SUMMARY", "add_arguments", "run"]

NAME = "runs"
USAGE = "[ROOT] [--metric NAME]... [--json] | --host HOST"
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
    from workbench.cli.remote import add_host_options

    add_host_options(parser.add_argument_group("runs on a host (workbench submit)"), host="optional")


def run(args: argparse.Namespace) -> int:
    """Print the runs under ``args.root`` (default: the runs root) as a table or a JSON list; 0.

    Raises
    ------
    CommandFailed
        The folder does not exist.
    """
    if args.host:
        return _remote(args)
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


def _remote(args: argparse.Namespace) -> int:
    """``workbench runs --host HOST``: the host's runs, one per line (name, state, job or pid, run folder), or JSON."""
    from workbench.core.remote.listing import probe
    from workbench.core.remote.ssh import Ssh

    if args.root or args.metric:
        raise CommandFailed("--host lists a host's runs: leave out ROOT and --metric (pull a run to read its "
                            "metrics: workbench pull --host HOST RUN)", code=2)
    found = probe(Ssh.from_env(args.ssh_config), args.host, args.remote_dir)
    rows = [{"id": p.name, "host": args.host, "state": p.state, "job": p.job, "pid": p.pid,
             "run_dir": f"{p.folder}/run"} for p in found]
    if args.json:
        write_out(json.dumps(rows, indent=1))
        return 0
    if not rows:
        write_out(escaped([f"no runs on {args.host} in {args.remote_dir}"]))
        return 0
    width = max(len(r["id"]) for r in rows)
    where = [f"job {r['job']}" if r["job"] else f"pid {r['pid'] or '-'}" for r in rows]
    write_out(escaped([f"{'name':<{width}}  {'state':<9}  {'job/pid':<10}  run folder"] + [
        f"{r['id']:<{width}}  {r['state']:<9}  {w:<10}  {r['run_dir']}" for r, w in zip(rows, where)]))
    return 0
