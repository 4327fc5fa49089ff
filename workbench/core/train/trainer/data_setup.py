"""A run's data and task, built before its first step: :func:`build_data`, :func:`settle_task`. Qt-free.

The loaders come from ``config.data`` (fitted to the model's input channels),
the task's kind is settled (``auto``: the data's, else the first batch's) and
the pre-flight scan checks, before any step and before the run folder exists,
that the images are readable, the batches go through the model and the model
has enough outputs (:mod:`workbench.core.train.data.preflight`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

import torch
from torch import nn

from workbench.core.errors import DataError, WorkbenchError
from workbench.core.train.config import TrainConfig
from workbench.core.train.data.preflight import first_batch, preflight
from workbench.core.train.task.build import build_task, resolve_kind
from workbench.core.train.task.tasks import Task

__all__ = ["RunData", "build_data", "settle_task", "take_skipped", "wants_channels_last"]


@dataclass
class RunData:
    """What :func:`build_data` built.

    Attributes
    ----------
    train_loader, val_loader
        Iterables of batches with ``len()``.
    info : DatasetInfo
        Classes, task and shapes of the dataset.
    loader_note : str or None
        How the DataLoader settings were chosen, or None.
    data_note : str or None
        What was changed in the data settings to fit the model, and the pre-flight's note.
    kind : str
        The task's settled kind.
    task : Task
    """

    train_loader: Any
    val_loader: Any
    info: Any
    loader_note: str | None
    data_note: str | None
    kind: str
    task: Task


def settle_task(config: TrainConfig, info: Any, train_loader: Any) -> tuple[str, Task]:
    """The task's kind (``auto``: the data's, else the first batch's) and the task built for it.

    Raises
    ------
    DataError
        A spec cannot be imported or a built-in name is unknown (named with its setting).
    """
    info_task = getattr(info, "task", "") if info is not None else ""
    batch = None
    if config.task.kind == "auto" and not info_task and not config.task.step:
        batch = first_batch(train_loader)
    kind = resolve_kind(config, info_task, batch)
    try:
        return kind, build_task(config, kind)
    except (ValueError, TypeError) as e:
        raise DataError(f"[task]: {e}") from e
    except WorkbenchError as e:
        raise DataError(f"[task]: {e}") from e


def build_data(config: TrainConfig, model: nn.Module, device: torch.device, shard: tuple[int, int],
               progress: Callable[[str], None]) -> RunData:
    """The loaders of ``config.data`` for ``model``, the task, and the pre-flight scan.

    Parameters
    ----------
    shard : (int, int)
        ``(rank, world_size)``: the part of the training set this process reads.
    progress : callable
        ``progress(text)``: a line on the pre-flight scan.

    Raises
    ------
    DataError
        The dataset cannot be built, an image cannot be read, a batch does not go
        through the model, or the model has fewer outputs than the data has classes.
    """
    from workbench.core.train.data.datasets import TensorBatchLoader, build_loaders, fit_channels_to_model

    data_note = fit_channels_to_model(config.data, model)
    train_loader, val_loader, info = build_loaders(config.data, seed=config.seed, device=device, shard=shard,
                                                   task=config.task.kind)
    loader_note = getattr(getattr(train_loader, "settings", None), "note", None)
    for loader in (train_loader, val_loader):
        if isinstance(loader, TensorBatchLoader) and device.type != "cpu":
            loader.to(device)
    kind, task = settle_task(config, info, train_loader)
    note = preflight(model, train_loader, val_loader, device,
                     num_classes=info.num_classes if info is not None else None,
                     classification=kind == "classification", step=task.eval_step,
                     datasets=tuple(getattr(ld, "dataset", None) for ld in (train_loader, val_loader)),
                     progress=progress, skip_unreadable=bool(config.data.skip_unreadable))
    if note:
        data_note = f"{data_note}; {note}" if data_note else note
    take_skipped(train_loader, val_loader)  # the pre-flight batches are not the first epoch's
    return RunData(train_loader, val_loader, info, loader_note, data_note, kind, task)


def take_skipped(*loaders: Any) -> list[str]:
    """Image files the loaders skipped as unreadable (``skip_unreadable``) since the last call, by name."""
    return [name for loader in loaders if hasattr(loader, "take_skipped") for name in loader.take_skipped()]


def wants_channels_last(setting, device: torch.device, model: nn.Module) -> bool:
    """``channels_last`` resolved: ``"auto"`` is on for CUDA when the model has an ``nn.Conv2d``."""
    if setting == "auto":
        return device.type == "cuda" and any(isinstance(m, nn.Conv2d) for m in model.modules())
    return bool(setting)
