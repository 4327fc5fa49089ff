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
here structurally; nothing inherits from them.

The steering parts ask for less than the whole trainer: the command applier
(:func:`~workbench.core.train.trainer.commands.apply_command`) takes a
:class:`SteeredRun` (model, optimizer, control, run folder, step, LR roles) and
the ranks' agreement (:class:`~workbench.core.train.trainer.rank_sync.RankSync`)
a :class:`LockstepRun`, so a user's own loop attached to the window
(:class:`~workbench.core.attach.script_run.ScriptRun`) passes a small state
object of its own, not a look-alike trainer. Qt-free.
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

__all__ = ["TrainerLike", "SteeredRun", "LockstepRun", "CheckpointsLike", "RankAgreementLike", "EditLogLike"]


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
    save_in_background(payload, paths) -> None
        Write ``payload`` to each of ``paths`` on the writer's thread.
    save_now_failed(path, exc) -> None
        Save now could not write ``path``: said and logged, the run goes on.

    Attributes
    ----------
    writes : WriteWatch
        The run's failed writes of the moment (:class:`~workbench.core.train.runs.writes.WriteWatch`).
    """

    writes: Any

    def payload(self, loss: float | None = None) -> dict: ...

    def wait_for_saves(self) -> None: ...

    def load_file(self, path: Path) -> None: ...

    def save_in_background(self, payload: dict, paths: list[Path]) -> None: ...

    def save_now_failed(self, path: Path, exc: OSError) -> None: ...


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


class SteeredRun(Protocol):
    """A run the commands act on (:func:`~workbench.core.train.trainer.commands.apply_command`).

    Attributes
    ----------
    model : nn.Module
        Trained in place (freezing goes through its parameters).
    optimizer : torch.optim.Optimizer or None
    scheduler : LRScheduler or None
        Its reference LRs follow an LR change and learn of new param groups.
    config : TrainConfig
        The LR roles of the param groups an unfreeze adds (``lr`` is set by ``SetLR``).
    control : RunControl
        Stop, pause and the command queue, shared with other threads.
    run_dir : Path or None
        The run folder (``SaveNow`` writes ``last.pt`` there).
    edit_log : EditLogLike or None
        The run folder's ``edits.jsonl`` (rank 0).
    step : int
        Optimizer steps done.
    group_names : list of list of str
        Parameter names of each optimizer param group (an unfreeze appends one).
    lr_used : float
        The head LR the next step uses.
    lr : float
        Current head LR (read-only).
    is_main : bool
        Rank 0, or not data-parallel (read-only): the process that writes files.

    Methods
    -------
    prepare()
        Ready the run folder and the optimizer (idempotent).
    apply_bn_policy()
        Put fully frozen BatchNorm layers in ``eval()`` when the run asks it.
    checkpoint_payload(loss=None) -> dict
        The checkpoint dict of the run's current state.
    wait_for_saves()
        Block until a background checkpoint write is on disk.
    """

    model: nn.Module
    optimizer: torch.optim.Optimizer | None
    scheduler: Any
    config: TrainConfig
    control: RunControl
    run_dir: Path | None
    edit_log: EditLogLike | None
    step: int
    group_names: list[list[str]]
    lr_used: float

    @property
    def lr(self) -> float: ...

    @property
    def is_main(self) -> bool: ...

    def prepare(self) -> None: ...

    def apply_bn_policy(self) -> None: ...

    def checkpoint_payload(self, loss: float | None = None) -> dict: ...

    def wait_for_saves(self) -> None: ...


class LockstepRun(Protocol):
    """One rank of a data-parallel run, as the ranks' agreement sees it
    (:class:`~workbench.core.train.trainer.rank_sync.RankSync`).

    Attributes
    ----------
    control : RunControl
    edit_log : EditLogLike or None
    step : int
    rank, world_size : int
        This process's place in the run (read-only).

    Methods
    -------
    apply_one(cmd)
        Apply one command on the training thread (record it, tell the listeners).
    wrap_ddp()
        Rebuild the ``DistributedDataParallel`` wrapper after the frozen set changed (or nothing).
    lockstep_paused()
        Every rank pauses at this step: send the step rows so far, say so to the listeners.
    lockstep_resumed()
        The pause ended (a resume or a stop).
    heartbeat()
        Called every ``PAUSE_TICK_S`` while the ranks wait together.
    """

    control: RunControl
    edit_log: EditLogLike | None
    step: int

    @property
    def rank(self) -> int: ...

    @property
    def world_size(self) -> int: ...

    def apply_one(self, cmd: Any) -> None: ...

    def wrap_ddp(self) -> None: ...

    def lockstep_paused(self) -> None: ...

    def lockstep_resumed(self) -> None: ...

    def heartbeat(self) -> None: ...


class TrainerLike(SteeredRun, LockstepRun, Protocol):
    """The trainer as its parts see it: the state and methods they read, set or call.

    :class:`~workbench.core.train.trainer.loop.Trainer` documents each member;
    this lists only those a part uses: every member of :class:`SteeredRun` and
    :class:`LockstepRun`, and those below.

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
    strategy : SingleProcess, DataParallel or FullyShardedParallel
        How the run spans processes (:mod:`~workbench.core.train.trainer.strategy`).
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

    arch: Any
    device: torch.device
    callbacks: list
    checkpoints: CheckpointsLike
    strategy: Any
    net: nn.Module
    epoch: int
    batch_in_epoch: int
    samples: int
    best_val_loss: float
    history: list[dict]
    scaler: Any
    task: Task | None
    best_score: float
    train_loader: Any
    val_loader: Any
    resumed: bool
    error: BaseException | None
    reason_override: str | None
    last_batch: Any
    nonfinite_trace: NonFiniteTrace | None

    @property
    def sync(self) -> RankAgreementLike | None: ...

    def build_optimizer(self, group_names: list[list[str]] | None = None,
                        roles: list[str] | None = None) -> Any: ...

    def epoch_loss_so_far(self) -> tuple[float, int]: ...

    def carry_epoch_loss(self, total: float | None, count: int | None) -> None: ...

    def autocast(self) -> ContextManager: ...

    def emit(self, now: float | None = None) -> None: ...

    def call(self, hook: str, *args: Any) -> None: ...

    def safe_call(self, hook: str, *args: Any) -> None: ...

    def drop_device_losses(self) -> None: ...

    def restart_throughput_window(self) -> None: ...

    def apply_commands(self) -> None: ...
