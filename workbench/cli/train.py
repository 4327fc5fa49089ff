"""``workbench train RUN.toml``: train from a run configuration without the window (``--nproc-per-node N``: DDP).

A one-process run listens for Workbench's window as an attached script does
(:class:`~workbench.core.attach.trainer_attach.TrainerAttach`: ``127.0.0.1``, a
free port or ``--attach-port``, the address and token printed once, a discovery
file); ``--no-attach`` turns it off.
"""

from __future__ import annotations

import argparse

from workbench.cli.arguments import RUN_TRUST, add_trust

__all__ = ["NAME", "USAGE", "SUMMARY", "add_arguments", "run"]

NAME = "train"
USAGE = "RUN.toml"
SUMMARY = "train from a run file without the window (--nproc-per-node N: DDP)"
DESCRIPTION = "Train from a run configuration (TOML)."
EPILOG = None
SUBJECT = "config"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The arguments of ``workbench train``: the run file, ``--trust``, and the data-parallel options."""
    parser.add_argument("config", help="RUN.toml")
    add_trust(parser, RUN_TRUST)
    att = parser.add_argument_group("attaching Workbench's window (one-process runs)")
    att.add_argument("--attach-port", type=int, default=0, metavar="N",
                     help="listen on 127.0.0.1:N for the window (default: a free port, printed at the start)")
    att.add_argument("--no-attach", action="store_true",
                     help="do not listen: no window can attach to this run")
    ddp = parser.add_argument_group("data-parallel (DistributedDataParallel on torch.distributed.run)")
    ddp.add_argument("--nproc-per-node", type=int, default=0, metavar="N",
                     help="run N ranks on this machine (Gloo on CPU, NCCL on CUDA); 0 = one process, no DDP")
    ddp.add_argument("--nnodes", type=int, default=1)
    ddp.add_argument("--node-rank", type=int, default=0)
    ddp.add_argument("--master-addr", default=None)
    ddp.add_argument("--master-port", type=int, default=None)
    ddp.add_argument("--rank-timeout", type=float, default=60.0, metavar="S",
                     help="end the run when a rank has made no step for S seconds (default 60)")


def run(args: argparse.Namespace) -> int:
    """Train the run ``args.config`` describes (:func:`~workbench.core.train.launch.headless.train_from_toml`).

    Returns
    -------
    int
        The run's exit code (0 finished).
    """
    from workbench.core.train.launch.headless import train_from_toml

    if args.nproc_per_node > 0:
        from workbench.core.train.launch.headless import check_run_trust
        from workbench.core.train.launch.torchrun import launch

        check_run_trust(args.config, trust=args.trust)  # before any rank starts
        return int(launch(args.config, args.nproc_per_node, out=print, nnodes=args.nnodes, node_rank=args.node_rank,
                          master_addr=args.master_addr, master_port=args.master_port,
                          timeout_s=args.rank_timeout, trust=args.trust))
    callbacks = []
    if not args.no_attach:
        from workbench.core.attach.trainer_attach import TrainerAttach

        if not 0 <= args.attach_port <= 65535:
            print(f"error: --attach-port {args.attach_port}: a port is 1 to 65535 (0: a free one)")
            return 2
        callbacks.append(TrainerAttach(print, port=args.attach_port))
    return int(train_from_toml(args.config, out=print, trust=args.trust, debug=args.debug, callbacks=callbacks))
