"""RunHandle: the one way to talk to a run, wherever it trains.

A run on a thread in the window's process
(:class:`~workbench.core.train.launch.in_thread.ThreadRun`), in a training
process or on torchrun's ranks
(:class:`~workbench.core.train.launch.training_process.ProcessRun`), and later a
user's own step or a script attached from outside, are all driven the same
way: :meth:`RunHandle.run` on a thread of the caller's choosing, steering from
any other thread, typed events (:mod:`workbench.core.train.events`) back
through one callback. The window's
:class:`~workbench.ui.train.run_controller.RunController` and the tests hold
nothing else. Qt-free.
"""

from __future__ import annotations

from typing import Any, Callable, Protocol, runtime_checkable

from workbench.core.train.events import Event

__all__ = ["RunHandle", "SteeredByControl"]


@runtime_checkable
class RunHandle(Protocol):
    """A run, however it trains (see the module docstring).

    Attributes
    ----------
    kind : str
        ``"thread"``, ``"process"`` or ``"ddp"``.
    ranks : int
        Processes that train (1 unless data-parallel).
    reason : str or None
        The end reason once :meth:`run` returned.
    in_this_process : bool
        True when the trainer trains the caller's own model object in the caller's
        process (a thread run); False when the caller's copy follows through
        ``StateSynced`` events.
    can_end : bool
        :meth:`end` can end the run by force (a run in another process).
    """

    kind: str
    ranks: int
    reason: str | None
    in_this_process: bool
    can_end: bool

    def run(self, emit: Callable[[Event], Any]) -> str:
        """Train to the end on the calling thread, handing every event to ``emit``; the end reason.

        Never raises: a failure is a ``RunError`` event and the reason ``"error"``
        (``"crashed"`` when a training process died). The last event is ``Finished``.
        """

    def pause(self) -> None:
        """Pause at the next step boundary."""

    def resume(self) -> None:
        """Continue after :meth:`pause`."""

    def stop(self) -> None:
        """Stop at the next step boundary."""

    def stop_and_save(self) -> None:
        """Stop at the next step boundary (ending a pause or a NaN question) and write ``last.pt``."""

    def queue(self, command: Any) -> None:
        """Apply ``command`` (:mod:`workbench.core.train.trainer.commands`) at the next step boundary."""

    def resolve_nonfinite(self, action: str) -> None:
        """Answer a ``NonFinite`` event: ``"lower_lr"``, ``"rollback"`` or ``"stop"``."""

    def end(self) -> bool:
        """End the run now, by force (a step that never returns); False when it cannot be (a thread)."""


class SteeredByControl:
    """The steering of a handle whose ``control`` takes it as it is (a
    :class:`~workbench.core.train.trainer.control.RunControl`, or the training process's
    :class:`~workbench.core.train.launch.training_process.JobControl`): the methods of
    :class:`RunHandle` that only pass a call on, written once."""

    control: Any

    def pause(self) -> None:
        """Pause at the next step boundary."""
        self.control.pause()

    def resume(self) -> None:
        """Continue after :meth:`pause`."""
        self.control.resume()

    def stop(self) -> None:
        """Stop at the next step boundary."""
        self.control.request_stop()

    def queue(self, command: Any) -> None:
        """Apply ``command`` at the next step boundary."""
        self.control.queue(command)

    def resolve_nonfinite(self, action: str) -> None:
        """Answer a ``NonFinite`` event."""
        self.control.resolve_nonfinite(action)
