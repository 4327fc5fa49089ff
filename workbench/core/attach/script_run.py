"""The state of a user's own loop that the steering parts act on: :class:`ScriptRun`.

A script attached to the window (:func:`~workbench.core.attach.script.attach`)
has a model, an optimizer and maybe a scheduler, and calls
:meth:`~workbench.core.attach.script.Attached.step` after each optimizer step.
The commands a window sends apply through
:func:`~workbench.core.train.trainer.commands.apply_command`, and a
data-parallel script's ranks agree through
:class:`~workbench.core.train.trainer.rank_sync.RankSync`; those ask only a
:class:`~workbench.core.train.trainer.types.SteeredRun` and a
:class:`~workbench.core.train.trainer.types.LockstepRun`. :class:`ScriptRun`
holds exactly those members, and the script's progress (``epoch``,
``history``) its checkpoints record. Qt-free.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any, Callable

from torch import nn

from workbench.core.model.saving import checkpoint_payload
from workbench.core.train.config import TrainConfig
from workbench.core.train.trainer.commands import apply_command
from workbench.core.train.trainer.control import RunControl
from workbench.core.train.trainer.edit_log import EditLog

__all__ = ["ScriptRun"]


def _nothing() -> None:
    """A step of the protocol a script has nothing to do for."""


class ScriptRun:
    """What Workbench's steering parts read of a user's loop (a ``SteeredRun`` and a ``LockstepRun``).

    Parameters
    ----------
    model : nn.Module
    optimizer : torch.optim.Optimizer or None
    scheduler : LRScheduler or None
    run_dir : Path
        The run folder (``edits.jsonl``, ``last.pt``); rank 0 alone writes it.
    control : RunControl
        The script's queue of commands, pause and stop.
    name : str
        Recorded in the checkpoints (``attached_script``).
    rank, world_size : int
        This process's place in a data-parallel script, else 0 and 1.
    apply_one : callable, optional
        ``apply_one(cmd)``: apply one command, record it and tell the windows (the
        :class:`~workbench.core.attach.script.Attached`'s own); :class:`RankSync` calls it.
        Default: :func:`~workbench.core.train.trainer.commands.apply_command` on this state.
    lockstep_paused : callable, optional
        ``lockstep_paused()``: the ranks pause together at this step (send the rows, say so).

    Attributes
    ----------
    config : TrainConfig
        The defaults: the LR roles of the param groups an unfreeze adds.
    edit_log : EditLog or None
        ``run_dir/edits.jsonl`` (rank 0).
    step, epoch : int
        Steps and epochs the script reported.
    history : list of dict
        The epoch rows (saved with a checkpoint).
    group_names : list of list of str
        Parameter names of each param group of the optimizer.
    lr_used : float
        The first group's LR when attached (``SetLR`` of every group sets it).
    """

    def __init__(self, model: nn.Module, optimizer, scheduler, run_dir: Path, control: RunControl, name: str, *,
                 rank: int = 0, world_size: int = 1, apply_one: Callable[[Any], None] | None = None,
                 lockstep_paused: Callable[[], None] | None = None):
        self.model = model
        self.optimizer = optimizer
        self.scheduler = scheduler
        self.run_dir = Path(run_dir)
        self.control = control
        self.name = name
        self.rank = int(rank)
        self.world_size = int(world_size)
        self.config = TrainConfig()
        self.edit_log = EditLog(self.run_dir) if self.is_main else None
        self.step = 0
        self.epoch = 0
        self.history: list[dict] = []
        names = {id(p): n for n, p in model.named_parameters()}
        self.group_names = [[names.get(id(p), "?") for p in g["params"]] for g in optimizer.param_groups] \
            if optimizer is not None else []
        self.lr_used = self.lr
        self.apply_one = apply_one or self._apply_here
        self.lockstep_paused = lockstep_paused or _nothing

    @property
    def lr(self) -> float:
        """The first param group's LR (NaN without an optimizer)."""
        if self.optimizer is None or not self.optimizer.param_groups:
            return math.nan
        return float(self.optimizer.param_groups[0]["lr"])

    @property
    def is_main(self) -> bool:
        """Rank 0 (or not data-parallel): the process that writes the run folder."""
        return self.rank == 0

    def prepare(self) -> None:
        """The script prepared everything itself."""

    def apply_bn_policy(self) -> None:
        """BatchNorm follows the script's own ``train()`` / ``eval()``."""

    def checkpoint_payload(self, loss: float | None = None) -> dict:
        """The checkpoint dict (``model_state_dict``, ``optimizer_state_dict``, ``epoch``, ``step``, ``history``...)."""
        loss = None if loss is None or not math.isfinite(loss) else float(loss)
        return checkpoint_payload(self.model, arch=None, optimizer=self.optimizer, scheduler=self.scheduler,
                                  epoch=self.epoch, step=self.step, loss=loss,
                                  extra={"history": [dict(h) for h in self.history], "attached_script": self.name})

    def wait_for_saves(self) -> None:
        """Nothing is written in the background."""

    def wrap_ddp(self) -> None:
        """The script owns its ``DistributedDataParallel`` wrapper: freezing needs it built with
        ``find_unused_parameters=True`` (said in the README)."""

    def lockstep_resumed(self) -> None:
        """No throughput is measured here."""

    def heartbeat(self) -> None:
        """No callback of the script listens for one."""

    def _apply_here(self, cmd: Any) -> None:
        apply_command(self, cmd)
