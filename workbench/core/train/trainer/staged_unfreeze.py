"""Staged unfreezing: ``config.unfreeze`` entries (``{"epoch", "module", "lr_factor"}``) applied at their epoch.

:func:`check_schedule` names a module the model lacks before the first step;
:func:`apply_scheduled_unfreeze` unfreezes, at an epoch's first batch, the
modules of the epoch about to start (``epoch`` is 1-based). Qt-free.
"""

from __future__ import annotations

from torch import nn

from workbench.core.errors import TrainingError
from workbench.core.train.config import TrainConfig
from workbench.core.train.trainer.commands import SetTrainable
from workbench.core.train.trainer.types import TrainerLike

__all__ = ["check_schedule", "apply_scheduled_unfreeze"]


def check_schedule(config: TrainConfig, model: nn.Module) -> None:
    """Every module of the schedule exists in ``model``.

    Raises
    ------
    TrainingError
        An entry names no module of the model (the message names it and its epoch).
    """
    for entry in config.unfreeze:
        try:
            model.get_submodule(str(entry["module"]))
        except AttributeError:
            raise TrainingError(f"unfreeze schedule: no module named {entry['module']!r} in "
                                f"{type(model).__name__} (epoch {entry['epoch']}); fix the name "
                                "(as in the Model tree) or remove the entry") from None


def apply_scheduled_unfreeze(trainer: TrainerLike) -> None:
    """The entries of the epoch about to start: unfrozen before its first step.

    Called only at an epoch's first batch, so a run resumed in the middle of an
    epoch keeps the checkpoint's frozen set and the entries of later epochs.
    Applied at once, not queued: every rank of a data-parallel run reaches this
    point at the same step, and rebuilds its ``DistributedDataParallel`` wrapper.
    """
    changed = False
    for entry in trainer.config.unfreeze:
        if int(entry["epoch"]) == trainer.epoch + 1:
            cmd = SetTrainable([str(entry["module"])], True, scheduled=True,
                               lr_factor=float(entry.get("lr_factor", 1.0)))
            trainer.apply_one(cmd)
            changed = changed or bool(cmd.changed)
    if changed:
        trainer.wrap_ddp()
