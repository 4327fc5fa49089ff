"""A pause is a lease: :class:`PauseLease`.

A window that pauses a script holds the pause only while it keeps renewing it
(the client sends ``{"type": "renew"}`` every :func:`renew_interval` seconds).
A laptop that sleeps, a dead tunnel or a frozen window stops the renewals;
:data:`PAUSE_LEASE_S` seconds after the last one the lease lapses and the
script resumes by itself (or, with ``pause_lease="hold"``, stays paused and
lets another window steer). A window that detached on purpose holds no lease:
the pause it left stays until a window resumes it (said in the README). Qt-free.
"""

from __future__ import annotations

import logging
import math
import threading
import time
from typing import Callable

__all__ = ["PauseLease", "PAUSE_LEASE_S", "RENEW_S", "LEASE_MODES", "renew_interval", "check_lease"]

log = logging.getLogger("workbench.attach")

#: Seconds a pause outlives its window's last renewal: long enough for a window busy on its GUI thread
#: (a large tree rebuilt, a modal dialog) or a tunnel's short hiccup, short enough that a GPU paused by a
#: laptop that went to sleep is training again within two minutes.
PAUSE_LEASE_S = 120.0
#: Seconds between two renewals a window sends, at most (:func:`renew_interval`): a few a minute, a
#: message of ~30 bytes each.
RENEW_S = 5.0
#: What a lapsed lease does: ``"resume"`` the training, or ``"hold"`` the pause and free the steering.
LEASE_MODES = ("resume", "hold")


def renew_interval(lease_s: float) -> float:
    """Seconds between two renewals for a lease of ``lease_s`` seconds: :data:`RENEW_S`, or a quarter of
    a shorter lease (three renewals may be lost before it lapses)."""
    return max(0.05, min(RENEW_S, float(lease_s) / 4))


def check_lease(seconds, mode) -> tuple[float, str]:
    """``(seconds, mode)`` checked for :func:`~workbench.core.attach.script.attach`.

    Raises
    ------
    ValueError
        ``seconds`` is not a positive finite number, or ``mode`` not one of :data:`LEASE_MODES`.
    """
    if isinstance(seconds, bool) or not isinstance(seconds, (int, float)) or not (math.isfinite(seconds)
                                                                                    and seconds > 0):
        raise ValueError(f"pause_lease_s must be a positive number of seconds, not {seconds!r}")
    if mode not in LEASE_MODES:
        raise ValueError(f"pause_lease must be one of {', '.join(map(repr, LEASE_MODES))}, not {mode!r}")
    return float(seconds), str(mode)


class PauseLease:
    """Watch a pause held by a window; call ``on_lapse()`` once its renewals stop for ``seconds`` seconds.

    A daemon thread (started at the first :meth:`arm`) waits on a condition: no polling.

    Parameters
    ----------
    seconds : float
        The lease (:data:`PAUSE_LEASE_S`).
    on_lapse : callable
        ``on_lapse()``, on the lease's thread, when an armed lease was not renewed in time.
    is_paused : callable
        ``is_paused() -> bool``: a lease whose run is no longer paused ends quietly.
    """

    def __init__(self, seconds: float, on_lapse: Callable[[], None], is_paused: Callable[[], bool]):
        self.seconds = float(seconds)
        self._on_lapse = on_lapse
        self._is_paused = is_paused
        self._cond = threading.Condition()
        self._renewed = time.monotonic()
        self._armed = False
        self._closed = False
        self._thread: threading.Thread | None = None

    @property
    def armed(self) -> bool:
        """A pause is held by a window and counted."""
        return self._armed

    def renew(self) -> None:
        """The holding window is alive (any thread)."""
        with self._cond:
            self._renewed = time.monotonic()

    def arm(self) -> None:
        """The run is paused and a window steers it: the lease starts now (any thread)."""
        with self._cond:
            if self._closed:
                return
            self._renewed = time.monotonic()
            self._armed = True
            if self._thread is None:
                self._thread = threading.Thread(target=self._watch, name="workbench-attach-lease", daemon=True)
                self._thread.start()
            self._cond.notify_all()

    def disarm(self) -> None:
        """No lease counts now (the pause ended, or its window let go on purpose)."""
        with self._cond:
            self._armed = False
            self._cond.notify_all()

    def close(self) -> None:
        """End the lease's thread."""
        with self._cond:
            self._closed = True
            self._armed = False
            self._cond.notify_all()

    def _watch(self) -> None:
        with self._cond:
            while not self._closed:
                if not self._armed:
                    self._cond.wait()
                    continue
                left = self._renewed + self.seconds - time.monotonic()
                if left > 0:
                    self._cond.wait(left)
                    continue
                self._armed = False
                if not self._is_paused():
                    continue  # resumed meanwhile (a data-parallel resume does not disarm): nothing held
                self._cond.release()
                try:
                    self._on_lapse()
                except Exception:  # noqa: BLE001 - the watch goes on; the run is never ended by it
                    log.exception("workbench attach: the pause lease's lapse failed")
                finally:
                    self._cond.acquire()
