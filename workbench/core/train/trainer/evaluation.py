"""Validation of a run: mean loss and accuracy over the validation loader. Qt-free."""

from __future__ import annotations

import math

import torch

from workbench.core.train.trainer.types import TrainerLike

__all__ = ["validate"]


def validate(trainer: TrainerLike) -> tuple[float, float]:
    """Validation loss and accuracy under ``model.eval()`` + ``torch.no_grad()``.

    Parameters
    ----------
    trainer : TrainerLike
        Its model, ``val_loader`` (``(x, y)`` batches), ``loss_fn`` and device.

    Returns
    -------
    (float, float)
        Mean loss per sample and accuracy in [0, 1] (NaN when the targets
        are not class indices or the validation set is empty). The model is
        back in ``train()`` mode afterwards (frozen BatchNorm policy applied).
    """
    if trainer.val_loader is None:
        return math.nan, math.nan
    was_training = trainer.model.training
    trainer.model.eval()
    total, loss_sum, correct, classification = 0, None, None, True
    try:
        with torch.no_grad():
            loader = trainer.val_loader
            batches = loader.iter_epoch(0) if hasattr(loader, "iter_epoch") else iter(loader)
            for xb, yb in batches:
                xb, yb = xb.to(trainer.device), yb.to(trainer.device)
                with trainer.autocast():
                    out = trainer.model(xb)
                out = out.float()
                loss = trainer.loss_fn(out, yb).detach() * xb.shape[0]
                loss_sum = loss if loss_sum is None else loss_sum + loss
                if classification and out.dim() == 2 and not yb.is_floating_point() and yb.dim() == 1:
                    c = (out.argmax(1) == yb).sum()
                    correct = c if correct is None else correct + c
                else:
                    classification = False
                total += int(xb.shape[0])
    finally:
        if was_training:
            trainer.model.train()
            trainer.apply_bn_policy()
    if total == 0:
        return math.nan, math.nan
    val_loss = float(loss_sum.item()) / total
    acc = float(correct.item()) / total if classification and correct is not None else math.nan
    return val_loss, acc
