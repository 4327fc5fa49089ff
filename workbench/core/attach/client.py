"""The window's side of attaching (and a notebook's): :func:`connect` and :class:`AttachedRun`.

:class:`AttachedRun` is a :class:`~workbench.core.train.handle.RunHandle`: the
window drives it exactly as a run of its own (``run(emit)`` on its training
QThread, ``pause`` / ``resume`` / ``stop`` / ``queue`` from the GUI thread).
From Python, :meth:`AttachedRun.events` yields the same typed events and
:meth:`~AttachedRun.freeze`, :meth:`~AttachedRun.set_lr`... steer. Messages
are :mod:`~workbench.core.attach.wire`'s data-only encoding in both directions.

While it steers, a run renews its pause lease (:mod:`~workbench.core.attach.lease`)
from a thread of its own; a window whose steering another window took over (or
whose lapsed lease freed it) gets a :class:`~workbench.core.attach.notice.Notice`
(``"read_only"``) and steers no more.
"""

from __future__ import annotations

import itertools
import queue
import socket
import threading
from typing import Any, Callable, Iterator

from workbench.core.attach import script as _script  # registers the probe dataclasses for the wire
from workbench.core.attach.lease import renew_interval
from workbench.core.attach.notice import Notice
from workbench.core.attach.schema import SchemaError, check_ack, check_event, check_steering, check_welcome
from workbench.core.attach.wire import MAX_MESSAGE_BYTES, UnknownType, WireError, recv_message, send_message
from workbench.core.train.events import Event, Finished, ProgressText, RunError, Sink
from workbench.core.train.trainer.commands import SampleNow, SaveNow, SetLR, SetTrainable

__all__ = ["connect", "drive", "AttachedRun", "AttachError", "ConnectCancel", "parse_address",
           "CONNECT_TIMEOUT_S", "MAX_WELCOME_BYTES", "SCRIPT_EVENTS"]

#: Seconds to connect and be welcomed, in all: one deadline for the whole welcome, not a timeout per read
#: (a peer trickling a byte every few seconds would otherwise hold the window for ever).
CONNECT_TIMEOUT_S = 10.0
#: The largest welcome (bytes) a window reads: a model at :data:`~workbench.core.attach.schema.MAX_MODULES`
#: modules and twice as many tensors describes itself in ~10 MB; the 64 MB of any other message would let a
#: peer fill the window's memory with millions of entries before they are counted.
MAX_WELCOME_BYTES = 16 * 2**20
#: Replies to commands kept in :attr:`AttachedRun.acks` (the newest; a window waits for the latest few).
MAX_ACKS = 1024
#: The events a script publishes (:data:`workbench.core.attach.script.PUBLISHED`): the only event types the
#: socket rebuilds, so ``StateSynced`` / ``ExtrasReady`` (whose bytes a training process's pipe reads with
#: ``torch.load``) never come from a socket; a message of any other type is skipped whole.
SCRIPT_EVENTS = frozenset(cls.__name__ for cls in _script.PUBLISHED)
_END = object()


class AttachError(ConnectionError):
    """The script could not be reached, refused the token, or answered with something that is not a welcome."""


class ConnectCancel:
    """Ends a :func:`connect` in progress from another thread (the busy dialog's Cancel): its socket is shut.

    :func:`connect` then raises :class:`AttachError` ("cancelled"); once it has returned, :meth:`cancel`
    does nothing (the run is the caller's to close).
    """

    def __init__(self):
        self._lock = threading.Lock()
        self._sock: socket.socket | None = None
        self._done = False
        self.cancelled = False
        self.expired = False

    def cancel(self) -> None:
        """Stop the connect now (any thread)."""
        self._end("cancelled")

    def _expire(self) -> None:  # the deadline's timer
        self._end("expired")

    def _end(self, why: str) -> None:
        with self._lock:
            setattr(self, why, True)  # after connect returned: said, but the run is the caller's to close
            if self._done:
                return
            sock = self._sock
        if sock is not None:
            _shut(sock)

    def _attach(self, sock: socket.socket) -> None:
        with self._lock:
            self._sock = sock
            stopped = self.cancelled or self.expired
        if stopped:
            _shut(sock)

    def _finish(self) -> bool:
        """No cancel from now on; True when the socket was shut meanwhile."""
        with self._lock:
            self._done = True
            return self.cancelled or self.expired


def _shut(sock: socket.socket) -> None:
    try:
        sock.shutdown(socket.SHUT_RDWR)  # wakes a connect or recv blocked on another thread
    except OSError:
        pass


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


def connect(address, token: str, *, steer: bool | str = True, callbacks=(), cancel: ConnectCancel | None = None,
            timeout: float | None = None) -> "AttachedRun":
    """Attach to a script that called :func:`workbench.attach`.

    Parameters
    ----------
    address : str or (str, int)
        ``"host:port"`` the script printed (through ``ssh -L``: the local end).
    token : str
        The run's token, printed by the script and in its discovery file.
    steer : bool or "take"
        Ask to steer; False watches read-only (so does a second window while one steers); ``"take"`` takes
        the steering from the window that has it (that one is told, and watches read-only).
    callbacks : sequence of ProbeCallback
        The window's live probes: their copies run in the script, their reports come back to ``sink``.
    cancel : ConnectCancel, optional
        Lets another thread end the wait (a dialog's Cancel).
    timeout : float, optional
        Seconds for the whole of connecting and reading the welcome (one deadline; :data:`CONNECT_TIMEOUT_S`).

    Returns
    -------
    AttachedRun
        Already receiving: the run's history first, then live events.

    Raises
    ------
    ValueError
        ``steer`` is not True, False or ``"take"``.
    AttachError
        Nothing listens there, the token is wrong, the peer is not a Workbench script, its welcome did not
        come whole within ``timeout`` seconds, is larger than :data:`MAX_WELCOME_BYTES` or fails
        :func:`~workbench.core.attach.schema.check_welcome` (a wrong type, a model past its limits), or
        ``cancel`` was used.
    """
    if steer not in (True, False, "take"):
        raise ValueError(f"steer must be True, False or 'take', not {steer!r}")
    host, port = parse_address(address)
    where = f"{host}:{port}"
    timeout = CONNECT_TIMEOUT_S if timeout is None else float(timeout)
    guard = cancel if cancel is not None else ConnectCancel()
    deadline = threading.Timer(timeout, guard._expire)
    deadline.daemon = True
    deadline.start()
    sock = None
    try:
        sock, reply = _hello(host, port, token, steer, timeout, guard)
    except (OSError, WireError) as exc:
        error = exc
    else:
        error = None
    finally:
        deadline.cancel()
    stopped = guard._finish()
    if stopped or error is not None:
        if sock is not None:
            sock.close()
        if guard.cancelled:
            raise AttachError(f"attaching to {where} was cancelled")
        if guard.expired:
            raise AttachError(f"{where} did not welcome this window within {timeout:g} s "
                              "(a slow tunnel, or not a Workbench script)")
        if isinstance(error, WireError):
            raise AttachError(f"{where} did not answer as a Workbench script: {error}")
        raise AttachError(f"cannot reach {where}: {getattr(error, 'strerror', None) or error}. Is the script "
                          "running, and for a remote machine, is the ssh -L tunnel open?")
    if isinstance(reply, dict) and reply.get("type") == "refused":
        sock.close()
        reason = reply.get("reason")
        raise AttachError(f"{where} refused to attach: {reason if isinstance(reason, str) else '?'}"[:500])
    try:
        check_welcome(reply)
    except SchemaError as exc:
        sock.close()
        raise AttachError(f"{where} sent a welcome Workbench does not take: {exc}") from None
    sock.settimeout(None)
    return AttachedRun(sock, reply, where, callbacks)


def _hello(host: str, port: int, token: str, steer: bool | str, timeout: float, guard: ConnectCancel):
    """``(socket, reply)``: connected, hello sent, one message read (``guard`` may shut the socket meanwhile).

    Raises ``OSError`` when no address connects, ``WireError`` when the peer fails after connecting.
    """
    last: OSError = OSError(f"no address for {host}")
    for family, kind, proto, _name, addr in socket.getaddrinfo(host, port, type=socket.SOCK_STREAM):
        sock = socket.socket(family, kind, proto)
        guard._attach(sock)
        sock.settimeout(timeout + 1.0)  # each read is bounded too; the guard's timer bounds them all, and first
        try:
            sock.connect(addr)
        except OSError as exc:
            sock.close()
            last = exc
            if guard.cancelled or guard.expired:
                break
            continue
        try:
            send_message(sock, {"type": "hello", "token": str(token), "steer": bool(steer), "take": steer == "take",
                                "version": 1})
            reply = recv_message(sock, MAX_WELCOME_BYTES)
        except OSError as exc:  # connected: the peer, not the address, failed
            sock.close()
            raise WireError(exc.strerror or str(exc) or type(exc).__name__) from None
        except BaseException:
            sock.close()
            raise
        if reply is None:
            sock.close()
            raise WireError("the connection closed before a welcome")
        return sock, reply
    raise last


def drive(run, emit: Callable[[Event], Any], *, unfinished: Callable[[], tuple[str, Event | None]],
          label: str) -> str:
    """The top of an attached run's ``run(emit)``: hand each event to ``emit`` until ``Finished``; the end reason.

    Never raises (an exception is a ``RunError`` line and the reason ``"error"``). However the events end,
    ``run.reason`` is set and ``run.close()`` called, then ``emit(Finished(reason))`` comes last.

    Parameters
    ----------
    run : AttachedRun or RemoteAttachedRun
        Has ``events()`` (ends after ``Finished`` or when the connection is gone), ``close()`` and ``reason``.
    emit : callable
        Takes each event (the window's sink).
    unfinished : callable
        ``() -> (reason, line)`` when the events ended without a ``Finished``: the end reason, and an event
        emitted first (None: nothing to say).
    label : str
        Names the run in the ``RunError`` of an exception (``"Attached script"``).
    """
    reason = "detached"
    try:
        for event in run.events():
            if isinstance(event, Finished):
                reason = event.reason
                return reason
            emit(event)
        ending, line = unfinished()
        if line is not None:
            emit(line)
        reason = ending
    except Exception as exc:  # noqa: BLE001 - the run's top: report, end cleanly
        emit(RunError(f"{label}: {type(exc).__name__}: {exc}"))
        reason = "error"
    finally:
        run.reason = reason
        run.close()  # the socket and the listeners on the window's probe callbacks go with the run
        emit(Finished(reason))
    return reason


class AttachedRun:
    """A script's run seen from a window: a :class:`~workbench.core.train.handle.RunHandle` (see the module docstring).

    Attributes
    ----------
    info : dict
        The script's welcome: ``name``, ``pid``, ``run_dir``, ``model`` (its structure,
        :func:`~workbench.core.model.skeleton.describe_structure`), ``step``, ``paused``, ``lrs``...
    steering : bool
        This connection may steer (False: another window steers, or took over, or ``steer=False``).
    steered_elsewhere : bool
        Another window steered the run when this one attached.
    reason : str or None
        The end reason once the script finished (``"detached"`` when this side let go).
    bad_peer : str or None
        The one line said when the script sent a message that failed its check (the connection then ends,
        after a ``RunError`` with that line).
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
        self.bad_peer: str | None = None
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
        self._no_renew = threading.Event()
        lease = self.info.get("pause_lease_s")  # a script without leases is not sent renewals
        if self.steering and isinstance(lease, (int, float)) and not isinstance(lease, bool) and lease > 0:
            threading.Thread(target=self._renew_loop, args=(renew_interval(lease),), name="workbench-attach-renew",
                             daemon=True).start()
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

    def sample_now(self) -> int:
        """Have a causal LM's run complete its prompts at its next step (``samples.jsonl``, marked on demand)."""
        return self._command("sample_now")

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
        """A core command (``SetTrainable``, ``SetLR``, ``SaveNow``, ``SampleNow``) from the window's controls.

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
        elif isinstance(command, SampleNow):
            self.sample_now()
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
        self._no_renew.set()
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

        Never raises: a lost connection is a ``RunError`` and the reason ``"crashed"`` (:func:`drive`).
        """
        return drive(self, emit, unfinished=self._unfinished, label="Attached script")

    def _unfinished(self) -> tuple[str, Event | None]:
        """The end reason, and the line said, when the events ended without a ``Finished``."""
        if self.bad_peer is not None:
            return "error", None  # its RunError line was the last event
        if not (self._closed or self._detaching):
            return "crashed", RunError(f"The connection to the script at {self.address} was lost "
                                       f"(the script ended or the network went away).")
        return "detached", ProgressText("detached; the script trains on")

    # ------------------------------------------------------------------ internals
    def _renew_loop(self, every: float) -> None:
        """Renew the pause lease every ``every`` seconds while this side steers (a thread of its own)."""
        while not self._no_renew.wait(every):
            if not self.steering or self._closed:
                return
            try:
                self._send({"type": "renew"})
            except OSError:
                return

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
                try:
                    self._take(msg)
                except SchemaError as exc:  # a peer that sends what no script sends: one line, and let go
                    self.bad_peer = (f"The script at {self.address} sent a message Workbench does not take "
                                     f"({exc}); detached.")
                    self._events.put(RunError(self.bad_peer))
                    return
        finally:
            self._events.put(_END)

    def _take(self, msg: dict) -> None:
        """One message from the script, checked (:mod:`~workbench.core.attach.schema`) before anything uses it."""
        if msg.get("type") == "ack":
            check_ack(msg)
            with self._acked:
                self.acks.append(msg)
                del self.acks[:-MAX_ACKS]  # a peer replying without end never fills the memory
                self._acked.notify_all()
            if not msg.get("ok"):  # the window says so (a status line), never silently
                self._events.put(ProgressText(f"The script refused a command: {msg.get('error')}"))
            return
        if msg.get("type") == "steering":
            check_steering(msg)
            if self.steering and not msg["steering"]:
                self.steering = False
                self._no_renew.set()
                self._events.put(Notice("read_only", str(msg.get("reason") or "this window is read-only now")))
            return
        event = msg.get("event")
        if msg.get("type") != "event" or type(event).__name__ not in SCRIPT_EVENTS:
            return  # a script publishes no state blobs: nothing here is ever unpickled
        check_event(event)
        self._events.put(event)

    def wait_ack(self, cid: int | None = None, timeout: float = 5.0) -> dict | None:
        """The reply to command ``cid`` (the latest when None) within ``timeout`` seconds, or None."""
        def found():
            return next((a for a in reversed(self.acks) if cid is None or a.get("id") == cid), None)

        with self._acked:  # the reader thread notifies on every reply
            self._acked.wait_for(found, timeout)
            return found()
