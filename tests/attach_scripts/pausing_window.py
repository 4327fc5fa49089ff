"""A window in a process of its own (run by tests/core/attach/test_lease.py): attach, steer, pause, renew, wait.

``python pausing_window.py``, then ``ADDRESS TOKEN`` on its input. It speaks the attach protocol with the
standard library alone (it starts in milliseconds, where importing torch for ``workbench.connect`` takes
seconds on a busy machine): the hello, a pause, then a lease renewal as often as ``workbench.connect``'s
client renews it (``workbench.core.attach.lease.renew_interval``); it prints ``paused`` once the script says
it is and ``notice KIND`` for each notice it reads, until its input closes. The test stops this process
(SIGSTOP) to play a laptop gone to sleep: its renewals stop with it.
"""

import json
import socket
import struct
import sys
import threading

MAGIC = b"WBA1"
RENEW_S = 5.0  # workbench.core.attach.lease.RENEW_S


def send(sock: socket.socket, msg: dict) -> None:
    text = json.dumps(msg).encode()
    body = struct.pack(">I", len(text)) + text
    sock.sendall(MAGIC + struct.pack(">I", len(body)) + body)


def recv_exact(sock: socket.socket, n: int) -> bytes:
    data = b""
    while len(data) < n:
        chunk = sock.recv(n - len(data))
        if not chunk:
            raise EOFError
        data += chunk
    return data


def recv_json(sock: socket.socket) -> dict:
    """One message's JSON part (its buffers, if any, are read and dropped)."""
    magic, size = struct.unpack(">4sI", recv_exact(sock, 8))
    assert magic == MAGIC
    body = recv_exact(sock, size)
    (n,) = struct.unpack(">I", body[:4])
    return json.loads(body[4:4 + n])


def main() -> int:
    address, token = sys.stdin.readline().split()
    host, port = address.rsplit(":", 1)
    sock = socket.create_connection((host, int(port)))
    send(sock, {"type": "hello", "token": token, "steer": True, "take": False, "version": 1})
    welcome = recv_json(sock)
    assert welcome["type"] == "welcome" and welcome["steering"], welcome
    every = max(0.05, min(RENEW_S, welcome["info"]["pause_lease_s"] / 4))
    lock = threading.Lock()
    with lock:
        send(sock, {"type": "command", "op": "pause", "id": 1})
    done = threading.Event()

    def renew() -> None:
        while not done.wait(every):
            with lock:
                send(sock, {"type": "renew"})

    def read() -> None:
        try:
            while True:
                msg = recv_json(sock)
                event = msg.get("event") if msg.get("type") == "event" else None
                if isinstance(event, dict) and event.get("$dc") == "Paused":
                    print("paused", flush=True)
                elif isinstance(event, dict) and event.get("$dc") == "Notice":
                    print(f"notice {event['f']['kind']}", flush=True)
        except (EOFError, OSError):
            pass

    threading.Thread(target=renew, daemon=True).start()
    threading.Thread(target=read, daemon=True).start()
    sys.stdin.read()  # until the test closes our input
    done.set()
    with lock:
        send(sock, {"type": "command", "op": "detach"})
    sock.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
