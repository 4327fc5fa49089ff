"""What the parts of the trainer need from it, as :class:`typing.Protocol` classes.

The parts (:mod:`~workbench.core.train.trainer.hooks`,
:mod:`~workbench.core.train.trainer.checkpoints`,
:mod:`~workbench.core.train.trainer.commands`,
:mod:`~workbench.core.train.trainer.faults`,
:mod:`~workbench.core.train.trainer.evaluation`,
:mod:`~workbench.core.train.trainer.rank_sync`,
:mod:`~workbench.core.train.trainer.strategy`) annotate the trainer they serve
with :class:`TrainerLike` instead of importing
:class:`~workbench.core.train.trainer.loop.Trainer`: ``loop.py`` imports every
part, so a part that imported ``loop.py`` back, even for a type hint, would
close an import circle. After Lightning's ``fabric/utilities/types.py``
(``Steppable``, ``_Stateful``). The real ``Trainer`` satisfies every protocol
here structurally; nothing inherits from them. Qt-free.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, ContextManager, Protocol

import torch
from torch import nn

from workbench.core.train.config import TrainConfig
from workbench.core.train.task.tasks import Task
from workbench.core.train.trainer.control import RunControl
from workbench.core.train.trainer.nan_trace import NonFiniteTrace

__all__ = ["TrainerLike", "CheckpointsLike", "RankAgreementLike", "EditLogLike"]


class CheckpointsLike(Protocol):
    """What the parts use of ``trainer.checkpoints`` (a :class:`CheckpointConnector`).

    Methods
    -------
    payload(loss=None) -> dict
        The checkpoint dict of the trainer's current state.
    wait_for_saves() -> None
        Block until the background checkpoint write is on disk.
    load_file(path) -> None
        Put the state of a checkpoint file this run wrote into the trainer.
    """

    def payload(self, loss: float | None = None) -> dict: ...

    def wait_for_saves(self) -> None: ...

    def load_file(self, path: Path) -> None: ...


class RankAgreementLike(Protocol):
    """What the parts use of ``trainer.sync`` (a :class:`RankSync`, data-parallel runs only).

    Attributes
    ----------
    stop : bool
        Every rank agreed to stop at the next step boundary.

    Methods
    -------
    decide(asked) -> str
        Rank 0's answer to a NaN/Inf pause, the same on every rank.
    """

    stop: bool

    def decide(self, asked: bool) -> str: ...


class EditLogLike(Protocol):
    """What the parts use of ``trainer.edit_log`` (an :class:`EditLog`).

    Methods
    -------
    write(step, entry) -> None
        Append one record (``{"op": ...}``) at optimizer step ``step``.
    """

    def write(self, step: int, entry: dict) -> None: ...


class TrainerLike(Protocol):
    """The trainer as its parts see it: the state and methods they read, set or call.

    :class:`~workbench.core.train.trainer.loop.Trainer` documents each member;
    this lists only those a part uses.

    Attributes
    ----------
    model : nn.Module
        The model trained in place.
    config : TrainConfig
        The run's settings (parts change ``lr`` and ``seed`` in it).
    arch : Any
        The architecture recorded in checkpoints, or None.
    device : torch.device
    callbacks : list of Callback
    control : RunControl
        Stop, pause, commands and the NaN decision, shared with other threads.
    checkpoints : CheckpointsLike
    edit_log : EditLogLike or None
        The run folder's ``edits.jsonl`` (rank 0, once prepared).
    net : nn.Module
        What the steps call: the model, or its ``DistributedDataParallel`` wrapper (set by the strategy).
    epoch, step, batch_in_epoch, samples : int
        Epochs completed, optimizer steps done, batches of this epoch consumed, samples seen.
    best_val_loss : float
    history : list of dict
        Epoch metrics.
    group_names : list of list of str
        Parameter names of each optimizer param group.
    optimizer, scheduler, scaler
        Built by ``prepare()`` (None before; ``scaler`` only with float16 AMP on CUDA).
    task : Task or None
        How a batch becomes a loss and metrics; None before ``prepare()``.
    best_score : float
        The best value so far of the monitored metric (NaN before the first epoch end).
    train_loader, val_loader
        Iterables of batches (``(x, y)``, dicts of tensors...), or None before ``prepare()``.
    run_dir : Path or None
    lr_used : float
        The head LR the next step uses.
    resumed : bool
    error : Exception or None
    reason_override : str or None
        An end reason that overrides ``completed`` / ``stopped``.
    last_batch : object or None
        The latest training batch, on the device (for the NaN trace).
    nonfinite_trace : NonFiniteTrace or None
    lr : float
        Current head LR (read-only).
    is_main : bool
        Rank 0, or not data-parallel (read-only).
    rank, world_size : int
        This process's place in a data-parallel run, else 0 and 1 (read-only).
    sync : RankAgreementLike or None
        Data-parallel agreement of the ranks; None in one process (read-only).

    Methods
    -------
    prepare()
        Build data, optimizer, scheduler and run folder (idempotent).
    build_optimizer(group_names=None, roles=None)
    epoch_loss_so_far() -> (float, int)
    carry_epoch_loss(total, count)
    apply_bn_policy()
    autocast()
        A ``torch.autocast`` context for the run's AMP setting, or a no-op.
    emit()
        Send the buffered step metrics to ``on_metrics``.
    call(hook, *args), safe_call(hook, *args)
        Call a hook on every callback (``safe_call`` passes the trainer first and swallows errors).
    drop_device_losses()
    restart_throughput_window()
    apply_one(cmd), apply_commands()
        Apply one command, or every queued one, on the training thread.
    wrap_ddp()
        Data-parallel: rebuild the ``DistributedDataParallel`` wrapper.
    """

    model: nn.Module
    config: TrainConfig
    arch: Any
    device: torch.device
    callbacks: list
    control: RunControl
    checkpoints: CheckpointsLike
    edit_log: EditLogLike | None
    net: nn.Module
    epoch: int
    step: int
    batch_in_epoch: int
    samples: int
    best_val_loss: float
    history: list[dict]
    group_names: list[list[str]]
    optimizer: torch.optim.Optimizer | None
    scheduler: Any
    scaler: Any
    task: Task | None
    best_score: float
    train_loader: Any
    val_loader: Any
    run_dir: Path | None
    lr_used: float
    resumed: bool
    error: BaseException | None
    reason_override: str | None
    last_batch: Any
    nonfinite_trace: NonFiniteTrace | None

    @property
    def lr(self) -> float: ...

    @property
    def is_main(self) -> bool: ...

    @property
    def rank(self) -> int: ...

    @property
    def world_size(self) -> int: ...

    @property
    def sync(self) -> RankAgreementLike | None: ...

    def prepare(self) -> None: ...

    def build_optimizer(self, group_names: list[list[str]] | None = None,
                        roles: list[str] | None = None) -> Any: ...

    def epoch_loss_so_far(self) -> tuple[float, int]: ...

    def carry_epoch_loss(self, total: float | None, count: int | None) -> None: ...

    def apply_bn_policy(self) -> None: ...

    def autocast(self) -> ContextManager: ...

    def emit(self, now: float | None = None) -> None: ...

    def call(self, hook: str, *args: Any) -> None: ...

    def safe_call(self, hook: str, *args: Any) -> None: ...

    def drop_device_losses(self) -> None: ...

    def restart_throughput_window(self) -> None: ...

    def apply_one(self, cmd: Any) -> None: ...

    def apply_commands(self) -> None: ...

    def wrap_ddp(self) -> None: ...
