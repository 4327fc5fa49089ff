"""One training batch and, closing an optimizer step, the step: :class:`StepRunner` (``trainer.stepper``).

A part of the :class:`~workbench.core.train.trainer.loop.Trainer` (as ``trainer.checkpoints``
and ``trainer.faults`` are). It owns what the step needs of the speed settings
(:mod:`~workbench.core.train.trainer.speed`):

- ``accumulate_grad_batches = N``: the batches whose gradients wait for the next
  optimizer step and their losses; each batch's loss is divided by ``N`` before
  backward; a data-parallel wrapper all-reduces once, with the batch that closes the
  step (``no_sync`` before it).
- ``compile``: the :class:`~workbench.core.train.trainer.speed.CompiledStep` the step
  calls, and its graph-break / recompilation report.

The trainer keeps the counters and the step's row (:meth:`Trainer._train_step`); the
stepper tells it what the batch did. Qt-free.
"""

from __future__ import annotations

import contextlib
import math

import torch
from torch import nn

from workbench.core.train.data.batch import move
from workbench.core.train.trainer import optim, speed
from workbench.core.train.trainer.faults import grads_finite
from workbench.core.train.trainer.types import TrainerLike

__all__ = ["StepRunner"]


class StepRunner:
    """Forward, backward and the optimizer step of one trainer's batches (accumulation, compile).

    Parameters
    ----------
    trainer : TrainerLike

    Attributes
    ----------
    pending : int
        Batches whose gradients wait for the next optimizer step (0 at a step boundary).
    compiled : CompiledStep or None
        ``config.compile``: the compiled step module (set by :meth:`prepare`).
    """

    def __init__(self, trainer: TrainerLike):
        self.trainer = trainer
        self.pending = 0
        self._losses: list = []  # the pending batches' losses (floats, or device tensors on CUDA)
        self.compiled: speed.CompiledStep | None = None
        self._report_due = False

    # ------------------------------------------------------------ set-up
    def before_wrap(self) -> None:
        """``prepare()``, before the strategy wraps the model: activation checkpointing (the blocks'
        forward is what a wrapper calls)."""
        tr = self.trainer
        if tr.config.activation_checkpointing:
            tr.say(speed.enable_activation_checkpointing(tr.model))

    def after_wrap(self) -> None:
        """``prepare()``, after the wrap: the compiled step (``config.compile``)."""
        if self.trainer.config.compile:
            self.compiled = speed.CompiledStep(self.trainer.model)

    def start_fit(self) -> None:
        """``fit()`` starts: the first optimizer step reports what was compiled."""
        self._report_due = self.compiled is not None

    def start_epoch(self) -> None:
        """An epoch (or a rollback's restart) begins at a step boundary: nothing pending."""
        self.pending, self._losses = 0, []

    # ------------------------------------------------------------ compile
    def net(self) -> nn.Module:
        """What the step calls: ``trainer.net``, or its ``torch.compile`` (eager while probes hook)."""
        tr = self.trainer
        if self.compiled is None:
            return tr.net
        net, note = self.compiled.module(tr.net)
        if note:
            tr.say(note)
        return net

    def report(self, first_only: bool = False) -> None:
        """Say new graph breaks and recompilations (``first_only``: only the first step's report)."""
        if self.compiled is None or (first_only and not self._report_due):
            return
        self._report_due = False
        text = self.compiled.report()
        if text:
            self.trainer.say(text)

    # ------------------------------------------------------------ the step
    def run(self, batch, n_batches: int) -> tuple[int, object] | None:
        """One batch: forward and backward; every ``accumulate_grad_batches``-th batch (and the
        epoch's last) also the optimizer step and the scheduler step.

        Returns
        -------
        (n, step_loss) or None
            ``n``: the batch's samples (data-parallel: of every rank); ``step_loss``: None
            while the step accumulates, else the mean loss of its batches (a float, or a
            device tensor on CUDA). None: a non-finite loss or gradient was handed to
            ``trainer.faults`` and the batch does not count.
        """
        tr = self.trainer
        dev = tr.device
        batch = move(batch, dev, dev.type == "cuda", torch.channels_last if tr.channels_last else None)
        opt = tr.optimizer
        accumulate = max(1, int(tr.config.accumulate_grad_batches))
        if self.pending == 0:
            opt.zero_grad(set_to_none=True)
        closes = speed.closes_step(tr.batch_in_epoch + 1, n_batches, accumulate)
        tr.last_batch = batch  # a reference (one batch of memory) for the NaN trace (faults.trace)
        net = self.net()
        # data-parallel: the gradients are all-reduced once, with the batch that closes the step
        no_sync = net.no_sync() if not closes and hasattr(net, "no_sync") else contextlib.nullcontext()
        if hasattr(net, "set_requires_gradient_sync"):  # FSDP2: unsharded gradients add up until the last batch
            net.set_requires_gradient_sync(closes)
        on_cuda = tr._defer_loss
        with no_sync:
            with tr.autocast():
                result = tr.task.train_step(net, batch)
            loss = result.loss
            out = result.output
            n = result.n
            tr._epoch_loss.log(result.logged, n)
            # data-parallel: every rank logs (and judges NaN on) the same global loss
            logged, n = tr.strategy.reduce(loss, n, deferred=on_cuda)
            if not on_cuda:
                value = logged.item()
                if not math.isfinite(value):
                    del out, loss
                    self.start_epoch()  # the step's accumulated gradients are dropped
                    tr.faults.nonfinite(tr.step + 1, value)
                    return None
            if loss.requires_grad:
                scaled = loss / accumulate if accumulate > 1 else loss  # Lightning: the loss divided by N
                if tr.scaler is not None:
                    tr.scaler.scale(scaled).backward()
                else:
                    scaled.backward()
                del scaled
        del out, result
        self.pending += 1
        self._losses.append(logged.detach() if on_cuda else value)
        if not closes:
            return n, None
        losses, self._losses, self.pending = self._losses, [], 0
        if on_cuda:
            step_loss = losses[0] if len(losses) == 1 else torch.stack(losses).mean()
        else:
            step_loss = value = losses[0] if len(losses) == 1 else sum(losses) / len(losses)
        trains = loss.requires_grad
        del loss, batch
        if trains and not self._optimizer_step(opt, None if on_cuda else value):
            return None
        return n, step_loss

    def _optimizer_step(self, opt, value: float | None) -> bool:
        """Unscale, ``on_after_backward``, clip, step the optimizer and the per-step scheduler;
        False when a non-finite gradient was handed to ``trainer.faults`` (no step)."""
        tr = self.trainer
        if tr.scaler is not None and (tr.config.grad_clip or tr._after_backward):
            tr.scaler.unscale_(opt)
        for cb in tr._after_backward:
            cb.on_after_backward(tr)
        # A non-finite gradient never reaches the weights: the step is skipped and the
        # trace can re-run it exactly. (Not on CUDA: the check would sync every step;
        # with a GradScaler, overflowing fp16 gradients are its business: it skips the step.)
        check = value is not None and tr.scaler is None
        grads = [p for g in opt.param_groups for p in g["params"] if p.grad is not None] \
            if tr.config.grad_clip else []
        if check and not grads and not grads_finite(opt):
            tr.faults.nonfinite(tr.step + 1, value, what="gradient")
            return False
        if grads:
            norm = torch.nn.utils.clip_grad_norm_(grads, float(tr.config.grad_clip))
            # the total norm is finite exactly when every gradient is: one pass over the gradients, not two
            if check and not bool(torch.isfinite(norm)):
                tr.faults.nonfinite(tr.step + 1, value, what="gradient")
                return False
        if tr.scaler is not None:
            tr.scaler.step(opt)
            tr.scaler.update()
        else:
            opt.step()
        if tr.scheduler is not None and not optim.is_per_epoch(tr.scheduler):
            tr.scheduler.step()
        return True
