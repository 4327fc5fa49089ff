"""Validation of a run: mean loss and the task's metrics over the validation loader, and whether an epoch is the
best so far (``best.pt`` follows it). Qt-free."""

from __future__ import annotations

import math

import torch

from workbench.core.errors import TrainingError
from workbench.core.train.config import TrainConfig
from workbench.core.train.data.batch import move
from workbench.core.train.data.loaders import epoch_batches, say_overlong
from workbench.core.train.task.metrics import Mean, column
from workbench.core.train.trainer.types import TrainerLike

__all__ = ["validate", "monitor_key", "is_best"]


def validate(trainer: TrainerLike) -> dict[str, float]:
    """Validation loss and metrics under ``model.eval()`` + ``torch.no_grad()``.

    Parameters
    ----------
    trainer : TrainerLike
        Its model, ``val_loader``, ``task`` (:class:`~workbench.core.train.task.tasks.Task`) and device.

    Returns
    -------
    dict
        ``val_loss`` (mean loss per sample), then each metric of the task under
        its ``metrics.csv`` column (:func:`~workbench.core.train.task.metrics.column`:
        ``val_acc``, ``val_top5``, ``val_r2``...) and each value a user's
        validation step returns (``val_<name>``). NaN where a metric does not
        apply or the validation set is empty. The model is back in ``train()``
        mode afterwards (frozen BatchNorm policy applied).
    """
    task = trainer.task
    if trainer.val_loader is None or task is None:
        return {"val_loss": math.nan}
    was_training = trainer.model.training
    trainer.model.eval()
    total, loss_sum = 0, None
    metrics = task.new_metrics()
    logged: dict[str, Mean] = {}
    before = getattr(task, "before_validation", None)  # a classifier's class report starts empty
    if before is not None:
        before(trainer)
    try:
        with torch.no_grad():
            loader = trainer.val_loader
            batches = loader.iter_epoch(0) if hasattr(loader, "iter_epoch") else iter(loader)
            batches = epoch_batches(batches, len(loader), say_overlong(trainer, loader, "validation"))
            for batch in batches:
                batch = move(batch, trainer.device)
                with trainer.autocast():
                    out = task.eval_step(trainer.model, batch)
                loss = out.loss.detach().float() * out.n
                loss_sum = loss if loss_sum is None else loss_sum + loss
                for m in metrics:
                    m.update(out.output, out.target, out.n)
                for name, value in out.logged.items():
                    logged.setdefault(name, Mean(name)).add_value(value, out.n)
                total += out.n
            after = getattr(task, "after_validation", None)  # a causal LM's samples (task.samples)
            if after is not None:
                after(trainer)
    finally:
        if was_training:
            trainer.model.train()
            trainer.apply_bn_policy()
    if total == 0:
        return {"val_loss": math.nan, **{column(m.name): math.nan for m in metrics}}
    result = {"val_loss": float(loss_sum.item()) / total}
    result.update({column(m.name): m.compute() for m in metrics})
    result.update({f"val_{name}": m.compute() for name, m in logged.items()})
    return result


def monitor_key(config: TrainConfig) -> str:
    """The ``metrics.csv`` column ``best.pt`` follows: ``config.task.monitor`` (``val_accuracy`` is ``val_acc``)."""
    key = config.task.monitor or "val_loss"
    return "val_acc" if key in ("val_accuracy", "accuracy") else key


def is_best(trainer: TrainerLike, metrics: dict) -> bool:
    """Whether this epoch's monitored metric beats ``trainer.best_score`` (then it becomes the best).

    Raises
    ------
    TrainingError
        The monitor is not a metric this run reports (a typo, a metric of another
        task); the message names the metrics it has. Raised at the first epoch's end.
    """
    cfg = trainer.config
    key = monitor_key(cfg)
    if key not in metrics:
        have = [k for k, v in metrics.items() if isinstance(v, float) and k not in ("time", "epoch_time", "lr",
                                                                                     "samples_per_s", "input_wait")]
        raise TrainingError(f"[task] monitor = {cfg.task.monitor!r} is not a metric of this run; "
                            f"choose one of {', '.join(have)}")
    value = metrics[key]
    if not (isinstance(value, float) and math.isfinite(value)):
        return False
    better = math.isnan(trainer.best_score) or (value > trainer.best_score if cfg.task.mode == "max"
                                                else value < trainer.best_score)
    if better:
        trainer.best_score = value
    return better
