"""Safetensors headers are validated in linear time before the library maps the file.

Every file here is written byte by byte (8-byte little-endian length, JSON, data)
as https://github.com/huggingface/safetensors#format describes.
"""

from __future__ import annotations

import json
import struct
import subprocess
import sys

import pytest
import torch

from tests.core.model.checkpoint_files import save_safetensors
from workbench.core.errors import CheckpointError
from workbench.core.model.formats import read_checkpoint
from workbench.core.model.formats.safetensors import MAX_SAFETENSORS_TENSORS, safetensors_header


def write_raw(path, header: bytes | str, data: bytes = b"") -> object:
    raw = header.encode() if isinstance(header, str) else header
    path.write_bytes(struct.pack("<Q", len(raw)) + raw + data)
    return path


def write(path, header: dict, data: bytes = b"") -> object:
    return write_raw(path, json.dumps(header), data)


def zero_size_header(n: int) -> bytes:
    """``{"t0": {dtype F32, shape [0], offsets [0, 0]}, ...}`` with ``n`` tensors, built as bytes."""
    entry = '"t%d":{"dtype":"F32","shape":[0],"data_offsets":[0,0]}'
    return ("{" + ",".join(entry % i for i in range(n)) + "}").encode()


def refused(path, *words):
    with pytest.raises(CheckpointError) as info:
        read_checkpoint(path)
    text = str(info.value)
    assert str(path) in text
    for word in words:
        assert word.lower() in text.lower(), text
    return text


def test_a_real_file_passes_and_lists_its_tensors(tmp_path):
    path = save_safetensors(torch.nn.Linear(3, 2), tmp_path / "lin.safetensors", metadata={"epoch": "3"})
    meta, entries = safetensors_header(path)
    assert meta == {"epoch": "3"}
    assert {(e.name, e.dtype, e.shape, e.end - e.begin) for e in entries} == {
        ("weight", "F32", (2, 3), 24), ("bias", "F32", (2,), 8)}
    assert read_checkpoint(path).metadata.num_tensors == 2


MEASURE = """
import resource, sys, time
from workbench.core.errors import CheckpointError
from workbench.core.model.formats import read_checkpoint
before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
t0 = time.perf_counter()
try:
    read_checkpoint(sys.argv[1])
except CheckpointError as e:
    print(e)
print(time.perf_counter() - t0, (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before) * 1024)
"""


@pytest.mark.skipif(sys.platform != "linux", reason="ru_maxrss is in KiB on Linux")
def test_a_million_zero_size_tensors_are_refused_quickly(tmp_path):
    """Under the 100 MB header cap; it used to take 53 s and 3.2 GB to show an empty tree."""
    header = zero_size_header(1_000_000)
    assert len(header) < 100 * 2**20
    path = write_raw(tmp_path / "many.safetensors", header)
    out = subprocess.run([sys.executable, "-c", MEASURE, str(path)], capture_output=True, text=True, timeout=120)
    message, figures = out.stdout.strip().splitlines()
    elapsed, grown = map(float, figures.split())
    assert message.startswith(f"{path}: ") and f"more than {MAX_SAFETENSORS_TENSORS:,} tensors" in message
    assert elapsed < 20, elapsed  # ~2.5 s here; loose for slow CI machines
    assert grown < 700 * 2**20, grown  # ~260 MB here: the 55 MB header and 200,000 parsed entries


def test_exactly_the_limit_is_accepted_by_the_validator(tmp_path):
    path = write_raw(tmp_path / "limit.safetensors", zero_size_header(MAX_SAFETENSORS_TENSORS))
    _, entries = safetensors_header(path)
    assert len(entries) == MAX_SAFETENSORS_TENSORS


@pytest.mark.parametrize("entry, words", [
    ({"dtype": "F32", "shape": [2, 3], "data_offsets": [0, 20]}, ["20 bytes", "needs 24"]),
    ({"dtype": "F32", "shape": [2, 3], "data_offsets": [0, 24], "x": 1}, None),  # extra keys are tolerated
    ({"dtype": "F33", "shape": [2, 3], "data_offsets": [0, 24]}, ["unknown dtype"]),
    ({"dtype": "F32", "shape": [2, -3], "data_offsets": [0, 24]}, ["shape"]),
    ({"dtype": "F32", "shape": [2, True], "data_offsets": [0, 24]}, ["shape"]),
    ({"dtype": "F32", "shape": "2x3", "data_offsets": [0, 24]}, ["shape"]),
    ({"dtype": "F32", "shape": [2, 3], "data_offsets": [0]}, ["data_offsets"]),
    ({"dtype": "F32", "shape": [2, 3], "data_offsets": [8, 32]}, ["outside the file"]),
    ({"dtype": "F32", "shape": [2, 3]}, ["lacks"]),
    ({"dtype": "F32", "shape": [2**62, 2**62, 2**62], "data_offsets": [0, 24]}, ["needs more than the file"]),
    ({"dtype": "F4", "shape": [3], "data_offsets": [0, 1]}, ["whole bytes"]),
    ([1, 2], ["lacks"]),
])
def test_each_tensor_is_checked(tmp_path, entry, words):
    path = write(tmp_path / "one.safetensors", {"w": entry}, bytes(24))
    if words is None:
        assert [e.name for e in safetensors_header(path)[1]] == ["w"]
        return
    refused(path, "safetensors", *words)


def test_overlapping_tensors_are_refused(tmp_path):
    header = {"a": {"dtype": "F32", "shape": [4], "data_offsets": [0, 16]},
              "b": {"dtype": "F32", "shape": [2], "data_offsets": [8, 16]},
              "empty": {"dtype": "F32", "shape": [0], "data_offsets": [4, 4]}}
    refused(write(tmp_path / "overlap.safetensors", header, bytes(16)), "'a' and 'b' overlap")
    del header["b"]
    assert len(safetensors_header(write(tmp_path / "ok.safetensors", header, bytes(16)))[1]) == 2


@pytest.mark.parametrize("header, words", [
    (b"[1, 2]    ", ["not a json object"]),
    (b'{"w": 1} x', ["after the json object"]),
    (b'{"w"  1}', ["expected ':'"]),
    (b'{"a": {}, "a": {}}', ["lacks"]),
    (b'{"__metadata__": {"k": 1}}', ["__metadata__"]),
    (b'{"__metadata__": {"k": "v"}}' + b" " * 6, None),  # space padding is allowed
    (b"{" + b"[" * 100_000, ["json"]),
    (b"\xff\xfe{}", ["utf-8"]),
])
def test_header_json_is_checked(tmp_path, header, words):
    path = write_raw(tmp_path / "h.safetensors", header)
    if words is None:
        assert safetensors_header(path) == ({"k": "v"}, [])
        return
    with pytest.raises(CheckpointError) as info:
        safetensors_header(path)
    for word in words:
        assert word.lower() in str(info.value).lower(), str(info.value)


def test_duplicate_names_are_refused(tmp_path):
    entry = '{"dtype":"F32","shape":[0],"data_offsets":[0,0]}'
    path = write_raw(tmp_path / "dup.safetensors", '{"w": %s, "w": %s}' % (entry, entry))
    with pytest.raises(CheckpointError, match="twice"):
        safetensors_header(path)


def test_header_length_beyond_the_file_is_refused(tmp_path):
    path = tmp_path / "short.safetensors"
    path.write_bytes(struct.pack("<Q", 1000) + b"{}")
    with pytest.raises(CheckpointError, match="does not fit"):
        safetensors_header(path)
