"""One rank of a headless data-parallel run, rank 0 attachable: ``python -m workbench.core.attach.torchrun_rank``.

``workbench train RUN.toml --nproc-per-node N`` (and a SLURM job of ``workbench
submit --slurm``) starts ``torch.distributed.run`` with this module as the
script. Each rank is :func:`workbench.core.train.launch.torchrun_rank.main`'s; here the
global rank 0 also gets a :class:`~workbench.core.attach.trainer_attach.TrainerAttach`,
so the run listens for Workbench's window as a one-process ``workbench train``
does (``127.0.0.1``, a free port or ``--attach-port N``, the address and token
printed once, a discovery file; the pause lease from ``run.toml``'s
``pause_lease_s`` / ``pause_lease``). The window steers rank 0; every rank applies
its commands, pause and stop at the same step
(:class:`~workbench.core.train.trainer.rank_sync.RankSync`). The other ranks never
listen. ``--no-attach`` turns it off. This entry lives outside ``core.train``
because the training rooms know nothing of the attach server (an import-linter
contract). A window's own job (``--job FILE``) is passed through untouched.
Qt-free.
"""

from __future__ import annotations

import sys
from typing import Sequence

__all__ = ["split_attach_args", "attach_callbacks", "main", "NO_ATTACH", "ATTACH_PORT"]

#: The rank's flag that turns the attach server off (``workbench train --no-attach``).
NO_ATTACH = "--no-attach"
#: The rank's option that names rank 0's port (``workbench train --attach-port N``; 0: a free one).
ATTACH_PORT = "--attach-port"


def split_attach_args(argv: Sequence[str]) -> tuple[list[str], bool, int]:
    """``(the rest of argv, listen, port)``: this module's options taken out of a rank's arguments.

    Raises
    ------
    ValueError
        ``--attach-port`` without a port from 0 to 65535.
    """
    rest: list[str] = []
    listen, port = True, 0
    args = list(argv)
    i = 0
    while i < len(args):
        arg = args[i]
        if arg == NO_ATTACH:
            listen = False
        elif arg == ATTACH_PORT or arg.startswith(ATTACH_PORT + "="):
            value = arg.split("=", 1)[1] if "=" in arg else (args[i + 1] if i + 1 < len(args) else "")
            i += 0 if "=" in arg else 1
            if not value.isdigit() or not 0 <= int(value) <= 65535:
                raise ValueError(f"{ATTACH_PORT} {value!r}: a port is 1 to 65535 (0: a free one)")
            port = int(value)
        else:
            rest.append(arg)
        i += 1
    return rest, listen, port


def attach_callbacks(rank: int, config, *, port: int = 0, out=None) -> list:
    """The attach server of a data-parallel run's rank: a :class:`TrainerAttach` on rank 0, nothing elsewhere.

    Parameters
    ----------
    rank : int
        The global rank.
    config : TrainConfig
        The run's settings: ``pause_lease_s`` and ``pause_lease`` make rank 0's pause lease.
    port : int
        Where rank 0 listens on ``127.0.0.1`` (0: a free port).
    out : callable, optional
        Takes the address line (default: printed, flushed).
    """
    from workbench.core.attach.trainer_attach import TrainerAttach

    if rank != 0:
        return []
    return [TrainerAttach(out or (lambda line: print(line, flush=True)), port=port,
                          pause_lease_s=config.pause_lease_s, pause_lease=config.pause_lease)]


def main(argv: Sequence[str] | None = None, life=None) -> int:
    """Train one rank (:func:`workbench.core.train.launch.torchrun_rank.main`), rank 0 listening unless
    ``--no-attach``; 0 completed, 130 stopped, 1 otherwise (2: a bad ``--attach-port``)."""
    from workbench.core.train.launch.torchrun_rank import main as rank_main

    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["--job"]:
        return rank_main(argv, life)  # the window's own ranks: it steers them over its own connection
    try:
        rest, listen, port = split_attach_args(argv)
    except ValueError as e:
        print(f"error: {e}", flush=True)
        return 2
    factory = (lambda rank, cfg: attach_callbacks(rank, cfg, port=port)) if listen else None
    return rank_main(rest, life, callbacks_for=factory)


if __name__ == "__main__":
    from workbench.core.train.launch.torchrun_rank import RankLife

    _life = RankLife()
    _life.watch_agent()
    _life.exit(main(life=_life))
