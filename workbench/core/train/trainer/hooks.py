"""The :class:`Callback` hooks of the training loop and the keys of what they receive.

:data:`STEP_KEYS` and :data:`EPOCH_KEYS` name the fields of the step and epoch
metrics dicts; :data:`END_REASONS` lists what ``Trainer.fit()`` can return.
Qt-free.
"""

from __future__ import annotations

from typing import Any

from workbench.core.train.trainer.types import TrainerLike

__all__ = ["Callback", "STEP_KEYS", "EPOCH_KEYS", "END_REASONS"]

#: Keys of each per-step metrics dict (``on_step_end`` and the ``on_metrics`` batches).
#: step: optimizer steps done (1-based); epoch: 0-based epoch index; epoch_float:
#: epoch + fraction done; loss: training loss of the step; lr: head LR used; samples:
#: samples seen so far; time: seconds since ``fit()`` started; samples_per_s: over
#: the last emission window; input_wait: share (0..1) of that window's wall time spent
#: waiting for the next batch.
STEP_KEYS = ("step", "epoch", "epoch_float", "loss", "lr", "samples", "time", "samples_per_s", "input_wait")
#: Keys of each epoch metrics dict (``on_epoch_end``, ``Trainer.history``). epoch: the
#: 0-based index of the finished epoch; val_acc is NaN when not a classification;
#: best: this epoch has the lowest validation loss so far; epoch_time: seconds; input_wait:
#: share of the epoch's training time spent waiting for batches; skipped: the unreadable
#: image files skipped in the epoch (``data.skip_unreadable``), ``"<file> (class folder <name>): <reason>"``.
EPOCH_KEYS = ("epoch", "step", "train_loss", "val_loss", "val_acc", "lr", "time", "samples_per_s",
              "best", "epoch_time", "input_wait", "skipped")
END_REASONS = ("completed", "stopped", "error", "nonfinite", "oom")


class Callback:
    """Hooks called by :class:`Trainer` on the training thread; every hook is a no-op by default.

    ``on_step_end`` is called after EVERY optimizer step: keep it cheap (no
    signals, no I/O); use ``on_metrics`` for anything that crosses threads.
    ``trainer`` is the :class:`~workbench.core.train.trainer.loop.Trainer` itself; the
    hooks are annotated with :class:`~workbench.core.train.trainer.types.TrainerLike`
    (the members its parts use) so that this module need not import ``loop.py``.
    """

    def on_fit_start(self, trainer: TrainerLike) -> None:
        """Data, optimizer and run folder are ready; nothing has been trained yet."""

    def on_step_end(self, trainer: TrainerLike, metrics: dict) -> None:
        """After each step. ``metrics`` keys: :data:`STEP_KEYS`; on CUDA ``loss`` is a
        detached 0-dim device tensor (reading it syncs) and ``samples_per_s`` is NaN. The
        same dict is later passed to ``on_metrics`` with those fields filled in as floats."""

    def on_after_backward(self, trainer: TrainerLike) -> None:
        """After ``backward()`` of each step, before gradient clipping and the optimizer step
        (fp16: after ``GradScaler.unscale_``, so gradients are true values). Called only for
        callbacks that override it; keep it cheap."""

    def on_metrics(self, trainer: TrainerLike, batch: list[dict]) -> None:
        """A batch of step dicts (floats only), about every ``emit_every_ms`` and at epoch end."""

    def on_epoch_end(self, trainer: TrainerLike, metrics: dict) -> None:
        """After validation and checkpointing; ``metrics`` keys: :data:`EPOCH_KEYS`."""

    def on_pause(self, trainer: TrainerLike) -> None:
        """The run pauses at this step boundary (the metrics so far were emitted); the
        training thread blocks right after, so the model is consistent here."""

    def on_heartbeat(self, trainer: TrainerLike) -> None:
        """Data-parallel, while paused: called every ``rank_sync.PAUSE_TICK_S`` on every rank (a
        paused rank makes no step, yet is alive)."""

    def on_nonfinite(self, trainer: TrainerLike, step: int, loss: float) -> None:
        """The loss of step ``step`` is ``loss`` (NaN or +/-Inf); the run is paused until
        ``trainer.control.resolve_nonfinite(action)`` (may be called from any thread, or here)."""

    def handles_nonfinite(self) -> bool:
        """True when this callback answers a non-finite loss now (the run then pauses for its answer instead of
        ending): by default when it overrides :meth:`on_nonfinite`; a callback whose answer comes from a window
        says so only while one is there."""
        return type(self).on_nonfinite is not Callback.on_nonfinite

    def on_progress(self, trainer: TrainerLike, text: str) -> None:
        """Work before the first step reports where it is, e.g. ``"checking images 2,000 / 10,000"``."""

    def on_notice(self, trainer: TrainerLike, kind: str, text: str, file: str) -> None:
        """One line for whoever watches the run: a run file's write failed (``kind`` ``"write_failed"``,
        ``"save_failed"``) or works again (``"write_ok"``); ``file`` names it. Training goes on."""

    def on_command_applied(self, trainer: TrainerLike, command: Any) -> None:
        """A queued command was applied (its result fields are filled in)."""

    def on_exception(self, trainer: TrainerLike, exc: BaseException, tb: str) -> None:
        """The run failed; ``tb`` is the formatted traceback. ``on_fit_end`` follows."""

    def on_fit_end(self, trainer: TrainerLike, reason: str) -> None:
        """The run ended: ``reason`` is one of :data:`END_REASONS`."""
