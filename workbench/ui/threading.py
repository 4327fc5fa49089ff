"""The one QThread helper: start a worker on a QThread, wait for it, list live threads, run a call off the GUI thread.

The wiring is superqt's: ``worker.moveToThread(thread); thread.started.connect(worker.run);
worker.finished.connect(thread.quit); worker.finished.connect(worker.deleteLater);
thread.finished.connect(thread.deleteLater)``. Threads are never terminated:
callers ask their worker to stop, then :func:`wait_for` it.
"""

from __future__ import annotations

import time
from typing import Any, Callable

from PySide6.QtCore import QEventLoop, QObject, Qt, QThread, Signal, Slot
from PySide6.QtWidgets import QProgressDialog, QWidget

__all__ = ["start_in_thread", "wait_for", "live_threads", "run_in_background", "collect_garbage_on_gui_thread"]

#: Threads and workers alive right now: Python keeps a reference until the thread
#: has finished, so neither is ever garbage-collected while running (which would print
#: "QThread: Destroyed while thread is still running").
_LIVE: set[QObject] = set()


_collector = None


def collect_garbage_on_gui_thread(interval_s: float = 1.0):
    """From now on Python's cyclic garbage collector runs only on the GUI thread, every ``interval_s``.

    pyqtgraph's ``GarbageCollector`` (automatic collection off, ``gc.collect`` from
    a QTimer). Why: a collection is run by whichever thread allocates when the
    counters trip; when it frees a QObject caught in a reference cycle on a worker
    thread (the training QThread, the checkpoint writer), PySide deadlocks — the GUI
    thread holds a Qt lock and waits for the GIL, the worker holds the GIL and
    waits for the lock. Both were seen in this test suite. Call once, on the GUI
    thread, after the QApplication exists; later calls return the same collector.
    """
    global _collector
    if _collector is None:
        from pyqtgraph.util.garbage_collector import GarbageCollector

        _collector = GarbageCollector(interval=interval_s)
    return _collector


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


class _Call(QObject):
    """Runs ``fn()`` on its thread; puts the result or the exception into ``box`` for the GUI thread."""

    finished = Signal()

    def __init__(self, fn: Callable[[], Any], box: dict):
        super().__init__()
        self._fn, self._box = fn, box

    @Slot()
    def run(self) -> None:
        try:
            self._box["result"] = self._fn()
        except BaseException as exc:  # noqa: BLE001 - re-raised on the GUI thread
            self._box["error"] = exc
        finally:
            self.finished.emit()


def run_in_background(fn: Callable[[], Any], label: str, parent: QWidget | None = None,
                      show_after_ms: int = 400, on_cancel: Callable[[], None] | None = None) -> Any:
    """Run ``fn()`` on a worker thread while the window keeps repainting; return its result.

    The GUI thread waits in a local event loop (so the window stays responsive
    and the call stays synchronous for its caller) behind a busy
    ``QProgressDialog`` that appears only if the work takes longer than
    ``show_after_ms`` milliseconds. The dialog is window-modal, so no other
    action starts meanwhile. It has a Cancel button only when ``on_cancel`` is
    given: pressing it calls ``on_cancel()`` on the GUI thread, which must make
    ``fn`` return or raise soon (attaching: it closes the connection).

    Raises
    ------
    BaseException
        Whatever ``fn`` raised, re-raised on the GUI thread.
    """
    box: dict = {}
    call = _Call(fn, box)
    loop = QEventLoop()
    call.finished.connect(loop.quit, Qt.ConnectionType.QueuedConnection)
    dialog = QProgressDialog(label, "Cancel" if on_cancel else None, 0, 0, parent)
    dialog.setObjectName("busyDialog")
    dialog.setWindowModality(Qt.WindowModality.WindowModal)
    dialog.setMinimumDuration(show_after_ms)
    if on_cancel is None:
        dialog.setCancelButton(None)
    else:
        dialog.canceled.connect(on_cancel)
        dialog.setValue(0)  # starts the timer that shows it after show_after_ms (Qt 6 no longer does on its own)
    thread = start_in_thread(call, "backgroundCall")
    try:
        loop.exec()  # the queued quit arrives even if the call finished before exec() started
    finally:
        wait_for(thread, 60_000)
        dialog.reset()
        dialog.deleteLater()
    if "error" in box:
        raise box["error"]
    return box.get("result")
