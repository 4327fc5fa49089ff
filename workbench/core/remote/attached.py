"""A run on a host, attached through a tunnel Workbench manages, that reconnects by itself. Qt-free.

:class:`RemoteAttachedRun` is what :meth:`workbench.remote.RemoteRun.attach` returns: the
:class:`~workbench.core.attach.client.AttachedRun` API (``freeze``, ``set_lr``, ``pause``, ``wait_ack``,
``events``, ``run``, ``info``, ``acks``, ``close``...; a :class:`~workbench.core.train.handle.RunHandle` the window
drives as any attached run) over the connection of the moment. When the tunnel or the connection is lost while
the run trains on (the ssh connection dropped, the laptop slept), it says so with a :class:`Notice`
(:data:`LOST`: "disconnected, reconnecting…", never a crash), reads the run's discovery file on the host again,
reopens the tunnel and reconnects every :data:`RETRY_S` seconds until the host is back (:data:`BACK`); the
run's history, sent again on each connection, fills the gap (the steps and epochs seen already are left out).
A run that ended meanwhile ends the handle with its state. :meth:`close` detaches and closes the tunnel.
"""

from __future__ import annotations

import queue
import threading
from typing import Any, Callable

import numpy as np

from workbench.core.attach.client import AttachError, connect, drive
from workbench.core.attach.notice import Notice
from workbench.core.remote.ssh import RemoteError, Ssh
from workbench.core.remote.tunnel import Tunnel
from workbench.core.train.events import EpochEnded, Event, Finished, FitStarted, Metrics, ProgressText

__all__ = ["RemoteAttachedRun", "LOST", "BACK", "RETRY_S"]

#: The :class:`Notice` kinds a remote attached run adds: the connection was lost / is back.
LOST, BACK = "disconnected", "reconnected"
#: Seconds between two attempts to reconnect (each reads the discovery file over ssh: ~50 ms on a live master).
RETRY_S = 2.0
#: States of a run that is still going while it does not listen (between a restart and its first step).
_GOING = ("queued", "running")
_END = object()

#: ``locate()``: the run's discovery dict and the compute node it is on (None: the host itself), or None when it
#: does not listen now; ``state()``: the run's state once it does not.
Locate = Callable[[], "tuple[dict, str | None] | None"]


class RemoteAttachedRun:
    """A remote run's window-side handle (see the module docstring); made by :meth:`open`.

    Attributes
    ----------
    host : str
    run_name : str or None
        A submitted run's name (``workbench pull --host HOST RUN``); None for a script.
    tunnel : Tunnel or None
        The forward of the moment (None while disconnected or once closed).
    reason : str or None
        How the run's events ended (``"detached"`` when this side let go).
    """

    kind = "attached"
    ranks = 1
    in_this_process = False
    can_end = False
    _inner = None

    def __init__(self, ssh: Ssh, host: str, locate: Locate, state: Callable[[], str], *, steer: bool | str = True,
                 callbacks=(), what: str = "the run", run_name: str | None = None):
        self.ssh, self.host, self.what, self.run_name = ssh, host, what, run_name
        self._locate, self._state = locate, state
        self._steer = steer
        self.callbacks = list(callbacks)
        self.tunnel: Tunnel | None = None
        self.reason: str | None = None
        self.connected = False
        self._events: queue.Queue = queue.Queue()
        self._closed = False
        self._wake = threading.Event()
        self._lock = threading.Lock()
        self._last_step = -1.0
        self._last_epoch = -1.0

    @classmethod
    def open(cls, ssh: Ssh, host: str, locate: Locate, state: Callable[[], str], *, steer: bool | str = True,
             callbacks=(), timeout: float | None = None, what: str = "the run",
             run_name: str | None = None) -> RemoteAttachedRun:
        """Read the discovery file on ``host`` (``locate``), open the tunnel, connect; the handle.

        Raises
        ------
        RemoteError
            ssh failed, or the run does not listen (not started yet, ended, or ``--no-attach``).
        AttachError
            The run refused the token or did not answer through the tunnel (the tunnel is closed again).
        """
        found = locate()
        if found is None:
            raise RemoteError(f"{host}: {what} does not wait for a window (not started yet, ended, or started with "
                              f"--no-attach); see its state with: workbench runs --host {host}")
        run = cls(ssh, host, locate, state, steer=steer, callbacks=callbacks, what=what, run_name=run_name)
        run._connect(found, timeout)
        threading.Thread(target=run._pump, name="workbench-remote-attach", daemon=True).start()
        return run

    # ------------------------------------------------------------------ the AttachedRun of the moment
    def __getattr__(self, name: str) -> Any:
        """``info``, ``steering``, ``acks``, ``wait_ack``, ``bad_peer``... of the connection of the moment."""
        if name.startswith("_") or self._inner is None:
            raise AttributeError(name)
        return getattr(self._inner, name)

    @property
    def address(self) -> str:
        """``"HOST:PORT via 127.0.0.1:LOCAL"``: where the run listens and the tunnel's local end."""
        inner = self._inner
        port = (inner.info.get("port") if inner is not None else None) or "?"
        return f"{self.host} port {port} via {self.tunnel.address if self.tunnel else 'no tunnel'}"

    def _connect(self, found, timeout: float | None = None) -> None:
        info, node = found
        old, self.tunnel = self.tunnel, None
        if old is not None:
            old.close()
        tunnel = Tunnel(self.ssh, self.host, info["port"], node)
        address = tunnel.open()
        try:
            inner = connect(address, info["token"], steer=self._steer, callbacks=self.callbacks, timeout=timeout)
        except BaseException:
            tunnel.close()
            raise
        inner.info.setdefault("port", info["port"])
        with self._lock:
            if self._closed:  # closed while connecting: let go at once
                inner.close()
                tunnel.close()
                return
            self._inner, self.tunnel, self.connected = inner, tunnel, True

    # ------------------------------------------------------------------ steering
    def _send(self, method: str, *args, **kwargs):
        inner = self._inner
        if not self.connected or inner is None:
            raise AttachError(f"disconnected from {self.what} on {self.host} (reconnecting); send it again once "
                              "reconnected")
        try:
            return getattr(inner, method)(*args, **kwargs)
        except OSError as exc:
            raise AttachError(f"disconnected from {self.what} on {self.host} (reconnecting): {exc}") from None

    def freeze(self, path) -> int:
        """Freeze a module or parameter at the run's next step; the command's id (:meth:`wait_ack`).

        Raises
        ------
        AttachError
            Disconnected (reconnecting): nothing was sent.
        """
        return self._send("freeze", path)

    def unfreeze(self, path) -> int:
        """Unfreeze a module or parameter at the run's next step (raises as :meth:`freeze`)."""
        return self._send("unfreeze", path)

    def set_lr(self, lr: float, group: int | None = None) -> int:
        """Set one param group's LR, or every group's in proportion (raises as :meth:`freeze`)."""
        return self._send("set_lr", lr, group)

    def save_now(self) -> int:
        """Have the run write ``last.pt`` at its next step (raises as :meth:`freeze`)."""
        return self._send("save_now")

    def _window_send(self, method: str, *args):
        """A command from the window's controls: while disconnected, a line in the status bar instead of an error."""
        try:
            return self._send(method, *args)
        except AttachError as exc:
            self._events.put(Notice("command_failed", f"not sent: {exc}"))
            return None

    def pause(self):
        """Pause the run at its next step (while disconnected: not sent, and said)."""
        return self._window_send("pause")

    def resume(self):
        """Resume a paused run (while disconnected: not sent, and said)."""
        return self._window_send("resume")

    def stop(self):
        """Ask the run to stop at its next step with ``last.pt`` saved (while disconnected: not sent, and said)."""
        return self._window_send("stop")

    def queue(self, command) -> None:
        """A core command from the window's controls (``SetTrainable``, ``SetLR``, ``SaveNow``); see :meth:`pause`."""
        self._window_send("queue", command)

    def probe(self, paths: list[str]) -> None:
        """Probe exactly these modules (see :meth:`pause`)."""
        self._window_send("probe", paths)

    def resolve_nonfinite(self, action: str) -> None:
        """Answer a ``NonFinite`` event (see :meth:`pause`)."""
        self._window_send("resolve_nonfinite", action)

    def end(self) -> bool:
        """A remote run is never ended from here (``cancel`` does): False."""
        return False

    def stop_and_save(self) -> None:
        """The window closes or detaches: let go; the run trains on."""
        self.close()

    def close(self) -> None:
        """Detach and close the tunnel (the local port is free afterwards); the run trains on. Idempotent."""
        with self._lock:
            self._closed = True
            inner, tunnel, self.tunnel, self.connected = self._inner, self.tunnel, None, False
        self._wake.set()
        if inner is not None:
            inner.close()
        if tunnel is not None:
            tunnel.close()

    def __enter__(self) -> RemoteAttachedRun:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # ------------------------------------------------------------------ events
    def events(self, timeout: float | None = None):
        """Yield the run's events across reconnections: history first, then live, :class:`Notice` lines on a loss
        (:data:`LOST`) and a return (:data:`BACK`); ``Finished`` last. Ends as ``AttachedRun.events`` does."""
        while True:
            try:
                event = self._events.get(timeout=timeout)
            except queue.Empty:
                return
            if event is _END:
                self._events.put(_END)
                return
            yield event
            if isinstance(event, Finished):
                return

    def run(self, emit: Callable[[Any], Any]) -> str:
        """Hand every event to ``emit`` until the run finishes or this side detaches; the end reason. Never raises:
        a lost connection is a :data:`LOST` notice and a reconnection, never a crash (:func:`drive`)."""
        return drive(self, emit, unfinished=self._unfinished, label="Remote run")

    def _unfinished(self) -> tuple[str, Event | None]:
        """The end reason, and the line said, when the events ended without a ``Finished``."""
        if self._inner is not None and self._inner.bad_peer is not None:
            return "error", None
        return "detached", ProgressText("detached; the run trains on")

    def _pump(self) -> None:
        """Move the events of each connection into this handle's queue; on a loss, reconnect (its own thread)."""
        replay = False
        try:
            while True:
                inner = self._inner
                for event in inner.events():
                    event = self._fresh(event) if replay else event
                    if event is None:
                        continue
                    self._seen(event)
                    self._events.put(event)
                    if isinstance(event, Finished):
                        self.reason = event.reason
                        return
                if inner.bad_peer is not None:
                    self.reason = "error"
                if self._closed or inner.bad_peer is not None:
                    return
                self.connected = False
                self._steer = "take" if inner.steering else False  # steer again only what this side steered
                inner.close()  # its socket: the reader has ended
                self._events.put(Notice(LOST, f"{self.what} on {self.host}: disconnected, reconnecting…"))
                ended = self._reconnect()
                if ended is not None:
                    self._events.put(Finished(ended))
                    return
                if self._closed:
                    return
                replay = True
                self._events.put(Notice(BACK, f"reconnected to {self.what} on {self.host}; the steps since the loss "
                                              "come from the run's history"))
        finally:
            self._events.put(_END)

    def _reconnect(self) -> str | None:
        """Retry until connected again (None) or the run ended (its state); returns at once when closed."""
        while not self._wake.wait(RETRY_S):
            try:
                found = self._locate()
                if found is None:
                    state = self._state()
                    if state in _GOING:
                        continue
                    return state
                self._connect(found)
                return None
            except (RemoteError, AttachError, OSError):
                continue  # the host is not back yet
        return None

    def _seen(self, event) -> None:
        if isinstance(event, Metrics) and len(event.values.get("step", ())):
            self._last_step = max(self._last_step, float(np.nanmax(event.values["step"])))
        elif isinstance(event, EpochEnded) and isinstance(event.metrics.get("epoch"), (int, float)):
            self._last_epoch = max(self._last_epoch, float(event.metrics["epoch"]))

    def _fresh(self, event):
        """``event`` of a history sent again, without what was shown already (None: nothing new in it)."""
        if isinstance(event, FitStarted):
            return None
        if isinstance(event, Metrics) and "step" in event.values:
            keep = np.asarray(event.values["step"]) > self._last_step
            if not keep.any():
                return None
            return Metrics({k: np.asarray(v)[keep] for k, v in event.values.items()}) if not keep.all() else event
        if isinstance(event, EpochEnded) and isinstance(event.metrics.get("epoch"), (int, float)):
            return event if event.metrics["epoch"] > self._last_epoch else None
        return event
