"""What a run does when a step fails: NaN/Inf losses, out of memory, exceptions.

:class:`FaultHandler` is one part of a :class:`~workbench.core.train.trainer.loop.Trainer`
(``trainer.faults``). On a non-finite loss it pauses the run through the
trainer's :class:`~workbench.core.train.trainer.control.RunControl` until a decision
(:data:`~workbench.core.train.trainer.control.NONFINITE_ACTIONS`) arrives, or ends it when
no callback handles ``on_nonfinite`` (headless). CUDA out-of-memory and other
exceptions become ``trainer.error`` and an ``on_exception`` call. Qt-free.
"""

from __future__ import annotations

import contextlib
import gc
import math
import traceback

import torch

from workbench.core.errors import TrainingError
from workbench.core.train.trainer import optim
from workbench.core.train.trainer.hooks import Callback
from workbench.core.train.trainer.nan_trace import NonFiniteTrace, trace_nonfinite
from workbench.core.train.trainer.types import TrainerLike

__all__ = ["FaultHandler", "Restart", "clear_traceback", "grads_finite", "nonfinite_tensors", "NO_SHARDED_TRACE"]


def nonfinite_tensors(model: torch.nn.Module) -> list[str]:
    """Qualified names of the floating-point parameters and buffers holding NaN or Inf.

    One ``isfinite().all()`` per tensor, read back with a single host sync. Sharded
    (FSDP's ``DTensor`` parameters) each rank checks its shards and one all-reduce makes
    the answer every rank's: call it on every rank at once.
    """
    named = [(n, t) for n, t in [*model.named_parameters(), *model.named_buffers()]
             if t is not None and (t.is_floating_point() or t.is_complex())]
    if not named:
        return []
    sharded = any(hasattr(t, "to_local") for _, t in named)
    with torch.no_grad():
        flags = torch.stack([torch.isfinite(t.to_local() if hasattr(t, "to_local") else t).all() for _, t in named])
        if sharded:
            import torch.distributed as dist

            flags = flags.to(torch.int32)
            dist.all_reduce(flags, op=dist.ReduceOp.MIN)
        flags = flags.tolist()
    return [n for (n, _), ok in zip(named, flags) if not ok]


#: Said instead of a NaN trace under ``strategy = "fsdp"``.
NO_SHARDED_TRACE = ('NaN trace: not run under strategy = "fsdp" (its re-run forward would need every rank in '
                    'step); the step and the loss are still named')


class Restart(Exception):
    """The state was rolled back to ``last.pt``: the loop restarts at the restored position."""


def grads_finite(opt: torch.optim.Optimizer) -> bool:
    """True when every gradient in ``opt``'s param_groups is finite (one fused norm per tensor, one read)."""
    grads = [p.grad for g in opt.param_groups for p in g["params"] if p.grad is not None]
    if not grads:
        return True
    return bool(torch.isfinite(torch.stack(torch._foreach_norm(grads))).all())


def clear_traceback(exc: BaseException) -> None:
    """Drop the frames an exception keeps alive (they pin tensors and device memory)."""
    tb = exc.__traceback__
    if tb is not None:
        traceback.clear_frames(tb)


class FaultHandler:
    """NaN/Inf, OOM and error handling of one :class:`~workbench.core.train.trainer.loop.Trainer`.

    Parameters
    ----------
    trainer : TrainerLike
        The trainer this handler belongs to (its control, optimizer, callbacks, run folder).
    """

    def __init__(self, trainer: TrainerLike):
        self.trainer = trainer

    def _handled(self) -> bool:
        return any(cb.handles_nonfinite() if hasattr(cb, "handles_nonfinite") else
                   type(cb).on_nonfinite is not Callback.on_nonfinite for cb in self.trainer.callbacks)

    def nonfinite(self, step: int, loss: float, counted: bool = False, what: str = "loss") -> None:
        """Handle the NaN/Inf ``loss`` of ``step``: pause for a decision, or end the run headless.

        ``what="gradient"``: the loss was finite but a gradient was not (the
        optimizer step was skipped, the weights are those before the step).

        ``lower_lr`` divides every LR by 10, skips the bad batch and continues;
        ``rollback`` reloads ``run_dir/last.pt`` and raises :class:`Restart` (with no
        checkpoint the run ends with reason ``"nonfinite"``); ``stop`` ends it.

        Raises
        ------
        Restart
            After a rollback.
        """
        tr = self.trainer
        trace = self.trace(step, exact=not counted)
        tr.optimizer.zero_grad(set_to_none=True)
        if not counted:
            tr.batch_in_epoch += 1  # the bad batch is consumed (skipped)
        head = (f"step {step}: the loss is {loss}" if what == "loss" else
                f"step {step}: a gradient is non-finite (the loss is {loss:.6g}; the weights were not updated)")
        head += f"; {trace.text()}" if trace is not None else ""
        message = f"{head}; lower the learning rate, roll back to the last checkpoint, or stop"
        handled = self._handled() and tr.is_main  # data-parallel: rank 0 asks; every rank follows its answer
        if handled:
            tr.emit()
            tr.control.begin_nonfinite(step)
            tr.call("on_nonfinite", tr, step, float(loss))
        if tr.sync is not None:
            action = tr.sync.decide(handled)
        else:
            action = tr.control.wait_for_decision() if handled else "end"
        if action == "end":
            self.end_nonfinite(message)
            return
        if action == "lower_lr":
            optim.rescale_lr(tr.optimizer, tr.scheduler, tr.lr / 10.0, tr.config)
            tr.lr_used = tr.lr
            tr.config.lr = tr.lr
        elif action == "rollback":
            tr.checkpoints.wait_for_saves()
            last = tr.run_dir / "last.pt" if tr.run_dir else None
            if last is None or not last.exists():
                self.end_nonfinite(f"step {step}: the loss is {loss} and there is no "
                                   f"checkpoint to roll back to ({last}); stopped")
                return
            tr.checkpoints.load_file(last)
            raise Restart()
        else:
            self.end_nonfinite(head + "; stopped")

    def trace(self, step: int, exact: bool = True) -> NonFiniteTrace | None:
        """Re-run the last batch to name the module that made the first NaN/Inf (:mod:`nan_trace`).

        Sets and returns ``trainer.nonfinite_trace``; None when no batch is kept or
        the re-run itself failed (the run's own handling goes on either way).
        ``exact``: the batch is the failing step's and the weights are pre-step.
        """
        tr = self.trainer
        tr.nonfinite_trace = None
        batch = tr.last_batch
        if batch is None:
            return None
        if getattr(tr.strategy, "sharded", False):
            tr.say(NO_SHARDED_TRACE)
            return None
        task = tr.task
        try:
            tr.nonfinite_trace = trace_nonfinite(tr.model, batch, lambda m, b: task.train_step(m, b).loss, step,
                                                 tr.autocast, exact=exact)
        except Exception:  # noqa: BLE001 - a trace must never turn a NaN into a crash
            traceback.print_exc()
        return tr.nonfinite_trace

    def nonfinite_state(self, step: int, names: list[str]) -> None:
        """Parameters or buffers ``names`` hold NaN/Inf at an epoch end (no checkpoint is written).

        Continuing from such weights cannot help, so both "lower the LR" and
        "roll back" reload ``run_dir/last.pt`` (the first with the LR divided by
        10); "stop" (and a headless run) ends the run with reason ``"nonfinite"``
        and an error naming the tensors.

        Raises
        ------
        Restart
            After a rollback.
        """
        tr = self.trainer
        shown = ", ".join(names[:3]) + (f" and {len(names) - 3} more" if len(names) > 3 else "")
        message = f"step {step}: non-finite values in {shown}"
        if not self._handled():
            self.end_nonfinite(message + "; stopped without writing a checkpoint")
            return
        tr.emit()
        tr.control.begin_nonfinite(step)
        tr.call("on_nonfinite", tr, step, math.nan)
        action = tr.control.wait_for_decision()
        last = tr.run_dir / "last.pt" if tr.run_dir else None
        if action == "stop" or last is None or not last.exists():
            self.end_nonfinite(message + ("; stopped" if action == "stop" else
                                          f"; no checkpoint to roll back to ({last}); stopped"))
            return
        tr.checkpoints.wait_for_saves()
        tr.checkpoints.load_file(last)
        if action == "lower_lr":
            optim.rescale_lr(tr.optimizer, tr.scheduler, tr.lr / 10.0, tr.config)
            tr.lr_used = tr.config.lr = tr.lr
        raise Restart()

    def end_nonfinite(self, message: str) -> None:
        """End the run with reason ``"nonfinite"`` and ``message`` as its error."""
        tr = self.trainer
        tr.error = TrainingError(message)
        tr.reason_override = "nonfinite"
        tr.control.request_stop()
        if tr.sync is not None:
            tr.sync.stop = True  # every rank ends here, at the same step (the decision was agreed)

    def on_oom(self, exc: BaseException) -> None:
        """CUDA out of memory: free what the step held and report a batch-size hint."""
        tr = self.trainer
        tb = traceback.format_exc()
        clear_traceback(exc)
        del exc
        if tr.optimizer is not None:
            tr.optimizer.zero_grad(set_to_none=True)
        tr.drop_device_losses()
        gc.collect()
        if torch.cuda.is_available():
            torch.cuda.empty_cache()
        tr.error = TrainingError(
            f"step {tr.step + 1}: out of memory on {tr.device} with batch size "
            f"{tr.config.data.batch_size}; try a smaller batch size (or mixed precision, or a smaller model)")
        tr.safe_call("on_exception", tr.error, tb)

    def on_error(self, exc: BaseException) -> None:
        """Any other exception: keep the traceback text, leave the model in ``train()`` with no grads."""
        tr = self.trainer
        tb = traceback.format_exc()
        clear_traceback(exc)
        tr.error = exc
        with contextlib.suppress(Exception):
            if tr.optimizer is not None:
                tr.optimizer.zero_grad(set_to_none=True)
            tr.model.train()
        tr.safe_call("on_exception", exc, tb)
