"""The one way a run is started: :func:`make_trainer` (window thread, training process, ``workbench train``).

A run on a thread of the window's process
(:class:`~workbench.core.train.launch.in_thread.ThreadRun`), the training process
(:mod:`workbench.core.train.launch.training_process_main`) and the headless ``workbench train RUN.toml``
(:mod:`workbench.core.train.launch.headless`) all build their
:class:`~workbench.core.train.trainer.loop.Trainer` here and then call ``fit()``, so a
run from the window and its headless replay run the same code. Qt-free.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Callable, Iterable

from torch import nn

from workbench.core.train.config import TrainConfig
from workbench.core.train.trainer.control import RunControl
from workbench.core.train.trainer.hooks import Callback
from workbench.core.train.trainer.loop import Trainer

__all__ = ["make_trainer", "save_last"]


def make_trainer(model: nn.Module, config: TrainConfig, callbacks: Iterable[Callback] = (), arch: Any = None, *,
                 control: RunControl | None = None, resume: Any = None,
                 factory: Callable[..., Trainer] | None = None) -> Trainer:
    """Build the trainer of a run, restored from ``resume`` when given; ``fit()`` is the caller's.

    Parameters
    ----------
    model : nn.Module
        Trained in place; its ``requires_grad`` flags are the frozen set.
    config : TrainConfig
    callbacks : iterable of Callback
    arch : ArchSpec, optional
        Recorded in checkpoints and run.toml.
    control : RunControl, optional
        Shared with whoever steers the run.
    resume : str, Path or Checkpoint, optional
        A training checkpoint whose optimizer, scheduler, epoch, step and RNG state the run continues.
    factory : callable, optional
        ``factory(model, config, callbacks, arch, control=control) -> Trainer`` (tests inject faults).

    Raises
    ------
    TrainingError
        ``resume`` is not a training checkpoint or does not fit the model.
    """
    factory = factory or Trainer
    trainer = factory(model, config, list(callbacks), arch, control=control)
    if resume is not None:
        trainer.resume_from(resume)
    return trainer


def save_last(trainer: Trainer) -> Path | None:
    """After a stop: have the final state (weights, optimizer, RNG...) in ``run_dir/last.pt``.

    A stopped ``fit()`` has written it already at the step it stopped
    (:meth:`~workbench.core.train.trainer.checkpoints.CheckpointConnector.save_last`); it is
    not written twice. A run without checkpoints (``checkpoint_every_epoch = false``)
    gets it here, when the window asks (it closes).

    Returns
    -------
    Path or None
        ``run_dir/last.pt``; None when the run made no run folder.
    """
    return trainer.checkpoints.save_last()
