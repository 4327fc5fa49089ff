"""The end of an epoch in a :class:`~workbench.core.training.Trainer`: validation, metrics, checkpoints.

:class:`EpochEndMixin` validates, steps a per-epoch scheduler, records the
epoch metrics (:data:`~workbench.core.callbacks.EPOCH_KEYS`) and saves
``last.pt`` / ``best.pt``; it also keeps fully frozen BatchNorm layers in
``eval()`` mode. Qt-free.
"""

from __future__ import annotations

import math
import time

import torch
from torch import nn

from workbench.core import optim as _optim

__all__ = ["EpochEndMixin"]


class EpochEndMixin:
    """Epoch end, validation and the frozen-BatchNorm policy of :class:`~workbench.core.training.Trainer`."""

    def _end_epoch(self) -> None:
        self._emit()
        if self._epoch_loss:
            vals = self._epoch_loss
            if isinstance(vals[0], torch.Tensor):
                train_loss = float(torch.stack([v.float() for v in vals]).mean().item())
            else:
                train_loss = float(sum(vals) / len(vals))
        else:
            train_loss = math.nan
        epoch_time = time.perf_counter() - self._epoch_t0
        val_loss, val_acc = self.validate()
        finished = self.epoch
        self.epoch += 1
        self.batch_in_epoch = 0
        if self.scheduler is not None and _optim.is_per_epoch(self.scheduler) and math.isfinite(val_loss):
            self.scheduler.step(val_loss)
        best = math.isfinite(val_loss) and val_loss < self.best_val_loss
        if best:
            self.best_val_loss = val_loss
        metrics = {"epoch": finished, "step": self.step, "train_loss": train_loss, "val_loss": val_loss,
                   "val_acc": val_acc, "lr": self.lr, "time": time.perf_counter() - self._t0,
                   "samples_per_s": self._epoch_samples / epoch_time if epoch_time > 0 else math.nan,
                   "best": bool(best), "epoch_time": epoch_time}
        self.history.append(metrics)
        if self._csv is not None:
            self._csv.append({**metrics, "time_s": metrics["time"], "best": int(best)})
        if self.config.checkpoint_every_epoch:
            payload = self.checkpoint_payload(loss=val_loss if math.isfinite(val_loss) else train_loss)
            paths = [self.run_dir / "last.pt"] + ([self.run_dir / "best.pt"] if best else [])
            self._save_in_background(payload, paths)
        if self._tb is not None:
            for k in ("train_loss", "val_loss", "val_acc", "lr"):
                if math.isfinite(metrics[k]):
                    self._tb.add_scalar(f"epoch/{k}", metrics[k], finished)
        self._call("on_epoch_end", self, metrics)

    def validate(self) -> tuple[float, float]:
        """Validation loss and accuracy under ``model.eval()`` + ``torch.no_grad()``.

        Returns
        -------
        (float, float)
            Mean loss per sample and accuracy in [0, 1] (NaN when the targets
            are not class indices or the validation set is empty). The model is
            back in ``train()`` mode afterwards (frozen BatchNorm policy applied).
        """
        if self.val_loader is None:
            return math.nan, math.nan
        was_training = self.model.training
        self.model.eval()
        total, loss_sum, correct, classification = 0, None, None, True
        try:
            with torch.no_grad():
                loader = self.val_loader
                batches = loader.iter_epoch(0) if hasattr(loader, "iter_epoch") else iter(loader)
                for xb, yb in batches:
                    xb, yb = xb.to(self.device), yb.to(self.device)
                    with self._autocast():
                        out = self.model(xb)
                    out = out.float()
                    loss = self.loss_fn(out, yb).detach() * xb.shape[0]
                    loss_sum = loss if loss_sum is None else loss_sum + loss
                    if classification and out.dim() == 2 and not yb.is_floating_point() and yb.dim() == 1:
                        c = (out.argmax(1) == yb).sum()
                        correct = c if correct is None else correct + c
                    else:
                        classification = False
                    total += int(xb.shape[0])
        finally:
            if was_training:
                self.model.train()
                self._apply_bn_policy()
        if total == 0:
            return math.nan, math.nan
        val_loss = float(loss_sum.item()) / total
        acc = float(correct.item()) / total if classification and correct is not None else math.nan
        return val_loss, acc

    def _apply_bn_policy(self) -> None:
        if not self.config.keep_frozen_bn_eval:
            return
        try:
            from workbench.core.freezing import apply_batchnorm_policy
        except ImportError:
            apply_batchnorm_policy = _apply_batchnorm_policy
        apply_batchnorm_policy(self.model)


def _apply_batchnorm_policy(model: nn.Module) -> list[str]:
    """Fallback until core.freezing lands: fully frozen BatchNorm layers go to eval()."""
    changed = []
    for name, m in model.named_modules():
        if isinstance(m, nn.modules.batchnorm._BatchNorm):
            ps = list(m.parameters(recurse=False))
            if ps and not any(p.requires_grad for p in ps) and m.training:
                m.eval()
                changed.append(name)
    return changed
