"""The data-only encoding of every message between a script and a window.

Why our own and not pickle: nothing that can execute code may cross the socket
(a pickle runs code of the sender's choosing when read). JSON carries the
structure; numpy arrays, tensors and bytes travel as raw buffers after it, each
described by dtype and shape; dataclasses travel as their name and fields and
are rebuilt only when the name is one of :data:`DATACLASSES` (registered by
:func:`register`, all of them Workbench's own plain-data types: the events a
script publishes and the commands they carry, the probes' reports). This is the
one encoding of the socket: an event is one dataclass like any other.

Frame: ``b"WBA1"``, a big-endian ``uint32`` body length, then the body:
a ``uint32`` JSON length, the JSON text (UTF-8), and the buffers back to back.
A length above the reader's limit is refused before a byte of the body is read.

JSON forms of what JSON lacks: ``{"$t": [...]}`` a tuple; ``{"$m": [[k, v], ...]}``
a dict whose keys are not all plain strings (or start with ``$``);
``{"$b": i}`` bytes; ``{"$nd": i, "dtype": "float32", "shape": [...]}`` an
ndarray; ``{"$pt": i, "dtype": "bfloat16", "shape": [...]}`` a tensor;
``{"$dc": "Name", "f": {...}}`` a dataclass.
"""

from __future__ import annotations

import dataclasses
import json
import socket
import struct
from pathlib import PurePath
from typing import Any

import numpy as np
import torch

__all__ = ["MAGIC", "MAX_MESSAGE_BYTES", "MAX_JSON_VALUES", "WireError", "UnknownType", "register", "DATACLASSES", "encode", "decode",
           "send_message", "recv_message"]

MAGIC = b"WBA1"
_HEAD = struct.Struct(">4sI")
_JSON_LEN = struct.Struct(">I")
#: The largest message (bytes) a reader accepts unless told otherwise: a resnet50's
#: probe reports are ~1 MB; a full model state is never sent.
MAX_MESSAGE_BYTES = 64 * 2**20
#: The most JSON values (containers plus elements) one message may hold, counted before it is parsed: each
#: costs ~60 bytes as a Python object for 2-3 bytes on the wire, so 64 MB of ``[[],[],...]`` would take
#: 1.4 GB; 2,000,000 keep a message under ~150 MB. A script's largest (its welcome at
#: :data:`~workbench.core.attach.schema.MAX_MODULES`, a probe report of thousands of modules) holds < 1,000,000.
MAX_JSON_VALUES = 2_000_000

#: numpy dtypes an ndarray may have on the wire (never ``object``).
_ND_DTYPES = {"bool", "int8", "uint8", "int16", "uint16", "int32", "uint32", "int64", "uint64",
              "float16", "float32", "float64"}
_PT_DTYPES = {str(d).removeprefix("torch."): d for d in (
    torch.bool, torch.uint8, torch.int8, torch.int16, torch.int32, torch.int64,
    torch.float16, torch.bfloat16, torch.float32, torch.float64)}

#: The dataclasses a message may rebuild, by name.
DATACLASSES: dict[str, type] = {}


class WireError(ValueError):
    """A message that is not one: bad magic, too large, truncated, not JSON, an unknown form or dataclass."""


class UnknownType(WireError):
    """A whole message holding a dataclass this side does not rebuild (a newer peer's type, or one refused here).

    The message was read to its end: the stream is intact and the next message can be read.
    """


def register(*classes: type) -> None:
    """Allow these dataclasses to be rebuilt from a message (by their ``__name__``).

    Raises
    ------
    TypeError
        One is not a dataclass.
    """
    for cls in classes:
        if not dataclasses.is_dataclass(cls):
            raise TypeError(f"{cls!r} is not a dataclass")
        DATACLASSES[cls.__name__] = cls


def encode(obj: Any) -> bytes:
    """The framed bytes of ``obj`` (header included).

    Raises
    ------
    TypeError
        Something in ``obj`` has no data-only form (a function, an arbitrary object).
    """
    buffers: list[bytes] = []
    text = json.dumps(_to_json(obj, buffers), separators=(",", ":")).encode("utf-8")
    body_len = _JSON_LEN.size + len(text) + sum(len(b) for b in buffers)
    return b"".join([_HEAD.pack(MAGIC, body_len), _JSON_LEN.pack(len(text)), text, *buffers])


def decode(body: bytes) -> Any:
    """The object of one frame's body (what follows the 8-byte header).

    Raises
    ------
    WireError
        The body is damaged or holds a form this side does not rebuild.
    """
    if len(body) < _JSON_LEN.size:
        raise WireError("truncated message")
    (n,) = _JSON_LEN.unpack_from(body)
    if _JSON_LEN.size + n > len(body):
        raise WireError("truncated message")
    text = bytes(body[_JSON_LEN.size:_JSON_LEN.size + n])
    values = text.count(b"[") + text.count(b"{") + text.count(b",")  # every value but a container's first follows a comma
    if values > MAX_JSON_VALUES:
        raise WireError(f"a message of about {values:,} JSON values refused (limit {MAX_JSON_VALUES:,})")
    try:
        tree = json.loads(text.decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError) as exc:
        raise WireError(f"not a message: {type(exc).__name__}: {exc}") from None
    blob = memoryview(body)[_JSON_LEN.size + n:]
    try:
        return _from_json(tree, _Buffers(blob))
    except WireError:
        raise
    except (TypeError, ValueError, RecursionError, OverflowError, MemoryError, RuntimeError) as exc:
        # a form with the wrong kinds of values (a list as a dtype, a shape of 2**70, nesting too deep)
        raise WireError(f"bad message: {type(exc).__name__}: {exc}") from None


def send_message(sock: socket.socket, obj: Any) -> None:
    """Encode ``obj`` and send it whole (``sock.sendall``; raises ``OSError`` when the peer is gone)."""
    sock.sendall(encode(obj))


def recv_message(sock: socket.socket, limit: int = MAX_MESSAGE_BYTES) -> Any:
    """Read one message; None when the peer closed cleanly before a new one began.

    Raises
    ------
    WireError
        Bad magic, a length above ``limit`` (refused before reading the body), a truncated or damaged body.
    OSError
        The socket failed (a timeout included).
    """
    head = _recv_exact(sock, _HEAD.size, allow_eof=True)
    if head is None:
        return None
    magic, length = _HEAD.unpack(head)
    if magic != MAGIC:
        raise WireError("not a Workbench message (bad magic)")
    if length > limit:
        raise WireError(f"message of {length:,} bytes refused (limit {limit:,})")
    body = _recv_exact(sock, length, allow_eof=False)
    return decode(body)


def _recv_exact(sock: socket.socket, n: int, allow_eof: bool) -> bytes | None:
    buf = bytearray(n)
    view = memoryview(buf)
    got = 0
    while got < n:
        k = sock.recv_into(view[got:], n - got)
        if k == 0:
            if got == 0 and allow_eof:
                return None
            raise WireError(f"truncated message ({got} of {n} bytes)")
        got += k
    return bytes(buf)


class _Buffers:
    """The raw buffers after a message's JSON, taken in the order the encoder referenced them."""

    def __init__(self, blob: memoryview):
        self.blob = blob
        self.next = 0  # the index the next reference must carry
        self.pos = 0  # where its bytes start

    def take(self, index: int, nbytes: int) -> memoryview:
        if not isinstance(index, int) or isinstance(index, bool) or not isinstance(nbytes, int) or nbytes < 0:
            raise WireError("bad buffer reference")
        if index != self.next:
            raise WireError("buffers out of order")
        end = self.pos + nbytes
        if end > len(self.blob):
            raise WireError("truncated message (a buffer runs past the end)")
        view, self.next, self.pos = self.blob[self.pos:end], self.next + 1, end
        return view


def _to_json(obj: Any, buffers: list[bytes]) -> Any:
    if obj is None or isinstance(obj, (bool, str)):
        return obj
    if isinstance(obj, (int, float)):
        return obj
    if isinstance(obj, np.generic):
        return obj.item()
    if isinstance(obj, (bytes, bytearray, memoryview)):
        buffers.append(bytes(obj))
        return {"$b": len(buffers) - 1, "n": len(buffers[-1])}
    if isinstance(obj, np.ndarray):
        a = np.ascontiguousarray(obj)
        if a.dtype.name not in _ND_DTYPES:
            raise TypeError(f"an array of dtype {a.dtype} has no wire form")
        buffers.append(a.tobytes())
        return {"$nd": len(buffers) - 1, "n": a.nbytes, "dtype": a.dtype.name, "shape": list(a.shape)}
    if isinstance(obj, torch.Tensor):
        t = obj.detach().to("cpu").contiguous()
        name = str(t.dtype).removeprefix("torch.")
        if name not in _PT_DTYPES:
            raise TypeError(f"a tensor of dtype {t.dtype} has no wire form")
        raw = t.reshape(-1).view(torch.uint8).numpy().tobytes() if t.numel() else b""
        buffers.append(raw)
        return {"$pt": len(buffers) - 1, "n": len(raw), "dtype": name, "shape": list(t.shape)}
    if isinstance(obj, tuple):
        return {"$t": [_to_json(v, buffers) for v in obj]}
    if isinstance(obj, list):
        return [_to_json(v, buffers) for v in obj]
    if isinstance(obj, dict):
        if all(isinstance(k, str) and not k.startswith("$") for k in obj):
            return {k: _to_json(v, buffers) for k, v in obj.items()}
        return {"$m": [[_to_json(k, buffers), _to_json(v, buffers)] for k, v in obj.items()]}
    if isinstance(obj, PurePath):
        return str(obj)
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        name = type(obj).__name__
        if DATACLASSES.get(name) is not type(obj):
            raise TypeError(f"the dataclass {name} is not registered for the wire")
        fields = {f.name: _to_json(getattr(obj, f.name), buffers) for f in dataclasses.fields(obj) if f.init}
        return {"$dc": name, "f": fields}
    raise TypeError(f"{type(obj).__name__} has no wire form")


def _from_json(node: Any, bufs: _Buffers) -> Any:
    if isinstance(node, list):
        return [_from_json(v, bufs) for v in node]
    if not isinstance(node, dict):
        return node
    if not node or not next(iter(node)).startswith("$"):
        return {k: _from_json(v, bufs) for k, v in node.items()}
    if "$t" in node:
        return tuple(_from_json(v, bufs) for v in _list(node["$t"]))
    if "$m" in node:
        out = {}
        for pair in _list(node["$m"]):
            if not isinstance(pair, list) or len(pair) != 2:
                raise WireError("bad map entry")
            key = _from_json(pair[0], bufs)
            try:
                out[key] = _from_json(pair[1], bufs)
            except TypeError:
                raise WireError("unhashable map key") from None
        return out
    if "$b" in node:
        return bytes(bufs.take(node["$b"], node.get("n")))
    if "$nd" in node:
        dtype, shape = node.get("dtype"), _shape(node.get("shape"))
        if dtype not in _ND_DTYPES:
            raise WireError(f"array dtype {dtype!r} refused")
        raw = bufs.take(node["$nd"], node.get("n"))
        try:
            return np.frombuffer(raw, dtype=dtype).reshape(shape).copy()
        except ValueError as exc:
            raise WireError(f"bad array: {exc}") from None
    if "$pt" in node:
        dtype, shape = node.get("dtype"), _shape(node.get("shape"))
        if dtype not in _PT_DTYPES:
            raise WireError(f"tensor dtype {dtype!r} refused")
        raw = bytearray(bufs.take(node["$pt"], node.get("n")))
        try:
            flat = torch.frombuffer(raw, dtype=_PT_DTYPES[dtype]) if raw else torch.empty(0, dtype=_PT_DTYPES[dtype])
            return flat.reshape(shape)
        except (ValueError, RuntimeError) as exc:
            raise WireError(f"bad tensor: {exc}") from None
    if "$dc" in node:
        cls = DATACLASSES.get(node["$dc"]) if isinstance(node["$dc"], str) else None
        if cls is None:
            raise UnknownType(f"unknown type {node['$dc']!r} refused")
        fields = node.get("f")
        if not isinstance(fields, dict):
            raise WireError("bad dataclass fields")
        try:
            return cls(**{k: _from_json(v, bufs) for k, v in fields.items()})
        except TypeError as exc:
            raise WireError(f"bad {cls.__name__}: {exc}") from None
    raise WireError(f"unknown form {next(iter(node))!r}")


def _list(v: Any) -> list:
    if not isinstance(v, list):
        raise WireError("bad message structure")
    return v


def _shape(v: Any) -> tuple[int, ...]:
    if not isinstance(v, list) or not all(isinstance(d, int) and not isinstance(d, bool) and d >= 0 for d in v):
        raise WireError("bad shape")
    return tuple(v)
