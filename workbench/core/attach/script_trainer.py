"""The trainer as Workbench's parts see it, for a loop Workbench does not run: :class:`ScriptTrainer`.

A user's own loop has a model, an optimizer and maybe a scheduler, and calls
:meth:`~workbench.core.attach.script.Attached.step` after each optimizer step.
Everything Workbench applies to a run of its own (commands, the event bridge,
the live probes, the checkpoint payload, the NaN trace) is written against
:class:`~workbench.core.train.trainer.types.TrainerLike`; this object gives
those parts the members they read, so the same code serves an attached script.
"""

from __future__ import annotations

import contextlib
import math
from pathlib import Path

import torch
from torch import nn

from workbench.core.model.saving import checkpoint_payload
from workbench.core.train.config import TrainConfig
from workbench.core.train.trainer.control import RunControl
from workbench.core.train.trainer.edit_log import EditLog
from workbench.core.train.trainer.optim import set_group_lr_at

__all__ = ["ScriptTrainer", "set_group_lr"]


class _Checkpoints:
    """``trainer.checkpoints`` of a script: the payload of the script's model, optimizer and scheduler."""

    def __init__(self, trainer: "ScriptTrainer"):
        self.trainer = trainer

    def payload(self, loss: float | None = None) -> dict:
        """The checkpoint dict (``model_state_dict``, ``optimizer_state_dict``, ``epoch``, ``step``, ``history``...)."""
        tr = self.trainer
        loss = None if loss is None or not math.isfinite(loss) else float(loss)
        return checkpoint_payload(tr.model, arch=None, optimizer=tr.optimizer, scheduler=tr.scheduler,
                                  epoch=tr.epoch, step=tr.step, loss=loss,
                                  extra={"history": [dict(h) for h in tr.history], "attached_script": tr.name})

    def wait_for_saves(self) -> None:
        """Nothing is written in the background."""

    def load_file(self, path) -> None:
        """A script's run cannot be rolled back from the window.

        Raises
        ------
        RuntimeError
            Always.
        """
        raise RuntimeError("an attached script cannot roll back to a checkpoint")


class ScriptTrainer:
    """The :class:`~workbench.core.train.trainer.types.TrainerLike` members of a user's loop.

    Parameters
    ----------
    model : nn.Module
    optimizer : torch.optim.Optimizer or None
    scheduler : LRScheduler or None
    run_dir : Path
    control : RunControl
    name : str
    """

    def __init__(self, model: nn.Module, optimizer, scheduler, run_dir: Path, control: RunControl, name: str, *,
                 rank: int = 0, world_size: int = 1, owner=None):
        self.rank = int(rank)
        self.world_size = int(world_size)
        self.is_main = self.rank == 0
        self.sync = None
        self._owner = owner
        self.model = model
        self.net = model
        self.optimizer = optimizer
        self.scheduler = scheduler
        self.scaler = None
        self.name = name
        self.config = TrainConfig()
        self.config.epochs = 0
        self.arch = None
        try:
            self.device = next(model.parameters()).device
        except StopIteration:
            self.device = torch.device("cpu")
        self.callbacks: list = []
        self.control = control
        self.checkpoints = _Checkpoints(self)
        self.run_dir = Path(run_dir)
        self.edit_log = EditLog(self.run_dir) if self.is_main else None
        self.epoch = self.step = self.batch_in_epoch = self.samples = 0
        self.best_val_loss = math.inf
        self.best_score = math.nan
        self.history: list[dict] = []
        names = {id(p): n for n, p in model.named_parameters()}
        self.group_names = [[names.get(id(p), "?") for p in g["params"]] for g in optimizer.param_groups] \
            if optimizer is not None else []
        self.task = None
        self.train_loader = self.val_loader = None
        self.lr_used = self.lr
        self.resumed = False
        self.error = None
        self.reason_override = None
        self.last_batch = None
        self.nonfinite_trace = None
        self.tensorboard = None
        self.data_note = f"attached script {name}"
        self.stop_agreed = False

    @property
    def lr(self) -> float:
        """The first param group's LR (NaN without an optimizer)."""
        if self.optimizer is None or not self.optimizer.param_groups:
            return math.nan
        return float(self.optimizer.param_groups[0]["lr"])

    def prepare(self) -> None:
        """The script prepared everything itself."""

    def apply_bn_policy(self) -> None:
        """BatchNorm follows the script's own ``train()`` / ``eval()``."""

    def autocast(self):
        """The script's own autocast is in its loop: a no-op here."""
        return contextlib.nullcontext()

    # what RankSync asks of a data-parallel script's trainer
    def apply_one(self, cmd) -> None:
        """Apply one command (the owner's :meth:`~workbench.core.attach.script.Attached.apply_one`)."""
        self._owner.apply_one(cmd)

    def emit(self, now: float | None = None) -> None:
        """Send the step rows so far (before a pause)."""
        self._owner.flush()

    def call(self, hook: str, *args) -> None:
        """``on_pause`` of a lockstep pause: the owner says so to the windows; other hooks have no listener."""
        if hook == "on_pause":
            self._owner.on_pause()

    def wrap_ddp(self) -> None:
        """The script owns its ``DistributedDataParallel`` wrapper: freezing needs it built with
        ``find_unused_parameters=True`` (said in the README)."""

    def restart_throughput_window(self) -> None:
        """No throughput is measured here."""


def set_group_lr(optimizer, scheduler, lr: float, group: int | None = None) -> list[int]:
    """Set the LR of one param group, or (``group`` None) of every group in proportion to the first's.

    The scheduler's reference LRs of each changed group (``base_lrs``,
    ``initial_lr``, ``max_lr``, ``min_lr``) scale by the same ratio, so the
    schedule continues from the new LR.

    Returns
    -------
    list of int
        The indices of the groups changed.

    Raises
    ------
    ValueError
        ``lr`` is not a positive finite number, or ``group`` is not a group's index.
    """
    lr = float(lr)
    if not (math.isfinite(lr) and lr > 0):
        raise ValueError(f"a learning rate must be a positive number, not {lr!r}")
    groups = optimizer.param_groups
    if group is not None and not (0 <= int(group) < len(groups)):
        raise ValueError(f"param group {group} does not exist (the optimizer has {len(groups)})")
    first = float(groups[0]["lr"])
    targets = [int(group)] if group is not None else list(range(len(groups)))
    for i in targets:
        old = float(groups[i]["lr"])
        new = lr if group is not None or not first else old * lr / first
        set_group_lr_at(optimizer, scheduler, i, new)
    return targets
