"""The window's side of a run: :class:`RunController` drives any :class:`~workbench.core.train.handle.RunHandle`.

A thread run, a process run and a data-parallel run look the same from here:
the controller calls the handle's ``run`` on its own QThread
(``"trainingThread"``), turns each typed event
(:mod:`workbench.core.train.events`) into the Qt signal ``event(object)``
delivered on the GUI thread in order, and passes steering (pause, resume, stop,
stop and save, commands, the NaN answer, end by force) straight to the handle,
whose methods are thread-safe. The GUI thread never touches a model being
trained.
"""

from __future__ import annotations

from PySide6.QtCore import QObject, Qt, Signal, Slot

from workbench.core.train.handle import RunHandle
from workbench.ui.threading import start_in_thread, wait_for

__all__ = ["RunController"]


class _Runner(QObject):
    """Runs ``handle.run`` on the QThread it was moved to; every event out as ``event(object)``."""

    event = Signal(object)
    finished = Signal(str)

    def __init__(self, handle: RunHandle):
        super().__init__()
        self.handle = handle

    @Slot()
    def run(self) -> None:
        reason = "error"
        try:
            reason = self.handle.run(self.event.emit)
        finally:
            self.handle = None  # the handle holds the trainer; nothing here outlives the run
            self.finished.emit(reason)


class RunController(QObject):
    """Owns the run of the moment on a QThread and relays its events as Qt signals.

    Signals
    -------
    event(object)
        Every :class:`~workbench.core.train.events.Event` of the run, on the GUI
        thread, in order; ``Finished`` is the last.
    ended()
        The run's thread has finished (after ``Finished`` was delivered).

    Attributes
    ----------
    handle : RunHandle or None
        The run of the moment, from :meth:`start` until just after ``ended`` (it holds the trainer).
    """

    event = Signal(object)
    ended = Signal()

    def __init__(self, parent: QObject | None = None):
        super().__init__(parent)
        self.handle: RunHandle | None = None
        self._thread = None

    def start(self, handle: RunHandle) -> None:
        """Run ``handle`` on a new QThread.

        Raises
        ------
        RuntimeError
            A run is still going.
        """
        if self.is_running():
            raise RuntimeError("a run is still going")
        self.handle = handle
        runner = _Runner(handle)
        queued = Qt.ConnectionType.QueuedConnection  # always delivered on the GUI thread
        runner.event.connect(self.event, queued)  # signal to signal: emitted again on the GUI thread
        thread = start_in_thread(runner, "trainingThread")
        thread.finished.connect(self._on_thread_finished, queued)
        self._thread = thread

    def is_running(self) -> bool:
        """True from :meth:`start` until the run's thread has finished (and ``ended`` was emitted)."""
        return self._thread is not None

    @property
    def kind(self) -> str:
        """The handle's kind (``"thread"``, ``"process"``, ``"ddp"``), or ``""`` before a run."""
        return self.handle.kind if self.handle is not None else ""

    def wait(self, timeout_ms: int) -> bool:
        """Wait up to ``timeout_ms`` (ms) for the run's thread; True when it has finished."""
        return wait_for(self._thread, timeout_ms)

    def finish_now(self) -> None:
        """The thread finished but its queued end was not delivered (the window closes): end here."""
        if self._thread is not None:
            self._on_thread_finished()

    # steering: each goes straight to the handle (thread-safe there); nothing happens without a run
    def pause(self) -> None:
        """Pause at the next step boundary."""
        if self.handle is not None:
            self.handle.pause()

    def resume(self) -> None:
        """Continue a paused run."""
        if self.handle is not None:
            self.handle.resume()

    def stop(self) -> None:
        """Stop at the next step boundary."""
        if self.handle is not None:
            self.handle.stop()

    def stop_and_save(self) -> None:
        """Stop at the next step boundary and write ``last.pt`` (the window closes)."""
        if self.handle is not None:
            self.handle.stop_and_save()

    def queue(self, command) -> None:
        """Apply ``command`` at the next step boundary.

        Raises
        ------
        RuntimeError
            No run is going.
        """
        if self.handle is None or not self.is_running():
            raise RuntimeError("no training run is active")
        self.handle.queue(command)

    def resolve_nonfinite(self, action: str) -> None:
        """Answer a ``NonFinite`` event (``"lower_lr"``, ``"rollback"``, ``"stop"``)."""
        if self.handle is not None:
            self.handle.resolve_nonfinite(action)

    def end(self) -> bool:
        """End the run by force (a step that never returns); False when its kind cannot be (a thread run)."""
        return self.handle is not None and self.is_running() and self.handle.end()

    @Slot()
    def _on_thread_finished(self) -> None:
        thread, self._thread = self._thread, None
        if thread is None:
            return
        wait_for(thread, 5000)
        self.ended.emit()
        self.handle = None
