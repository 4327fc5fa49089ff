"""The socket a script listens on while it trains: :class:`AttachServer`.

Threads, none of them the training thread: one accepts connections; per window
one reads its commands and one writes events to it. The training thread only
calls :meth:`AttachServer.publish` (a lock, an append; never a send), so a slow
or vanished window costs the script nothing but dropped metric batches.

Every connection first sends ``{"type": "hello", "token", "steer"}`` within
:data:`HELLO_TIMEOUT_S`; a wrong token (compared in constant time,
``hmac.compare_digest``), a message that is not one (:mod:`.wire`), or one
larger than its limit closes the connection and is logged
(``logging.getLogger("workbench.attach")``); the script goes on. One window at
a time steers; others watch read-only. A window whose hello says ``"take": true``
takes the steering over: the window that steered is told
(``{"type": "steering", "steering": false, "reason"}``) and watches read-only from
then on. A window that attaches gets the welcome (``{"type": "welcome", "info",
"steering", "steered_elsewhere"}``), then the run's history (:class:`History`),
then every event as it happens. The steering window sends ``{"type": "renew"}``
every few seconds (its pause lease, :mod:`.lease`); nothing answers it.
"""

from __future__ import annotations

import hmac
import logging
import queue
import socket
import threading
import time
from typing import Any, Callable

import numpy as np

from workbench.core.attach.notice import Notice
from workbench.core.attach.wire import encode, recv_message, send_message
from workbench.core.train.events import Event, Metrics, Sink

__all__ = ["AttachServer", "History", "HELLO_TIMEOUT_S", "MAX_COMMAND_BYTES", "HISTORY_ROWS", "BACKLOG",
           "REPLAY_CHUNK_ROWS", "MAX_PENDING", "KEEPALIVE"]

log = logging.getLogger("workbench.attach")

#: Seconds a new connection has to authenticate.
HELLO_TIMEOUT_S = 5.0
#: The largest message a window may send (bytes): commands are small.
MAX_COMMAND_BYTES = 1 * 2**20
#: Step rows the history keeps; beyond, every other older row is dropped (the curve keeps its shape).
HISTORY_ROWS = 200_000
#: Metric / probe batches waiting for a slow window beyond which new ones are dropped.
BACKLOG = 64
#: Step rows per history message sent to a window that attaches (40 columns: ~6 MB).
REPLAY_CHUNK_ROWS = 20_000
#: Connections that have not authenticated yet, beyond which new ones are closed at once.
MAX_PENDING = 16
#: TCP keepalive of a window's connection (idle s, interval s, probes): a window whose network died
#: is dropped within about a minute, and its steering (and a pause it asked) is freed.
KEEPALIVE = (20, 10, 3)


class History:
    """What a window that attaches late is shown first: every event but the step metrics, in order,
    and the step metrics kept evenly over the whole run (at most ``max_rows`` rows: one of every
    ``2**k`` steps once the run is longer).

    Parameters
    ----------
    max_rows : int
        Step rows kept (:data:`HISTORY_ROWS`).
    """

    def __init__(self, max_rows: int = HISTORY_ROWS):
        self.max_rows = int(max_rows)
        self.events: list[Event] = []
        self._cols: dict[str, list[np.ndarray]] = {}
        self._rows = 0
        self._seen = 0  # step rows received in all
        self._stride = 1  # one row kept of every ``_stride`` received (doubles each time the history is full)

    def add(self, event: Event) -> None:
        """Keep ``event`` (probe reports and notices are live only: not kept)."""
        if isinstance(event, Metrics):
            self._add_rows(event.values)
        elif not isinstance(event, (Sink, Notice)):
            self.events.append(event)

    def _add_rows(self, values: dict) -> None:
        n = len(values.get("step", ()))
        if not n:
            return
        first = (-self._seen) % self._stride  # keep the rows whose run-wide index is a multiple of the stride
        self._seen += n
        if first:
            values = {k: np.asarray(v)[first::self._stride] for k, v in values.items()}
        elif self._stride > 1:
            values = {k: np.asarray(v)[::self._stride] for k, v in values.items()}
        n = len(values.get("step", ()))
        if not n:
            return
        for k in set(self._cols) | set(values):
            col = values.get(k)
            if col is None:
                col = np.full(n, np.nan)
            if k not in self._cols:
                self._cols[k] = [np.full(self._rows, np.nan)] if self._rows else []
            self._cols[k].append(np.asarray(col, dtype=np.float64))
        self._rows += n
        if self._rows > self.max_rows:  # every other row of the whole run, and from now on every 2k-th
            merged = self.metrics()
            self._cols = {k: [v[::2]] for k, v in merged.items()}
            self._rows = len(next(iter(self._cols.values()))[0])
            self._stride *= 2

    def metrics(self) -> dict:
        """The kept step rows: ``{key: (R,) float64}``."""
        return {k: np.concatenate(v) if v else np.zeros(0) for k, v in self._cols.items()}

    def replay(self, chunk: int = REPLAY_CHUNK_ROWS) -> list[Event]:
        """The events a new window gets first: the first event (``FitStarted``), the kept step rows as
        :class:`Metrics` of at most ``chunk`` rows each (every message stays far below the reader's limit), the rest."""
        out = list(self.events[:1])
        if self._rows:
            merged = self.metrics()
            for start in range(0, self._rows, chunk):
                out.append(Metrics({k: v[start:start + chunk] for k, v in merged.items()}))
        return out + self.events[1:]


class _Client:
    """One window: its socket, whether it steers, and the events waiting to be written."""

    def __init__(self, conn: socket.socket, peer: str, steering: bool):
        self.conn = conn
        self.peer = peer
        self.steering = steering
        self.detached = False
        self.dropped = 0
        self.queue: queue.Queue = queue.Queue()
        self.closed = False
        self.writer: threading.Thread | None = None

    def offer(self, event: Event) -> None:
        if isinstance(event, (Metrics, Sink)) and self.queue.qsize() >= BACKLOG:
            self.dropped += 1  # a slow window loses metric batches, the script never waits
            return
        self.queue.put(event)

    def close(self) -> None:
        self.closed = True
        self.queue.put(None)
        try:
            self.conn.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        self.conn.close()


class AttachServer:
    """Listen for windows on ``host:port`` (0: a free port) and serve them (see the module docstring).

    Parameters
    ----------
    token : str
        The run's secret; a window must send it.
    welcome : callable
        ``welcome() -> dict``: the run's description for a new window (plain data).
    on_command : callable
        ``on_command(message, steering) -> str or None``: a window's command
        (``{"type": "command", "op": ...}``); returns an error text to send back, or None.
    on_lost : callable
        ``on_lost(clean)``: the steering window went away (``clean``: it said detach, or another took over).
    host, port : str, int
    on_renew : callable, optional
        ``on_renew()``: the steering window renewed its pause lease (a reader thread).
    on_steering : callable, optional
        ``on_steering()``: a window steers from now on (it attached steering, or took over).

    Raises
    ------
    OSError
        The address cannot be bound.
    """

    def __init__(self, token: str, welcome: Callable[[], dict], on_command: Callable[[dict, bool], str | None],
                 on_lost: Callable[[bool], None], host: str = "127.0.0.1", port: int = 0, *,
                 on_renew: Callable[[], None] | None = None, on_steering: Callable[[], None] | None = None):
        self.token = str(token)
        self._welcome = welcome
        self._on_command = on_command
        self._on_lost = on_lost
        self._on_renew = on_renew
        self._on_steering = on_steering
        self.history = History()
        self._lock = threading.Lock()
        self._clients: list[_Client] = []
        self._pending = 0
        self._closed = False
        self.sock = socket.create_server((host, int(port)), reuse_port=False)
        self.host = host
        self.port = int(self.sock.getsockname()[1])
        self._thread = threading.Thread(target=self._accept_loop, name="workbench-attach", daemon=True)
        self._thread.start()

    @property
    def address(self) -> str:
        """``"host:port"``."""
        return f"{self.host}:{self.port}"

    @property
    def windows(self) -> int:
        """Windows attached now."""
        with self._lock:
            return len(self._clients)

    @property
    def steered(self) -> bool:
        """A window steers the run now."""
        with self._lock:
            return any(c.steering and not (c.closed or c.detached) for c in self._clients)

    def release_steering(self, reason: str) -> bool:
        """The steering window watches read-only from now on, and is told ``reason``; False when none steered."""
        with self._lock:
            released = [c for c in self._clients if c.steering and not (c.closed or c.detached)]
            for c in released:
                c.steering = False
                c.queue.put(_Ack({"type": "steering", "steering": False, "reason": str(reason)}))
        for c in released:
            log.info("workbench attach: %s is read-only now: %s", c.peer, reason)
        return bool(released)

    def publish(self, event: Event) -> None:
        """Keep ``event`` in the history and queue it for every window (training thread; never blocks)."""
        with self._lock:
            self.history.add(event)
            for c in self._clients:
                c.offer(event)

    def close(self, timeout: float = 2.0) -> None:
        """Stop listening; give every window up to ``timeout`` seconds to receive what was published, then close."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            clients = list(self._clients)
        try:
            self.sock.close()
        except OSError:
            pass
        for c in clients:
            c.queue.put(None)  # the writer ends after what is queued
        for c in clients:
            t = getattr(c, "writer", None)
            if t is not None:
                t.join(timeout)
            c.close()

    # ------------------------------------------------------------------ threads
    def _accept_loop(self) -> None:
        while True:
            try:
                conn, addr = self.sock.accept()
            except OSError as exc:
                if self._closed:
                    return
                log.warning("workbench attach: accept failed (%s); listening on", exc)  # EMFILE...: try again
                time.sleep(0.5)
                continue
            peer = f"{addr[0]}:{addr[1]}" if isinstance(addr, tuple) else str(addr)
            with self._lock:
                if self._pending >= MAX_PENDING:
                    log.warning("workbench attach: refused a connection from %s: too many unauthenticated", peer)
                    conn.close()
                    continue
                self._pending += 1
            _keepalive(conn)
            threading.Thread(target=self._serve, args=(conn, peer), name="workbench-attach-reader",
                             daemon=True).start()

    def _serve(self, conn: socket.socket, peer: str) -> None:
        client = self._handshake(conn, peer)
        if client is None:
            return
        try:
            conn.settimeout(None)
            while not client.closed:
                try:
                    msg = recv_message(conn, MAX_COMMAND_BYTES)
                except OSError:
                    break
                except Exception as exc:  # noqa: BLE001 - WireError, or anything a damaged message raises
                    log.warning("workbench attach: refused a message from %s: %s (connection closed)", peer, exc)
                    break
                if msg is None:
                    break
                self._command(client, msg)
        finally:
            self._drop(client)

    def _handshake(self, conn: socket.socket, peer: str) -> _Client | None:
        # one deadline for the whole hello (a per-recv timeout let a byte every few seconds hold it for hours)
        deadline = threading.Timer(HELLO_TIMEOUT_S, _shut, args=(conn,))
        deadline.daemon = True
        deadline.start()
        try:
            conn.settimeout(HELLO_TIMEOUT_S)
            msg = recv_message(conn, 64 * 1024)
        except Exception as exc:  # noqa: BLE001 - WireError, OSError, or anything a damaged message raises
            log.warning("workbench attach: refused a connection from %s: %s", peer, exc)
            conn.close()
            return None
        finally:
            deadline.cancel()
            with self._lock:
                self._pending -= 1
        token = msg.get("token") if isinstance(msg, dict) and msg.get("type") == "hello" else None
        if not isinstance(token, str) or not hmac.compare_digest(token.encode(), self.token.encode()):
            log.warning("workbench attach: refused a connection from %s: wrong token", peer)
            try:
                send_message(conn, {"type": "refused", "reason": "wrong token"})
            except OSError:
                pass
            conn.close()
            return None
        with self._lock:
            if self._closed:
                conn.close()
                return None
            steerers = [c for c in self._clients if c.steering and not (c.closed or c.detached)]  # not one letting go
            steered = bool(steerers)
            take = bool(msg.get("steer", True)) and msg.get("take") is True and steered
            steering = bool(msg.get("steer", True)) and (not steered or take)
            for c in steerers if take else ():  # told before anything the new window's commands change
                c.steering = False
                c.queue.put(_Ack({"type": "steering", "steering": False,
                                  "reason": f"another window ({peer}) took over steering this run: this window "
                                            "is read-only now"}))
            client = _Client(conn, peer, steering)
            replay = self.history.replay()
            self._clients.append(client)  # events published from here on queue behind the replay
        if take:
            log.info("workbench attach: %s took over steering", peer)
            self._lost(True)  # the old window's probes go before the new window's arrive
        try:
            conn.settimeout(30.0)
            welcome = {"type": "welcome", "info": self._welcome(), "steering": steering,
                       "steered_elsewhere": steered, "history": len(replay)}
            send_message(conn, welcome)
            for event in replay:
                conn.sendall(_event_bytes(event))
        except (OSError, TypeError) as exc:
            log.warning("workbench attach: lost %s while sending the history: %s", peer, exc)
            self._drop(client)
            return None
        client.writer = threading.Thread(target=self._write_loop, args=(client,), name="workbench-attach-writer",
                                         daemon=True)
        client.writer.start()
        log.info("workbench attach: %s attached (%s)", peer, "steering" if steering else "read-only")
        if steering and self._on_steering is not None:
            try:
                self._on_steering()
            except Exception:  # noqa: BLE001
                log.exception("workbench attach: on_steering failed")
        return client

    def _write_loop(self, client: _Client) -> None:
        while True:
            event = client.queue.get()
            if event is None or client.closed:
                return
            try:
                data = _event_bytes(event)
            except TypeError as exc:  # a probe's report without a wire form: a bug, never the run's end
                log.warning("workbench attach: an event could not be sent: %s", exc)
                continue
            try:
                client.conn.sendall(data)
            except OSError:
                return

    def _command(self, client: _Client, msg: Any) -> None:
        if isinstance(msg, dict) and msg.get("type") == "renew":  # the steering window is alive: no reply
            if client.steering and self._on_renew is not None:
                self._on_renew()
            return
        cid = msg.get("id") if isinstance(msg, dict) else None
        if not isinstance(msg, dict) or msg.get("type") != "command" or not isinstance(msg.get("op"), str):
            log.warning("workbench attach: refused a message from %s: not a command", client.peer)
            self._ack(client, cid, "not a command")
            return
        if msg["op"] == "detach":
            client.detached = True
            client.closed = True
            return
        try:
            error = self._on_command(msg, client.steering)
        except Exception as exc:  # noqa: BLE001 - a bad command is refused, the script trains on
            error = f"{type(exc).__name__}: {exc}"
        if error:
            log.warning("workbench attach: refused %r from %s: %s", msg["op"], client.peer, error)
        self._ack(client, cid, error)

    def _ack(self, client: _Client, cid: Any, error: str | None) -> None:
        try:
            reply = {"type": "ack", "id": cid if isinstance(cid, int) else None, "ok": not error, "error": error}
            client.queue.put(_Ack(reply))
        except Exception:  # noqa: BLE001
            pass

    def _drop(self, client: _Client) -> None:
        with self._lock:
            if client not in self._clients:
                client.close()
                return
            self._clients.remove(client)
        was_steering = client.steering
        client.close()
        log.info("workbench attach: %s %s", client.peer, "detached" if client.detached else "went away")
        if was_steering:
            self._lost(client.detached)

    def _lost(self, clean: bool) -> None:
        try:
            self._on_lost(clean)
        except Exception:  # noqa: BLE001
            log.exception("workbench attach: on_lost failed")


def _shut(conn: socket.socket) -> None:
    """End a connection that did not authenticate in time (its reader then fails and refuses it)."""
    try:
        conn.shutdown(socket.SHUT_RDWR)
    except OSError:
        pass


def _keepalive(conn: socket.socket) -> None:
    """TCP keepalive on a window's connection (:data:`KEEPALIVE`), where the platform has the options."""
    try:
        conn.setsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1)
        idle, interval, count = KEEPALIVE
        for name, value in (("TCP_KEEPIDLE", idle), ("TCP_KEEPINTVL", interval), ("TCP_KEEPCNT", count)):
            if hasattr(socket, name):
                conn.setsockopt(socket.IPPROTO_TCP, getattr(socket, name), value)
    except OSError:
        pass


class _Ack:
    """A message to one window (a reply to a command, a change of its steering), queued like an event."""

    def __init__(self, message: dict):
        self.message = message


def _event_bytes(event) -> bytes:
    if isinstance(event, _Ack):
        return encode(event.message)
    return encode({"type": "event", "event": event})  # the event as a registered dataclass (wire's one encoding)
