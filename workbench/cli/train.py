"""``workbench train RUN.toml``: train from a run configuration without the window (``--nproc-per-node N``: DDP;
``--nnodes N --node-rank R`` with ``--master-addr/--master-port`` or ``--rdzv-backend c10d --rdzv-endpoint``:
several nodes, one launcher on each, one run folder made by the global rank 0).

A run listens for Workbench's window as an attached script does
(:class:`~workbench.core.attach.trainer_attach.TrainerAttach`: ``127.0.0.1``, a
free port or ``--attach-port``, the address and token printed once, a discovery
file; the pause lease from ``run.toml``'s ``pause_lease_s`` and ``pause_lease``);
``--no-attach`` turns it off. A data-parallel run listens on its rank 0
(:mod:`workbench.core.attach.torchrun_rank`).
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
    att = parser.add_argument_group("attaching Workbench's window (a data-parallel run: on rank 0)")
    att.add_argument("--attach-port", type=int, default=0, metavar="N",
                     help="listen on 127.0.0.1:N for the window (default: a free port, printed at the start)")
    att.add_argument("--no-attach", action="store_true",
                     help="do not listen: no window can attach to this run")
    ddp = parser.add_argument_group("data-parallel (DistributedDataParallel on torch.distributed.run)")
    ddp.add_argument("--nproc-per-node", type=int, default=0, metavar="N",
                     help="run N ranks on this machine (Gloo on CPU, NCCL on CUDA); 0 = one process, no DDP")
    ddp.add_argument("--nnodes", type=int, default=1, metavar="N",
                     help="nodes of the run: start one launcher on each, with the same options (default 1)")
    ddp.add_argument("--node-rank", type=int, default=0, metavar="R",
                     help="this node's number, 0 to N-1 (the static rendezvous: node 0 holds rank 0)")
    ddp.add_argument("--master-addr", default=None, metavar="HOST",
                     help="node 0's address (static rendezvous; default 127.0.0.1)")
    ddp.add_argument("--master-port", type=int, default=None, metavar="PORT",
                     help="node 0's port (static rendezvous; default 29500)")
    ddp.add_argument("--rdzv-backend", default=None, metavar="NAME",
                     help="torchrun's rendezvous: static (default: --node-rank numbers the nodes) or c10d "
                          "(the nodes are numbered as they join; --node-rank is not needed)")
    ddp.add_argument("--rdzv-endpoint", default=None, metavar="HOST:PORT",
                     help="where the rendezvous listens (c10d: one node's address and a free port)")
    ddp.add_argument("--rdzv-id", default=None, metavar="ID",
                     help="the run's id in the rendezvous, the same on every node (default: workbench)")
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

    if not args.no_attach and not 0 <= args.attach_port <= 65535:
        print(f"error: --attach-port {args.attach_port}: a port is 1 to 65535 (0: a free one)")
        return 2
    if args.nnodes < 1 or not 0 <= args.node_rank < args.nnodes:
        print(f"error: --nnodes {args.nnodes} --node-rank {args.node_rank}: a node's rank is 0 to nnodes - 1")
        return 2
    if args.nnodes > 1 and args.nproc_per_node < 1:
        print("error: --nnodes: a run on several nodes needs --nproc-per-node (the ranks of each node)")
        return 2
    if args.nproc_per_node > 0:
        from workbench.core.train.launch.headless import check_run_trust
        from workbench.core.train.launch.torchrun import launch

        check_run_trust(args.config, trust=args.trust)  # before any rank starts
        rank_args = [str(args.config), *(["--trust"] if args.trust else [])]
        if args.no_attach:
            rank_args.append("--no-attach")
        elif args.attach_port:  # the global rank 0 runs on node 0
            if args.node_rank == 0 and not _port_free(args.attach_port):  # said before any rank starts
                print(f"error: attach: cannot listen on 127.0.0.1:{args.attach_port} (Address already in use); "
                      "choose another --attach-port, or --no-attach")
                return 1
            rank_args += ["--attach-port", str(args.attach_port)]
        return int(launch(args.config, args.nproc_per_node, out=print, nnodes=args.nnodes, node_rank=args.node_rank,
                          master_addr=args.master_addr, master_port=args.master_port,
                          rdzv_backend=args.rdzv_backend, rdzv_endpoint=args.rdzv_endpoint, rdzv_id=args.rdzv_id,
                          timeout_s=args.rank_timeout, trust=args.trust, rank_args=rank_args))
    callbacks = []
    if not args.no_attach:
        from workbench.core.attach.trainer_attach import TrainerAttach

        lease_s, lease = _lease_of(args.config)
        callbacks.append(TrainerAttach(print, port=args.attach_port, pause_lease_s=lease_s, pause_lease=lease))
    return int(train_from_toml(args.config, out=print, trust=args.trust, debug=args.debug, callbacks=callbacks))


def _lease_of(path) -> tuple[float, str]:
    """``run.toml``'s ``(pause_lease_s, pause_lease)``; the defaults when it cannot be read (the run then says
    why, as it starts)."""
    from workbench.core.train.config import TrainConfig

    try:
        cfg = TrainConfig.from_toml(path)
    except (OSError, ValueError, TypeError):
        cfg = TrainConfig()
    return cfg.pause_lease_s, cfg.pause_lease


def _port_free(port: int) -> bool:
    """Nothing listens on ``127.0.0.1:port`` now (rank 0 binds it a few seconds later, as a one-process run does)."""
    import socket

    try:
        with socket.create_server(("127.0.0.1", port)):
            return True
    except OSError:
        return False
