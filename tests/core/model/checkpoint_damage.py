"""Damage real checkpoint files the way disks do: flip one bit inside a tensor's zip record.

Import from any test::

    from tests.core.model.checkpoint_damage import flip_tensor_byte

    flip_tensor_byte(run / "last.pt")      # one byte in the middle of the largest tensor record
"""

from __future__ import annotations

import struct
import zipfile
from pathlib import Path


def record_span(path: str | Path, suffix: str) -> tuple[int, int]:
    """``(start, length)`` in bytes of the data of the zip record whose name ends with ``suffix``.

    The data starts after the local file header: 30 bytes plus the name and extra
    field lengths stored in it (PKWARE APPNOTE 4.3.7); torch.save stores records
    uncompressed, so the record's bytes are the storage's bytes.
    """
    with zipfile.ZipFile(path) as zf:
        info = next(i for i in zf.infolist() if i.filename.endswith(suffix))
    with open(path, "rb") as f:
        f.seek(info.header_offset)
        header = f.read(30)
    name_len, extra_len = struct.unpack("<HH", header[26:30])
    return info.header_offset + 30 + name_len + extra_len, info.file_size


def largest_tensor_record(path: str | Path) -> str:
    """Name of the largest ``data/N`` record (a tensor's storage) of a torch.save file."""
    with zipfile.ZipFile(path) as zf:
        infos = [i for i in zf.infolist() if "/data/" in i.filename and not i.filename.endswith("serialization_id")]
    return max(infos, key=lambda i: i.file_size).filename


def flip_tensor_byte(path: str | Path, record: str | None = None, bit: int = 4) -> int:
    """Flip one bit in the middle of a tensor record of ``path`` (default: the largest); return its offset."""
    record = record or largest_tensor_record(path)
    start, length = record_span(path, record)
    assert length > 0, record
    offset = start + length // 2
    with open(path, "r+b") as f:
        f.seek(offset)
        byte = f.read(1)[0]
        f.seek(offset)
        f.write(bytes([byte ^ (1 << bit)]))
    return offset


def nest_deep(path: str | Path, payload: dict, key: str, depth: int) -> Path:
    """``torch.save(payload)`` to ``path``, then make ``payload[key]`` a list nested ``depth`` levels deep.

    Python's pickler cannot write such a list (it recurses); the pickle is edited
    instead: the placeholder string stored under ``key`` becomes ``depth``
    EMPTY_LIST opcodes followed by ``depth - 1`` APPENDs, and the archive is
    written again record by record. torch's unpickler reads it without a limit.
    """
    import io

    import torch

    marker = "NEST_DEEP_PLACEHOLDER"
    buf = io.BytesIO()
    torch.save({**payload, key: marker}, buf)
    zf = zipfile.ZipFile(io.BytesIO(buf.getvalue()))
    names = zf.namelist()
    pkl_name = next(n for n in names if n.endswith("/data.pkl"))
    pkl = zf.read(pkl_name)
    at = pkl.index(marker.encode())
    assert pkl[at - 5:at - 4] == b"X", "expected a BINUNICODE opcode before the placeholder"
    pkl = pkl[:at - 5] + b"]" * depth + b"a" * (depth - 1) + pkl[at + len(marker):]
    writer = torch._C.PyTorchFileWriter(str(path))
    prefix = names[0].split("/")[0] + "/"
    for name in names:
        record = name[len(prefix):]
        if record == ".data/serialization_id":  # the writer adds its own
            continue
        data = pkl if name == pkl_name else zf.read(name)
        writer.write_record(record, data, len(data))
    writer.write_end_of_file()
    return Path(path)
