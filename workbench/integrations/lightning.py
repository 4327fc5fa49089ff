"""A Lightning ``Trainer.fit`` opened to Workbench's window: :class:`WorkbenchCallback`.

``Trainer(callbacks=[WorkbenchCallback()])``: the fit attaches
(:func:`workbench.attach`) over the LightningModule (freezing goes through its
parameters) and ``trainer.optimizers[0]`` (LR changes go through its param
groups; the first LR scheduler's reference LRs follow). The end of each
optimizer step is the step boundary where the window's commands apply and a
pause blocks; a Stop sets ``trainer.should_stop``, so Lightning ends the fit
the way early stopping does.

A distributed fit (``strategy="ddp"``): every rank's callback attaches; rank 0
listens and every rank applies its commands at the same step (``Attached``'s
agreement over ``torch.distributed``). Freezing mid-run needs
``strategy="ddp_find_unused_parameters_true"``; with plain ``"ddp"`` a freeze is
refused with a message saying so (:class:`~workbench.core.attach.ddp_guard.DDPGuard`),
as is an unfreeze of a parameter frozen when the fit started.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import lightning.pytorch as pl
import torch

from workbench.core.attach.script import Attached
from workbench.integrations._common import AttachOptions, EPOCH_RESERVED, STEP_RESERVED, scalars

__all__ = ["WorkbenchCallback"]

#: A training loss logged under these names is the step's loss again: not sent twice.
LOSS_NAMES = frozenset({"loss", "train_loss", "train/loss"})


class WorkbenchCallback(pl.Callback):
    """Let Workbench's window see and steer a Lightning fit.

    Per optimizer step the window gets the training loss (from what
    ``training_step`` returned) and every scalar the module ``self.log``-ged
    during the training batch (``trainer.callback_metrics``); after each
    validation (sanity checks excluded) an epoch row with the validation's
    metrics, or, in an epoch without validation, the epoch's aggregates.

    Parameters
    ----------
    run_dir, name, host, port
        Where the run attaches: :class:`~workbench.integrations._common.AttachOptions`.

    Attributes
    ----------
    options : AttachOptions
        The parameters above.
    attached : Attached or None
        The attached run while the fit trains.
    """

    def __init__(self, *, run_dir=None, name: str | None = None, host: str = "127.0.0.1", port: int = 0):
        super().__init__()
        self.options = AttachOptions(run_dir, name, host, port)
        self.attached: Attached | None = None
        self._seen: set[str] = set()        # every key of callback_metrics met so far
        self._step_keys: set[str] = set()   # the keys first met at a training batch's end: per-step values
        self._val_keys: set[str] = set()    # the keys a validation logged
        self._before_val: dict[str, Any] = {}
        self._validated = False
        self._last_step = 0
        self._losses: list = []

    # ------------------------------------------------------------------ fit
    def on_train_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        """Attach over the module, the first optimizer and its LR scheduler."""
        if self.attached is not None:
            return
        optimizer = trainer.optimizers[0] if trainer.optimizers else None
        configs = trainer.lr_scheduler_configs
        scheduler = configs[0].scheduler if configs else None
        self.attached = self.options.attach(pl_module, optimizer, scheduler)
        wrapper = getattr(trainer.strategy, "model", None)
        if isinstance(wrapper, torch.nn.parallel.DistributedDataParallel):  # strategy="ddp": what it can follow
            self.attached.use_ddp(wrapper)
        self._seen = set(trainer.callback_metrics)
        self._step_keys = set()
        self._val_keys = set()
        self._validated = False
        self._last_step = trainer.global_step
        self._losses = []

    def on_train_batch_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule, outputs, batch: Any,
                           batch_idx: int) -> None:
        """The step boundary (once per optimizer step): the loss and the logged values; commands apply here."""
        wb = self.attached
        if wb is None:
            return
        loss = _loss_of(outputs)
        if loss is not None:
            self._losses.append(loss)
        if trainer.global_step == self._last_step:
            return  # accumulating gradients: the optimizer has not stepped yet
        self._last_step = trainer.global_step
        losses, self._losses = self._losses, []
        if not losses:
            loss = None
        elif len(losses) == 1:
            loss = losses[0]
        else:  # automatic optimization divides each micro-batch's loss by their count: the sum is the mean
            total = sum(losses)
            loss = total if pl_module.automatic_optimization else total / len(losses)
        metrics = trainer.callback_metrics
        new = set(metrics) - self._seen
        self._seen |= new
        self._step_keys |= new
        values = scalars(metrics, [k for k in metrics if k in self._step_keys and not k.endswith("_epoch")],
                         skip=STEP_RESERVED | LOSS_NAMES | {n + "_step" for n in LOSS_NAMES})
        for k in [k for k in values if k.endswith("_step") and k[:-5] in values]:
            del values[k]  # `on_step=True, on_epoch=True` logs the step's value under both names
        wb.step(loss, batch=batch, **values)
        if wb.should_stop:
            trainer.should_stop = True

    def on_validation_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        """Remember the metrics before a validation (what it changes is what it logged)."""
        if self.attached is not None and not trainer.sanity_checking:
            self._before_val = dict(trainer.callback_metrics)

    def on_validation_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        """An epoch row with the validation's metrics (the epoch-level values are final only here)."""
        wb = self.attached
        if wb is None or trainer.sanity_checking:
            return
        metrics = trainer.callback_metrics
        before, self._before_val = self._before_val, {}
        self._val_keys |= {k for k in metrics if k not in before or not _same(before[k], metrics[k])}
        self._seen |= set(metrics)
        self._validated = True
        self._epoch_end(trainer, scalars(metrics, [k for k in metrics if k in self._val_keys], skip=EPOCH_RESERVED))

    def on_train_epoch_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        """An epoch without a validation: an epoch row with the epoch's aggregated training values."""
        wb = self.attached
        if wb is None:
            return
        metrics = trainer.callback_metrics
        self._seen |= set(metrics)  # the keys new here are the epoch's aggregates: never per-step values
        validated, self._validated = self._validated, False
        if validated:
            return
        keys = [k for k in metrics if k.endswith("_epoch") or (k not in self._step_keys and k not in self._val_keys)]
        self._epoch_end(trainer, scalars(metrics, keys, skip=EPOCH_RESERVED))

    def on_train_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        """The fit ended: close the attached run (``stopped`` after the window's Stop, else ``completed``)."""
        self._close(None)

    def on_exception(self, trainer: pl.Trainer, pl_module: pl.LightningModule, exception: BaseException) -> None:
        """The fit failed: the window gets the error (an interrupt ends the run as ``stopped``)."""
        wb, self.attached = self.attached, None
        if wb is not None:
            wb.__exit__(type(exception), exception, exception.__traceback__)

    # ------------------------------------------------------------------ helpers
    def _epoch_end(self, trainer: pl.Trainer, values: dict) -> None:
        if "val_loss" not in values and "val/loss" in values:
            values["val_loss"] = values["val/loss"]
        self.attached.epoch_end(**values)
        if self.attached.should_stop:
            trainer.should_stop = True

    def _close(self, reason: str | None) -> None:
        wb, self.attached = self.attached, None
        if wb is not None:
            wb.close(reason)


def _loss_of(outputs) -> torch.Tensor | float | None:
    """The loss in what ``training_step`` returned (a tensor, or a mapping with ``"loss"``)."""
    if isinstance(outputs, Mapping):
        outputs = outputs.get("loss")
    if isinstance(outputs, torch.Tensor) and outputs.numel() == 1:
        return outputs.detach()
    if isinstance(outputs, (int, float)) and not isinstance(outputs, bool):
        return float(outputs)
    return None


def _same(a, b) -> bool:
    """Whether two logged values are equal (tensors by value: Lightning hands out fresh detached copies)."""
    if isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor):
        return a.shape == b.shape and a.device == b.device and bool(torch.equal(a, b))
    return a == b
