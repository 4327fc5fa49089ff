"""What a run's events draw on the Training plots: :class:`PlotFeed`.

The loss, LR and accuracy curves take the ``Metrics`` of every step and the
``EpochEnded`` metrics of every epoch; an applied freeze, unfreeze or LR change
(``CommandApplied``) becomes a labelled vertical mark at its step. The feed only
adds data: the panel repaints on its redraw tick.
"""

from __future__ import annotations

import math
import time

import numpy as np

from workbench.core.train.trainer.commands import SetLR, SetTrainable

__all__ = ["PlotFeed", "command_label", "trainable_change"]


def trainable_change(command: SetTrainable) -> str:
    """``"freeze layer1, layer2…"`` / ``"unfreeze all"``: what a :class:`SetTrainable` does, in words."""
    names = [command.names] if isinstance(command.names, str) else list(command.names or [])
    what = ", ".join(n or "all" for n in names[:2]) + ("…" if len(names) > 2 else "")
    return f"{'unfreeze' if command.flag else 'freeze'} {what}"


def command_label(command) -> str | None:
    """The mark's text for an applied command (``"freeze layer1 (6)"``, ``"lr 0.0001"``), or None for none.

    ``(6)``: how many parameter tensors the freeze or unfreeze changed.
    """
    if isinstance(command, SetTrainable):
        return f"{trainable_change(command)} ({len(command.changed or [])})"
    if isinstance(command, SetLR):
        return f"lr {float(command.lr):.3g}"
    return None


class PlotFeed:
    """Adds a run's events to :class:`~workbench.ui.train.loss_plot.TrainingPlots`.

    Parameters
    ----------
    plots : TrainingPlots

    Attributes
    ----------
    t0 : float
        ``time.perf_counter()`` at the run's Start: the time axis of data that carries no time of its own.
    """

    def __init__(self, plots):
        self.plots = plots
        self.t0 = time.perf_counter()

    def begin(self) -> None:
        """A run starts: clear the curves, restart the clock."""
        self.plots.clear()
        self.t0 = time.perf_counter()

    def elapsed(self) -> float:
        """Seconds since :meth:`begin`."""
        return time.perf_counter() - self.t0

    def plan(self, info: dict) -> None:
        """``FitStarted`` info: the axes' extent (``total_steps``, ``epochs``)."""
        if info.get("total_steps"):
            self.plots.expect_extent(float(info["total_steps"]), float(info.get("epochs") or math.nan))

    def add_metrics(self, m: dict) -> tuple[float, int] | None:
        """Add a ``Metrics`` batch (``step``, ``loss``, ``lr``, ``epoch_float``, ``time``: (S,) arrays).

        Returns
        -------
        tuple of (float, int) or None
            The last step's time (s, the trainer's clock) and number; None when the batch has no loss.
        """
        step, loss = m.get("step"), m.get("loss")
        if step is None or loss is None:
            return None
        t = m.get("time", m.get("time_s"))
        if t is None:
            t = np.full(step.shape, self.elapsed())
        self.plots.add_steps(step, loss, lr=m.get("lr"), epoch=m.get("epoch_float", m.get("epoch")), time=t)
        if not len(step):
            return None
        return float(np.asarray(t)[-1]), int(step[-1])

    def add_epoch(self, m: dict) -> None:
        """Add an ``EpochEnded`` row (``epoch`` 0-based, ``step``, ``train_loss``, ``val_loss``, ``val_acc``, ``time``).

        Every other ``val_*`` / ``train_*`` number (``val_r2``, a user step's ``train_tokens``) goes to the
        plots' metric picker, and the run's ``best`` flag places the "best" marks.
        """
        def num(*keys):
            for k in keys:
                v = m.get(k)
                if isinstance(v, (int, float)) and not isinstance(v, bool):
                    return float(v)
            return None

        epoch = num("epoch")
        completed = (epoch + 1) if epoch is not None else len(self.plots.epochs) + 1.0
        epochs_done = num("epochs_completed")
        if epochs_done is not None:
            completed = epochs_done
        self.plots.add_epoch(
            completed, num("step") or self.plots.steps.last("step", 0.0),
            val_loss=num("val_loss"), val_acc=num("val_acc", "val_accuracy"),
            train_loss=num("train_loss"), time=num("time_s", "time") or self.elapsed(),
            metrics=m, best=bool(m["best"]) if isinstance(m.get("best"), (bool, int, np.bool_)) else None,
        )

    def mark(self, command, step: float, epoch: float) -> None:
        """Mark an applied command at ``step`` (nothing for commands without a label)."""
        label = command_label(command)
        if label is not None:
            self.plots.mark_freeze(float(step), label, epoch=float(epoch), time=self.elapsed())
