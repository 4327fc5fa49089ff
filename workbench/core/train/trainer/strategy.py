"""How a run spans processes: one process, or one rank of a ``DistributedDataParallel`` run.

The :class:`~workbench.core.train.trainer.loop.Trainer` asks its strategy
(``trainer.strategy``) everything that differs between the two: its rank and the
world size, the data shard, the module the steps call (the model or its
``DistributedDataParallel`` wrapper), the loss every rank logs, what happens at a
step boundary (commands, pause, stop) and the buffers at an epoch end. The loop
itself does not know how it was started (Lightning keeps DDP in
``strategies/ddp.py`` likewise). :func:`strategy_for` picks one:
:class:`DataParallel` when a default process group of more than one process was
initialized before the trainer was built, else :class:`SingleProcess`. The
per-step agreement of the ranks is :class:`~workbench.core.train.trainer.rank_sync.RankSync`.
Qt-free.
"""

from __future__ import annotations

import torch

from workbench.core.train.trainer.checkpoints import CheckpointConnector
from workbench.core.train.trainer.rank_sync import RankSync
from workbench.core.train.trainer.types import TrainerLike

__all__ = ["SingleProcess", "DataParallel", "strategy_for", "process_group"]


def process_group() -> tuple[int, int]:
    """``(rank, world_size)`` of the initialized default process group, else ``(0, 1)``."""
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized():
        return dist.get_rank(), dist.get_world_size()
    return 0, 1


class SingleProcess:
    """One process trains alone: no wrapper, no collectives; stop and pause are its own.

    Parameters
    ----------
    trainer : TrainerLike
        The trainer this strategy serves.
    rank, world_size : int
        From :func:`process_group` (a group of one process is still one process).

    Attributes
    ----------
    sync : RankSync or None
        None here: nothing to agree with.
    sharded : bool
        False: every process holds the whole model (True for
        :class:`~workbench.core.train.trainer.fsdp.FullyShardedParallel`).
    """

    sharded = False

    def __init__(self, trainer: TrainerLike, rank: int = 0, world_size: int = 1):
        self.trainer = trainer
        self.rank = rank
        self.world_size = world_size
        self.sync: RankSync | None = None

    @property
    def stop_agreed(self) -> bool:
        """A stop was asked (``control.stop_requested``)."""
        return self.trainer.control.stop_requested

    def wrap_model(self) -> None:
        """After the data is built, and after the frozen set changed: nothing to wrap in one
        process; the steps call the model (:meth:`DataParallel.wrap_model` builds the DDP wrapper)."""

    def checkpoint_connector(self) -> CheckpointConnector:
        """The trainer's ``checkpoints`` part: whole-model files written by rank 0."""
        return CheckpointConnector(self.trainer)

    def full_weights(self) -> torch.nn.Module:
        """What ``init.pt`` is written from: the model itself (its ``state_dict`` is whole)."""
        return self.trainer.model

    def reduce(self, loss: torch.Tensor, n: int, *, deferred: bool) -> tuple[torch.Tensor, int]:
        """The loss logged for the step and its sample count: this process's own ``(loss, n)``."""
        return loss, n

    def boundary(self) -> None:
        """Apply queued commands; wait while paused (commands still apply); return on stop."""
        tr = self.trainer
        tr.apply_commands()
        if not tr.control.is_paused:
            return
        tr.emit()
        tr.call("on_pause", tr)
        if tr.edit_log is not None:
            tr.edit_log.write(tr.step, {"op": "pause"})
        if tr.control.wait_while_paused(tr.apply_commands):
            tr.restart_throughput_window()
        if tr.edit_log is not None and not tr.control.stop_requested:
            tr.edit_log.write(tr.step, {"op": "resume"})
        tr.apply_commands()

    def sync_buffers(self) -> None:
        """Epoch end: the buffers are this process's own."""

    def reset(self) -> None:
        """End of ``fit()``: nothing to forget."""


class DataParallel(SingleProcess):
    """One rank of a ``DistributedDataParallel`` run (``world_size > 1``).

    Parameters
    ----------
    trainer : TrainerLike
    rank, world_size : int
        This process's place in the initialized default process group.

    Attributes
    ----------
    sync : RankSync
        Rank 0's commands, pause and stop agreed by every rank, carried on the
        step's loss all-reduce.
    """

    def __init__(self, trainer: TrainerLike, rank: int, world_size: int):
        super().__init__(trainer, rank, world_size)
        self.sync = RankSync(trainer)

    @property
    def stop_agreed(self) -> bool:
        """Every rank agreed to stop at this boundary (:attr:`RankSync.stop`)."""
        return self.sync.stop

    def wrap_model(self) -> None:
        """(Re)build the ``DistributedDataParallel`` wrapper of the model as ``trainer.net``.

        Only parameters with ``requires_grad=True`` join the reducer, so frozen ones stay
        bit-identical; a freeze or unfreeze mid-run calls this again at the same step
        boundary on every rank (:class:`RankSync`). With nothing trainable the model runs
        unwrapped (DDP refuses a module without gradients; there is nothing to reduce).
        """
        from torch.nn.parallel import DistributedDataParallel

        tr = self.trainer
        if not any(p.requires_grad for p in tr.model.parameters()):
            tr.net = tr.model
            return
        ids = [tr.device.index] if tr.device.type == "cuda" else None
        # broadcast_buffers=False: rank 0's buffers go to every rank at each epoch end
        # (sync_buffers) instead of before every forward: one collective less per step and the
        # same result (with the default too, every rank ends up with rank 0's running statistics)
        tr.net = DistributedDataParallel(tr.model, device_ids=ids, broadcast_buffers=False)

    def reduce(self, loss: torch.Tensor, n: int, *, deferred: bool) -> tuple[torch.Tensor, int]:
        """Every rank logs (and judges NaN on) the same global loss (:meth:`RankSync.reduce`)."""
        return self.sync.reduce(loss, n, deferred=deferred)

    def boundary(self) -> None:
        """Rank 0's commands and pause, agreed by every rank (:meth:`RankSync.boundary`)."""
        self.sync.boundary()

    def sync_buffers(self) -> None:
        """Every rank takes rank 0's buffers (BatchNorm running statistics), as
        ``DistributedDataParallel`` does before each forward, so that validation, checkpoints
        and the final weights are the same on every rank."""
        import torch.distributed as dist

        for buffer in self.trainer.model.buffers():
            dist.broadcast(buffer.data, 0)

    def reset(self) -> None:
        """End of ``fit()``: the agreed flags are cleared (:meth:`RankSync.reset`)."""
        self.sync.reset()


def strategy_for(trainer: TrainerLike) -> SingleProcess:
    """A whole-model strategy for a trainer being built: :class:`DataParallel` in a process group of
    more than one process, else :class:`SingleProcess` (the loop asks
    :func:`workbench.core.train.trainer.fsdp.strategy_for`, which picks FSDP first).

    Parameters
    ----------
    trainer : TrainerLike
        Not yet prepared; only kept by the strategy.

    Returns
    -------
    SingleProcess or DataParallel
    """
    rank, world_size = process_group()
    if world_size > 1:
        return DataParallel(trainer, rank, world_size)
    return SingleProcess(trainer, rank, world_size)
