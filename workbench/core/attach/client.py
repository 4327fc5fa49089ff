"""The window's side of attaching (and a notebook's): :func:`connect` and :class:`AttachedRun`.

:class:`AttachedRun` is a :class:`~workbench.core.train.handle.RunHandle`: the
window drives it exactly as a run of its own (``run(emit)`` on its training
QThread, ``pause`` / ``resume`` / ``stop`` / ``queue`` from the GUI thread).
From Python, :meth:`AttachedRun.events` yields the same typed events and
:meth:`~AttachedRun.freeze`, :meth:`~AttachedRun.set_lr`... steer. Messages
are :mod:`~workbench.core.attach.wire`'s data-only encoding in both directions.
"""

from __future__ import annotations

import itertools
import queue
import socket
import threading
from typing import Any, Callable, Iterator

from workbench.core.attach import script as _script  # registers the probe dataclasses for the wire
from workbench.core.attach.wire import MAX_MESSAGE_BYTES, UnknownType, WireError, recv_message, send_message
from workbench.core.train.events import Event, Finished, ProgressText, RunError, Sink
from workbench.core.train.trainer.commands import SaveNow, SetLR, SetTrainable

__all__ = ["connect", "AttachedRun", "AttachError", "parse_address", "CONNECT_TIMEOUT_S", "SCRIPT_EVENTS"]

#: Seconds to connect and be welcomed.
CONNECT_TIMEOUT_S = 10.0
#: The events a script publishes (:data:`workbench.core.attach.script.PUBLISHED`): the only event types the
#: socket rebuilds, so ``StateSynced`` / ``ExtrasReady`` (whose bytes a training process's pipe reads with
#: ``torch.load``) never come from a socket; a message of any other type is skipped whole.
SCRIPT_EVENTS = frozenset(cls.__name__ for cls in _script.PUBLISHED)
_END = object()


class AttachError(ConnectionError):
    """The script could not be reached, refused the token, or answered with something that is not a welcome."""


def parse_address(address) -> tuple[str, int]:
    """``("host", port)`` of ``"host:port"``, ``":port"``, ``"port"`` or a tuple.

    Raises
    ------
    AttachError
        Not an address.
    """
    if isinstance(address, tuple) and len(address) == 2:
        return str(address[0]), int(address[1])
    text = str(address).strip()
    host, _, port = text.rpartition(":")
    host = host.strip("[]") or "127.0.0.1"
    try:
        n = int(port)
    except ValueError:
        raise AttachError(f"{text!r} is not an address: give host:port, e.g. 127.0.0.1:5678") from None
    if not 0 < n < 65536:
        raise AttachError(f"{text!r}: the port must be 1-65535")
    return host, n


def connect(address, token: str, *, steer: bool = True, callbacks=()) -> "AttachedRun":
    """Attach to a script that called :func:`workbench.attach`.

    Parameters
    ----------
    address : str or (str, int)
        ``"host:port"`` the script printed (through ``ssh -L``: the local end).
    token : str
        The run's token, printed by the script and in its discovery file.
    steer : bool
        Ask to steer; False watches read-only (so does a second window while one steers).
    callbacks : sequence of ProbeCallback
        The window's live probes: their copies run in the script, their reports come back to ``sink``.

    Returns
    -------
    AttachedRun
        Already receiving: the run's history first, then live events.

    Raises
    ------
    AttachError
        Nothing listens there, the token is wrong, or the peer is not a Workbench script.
    """
    host, port = parse_address(address)
    try:
        sock = socket.create_connection((host, port), timeout=CONNECT_TIMEOUT_S)
    except OSError as exc:
        raise AttachError(f"cannot reach {host}:{port}: {exc.strerror or exc}. Is the script running, "
                          "and for a remote machine, is the ssh -L tunnel open?") from None
    try:
        send_message(sock, {"type": "hello", "token": str(token), "steer": bool(steer), "version": 1})
        reply = recv_message(sock, MAX_MESSAGE_BYTES)
    except (OSError, WireError) as exc:
        sock.close()
        raise AttachError(f"{host}:{port} did not answer as a Workbench script: {exc}") from None
    if isinstance(reply, dict) and reply.get("type") == "refused":
        sock.close()
        raise AttachError(f"{host}:{port} refused to attach: {reply.get('reason')}")
    if not isinstance(reply, dict) or reply.get("type") != "welcome" or not isinstance(reply.get("info"), dict):
        sock.close()
        raise AttachError(f"{host}:{port} did not answer as a Workbench script")
    sock.settimeout(None)
    return AttachedRun(sock, reply, f"{host}:{port}", callbacks)


class AttachedRun:
    """A script's run seen from a window: a :class:`~workbench.core.train.handle.RunHandle` (see the module docstring).

    Attributes
    ----------
    info : dict
        The script's welcome: ``name``, ``pid``, ``run_dir``, ``model`` (its structure,
        :func:`~workbench.core.model.skeleton.describe_structure`), ``step``, ``paused``, ``lrs``...
    steering : bool
        This connection may steer (False: another window steers, or ``steer=False``).
    steered_elsewhere : bool
        Another window steered the run when this one attached.
    reason : str or None
        The end reason once the script finished (``"detached"`` when this side let go).
    acks : list of dict
        Replies to commands: ``{"id", "ok", "error"}`` (a refused command's error is also logged by the script).
    """

    kind = "attached"
    ranks = 1
    in_this_process = False
    can_end = False

    def __init__(self, sock: socket.socket, welcome: dict, address: str, callbacks=()):
        self.sock = sock
        self.address = address
        self.info: dict = welcome["info"]
        self.steering = bool(welcome.get("steering"))
        self.steered_elsewhere = bool(welcome.get("steered_elsewhere"))
        self.reason: str | None = None
        self.acks: list[dict] = []
        self.callbacks = list(callbacks)
        self._events: queue.Queue = queue.Queue()
        self._ids = itertools.count(1)
        self._send_lock = threading.Lock()
        self._closed = False
        self._detaching = False
        self._acked = threading.Condition()
        self._listeners: list = []
        self._reader = threading.Thread(target=self._read_loop, name="workbench-attach-client", daemon=True)
        self._reader.start()
        if self.callbacks and self.steering:
            self._install_callbacks()

    # ------------------------------------------------------------------ steering
    # each command returns its id: wait_ack(cid) waits for the script's reply to it
    def freeze(self, path: str | list[str]) -> int:
        """Freeze a module or parameter (qualified name; ``""`` = the whole model) at the script's next step."""
        return self._command("freeze", path=path)

    def unfreeze(self, path: str | list[str]) -> int:
        """Unfreeze a module or parameter at the script's next step."""
        return self._command("unfreeze", path=path)

    def set_lr(self, lr: float, group: int | None = None) -> int:
        """Set one param group's LR, or (``group`` None) every group's in proportion to the first's."""
        return self._command("set_lr", lr=float(lr), group=group)

    def pause(self) -> int:
        """Pause the script at its next step (its ``wb.step`` blocks until :meth:`resume` or :meth:`stop`)."""
        return self._command("pause")

    def resume(self) -> int:
        """Resume a paused script."""
        return self._command("resume")

    def save_now(self) -> int:
        """Have the script write ``last.pt`` into its run folder at its next step."""
        return self._command("save_now")

    def stop(self) -> int:
        """Ask the script to stop: its ``wb.should_stop`` turns True (a pause ends)."""
        return self._command("stop")

    def probe(self, paths: list[str]) -> None:
        """Probe exactly these modules (the first probe callback; one with default settings when none was sent)."""
        if not self.callbacks:
            self._command("callbacks", callbacks=[{"kind": "probe", "settings": {"probed": list(paths)}}])
        else:
            self._command("callback", index=0, method="set_probed", args=[list(paths)])

    def stop_and_save(self) -> None:
        """The window closes: let go of the script, which trains on (never stopped by a closing window)."""
        self.close()

    def queue(self, command: Any) -> None:
        """A core command (``SetTrainable``, ``SetLR``, ``SaveNow``) from the window's controls.

        Raises
        ------
        TypeError
            A command an attached script does not take.
        """
        if isinstance(command, SetTrainable):
            self._command("unfreeze" if command.flag else "freeze", path=list(command.names) if not
                          isinstance(command.names, str) else command.names)
        elif isinstance(command, SetLR):
            self.set_lr(command.lr, command.group)
        elif isinstance(command, SaveNow):
            self.save_now()
        else:
            raise TypeError(f"an attached script does not take {type(command).__name__}")

    def resolve_nonfinite(self, action: str) -> None:
        """Answer a ``NonFinite`` event: ``"stop"``, ``"lower_lr"`` or ``"continue"`` (no rollback in a script)."""
        self._command("resolve_nonfinite", action=action)

    def end(self) -> bool:
        """A script is never ended from the window: False."""
        return False

    def close(self) -> None:
        """Detach: the script trains on as it is (a pause stays); attach again later to pick up its history."""
        if self._closed:
            return
        self._detaching = True  # the script closes the connection on "detach": that end is no loss
        try:
            self._send({"type": "command", "op": "detach"})
        except OSError:
            pass
        self._closed = True
        for cb, listener in self._listeners:
            cb.remove_listener(listener)
        self._listeners = []
        try:
            self.sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        self.sock.close()

    def __enter__(self) -> "AttachedRun":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # ------------------------------------------------------------------ events
    def events(self, timeout: float | None = None) -> Iterator[Event]:
        """Yield the run's events as they come: history first, then live; ``Finished`` last.

        Ends after ``Finished``, when the connection is gone, or when ``timeout``
        seconds pass without an event (None waits for ever). A probe report of a
        callback this side installed goes to its ``sink`` and is not yielded.
        """
        while True:
            try:
                event = self._events.get(timeout=timeout)
            except queue.Empty:
                return
            if event is _END:
                self._events.put(_END)  # every later call ends at once too
                return
            if isinstance(event, Sink) and event.index < len(self.callbacks):
                self.callbacks[event.index].sink(event.data)
                continue
            yield event
            if isinstance(event, Finished):
                return

    def run(self, emit: Callable[[Event], Any]) -> str:
        """Hand every event to ``emit`` until the script finishes or this side detaches; the end reason.

        Never raises: a lost connection is a ``RunError`` and the reason ``"crashed"``.
        """
        reason = "detached"
        try:
            for event in self.events():
                if isinstance(event, Finished):
                    reason = event.reason
                    return reason
                emit(event)
            if not (self._closed or self._detaching):
                emit(RunError(f"The connection to the script at {self.address} was lost "
                              f"(the script ended or the network went away)."))
                reason = "crashed"
            else:
                emit(ProgressText("detached; the script trains on"))
            return reason
        except Exception as exc:  # noqa: BLE001 - the run's top: report, end cleanly
            emit(RunError(f"Attached script: {type(exc).__name__}: {exc}"))
            reason = "error"
            return reason
        finally:
            self.reason = reason
            self.close()  # the socket and the listeners on the window's probe callbacks go with the run
            emit(Finished(reason))

    # ------------------------------------------------------------------ internals
    def _install_callbacks(self) -> None:
        specs = []
        for index, cb in enumerate(self.callbacks):
            settings = dict(cb.settings())
            settings = {k: v for k, v in settings.items() if k in _script.PROBE_SETTINGS}
            specs.append({"kind": "probe", "settings": settings})
            if hasattr(cb, "add_listener"):
                listener = self._forward_to(index)
                cb.add_listener(listener)
                self._listeners.append((cb, listener))
        self._command("callbacks", callbacks=specs)

    def _forward_to(self, index: int):
        def forward(method: str, args: tuple) -> None:
            if method in _script.CALLBACK_METHODS:
                try:
                    self._command("callback", index=index, method=method, args=list(args))
                except OSError:
                    pass
        return forward

    def _command(self, op: str, **fields) -> int:
        cid = next(self._ids)
        self._send({"type": "command", "op": op, "id": cid, **fields})
        return cid

    def _send(self, msg: dict) -> None:
        if self._closed:
            raise OSError("detached from the script")
        with self._send_lock:
            send_message(self.sock, msg)

    def _read_loop(self) -> None:
        try:
            while True:
                try:
                    msg = recv_message(self.sock, MAX_MESSAGE_BYTES)
                except UnknownType:
                    continue  # an event this version does not rebuild (read whole): skip it
                except Exception:  # noqa: BLE001 - a lost or damaged stream ends the run's events
                    return
                if msg is None:
                    return
                if not isinstance(msg, dict):
                    continue
                if msg.get("type") == "ack":
                    with self._acked:
                        self.acks.append(msg)
                        self._acked.notify_all()
                    if not msg.get("ok"):  # the window says so (a status line), never silently
                        self._events.put(ProgressText(f"The script refused a command: {msg.get('error')}"))
                    continue
                event = msg.get("event")
                if msg.get("type") != "event" or type(event).__name__ not in SCRIPT_EVENTS:
                    continue  # a script publishes no state blobs: nothing here is ever unpickled
                self._events.put(event)
        finally:
            self._events.put(_END)

    def wait_ack(self, cid: int | None = None, timeout: float = 5.0) -> dict | None:
        """The reply to command ``cid`` (the latest when None) within ``timeout`` seconds, or None."""
        def found():
            return next((a for a in reversed(self.acks) if cid is None or a.get("id") == cid), None)

        with self._acked:  # the reader thread notifies on every reply
            self._acked.wait_for(found, timeout)
            return found()
