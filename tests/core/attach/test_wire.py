"""The data-only wire encoding of workbench.attach (workbench.core.attach.wire): round trips and refusals."""

from __future__ import annotations

import dataclasses
import json
import math
import pickle
import socket
import struct
import threading
from pathlib import Path

import numpy as np
import pytest
import torch
import torchvision

from workbench.core.attach import script as _script  # noqa: F401 - registers the probe dataclasses
from workbench.core.attach.script_run import ScriptRun
from workbench.core.attach.wire import (DATACLASSES, MAGIC, MAX_MESSAGE_BYTES, WireError, decode, encode,
                                        recv_message, send_message)
from workbench.core.probe.callback import ProbeCallback, ProbeReport
from workbench.core.probe.health import HealthThresholds
from workbench.core.train.trainer.control import RunControl

HEAD = struct.Struct(">4sI")


def _body(frame: bytes) -> bytes:
    magic, length = HEAD.unpack_from(frame)
    assert magic == MAGIC and length == len(frame) - HEAD.size
    return frame[HEAD.size:]


def _round_trip(obj):
    return decode(_body(encode(obj)))


def _frame(tree, *buffers: bytes) -> bytes:
    """A body written by hand: a JSON tree and raw buffers (for messages ``encode`` would never write)."""
    text = json.dumps(tree).encode()
    return struct.pack(">I", len(text)) + text + b"".join(buffers)


def _bits(t: torch.Tensor) -> list[int]:
    return t.detach().contiguous().reshape(-1).view(torch.uint8).tolist()


def _same(a, b, where="obj") -> None:
    """Deep equality with types: NaN equals NaN, arrays and tensors by dtype, shape and bits."""
    assert type(a) is type(b), f"{where}: {type(a).__name__} != {type(b).__name__}"
    if isinstance(a, np.ndarray):
        assert a.dtype == b.dtype and a.shape == b.shape, where
        assert a.tobytes() == b.tobytes(), where
    elif isinstance(a, torch.Tensor):
        assert a.dtype == b.dtype and a.shape == b.shape, where
        assert _bits(a) == _bits(b), where
    elif isinstance(a, float) and math.isnan(a):
        assert math.isnan(b), where
    elif dataclasses.is_dataclass(a):
        for f in dataclasses.fields(a):
            _same(getattr(a, f.name), getattr(b, f.name), f"{where}.{f.name}")
    elif isinstance(a, dict):
        assert list(a) == list(b), where
        for k in a:
            _same(a[k], b[k], f"{where}[{k!r}]")
    elif isinstance(a, (list, tuple)):
        assert len(a) == len(b), where
        for i, (x, y) in enumerate(zip(a, b)):
            _same(x, y, f"{where}[{i}]")
    else:
        assert a == b, where


# ------------------------------------------------------------------ round trips
def test_nested_plain_data_round_trips_with_types():
    obj = {"a": [1, 2.5, None, True, "x", {"b": (1, (2, [3, (4,)]))}], "empty": {}, "t0": (), "l0": [],
           "unicode": "héllo ✓", "big": 2**62, "neg": -17, "float": 1e-300}
    back = _round_trip(obj)
    _same(obj, back)
    assert isinstance(back["a"][5]["b"], tuple) and isinstance(back["a"][5]["b"][1][1], list)


def test_dict_keys_that_are_not_plain_strings_round_trip():
    obj = {1: "int", 2.5: "float", None: "none", (1, "a"): "tuple", "s": "str",
           "$t": "a string that looks like a form", b"k": "bytes"}
    back = _round_trip(obj)
    _same(obj, back)
    assert list(back) == list(obj)
    nested = {"outer": {3: {"$m": [[1, 2]]}}}  # a plain dict whose value uses a reserved-looking key
    _same(nested, _round_trip(nested))


def test_bytes_round_trip_raw_in_order():
    blobs = [b"", b"\x00\xff" * 1000, bytes(range(256))]
    back = _round_trip({"blobs": blobs, "ba": bytearray(b"abc"), "mv": memoryview(b"xyz")})
    assert back["blobs"] == blobs
    assert back["ba"] == b"abc" and back["mv"] == b"xyz"
    frame = encode(blobs)
    assert blobs[1] in frame  # raw after the JSON, not base64 or a list of ints


@pytest.mark.parametrize("dtype", ["bool", "int8", "uint8", "int16", "uint16", "int32", "uint32", "int64",
                                   "uint64", "float16", "float32", "float64"])
def test_numpy_arrays_of_every_wire_dtype_round_trip(dtype):
    rng = np.random.default_rng(0)
    a = (rng.standard_normal((3, 4, 5)) * 100).astype(dtype)
    cases = [a, a[:, ::2, 1:],  # a non-contiguous view
             np.array(a.flat[0], dtype=dtype),  # 0-d
             np.zeros((0, 3), dtype=dtype), np.zeros(0, dtype=dtype)]
    back = _round_trip(cases)
    for x, y in zip(cases, back):
        _same(np.ascontiguousarray(x), y)
        assert y.flags.writeable  # a copy, not a view of the received bytes


def test_float_arrays_keep_nan_and_inf_bits():
    a = np.array([np.nan, np.inf, -np.inf, -0.0, 1.5], dtype=np.float32)
    back = _round_trip(a)
    assert back.tobytes() == a.tobytes()


@pytest.mark.parametrize("dtype", [torch.bool, torch.uint8, torch.int8, torch.int16, torch.int32, torch.int64,
                                   torch.float16, torch.bfloat16, torch.float32, torch.float64])
def test_torch_tensors_round_trip(dtype):
    g = torch.Generator().manual_seed(0)
    t = (torch.randn(2, 3, 4, generator=g) * 50).to(dtype)
    cases = [t, t.transpose(0, 2),  # non-contiguous
             t.reshape(-1)[0].clone(),  # 0-d
             torch.zeros(0, 5, dtype=dtype)]
    back = _round_trip(tuple(cases))
    assert isinstance(back, tuple)
    for x, y in zip(cases, back):
        assert y.dtype == dtype and y.shape == x.shape
        assert _bits(x) == _bits(y)


def test_bfloat16_nan_and_tensor_requiring_grad():
    t = torch.tensor([float("nan"), 1.0, -2.0], dtype=torch.bfloat16)
    back = _round_trip(t)
    assert back.dtype == torch.bfloat16 and _bits(back) == _bits(t)
    w = torch.ones(3, requires_grad=True) * 2
    back = _round_trip(w)
    assert not back.requires_grad and back.tolist() == [2.0, 2.0, 2.0]


def test_nan_and_inf_floats_and_numpy_scalars():
    back = _round_trip([float("nan"), float("inf"), -float("inf"), np.float32(0.5), np.int64(7), np.bool_(True)])
    assert math.isnan(back[0]) and back[1] == math.inf and back[2] == -math.inf
    assert back[3:] == [0.5, 7, True] and type(back[4]) is int and type(back[5]) is bool


def test_paths_travel_as_strings():
    assert _round_trip({"p": Path("/tmp/x/y.pt")}) == {"p": "/tmp/x/y.pt"}


def test_registered_dataclass_round_trips():
    th = HealthThresholds(vanishing_abs=1e-9, vanishing_rel=None, exploding=5e2, dead_fraction=0.75,
                          nonfinite_fraction=0.0)
    back = _round_trip({"settings": {"thresholds": th, "every": None}})
    assert type(back["settings"]["thresholds"]) is HealthThresholds
    assert back["settings"]["thresholds"] == th


def _probe_reports(tmp_path) -> list[ProbeReport]:
    """Real reports of a ProbeCallback on a torchvision resnet18, stepped as an attached script steps it."""
    torch.manual_seed(0)
    model = torchvision.models.resnet18(num_classes=10)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    tr = ScriptRun(model, opt, None, tmp_path, RunControl(), "wire")
    reports: list[ProbeReport] = []
    cb = ProbeCallback(reports.extend, every=1, grad_every=1, flush_ms=0, probed=["layer1.0.conv1", "fc"],
                       weight_hist=["fc.weight"], layers=True)
    cb.on_fit_start(tr)
    x, y = torch.randn(2, 3, 32, 32), torch.tensor([1, 2])
    for _ in range(3):
        loss = torch.nn.functional.cross_entropy(model(x), y)
        loss.backward()
        cb.on_after_backward(tr)
        opt.step()
        opt.zero_grad()
        tr.step += 1
        cb.on_step_end(tr, {"step": tr.step, "loss": float(loss.detach())})
    cb.on_fit_end(tr)
    return reports


def test_real_probe_reports_round_trip(tmp_path):
    reports = _probe_reports(tmp_path)
    full = [r for r in reports if r.activations and r.grads is not None]
    assert full, "the callback measured nothing"
    r = full[-1]
    assert {"layer1.0.conv1", "fc"} <= set(r.activations) and "fc.weight" in r.weight_histograms
    assert r.layers is not None and r.cadence is not None
    back = _round_trip(reports)
    assert len(back) == len(reports)
    for i, (a, b) in enumerate(zip(reports, back)):
        _same(a, b, f"reports[{i}]")
    assert type(back[-1].grads).__name__ == "GradNorms"
    assert isinstance(back[-1].weight_histograms["fc.weight"].counts, np.ndarray)


def test_socket_round_trip_of_several_messages():
    a, b = socket.socketpair()
    with a, b:
        msgs = [{"type": "hello", "token": "t"}, np.arange(10_000, dtype=np.float64), [b"x" * 70_000]]
        t = threading.Thread(target=lambda: [send_message(a, m) for m in msgs])
        t.start()
        got = [recv_message(b) for _ in msgs]
        t.join()
        a.close()
        assert recv_message(b) is None  # a clean close between messages
    _same(msgs[0], got[0])
    _same(msgs[1], got[1])
    assert got[2] == msgs[2]


# ------------------------------------------------------------------ refusals
def test_unregistered_dataclass_is_refused_both_ways():
    @dataclasses.dataclass
    class Evil:
        cmd: str = "rm -rf /"

    assert "Evil" not in DATACLASSES
    with pytest.raises(TypeError, match="not registered"):
        encode(Evil())
    with pytest.raises(WireError, match="Evil"):
        decode(_frame({"$dc": "Evil", "f": {"cmd": "x"}}))
    with pytest.raises(WireError):  # a module path instead of a registered name
        decode(_frame({"$dc": "os.system", "f": {}}))
    with pytest.raises(WireError):
        decode(_frame({"$dc": ["HealthThresholds"], "f": {}}))


def test_registered_name_with_a_different_class_is_not_encoded():
    @dataclasses.dataclass
    class HealthThresholds:  # same name, not the registered class
        x: int = 1

    with pytest.raises(TypeError, match="not registered"):
        encode(HealthThresholds())


def test_registered_dataclass_with_unknown_fields_is_refused():
    with pytest.raises(WireError, match="HealthThresholds"):
        decode(_frame({"$dc": "HealthThresholds", "f": {"__class__": "x"}}))
    with pytest.raises(WireError):
        decode(_frame({"$dc": "HealthThresholds", "f": [1, 2]}))


def test_object_arrays_are_refused_both_ways():
    with pytest.raises(TypeError, match="object"):
        encode(np.array([{"a": 1}, None], dtype=object))
    with pytest.raises(WireError, match="object"):
        decode(_frame({"$nd": 0, "n": 8, "dtype": "object", "shape": [1]}, b"\0" * 8))
    with pytest.raises(WireError):
        decode(_frame({"$pt": 0, "n": 8, "dtype": "complex64", "shape": [1]}, b"\0" * 8))


def test_objects_without_a_wire_form_raise_type_error():
    for obj in (object(), lambda: 1, {1, 2}, complex(1, 2), print, [1, {"a": socket.socket}]):
        with pytest.raises(TypeError):
            encode(obj)
    with pytest.raises(TypeError):
        encode(np.zeros(2, dtype=np.complex64))
    with pytest.raises(TypeError):
        encode(torch.zeros(2, dtype=torch.complex64))


def test_bad_magic_is_refused():
    a, b = socket.socketpair()
    with a, b:
        a.sendall(b"XXXX" + encode({"x": 1})[4:])
        with pytest.raises(WireError, match="magic"):
            recv_message(b)


def test_a_length_above_the_limit_is_refused_before_reading_the_body():
    a, b = socket.socketpair()
    with a, b:
        a.sendall(MAGIC + struct.pack(">I", 2**30))  # claims 1 GB, sends nothing more
        b.settimeout(5.0)  # were the body read, this would time out (OSError), not refuse
        with pytest.raises(WireError, match="limit"):
            recv_message(b)
        a.sendall(MAGIC + struct.pack(">I", 101))
        with pytest.raises(WireError, match="limit"):
            recv_message(b, limit=100)
    assert MAX_MESSAGE_BYTES < 2**30


def test_truncated_messages_are_refused():
    frame = encode({"x": np.arange(100)})
    a, b = socket.socketpair()
    with a, b:
        a.sendall(frame[:-10])
        a.shutdown(socket.SHUT_WR)
        with pytest.raises(WireError, match="truncated"):
            recv_message(b)
    a, b = socket.socketpair()
    with a, b:
        a.sendall(frame[:5])  # inside the header
        a.shutdown(socket.SHUT_WR)
        with pytest.raises(WireError, match="truncated"):
            recv_message(b)
    body = _body(frame)
    for cut in (0, 2, 10, len(body) - 1):
        with pytest.raises(WireError, match="truncated"):
            decode(body[:cut])


def test_buffer_references_out_of_range_are_refused():
    cases = [
        _frame({"$b": 0, "n": 100}, b"\0" * 10),  # runs past the end
        _frame({"$b": 3, "n": 1}, b"\0" * 10),  # not the next buffer
        _frame({"$b": -1, "n": 1}, b"\0"),
        _frame({"$b": 0, "n": -1}, b"\0"),
        _frame({"$b": "0", "n": 1}, b"\0"),
        _frame({"$b": 0}, b"\0"),  # no length
        _frame([{"$b": 0, "n": 1}, {"$b": 0, "n": 1}], b"\0\0"),  # the same buffer twice
        _frame({"$nd": 0, "n": 8, "dtype": "float32", "shape": [4]}, b"\0" * 8),  # shape and bytes disagree
        _frame({"$nd": 0, "n": 4, "dtype": "float32", "shape": [-1]}, b"\0" * 4),
        _frame({"$pt": 0, "n": 4, "dtype": "float32", "shape": [3]}, b"\0" * 4),
        _frame({"$pt": 0, "n": 4, "dtype": "float32", "shape": "1"}, b"\0" * 4),
    ]
    for body in cases:
        with pytest.raises(WireError):
            decode(body)


def test_bodies_that_are_not_json_are_refused():
    payload = pickle.dumps({"x": 1})
    for text in (payload, b"\xff\xfe not utf-8", b"{not json", b""):
        body = struct.pack(">I", len(text)) + text
        with pytest.raises(WireError):
            decode(body)
    with pytest.raises(WireError):
        decode(payload)  # a pickle as the whole body: its first 4 bytes are no sane JSON length


def test_unknown_forms_and_bad_structures_are_refused():
    for tree in ({"$eval": "1"}, {"$t": "abc"}, {"$m": [[1]]}, {"$m": [[[1, 2], 3]]}, {"$m": "x"}):
        with pytest.raises(WireError):
            decode(_frame(tree))


def _raw_body(text: bytes, blob: bytes = b"") -> bytes:
    return struct.pack(">I", len(text)) + text + blob


@pytest.mark.parametrize("text, blob", [
    (b'{"$nd": 0, "n": 4, "dtype": ["float32"], "shape": [1]}', b"\0" * 4),  # a list as a dtype
    (b'{"$pt": 0, "n": 4, "dtype": ["float32"], "shape": [1]}', b"\0" * 4),
    (b'{"$pt": 0, "n": 4, "dtype": "float32", "shape": [1180591620717411303424]}', b"\0" * 4),  # 2**70
    (b"[" * 30000 + b"]" * 30000, b""),  # nesting deeper than the interpreter's recursion
    (b'{"$m": [[[1, 2], 3]]}', b""),  # an unhashable key
])
def test_damaged_forms_raise_wire_error_only(text, blob):
    with pytest.raises(WireError):
        decode(_raw_body(text, blob))
