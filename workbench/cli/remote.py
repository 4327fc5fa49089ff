"""``workbench remote start|status|stop|pull HOST ...``: a run on an SSH host, detached, through the system ssh/rsync.

The same as ``workbench submit``, ``runs --host``, ``cancel --host`` and ``pull --host`` (:mod:`.submit`,
:mod:`.runs`, :mod:`.cancel`, :mod:`.pull`), which also reach a SLURM cluster; kept for scripts that use it.

HOST is what ``ssh`` accepts: an alias of ``~/.ssh/config`` (or of the file
``--ssh-config`` / ``$WORKBENCH_SSH_CONFIG`` names), or ``user@host``. The host
needs ``workbench`` on its PATH (``pip install workbench``) and ``rsync``.
"""

from __future__ import annotations

import argparse
import shlex

from workbench.cli.arguments import RUN_TRUST
from workbench.cli.output import escaped, write_out

__all__ = ["NAME", "USAGE", "SUMMARY", "add_arguments", "run", "add_host_options", "DEFAULT_REMOTE_DIR"]

NAME = "remote"
USAGE = "start|status|stop|pull HOST ..."
SUMMARY = "run on an SSH host: start a run file there detached, see its state, stop it (saved), pull its folder"
DESCRIPTION = ("Run on an SSH host, with your own ssh configuration (keys, ports, ProxyJump, known hosts). "
               "The run survives the connection; its folder on the host is REMOTE_DIR/NAME.")
EPILOG = """examples:
  workbench remote start gpu-box run.toml           copy the run and what it needs, start it; prints NAME
  workbench remote status gpu-box NAME               running or not, status.json's state, the log's last line
  workbench remote stop gpu-box NAME                 stop at the next step, last.pt saved
  workbench remote pull gpu-box NAME --to runs/      the run folder, here (then: workbench runs runs/)"""
SUBJECT = "host"


#: The runs folder on a host unless ``--remote-dir`` says otherwise (``jobs.DEFAULT_REMOTE_DIR``, spelled out so
#: that ``--help`` stays instant).
DEFAULT_REMOTE_DIR = "~/workbench-runs"


def add_host_options(parser: argparse.ArgumentParser, *, host: str = "positional") -> None:
    """Add the host (``positional``, ``--host`` ``required`` or ``optional``), ``--ssh-config``, ``--remote-dir``."""
    text = "an ssh destination: an alias of your ssh config, or user@host"
    if host == "positional":
        parser.add_argument("host", help=text)
    else:
        parser.add_argument("--host", required=host == "required", default=None, metavar="HOST", help=text)
    parser.add_argument("--ssh-config", default=None, metavar="FILE",
                        help="ssh client configuration (ssh -F FILE); default $WORKBENCH_SSH_CONFIG, else "
                             "your ~/.ssh/config")
    parser.add_argument("--remote-dir", default=DEFAULT_REMOTE_DIR, metavar="DIR",
                        help=f"the folder of runs on the host (default {DEFAULT_REMOTE_DIR})")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The four actions, each with the host, ``--ssh-config`` and ``--remote-dir``."""
    common = argparse.ArgumentParser(add_help=False)
    add_host_options(common)
    actions = parser.add_subparsers(dest="action", required=True, metavar="ACTION")
    start = actions.add_parser("start", parents=[common], help="copy a run file and what it needs, start it")
    start.add_argument("config", metavar="RUN.toml")
    start.add_argument("--name", default=None, help="the run's folder name on the host (default: the run "
                                                    "file's folder and the time)")
    start.add_argument("--trust", action="store_true", help=RUN_TRUST)
    for action, text in (("status", "is it running, its state, the last line of its log"),
                         ("stop", "stop at the next step boundary with last.pt saved, as Ctrl+C")):
        sub = actions.add_parser(action, parents=[common], help=text)
        sub.add_argument("name", metavar="NAME")
    pull = actions.add_parser("pull", parents=[common], help="copy the run folder back (again: what changed)")
    pull.add_argument("name", metavar="NAME")
    pull.add_argument("--to", default=None, metavar="DIR", help="where (default: the local runs root)")


def run(args: argparse.Namespace) -> int:
    """Do ``args.action`` on ``args.host``; 0, or an error (one line, exit 1) raised to the guard."""
    from workbench.core.remote import jobs
    from workbench.core.remote.ssh import Ssh

    ssh = Ssh.from_env(args.ssh_config)
    host, where = args.host, args.remote_dir
    if args.action == "start":
        from workbench.core.train.launch.headless import check_run_trust

        check_run_trust(args.config, trust=args.trust)  # refused here, before anything is copied
        s = jobs.start(ssh, host, args.config, remote_dir=where, name=args.name, trust=args.trust)
        write_out(escaped([f"started {s.name} on {host}: folder {s.folder}, pid {s.pid}",
                           f"  workbench remote status {shlex.quote(host)} {shlex.quote(s.name)}"]))
        return 0
    if args.action == "pull":
        target = jobs.pull(ssh, host, args.name, args.to, remote_dir=where)
        write_out(escaped([f"pulled {args.name} from {host} into {target}"]))
        return 0
    st = (jobs.status if args.action == "status" else jobs.stop)(ssh, host, args.name, remote_dir=where)
    word = "running" if st.alive else "not running"
    lines = [f"{args.name} on {host}: {word}" + (f" (pid {st.pid})" if st.pid else ""),
             f"state: {st.state}" + (f" ({st.reason})" if st.reason else "")]
    if st.log_line:
        lines.append(f"log: {st.log_line}")
    write_out(escaped(lines))
    if args.action == "stop" and st.alive:
        from workbench.cli.guard import CommandFailed

        raise CommandFailed(f"{host}: {args.name!r} is still stopping after {jobs.STOP_WAIT_S:.0f} s; "
                            f"check again: workbench remote status {shlex.quote(host)} {shlex.quote(args.name)}")
    return 0
