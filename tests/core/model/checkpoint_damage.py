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
