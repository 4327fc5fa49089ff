"""A hostile script for the attach tests: a real socket on 127.0.0.1 that speaks the wire protocol as told.

``FakePeer(serve)`` accepts windows; for each it reads the hello, then runs
``serve(peer, conn)`` on its own thread (send a bad welcome, trickle one byte at
a time, send events...), then reads and drops whatever the window sends until it
closes. Imported by ``tests/core/attach`` and ``tests/ui``.
"""

from __future__ import annotations

import socket
import struct
import threading
from typing import Callable

from workbench.core.attach.wire import MAGIC, encode, recv_message

__all__ = ["FakePeer", "welcome_frame", "json_frame", "event_frame", "trickle", "sends", "MINIMAL_INFO"]

#: A welcome's info the window takes: a one-module model, one param group.
MINIMAL_INFO = {"name": "evil", "pid": 1, "run_dir": "/nonexistent", "lrs": [0.1], "step": 0, "paused": False,
                "device": "cpu", "model": {"modules": [["", "Evil"]], "params": [], "buffers": []}}


def welcome_frame(info: dict, **extra) -> bytes:
    """The framed welcome the server sends, with ``info`` (and ``steering`` True)."""
    return encode({"type": "welcome", "info": info, "steering": True, "steered_elsewhere": False, "history": 0,
                   **extra})


def json_frame(text: bytes) -> bytes:
    """A frame whose body is this JSON text (built as bytes: a 60 MB welcome costs the peer 60 MB, no more)."""
    body = struct.pack(">I", len(text)) + text
    return MAGIC + struct.pack(">I", len(body)) + body


def sends(*frames: bytes) -> Callable:
    """A ``serve`` that sends these frames whole, one after another."""
    def serve(peer: "FakePeer", conn: socket.socket) -> None:
        for frame in frames:
            conn.sendall(frame)
    return serve


def trickle(frame: bytes, every_s: float) -> Callable:
    """A ``serve`` that sends ``frame`` one byte every ``every_s`` seconds (until the peer closes)."""
    def serve(peer: "FakePeer", conn: socket.socket) -> None:
        for i in range(len(frame)):
            if peer.stopped.wait(every_s):
                return
            conn.sendall(frame[i:i + 1])
    return serve


class FakePeer:
    """See the module docstring. ``hellos``: what each window sent first; ``closed``: set when a window left."""

    def __init__(self, serve: Callable):
        self.serve = serve
        self.server = socket.create_server(("127.0.0.1", 0))
        self.address = f"127.0.0.1:{self.server.getsockname()[1]}"
        self.hellos: list = []
        self.stopped = threading.Event()
        self.closed = threading.Event()
        self._conns: list[socket.socket] = []
        threading.Thread(target=self._accept, name="fake-peer", daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self.server.accept()
            except OSError:
                return
            self._conns.append(conn)
            threading.Thread(target=self._one, args=(conn,), name="fake-peer-conn", daemon=True).start()

    def _one(self, conn: socket.socket) -> None:
        try:
            conn.settimeout(60)
            self.hellos.append(recv_message(conn))
            self.serve(self, conn)
            while recv_message(conn) is not None:
                pass
        except (OSError, ValueError):
            pass
        finally:
            self.closed.set()
            conn.close()

    def close(self) -> None:
        """Stop serving; every connection is shut."""
        self.stopped.set()
        self.server.close()
        for conn in self._conns:
            try:
                conn.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass

    def __enter__(self) -> "FakePeer":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def event_frame(event) -> bytes:
    """An event message as the server frames it."""
    return encode({"type": "event", "event": event})
