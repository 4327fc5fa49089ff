"""``workbench attach --host HOST RUN``: attach to a run (or a script) on a host through a tunnel Workbench manages.

Reads the run's discovery file on the host over ssh (its port and token, never stored here), forwards a local
port to it (:meth:`workbench.remote.RemoteRun.attach`), prints the run's state and a line per epoch, and keeps
the tunnel until Ctrl+C (or ``--for SECONDS``), then detaches: the run trains on. While attached, the tunnel's
local address is printed so that ``workbench.connect`` from a notebook could use it too; a lost connection is
said and the tunnel reopened by itself.
"""

from __future__ import annotations

import argparse
import shlex
import time

from workbench.cli.output import escaped, write_out
from workbench.cli.remote import add_host_options

__all__ = ["NAME", "USAGE", "SUMMARY", "add_arguments", "run"]

NAME = "attach"
USAGE = "--host HOST RUN [--read-only | --take] [--for SECONDS]"
SUMMARY = "attach to a run or a script on a host through a managed ssh tunnel; Ctrl+C detaches"
DESCRIPTION = ("Attach to a run on a host (workbench submit / runs --host), or to a script there that called "
               "workbench.attach (by its name): print its state and epochs until Ctrl+C; the run trains on.")
EPILOG = """examples:
  workbench attach --host gpu-box mnist-20250101-120000     state and epochs, until Ctrl+C
  workbench attach --host gpu-box my-script --read-only      a script that called workbench.attach(name=...)"""
SUBJECT = "name"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """``--host``, the run's name, ``--read-only`` / ``--take``, ``--for``, ``--ssh-config``, ``--remote-dir``."""
    add_host_options(parser, host="required")
    parser.add_argument("name", metavar="RUN", help="the run's name (workbench runs --host HOST), or a script's")
    mode = parser.add_mutually_exclusive_group()
    mode.add_argument("--read-only", action="store_true", help="watch without steering")
    mode.add_argument("--take", action="store_true", help="take the steering from the window that has it")
    parser.add_argument("--for", dest="seconds", type=float, default=None, metavar="SECONDS",
                        help="detach after SECONDS (default: at Ctrl+C)")


def _target(args: argparse.Namespace, ssh):
    """The run named ``args.name`` on the host, else the script of that name waiting there."""
    from workbench.core.remote import listing, waiting
    from workbench.core.remote.handle import from_probe
    from workbench.core.remote.ssh import RemoteError

    try:
        p = listing.probe(ssh, args.host, args.remote_dir, args.name)[0]
        return from_probe(p, args.host, args.remote_dir, ssh)
    except RemoteError as e:
        if "no run" not in str(e):
            raise
    found = [s for s in waiting.scripts(args.host, remote_dir=args.remote_dir, ssh_config=ssh.config)
             if s.name == args.name]
    if not found:
        raise RemoteError(f"{args.host}: no run or waiting script named {args.name!r}; list them: "
                          f"workbench runs --host {shlex.quote(args.host)}")
    return found[0]


def _state_line(handle) -> str:
    info = handle.info
    state = "paused" if info.get("paused") else "stopping" if info.get("stopping") else "running"
    lrs = info.get("lrs") or []
    return (f"state: {state} · step {info.get('step', '?')} · epoch {info.get('epoch', '?')}"
            + (f" · lr {lrs[0]:.4g}" if lrs else "") + ("" if handle.steering else " · read-only"))


def _line(event) -> str:
    """What the terminal shows of ``event``: an epoch's numbers, a notice, an error, the end; ``""`` for the rest."""
    from workbench.core.attach.notice import Notice
    from workbench.core.train.events import EpochEnded, Finished, ProgressText, RunError

    if isinstance(event, EpochEnded):
        return " · ".join(f"{k} {v:.4g}" if isinstance(v, float) else f"{k} {v}" for k, v in event.metrics.items()
                          if k in ("epoch", "step", "train_loss", "val_loss", "val_acc"))
    if isinstance(event, (Notice, ProgressText, RunError)):
        return str(event.text)
    if isinstance(event, Finished):
        return f"the run ended: {event.reason}"
    return ""


def run(args: argparse.Namespace) -> int:
    """Attach, print, keep the tunnel until Ctrl+C or ``--for``; detach; 0."""
    from workbench.core.remote.ssh import Ssh
    from workbench.core.train.events import Finished

    ssh = Ssh.from_env(args.ssh_config)
    target = _target(args, ssh)
    handle = target.attach(steer=False if args.read_only else "take" if args.take else True)
    end = time.monotonic() + args.seconds if args.seconds is not None else None
    try:
        write_out(escaped([f"attached to {args.name!r} on {args.host} through {handle.tunnel.address} "
                           "(Ctrl+C detaches; the run trains on)", _state_line(handle)]))
        while (end is None or time.monotonic() < end) and handle.reason is None:
            wait = 1.0 if end is None else min(1.0, max(0.01, end - time.monotonic()))
            for event in handle.events(timeout=wait):
                line = _line(event)
                if line:
                    write_out(escaped([line]))
                if isinstance(event, Finished):
                    return 0
                if end is not None and time.monotonic() >= end:
                    break
    except KeyboardInterrupt:
        pass
    finally:
        handle.close()
    write_out(escaped([f"detached from {args.name!r}; it trains on"]))
    return 0
