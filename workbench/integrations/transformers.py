"""A Hugging Face ``Trainer.train`` opened to Workbench's window: :class:`WorkbenchCallback`.

``Trainer(..., callbacks=[WorkbenchCallback()])``: the training attaches
(:func:`workbench.attach`) over the model (freezing goes through its
parameters) and the torch optimizer inside accelerate's wrapper (LR changes go
through its param groups; the LR scheduler's reference LRs follow). Each
optimizer step is a step boundary where the window's commands apply and a
pause blocks; a Stop sets ``control.should_training_stop``.

The Trainer knows a step's loss only at a logging step (``logging_steps``),
after ``on_step_end``: at such a step the boundary waits for the ``on_log``
that follows, so the row carries the loss the Trainer logged (the mean since
the last logging step); other steps' rows have no loss, so ``logging_steps=1``
gives a curve of every step (each log reads the loss off the device once).

Under ``torch.distributed`` every process attaches: rank 0 listens, and every
rank applies its commands at the same step (not tested here with several ranks). The
Trainer has no hook for an exception: a training that raises ends the attached
run as an error when the exception leaves the script (``Attached`` chains
``sys.excepthook``).
"""

from __future__ import annotations

import transformers

from workbench.core.attach.script import Attached
from workbench.integrations._common import AttachOptions, EPOCH_RESERVED, STEP_RESERVED, scalars

__all__ = ["WorkbenchCallback"]

#: Logged numbers that are the Trainer's bookkeeping, not a metric to plot.
NOT_PLOTTED = ("learning_rate", "total_flos", "num_input_tokens_seen")
#: Suffixes of the Trainer's timing values (``eval_runtime``, ``train_samples_per_second``...).
TIMING = ("_runtime", "_samples_per_second", "_steps_per_second", "_tokens_per_second",
          "_model_preparation_time")


class WorkbenchCallback(transformers.TrainerCallback):
    """Let Workbench's window see and steer a Hugging Face Trainer's training.

    Per optimizer step the window gets the logged training loss (at logging
    steps), ``grad_norm`` and any other number the Trainer logs; after each
    evaluation an epoch row with the evaluation's metrics (``eval_loss`` also as
    ``val_loss``), or, in an epoch without evaluation, a plain epoch row.

    Parameters
    ----------
    run_dir, name, host, port
        Keyword-only, as :class:`~workbench.integrations._common.AttachOptions` takes them.

    Attributes
    ----------
    options : AttachOptions
        Those four, kept together.
    attached : Attached or None
        The attached run while the Trainer trains.
    """

    def __init__(self, *, run_dir=None, name: str | None = None, host: str = "127.0.0.1", port: int = 0):
        self.options = AttachOptions(run_dir, name, host, port)
        self.attached: Attached | None = None
        self._waiting_for_log = False   # a logging step ended: its boundary waits for on_log's loss
        self._extra: dict = {}          # numbers logged between two steps (a subclass's own self.log)
        self._evaluated = False

    def on_train_begin(self, args, state, control, model=None, optimizer=None, lr_scheduler=None, **kwargs):
        """Attach over the model, the torch optimizer and the LR scheduler (unwrapped from accelerate's)."""
        if self.attached is not None or model is None:
            return  # every rank attaches: under torch.distributed rank 0 listens and the ranks agree per step
        optimizer = getattr(optimizer, "optimizer", optimizer)  # accelerate's AcceleratedOptimizer
        lr_scheduler = getattr(lr_scheduler, "scheduler", lr_scheduler)  # accelerate's AcceleratedScheduler
        self.attached = self.options.attach(model, optimizer, lr_scheduler)
        self._waiting_for_log = False
        self._extra = {}
        self._evaluated = False

    def on_step_end(self, args, state, control, **kwargs):
        """The step boundary, or (at a logging step) the wait for the loss ``on_log`` brings."""
        if self.attached is None:
            return
        if self._waiting_for_log:  # the last logging step's log never came
            self._step(control, None, {})
        if control.should_log:
            self._waiting_for_log = True
        else:
            self._step(control, None, {})

    def on_log(self, args, state, control, logs=None, **kwargs):
        """A training log ends the step waiting for it; other numbers ride along with the next step."""
        if self.attached is None or not logs:
            return
        if any(k.startswith("eval_") for k in logs) or "train_runtime" in logs:
            return  # an evaluation's metrics come in on_evaluate; the run's summary is no step's
        values = {k: v for k, v in scalars(logs, skip=STEP_RESERVED | set(NOT_PLOTTED)).items()
                  if not k.endswith(TIMING)}
        if self._waiting_for_log and "loss" in logs:
            self._step(control, logs["loss"], values)
        else:
            self._extra.update(values)

    def on_evaluate(self, args, state, control, metrics=None, **kwargs):
        """An epoch row with the evaluation's metrics (``eval_loss`` also as ``val_loss``)."""
        if self.attached is None:
            return
        values = {k: v for k, v in scalars(metrics or {}, skip=EPOCH_RESERVED).items() if not k.endswith(TIMING)}
        if "eval_loss" in values:
            values.setdefault("val_loss", values["eval_loss"])
        self._evaluated = True
        self._epoch_end(control, values)

    def on_epoch_end(self, args, state, control, **kwargs):
        """An epoch with no evaluation since the last epoch row gets a plain one."""
        if self.attached is None:
            return
        if self._waiting_for_log:  # the last step's log never came: the step ends in this epoch
            self._step(control, None, {})
        evaluated, self._evaluated = self._evaluated, False
        if evaluated or control.should_evaluate:
            return  # an evaluation wrote this epoch's row, or one follows (on_evaluate writes it)
        self._epoch_end(control, {})

    def on_train_end(self, args, state, control, **kwargs):
        """Training ended: close the attached run (``stopped`` after the window's Stop, else ``completed``)."""
        if self.attached is None:
            return
        if self._waiting_for_log:
            self._step(control, None, {})
        wb, self.attached = self.attached, None
        wb.close()

    # ------------------------------------------------------------------ helpers
    def _step(self, control, loss, values: dict) -> None:
        self._waiting_for_log = False
        if self._extra:
            values = {**self._extra, **values}
            self._extra = {}
        self.attached.step(loss, **values)
        if self.attached.should_stop:
            control.should_training_stop = True

    def _epoch_end(self, control, values: dict) -> None:
        self.attached.epoch_end(**values)
        if self.attached.should_stop:
            control.should_training_stop = True
