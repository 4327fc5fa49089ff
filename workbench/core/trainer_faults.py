"""Fault handling of a :class:`~workbench.core.training.Trainer`: NaN/Inf losses, out of memory, errors.

:class:`FaultsMixin` pauses a run on a non-finite loss until
``resolve_nonfinite(action)`` answers (:data:`NONFINITE_ACTIONS`), or ends it
headless; it turns CUDA out-of-memory and other exceptions into an ``error`` and
an ``on_exception`` call. Qt-free.
"""

from __future__ import annotations

import contextlib
import traceback

import torch

from workbench.core import optim as _optim
from workbench.core.callbacks import Callback
from workbench.core.errors import TrainingError

__all__ = ["FaultsMixin", "NONFINITE_ACTIONS"]

#: The answers :meth:`FaultsMixin.resolve_nonfinite` accepts.
NONFINITE_ACTIONS = ("lower_lr", "rollback", "stop")


class _Restart(Exception):
    """Internal: the state was rolled back; restart the epoch loop at the restored position."""


def _clear_traceback(exc: BaseException) -> None:
    """Drop the frames an exception keeps alive (they pin tensors and device memory)."""
    tb = exc.__traceback__
    if tb is not None:
        traceback.clear_frames(tb)


class FaultsMixin:
    """NaN/Inf, OOM and error handling of :class:`~workbench.core.training.Trainer`.

    Uses the trainer's condition, flags, optimizer, callbacks and ``run_dir``;
    a rollback reloads ``run_dir/last.pt`` and raises :class:`_Restart`.
    """

    def resolve_nonfinite(self, action: str) -> None:
        """Answer a NaN/Inf pause: ``"lower_lr"``, ``"rollback"`` or ``"stop"``.

        ``lower_lr`` divides every LR by 10, skips the bad batch and continues;
        ``rollback`` reloads ``run_dir/last.pt`` (if none exists the run stops with
        reason ``"nonfinite"``); ``stop`` ends the run with reason ``"nonfinite"``.

        Raises
        ------
        ValueError
            Unknown action.
        """
        if action not in NONFINITE_ACTIONS:
            raise ValueError(f"unknown action {action!r}; choose one of {', '.join(NONFINITE_ACTIONS)}")
        with self._cond:
            self._nonfinite_action = action
            self._cond.notify_all()

    # ------------------------------------------------------------ faults
    def _has_nonfinite_handler(self) -> bool:
        return any(type(cb).on_nonfinite is not Callback.on_nonfinite for cb in self.callbacks)

    def _nonfinite(self, step: int, counted: bool = False) -> None:
        """Handle a NaN/Inf loss at ``step``: pause and wait for a decision, or stop headless."""
        self.optimizer.zero_grad(set_to_none=True)
        if not counted:
            self.batch_in_epoch += 1  # the bad batch is consumed (skipped)
        message = (f"step {step}: the loss is NaN or infinite; lower the learning rate, "
                   "roll back to the last checkpoint, or stop")
        if not self._has_nonfinite_handler():
            self._end_nonfinite(message)
            return
        self._emit()
        with self._cond:
            self._nonfinite_step = step
            self._nonfinite_action = None
            self._paused = True
        self._call("on_nonfinite", self, step)
        with self._cond:
            self._waiting = True
            while self._nonfinite_action is None and not self._stop:
                self._cond.wait()
            self._waiting = False
            action = self._nonfinite_action or "stop"
            self._nonfinite_step = None
            self._nonfinite_action = None
            self._paused = False
        if action == "lower_lr":
            _optim.rescale_lr(self.optimizer, self.scheduler, self.lr / 10.0, self.config)
            self._lr_cache = self.lr
            self.config.lr = self.lr
        elif action == "rollback":
            self.wait_for_saves()
            last = self.run_dir / "last.pt" if self.run_dir else None
            if last is None or not last.exists():
                self._end_nonfinite(f"step {step}: the loss is NaN or infinite and there is no "
                                    f"checkpoint to roll back to ({last}); stopped")
                return
            self._load_payload(torch.load(last, map_location="cpu", weights_only=True))
            raise _Restart()
        else:
            self._end_nonfinite(message.split(";")[0] + "; stopped")

    def _end_nonfinite(self, message: str) -> None:
        self.error = TrainingError(message)
        self._reason_override = "nonfinite"
        with self._cond:
            self._stop = True
            self._cond.notify_all()

    def _on_oom(self, exc: BaseException) -> None:
        tb = traceback.format_exc()
        _clear_traceback(exc)
        del exc
        if self.optimizer is not None:
            self.optimizer.zero_grad(set_to_none=True)
        self._buf = [r for r in self._buf if not isinstance(r.get("loss"), torch.Tensor)]
        self._epoch_loss = []
        import gc

        gc.collect()
        if torch.cuda.is_available():
            torch.cuda.empty_cache()
        self.error = TrainingError(
            f"step {self.step + 1}: out of memory on {self.device} with batch size "
            f"{self.config.data.batch_size}; try a smaller batch size (or mixed precision, or a smaller model)")
        self._safe_call("on_exception", self.error, tb)

    def _on_error(self, exc: BaseException) -> None:
        tb = traceback.format_exc()
        _clear_traceback(exc)
        self.error = exc
        with contextlib.suppress(Exception):
            if self.optimizer is not None:
                self.optimizer.zero_grad(set_to_none=True)
            self.model.train()
        self._safe_call("on_exception", exc, tb)
