"""The one QThread helper: start a worker on a QThread, wait for it, list live threads.

The wiring is superqt's: ``worker.moveToThread(thread); thread.started.connect(worker.run);
worker.finished.connect(thread.quit); worker.finished.connect(worker.deleteLater);
thread.finished.connect(thread.deleteLater)``. Threads are never terminated:
callers ask their worker to stop, then :func:`wait_for` it.
"""

from __future__ import annotations

import time

from PySide6.QtCore import QObject, Qt, QThread, Slot

__all__ = ["start_in_thread", "wait_for", "live_threads"]

#: Threads and workers alive right now: Python keeps a reference until the thread
#: has finished, so neither is ever garbage-collected while running (which would print
#: "QThread: Destroyed while thread is still running").
_LIVE: set[QObject] = set()


def live_threads() -> list[QThread]:
    """The threads started by :func:`start_in_thread` that are still running."""
    out = []
    for obj in list(_LIVE):
        if isinstance(obj, QThread):
            try:
                if obj.isRunning():
                    out.append(obj)
            except RuntimeError:  # C++ object deleted: finished
                pass
    return out


class _Reaper(QObject):
    """Drops the module's references to a finished thread and its worker, on the GUI thread."""

    def __init__(self, thread: QThread, worker: QObject):
        super().__init__()
        self._objs = (thread, worker)

    @Slot()
    def reap(self) -> None:
        thread, worker = self._objs
        wait_for(thread, 5000)
        for obj in (thread, worker, self):
            _LIVE.discard(obj)


def start_in_thread(worker: QObject, name: str = "workerThread") -> QThread:
    """Move ``worker`` (a QObject with a ``run`` slot and a ``finished`` signal) to a new QThread and start it.

    ``thread.quit`` is connected directly (it is thread-safe) so a GUI thread
    blocked in :func:`wait_for` cannot keep the thread's event loop alive. Both
    stay referenced in a module set until the GUI thread has seen the thread
    finish (:func:`live_threads`).

    Parameters
    ----------
    worker : QObject
    name : str
        The thread's objectName (``"trainingThread"``, ``"probeThread"``).

    Returns
    -------
    QThread
        Already started.
    """
    thread = QThread()
    thread.setObjectName(name)
    worker.moveToThread(thread)
    thread.started.connect(worker.run)
    worker.finished.connect(thread.quit, Qt.ConnectionType.DirectConnection)
    worker.finished.connect(worker.deleteLater)
    thread.finished.connect(thread.deleteLater)
    reaper = _Reaper(thread, worker)
    thread.finished.connect(reaper.reap, Qt.ConnectionType.QueuedConnection)  # runs on the GUI thread
    _LIVE.update((thread, worker, reaper))
    thread.start()
    return thread


def wait_for(thread: QThread | None, timeout_ms: int) -> bool:
    """Wait up to ``timeout_ms`` (ms) for ``thread`` to finish; True when it is not running (or gone).

    Polls with ``time.sleep`` (which releases the GIL) rather than blocking in
    ``QThread.wait``: a worker that still needs the GIL to reach its next step
    boundary must be able to get it while the GUI thread waits.
    """
    if thread is None:
        return True
    try:
        deadline = time.monotonic() + timeout_ms / 1000.0
        while thread.isRunning():
            if time.monotonic() >= deadline:
                return False
            time.sleep(0.002)
        thread.wait(1000)  # finished: returns at once, joins the native thread
        return True
    except RuntimeError:  # the C++ QThread was already deleted: it had finished
        return True
