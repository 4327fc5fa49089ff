"""The safetensors format: one validated header parser, one dtype table, one reader, and sharded indexes.

Format: https://github.com/huggingface/safetensors#format -- an 8-byte
little-endian header length N, N bytes of UTF-8 JSON (space-padded), then the
data section. The header is validated in time linear in its length before any
tensor is made (:func:`safetensors_header`). An opened model owns its weights:
:func:`read_safetensors` copies the data section into memory with plain reads
(never a memory map, which dies of ``SIGBUS`` when the file is truncated under
it and follows the file when it is rewritten in place). A model folder too large
to copy at open reads only its headers (:func:`read_shards` with ``lazy=True``):
a :class:`LazyStateDict` of ``meta`` tensors that says where each tensor's bytes
are, read when needed after the file's identity (:class:`FileIdentity`: size,
modification time, inode) is checked: a changed file is refused, never followed.
:func:`read_safetensors_mmap` (copy-on-write views) remains for callers that
want a view. A sharded checkpoint's ``*.safetensors.index.json`` (``weight_map``:
tensor name -> shard file of the same folder) reads as all its shards. Qt-free.
"""

from __future__ import annotations

import json
import os
import re
import struct
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from workbench.core.errors import CheckpointError
from workbench.core.model.checkpoint import Checkpoint, CheckpointMetadata
from workbench.core.model.formats.metadata import safetensors_metadata, tensor_stats
from workbench.core.model.formats.sniff import MAX_SAFETENSORS_HEADER, Sniff, short
from workbench.core.model.formats.workbench_meta import apply_workbench_metadata

__all__ = ["SAFETENSORS_DTYPES", "SAFETENSORS_DTYPE_BITS", "MAX_SAFETENSORS_HEADER", "MAX_SAFETENSORS_TENSORS",
           "MAX_JSON_BYTES", "SafetensorsEntry", "safetensors_header", "read_safetensors", "read_safetensors_mmap",
           "read_json", "index_files", "read_shards", "match", "read", "INDEX_SUFFIX", "FileIdentity",
           "TensorSource", "LazyStateDict", "READ_CHUNK_BYTES", "read_safetensors_lazy", "read_sources"]

#: Most tensors a safetensors header may describe (the largest published models hold a few thousand).
MAX_SAFETENSORS_TENSORS = 200_000
#: Largest JSON file (an index, a config) read (bytes); real ones are a few hundred kB.
MAX_JSON_BYTES = 16 * 1024 * 1024
#: Bytes read per system call when tensor data is copied into memory: a file truncated while it is read fails
#: at the next call with a one-line error, and no read holds more than this in flight.
READ_CHUNK_BYTES = 64 * 2**20
#: How a sharded checkpoint's index file is named (``model.safetensors.index.json``).
INDEX_SUFFIX = ".safetensors.index.json"

#: Each safetensors dtype: (bits per element, the torch dtype or None when torch has none).
#: Bits are the Rust crate's ``Dtype::bitsize``
#: (https://github.com/huggingface/safetensors/blob/main/safetensors/src/tensor.rs).
SAFETENSORS_DTYPES: dict[str, tuple[int, torch.dtype | None]] = {
    "BOOL": (8, torch.bool), "U8": (8, torch.uint8), "I8": (8, torch.int8),
    "F8_E5M2": (8, torch.float8_e5m2), "F8_E4M3": (8, torch.float8_e4m3fn),
    "F8_E4M3FNUZ": (8, getattr(torch, "float8_e4m3fnuz", None)),
    "F8_E5M2FNUZ": (8, getattr(torch, "float8_e5m2fnuz", None)),
    "F8_E8M0": (8, getattr(torch, "float8_e8m0fnu", None)), "E8M0": (8, getattr(torch, "float8_e8m0fnu", None)),
    "F4": (4, None), "F6_E2M3": (6, None), "F6_E3M2": (6, None),
    "I16": (16, torch.int16), "U16": (16, torch.uint16), "F16": (16, torch.float16), "BF16": (16, torch.bfloat16),
    "I32": (32, torch.int32), "U32": (32, torch.uint32), "F32": (32, torch.float32),
    "I64": (64, torch.int64), "U64": (64, torch.uint64), "F64": (64, torch.float64), "C64": (64, torch.complex64),
}
#: Bits per element of each safetensors dtype (from :data:`SAFETENSORS_DTYPES`).
SAFETENSORS_DTYPE_BITS = {name: bits for name, (bits, _) in SAFETENSORS_DTYPES.items()}
_JSON_SPACE = re.compile(r"[ \t\n\r]*")
_SAFETENSORS_FIX = "Its header or data is damaged; save it again with safetensors.torch.save_file."


@dataclass(frozen=True)
class SafetensorsEntry:
    """One tensor described by a safetensors header.

    Attributes
    ----------
    name : str
    dtype : str
        The header's dtype string (``"F32"``, ``"BF16"``...).
    shape : tuple of int
    begin, end : int
        Byte offsets into the data section (which starts after the header).
    """

    name: str
    dtype: str
    shape: tuple[int, ...]
    begin: int
    end: int


def _bad(path: Path, reason: str) -> CheckpointError:
    return CheckpointError(f"is not a valid safetensors file: {reason}. {_SAFETENSORS_FIX}", path)


def _header_pairs(text: str, path: Path) -> list[tuple[str, Any]]:
    """The top-level ``(key, value)`` pairs of a JSON object, refused past the tensor limit.

    Parses one pair at a time with the C scanner of :mod:`json`, so a header that
    names more than :data:`MAX_SAFETENSORS_TENSORS` tensors is refused after
    reading only that many: time and memory stay linear in what was read.
    """
    decoder = json.JSONDecoder()
    i = _JSON_SPACE.match(text, 0).end()
    if text[i:i + 1] != "{":
        raise _bad(path, "its header is not a JSON object")
    i = _JSON_SPACE.match(text, i + 1).end()
    pairs: list[tuple[str, Any]] = []
    tensors = 0
    if text[i:i + 1] == "}":
        _check_end(text, i + 1, path)
        return pairs
    while True:
        if text[i:i + 1] != '"':
            raise _bad(path, f"its header is not valid JSON (expected a name at character {i})")
        key, i = json.decoder.scanstring(text, i + 1)
        i = _JSON_SPACE.match(text, i).end()
        if text[i:i + 1] != ":":
            raise _bad(path, f"its header is not valid JSON (expected ':' at character {i})")
        value, i = decoder.raw_decode(text, _JSON_SPACE.match(text, i + 1).end())
        pairs.append((key, value))
        tensors += key != "__metadata__"
        if tensors > MAX_SAFETENSORS_TENSORS:
            raise CheckpointError(
                f"its safetensors header describes more than {MAX_SAFETENSORS_TENSORS:,} tensors; Workbench "
                "refuses such headers (the largest published models have a few thousand). The file is damaged "
                "or was made to exhaust memory.", path)
        i = _JSON_SPACE.match(text, i).end()
        sep = text[i:i + 1]
        i = _JSON_SPACE.match(text, i + 1).end()
        if sep == "}":
            break
        if sep != ",":
            raise _bad(path, f"its header is not valid JSON (expected ',' or '}}' at character {i})")
    _check_end(text, i, path)
    return pairs


def _check_end(text: str, i: int, path: Path) -> None:
    if text[i:].strip():
        raise _bad(path, "its header has data after the JSON object (only space padding is allowed)")


def _nbytes(name: str, dtype: str, shape: tuple[int, ...], limit: int, path: Path) -> int:
    """Bytes of a tensor of ``shape`` and ``dtype``; more than ``limit`` stops early (linear time)."""
    if 0 in shape:
        return 0
    numel = 1
    for dim in shape:
        numel *= dim
        if numel > limit * 8:  # cannot fit in the data section: stop before the product grows huge
            return limit + 1
    bits = numel * SAFETENSORS_DTYPE_BITS[dtype]
    if bits % 8:
        raise _bad(path, f"tensor {name!r} of {numel} {dtype} elements does not fill whole bytes")
    return bits // 8


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def _entry(name: str, info: Any, data_len: int, path: Path) -> SafetensorsEntry:
    """Validate one tensor description (dtype, shape, offsets inside the data section, byte length)."""
    if not isinstance(info, dict) or not {"dtype", "shape", "data_offsets"} <= info.keys():
        raise _bad(path, f"tensor {name!r} lacks dtype, shape or data_offsets")
    dtype, shape, offsets = info["dtype"], info["shape"], info["data_offsets"]
    if dtype not in SAFETENSORS_DTYPE_BITS:
        raise _bad(path, f"tensor {name!r} has unknown dtype {str(dtype)[:40]!r}")
    if not isinstance(shape, list) or not all(_is_int(d) for d in shape):
        raise _bad(path, f"tensor {name!r} has a shape that is not a list of non-negative integers")
    if not (isinstance(offsets, list) and len(offsets) == 2 and all(_is_int(o) for o in offsets)):
        raise _bad(path, f"tensor {name!r} has data_offsets that are not two non-negative integers")
    begin, end = offsets
    if not begin <= end <= data_len:
        raise _bad(path, f"tensor {name!r} lies outside the file (bytes {begin}-{end} of {data_len})")
    expected = _nbytes(name, dtype, tuple(shape), data_len, path)
    if end - begin != expected:
        raise _bad(path, f"tensor {name!r} has {end - begin} bytes but shape {tuple(shape)[:8]} of "
                         f"{dtype} needs {expected if expected <= data_len else 'more than the file'}")
    return SafetensorsEntry(name, dtype, tuple(shape), begin, end)


def _check_overlaps(entries: list[SafetensorsEntry], path: Path) -> None:
    """Refuse two tensors sharing bytes (sorted by offset; Timsort is linear on the usual sorted header)."""
    previous: SafetensorsEntry | None = None
    for e in sorted((e for e in entries if e.end > e.begin), key=lambda e: e.begin):
        if previous is not None and e.begin < previous.end:
            raise _bad(path, f"tensors {previous.name!r} and {e.name!r} overlap")
        previous = e


def _raw_header(path: Path, f=None) -> tuple[bytes, int]:
    """The header's bytes and the file's size, in one open (or from ``f``, a file open for reading, at its start)."""
    try:
        if f is None:
            with open(path, "rb") as opened:
                return _raw_header(path, opened)
        size = os.fstat(f.fileno()).st_size
        head = f.read(8)
        (n,) = struct.unpack("<Q", head) if len(head) == 8 else (0,)
        if not 2 <= n <= min(MAX_SAFETENSORS_HEADER, size - 8):
            raise _bad(path, f"its header length {n} does not fit the file ({size} bytes)")
        return f.read(n), size
    except OSError as exc:
        raise CheckpointError(f"cannot be read ({exc.strerror}). Check its permissions.", path) from exc


def _header(path: Path, f=None) -> tuple[dict[str, str], list[SafetensorsEntry], int, int]:
    """``(__metadata__, entries, header length, file size)``, validated (see :func:`safetensors_header`);
    read from ``f`` (open for reading, at its start) when given."""
    raw, size = _raw_header(path, f)
    try:
        pairs = _header_pairs(raw.decode("utf-8"), path)
    except (UnicodeDecodeError, ValueError, RecursionError) as exc:
        raise _bad(path, f"its header is not valid UTF-8 JSON ({short(exc, 120)})") from exc
    data_len = size - 8 - len(raw)
    metadata: dict[str, str] = {}
    entries: list[SafetensorsEntry] = []
    names: set[str] = set()
    for name, info in pairs:
        if name == "__metadata__":
            if not (isinstance(info, dict) and all(isinstance(v, str) for v in info.values())):
                raise _bad(path, "its __metadata__ is not a map of strings")
            metadata = info
            continue
        if name in names:
            raise _bad(path, f"its header names tensor {name!r} twice")
        names.add(name)
        entries.append(_entry(name, info, data_len, path))
    _check_overlaps(entries, path)
    return metadata, entries, len(raw), size


def safetensors_header(path: str | Path) -> tuple[dict[str, str], list[SafetensorsEntry]]:
    """Read and validate a safetensors header in time linear in its length.

    Checked: N within the file and at most :data:`MAX_SAFETENSORS_HEADER`; at
    most :data:`MAX_SAFETENSORS_TENSORS` tensors (refused as soon as one more is
    read); each tensor's dtype is known, its shape non-negative integers,
    ``shape x itemsize`` equals its byte length, its offsets lie inside the data
    section, and no two tensors overlap; ``__metadata__`` maps str to str.

    Parameters
    ----------
    path : str or Path

    Returns
    -------
    (dict of str to str, list of SafetensorsEntry)
        ``__metadata__`` and the tensors in header order.

    Raises
    ------
    CheckpointError
        Any of the checks fails (the message says which), or the file cannot be read.
    """
    metadata, entries, _, _ = _header(Path(path))
    return metadata, entries


def _torch_dtype(name: str, dtype: str, path: Path) -> torch.dtype:
    found = SAFETENSORS_DTYPES[dtype][1]
    if found is None:
        raise CheckpointError(f"tensor {name!r} has dtype {dtype}, which Workbench cannot map yet.", path)
    return found


def read_safetensors_mmap(path: str | Path) -> tuple[dict[str, torch.Tensor], dict[str, str]]:
    """A safetensors file's tensors as copy-on-write views of the memory-mapped file.

    The header is validated first (:func:`safetensors_header`); the file is then
    mapped once (``torch.UntypedStorage.from_file(shared=False)``, ``MAP_PRIVATE``):
    opening reads no tensor data (pages are read on first use) and writing to a
    tensor never changes the file. A tensor whose offset is not a multiple of its
    element size is copied instead.

    Parameters
    ----------
    path : str or Path

    Returns
    -------
    (dict of str to Tensor, dict of str to str)
        The tensors (CPU, header order) and the header's ``__metadata__``.

    Raises
    ------
    CheckpointError
        A header that fails validation, or a dtype torch has no type for (F4, F6).
    """
    path = Path(path)
    metadata, entries, header_len, size = _header(path)
    dtypes = [_torch_dtype(e.name, e.dtype, path) for e in entries]
    try:
        storage = torch.UntypedStorage.from_file(str(path), shared=False, nbytes=size)
    except (OSError, RuntimeError) as exc:
        raise CheckpointError(f"cannot be mapped ({short(exc)}). Check its permissions.", path) from exc
    start = 8 + header_len
    tensors: dict[str, torch.Tensor] = {}
    for e, dtype in zip(entries, dtypes):
        offset = start + e.begin
        if offset % dtype.itemsize == 0:
            tensors[e.name] = torch.empty(0, dtype=dtype).set_(storage, offset // dtype.itemsize, e.shape)
        else:  # unaligned: copy the bytes into aligned memory
            raw = torch.empty(0, dtype=torch.uint8).set_(storage, offset, (e.end - e.begin,)).clone()
            tensors[e.name] = raw.view(dtype).reshape(e.shape)
    return tensors, metadata


@dataclass(frozen=True)
class FileIdentity:
    """What a weight file was when it was opened: compared before any later read of it.

    Attributes
    ----------
    path : str
    size : int
        Bytes.
    mtime_ns : int
        Modification time, ns.
    inode, device : int
        ``st_ino`` and ``st_dev`` (a file replaced by ``os.replace`` has another inode).
    """

    path: str
    size: int
    mtime_ns: int
    inode: int
    device: int

    @classmethod
    def of(cls, path: str | Path, st: os.stat_result | None = None) -> FileIdentity:
        """The identity of ``path`` now (``st``: a stat already taken of it)."""
        st = st if st is not None else os.stat(path)
        return cls(str(path), st.st_size, st.st_mtime_ns, st.st_ino, st.st_dev)

    def change(self, st: os.stat_result | None = None) -> str | None:
        """How the file differs from this identity (``"it was deleted"``...), or None when it is the same.

        ``st``: a stat of the open file (``os.fstat``), else the path is stat'ed.
        """
        try:
            st = st if st is not None else os.stat(self.path)
        except OSError:
            return "it was deleted or moved"
        if st.st_size != self.size:
            return f"its size changed from {self.size:,} to {st.st_size:,} bytes"
        if (st.st_ino, st.st_dev) != (self.inode, self.device):
            return "it was replaced by another file"
        if st.st_mtime_ns != self.mtime_ns:
            return "it was rewritten"
        return None

    def check(self, st: os.stat_result | None = None) -> None:
        """Raise the one-line refusal when the file changed since it was opened.

        Raises
        ------
        CheckpointError
            ``"<file>: changed on disk since it was opened (it was rewritten); ..."``.
        """
        change = self.change(st)
        if change:
            raise CheckpointError(f"changed on disk since it was opened ({change}); Workbench does not read a "
                                  "changed file into an open model: open it again to use the new weights.",
                                  Path(self.path))


def _read_into(f, out: torch.Tensor, offset: int, path: Path) -> None:
    """Fill the uint8 tensor ``out`` with the file's bytes from ``offset``, in :data:`READ_CHUNK_BYTES` reads."""
    view = memoryview(out.numpy()) if out.numel() else memoryview(b"")
    done = 0
    while done < len(view):
        n = os.preadv(f.fileno(), [view[done:done + READ_CHUNK_BYTES]], offset + done)
        if n <= 0:
            raise CheckpointError(f"ended at byte {offset + done:,} while it was read: it was truncated or "
                                  "changed on disk. Open it again once it is complete.", path)
        done += n


def _as_tensor(raw: torch.Tensor, entry: SafetensorsEntry, dtype: torch.dtype, begin: int) -> torch.Tensor:
    """Entry ``entry`` of the uint8 buffer ``raw`` (whose byte 0 is the data section's byte ``begin``).

    Not a view of ``raw``: a tensor of its own over ``raw``'s storage (``set_``), so each has its own autograd
    version counter. Views would share one, and a BatchNorm's in-place running-stat update would then mark
    every weight saved for backward as modified ("modified by an inplace operation").
    """
    offset = raw.storage_offset() + entry.begin - begin
    if offset % dtype.itemsize:  # unaligned: copy into aligned memory (the copy is this tensor's alone)
        return raw[entry.begin - begin:entry.end - begin].clone().view(dtype).reshape(entry.shape)
    return torch.empty(0, dtype=dtype).set_(raw.untyped_storage(), offset // dtype.itemsize, tuple(entry.shape))


def read_safetensors(path: str | Path) -> tuple[dict[str, torch.Tensor], dict[str, str], FileIdentity]:
    """A safetensors file's tensors, copied into memory the model owns (no memory map).

    The header is validated first (:func:`safetensors_header`); the data section
    is then read with plain reads into one buffer the tensors view. A file
    truncated, rewritten or deleted afterwards changes nothing in them; one
    truncated while it is read raises.

    Parameters
    ----------
    path : str or Path

    Returns
    -------
    (dict of str to Tensor, dict of str to str, FileIdentity)
        The tensors (CPU, header order), the header's ``__metadata__``, and the
        file as it was read.

    Raises
    ------
    CheckpointError
        A header that fails validation, a dtype torch has no type for (F4, F6),
        a file that changed while it was read, or one that cannot be read.
    """
    path = Path(path)
    try:
        with open(path, "rb") as f:  # one open: the header, then the data, of the same file
            metadata, entries, header_len, size = _header(path, f)
            dtypes = [_torch_dtype(e.name, e.dtype, path) for e in entries]
            start = 8 + header_len
            st = os.fstat(f.fileno())
            if st.st_size != size:
                raise CheckpointError("changed size while it was read. Open it again once it is complete.", path)
            raw = torch.empty(size - start, dtype=torch.uint8)
            _read_into(f, raw, start, path)
    except OSError as exc:
        raise CheckpointError(f"cannot be read ({exc.strerror}). Check its permissions.", path) from exc
    tensors = {e.name: _as_tensor(raw, e, dtype, 0) for e, dtype in zip(entries, dtypes)}
    return tensors, metadata, FileIdentity.of(path, st)


@dataclass(frozen=True)
class TensorSource:
    """Where the bytes of one tensor of a lazily read file are.

    Attributes
    ----------
    file : FileIdentity
        The file as it was when its header was read.
    data_start : int
        Byte offset of the data section in the file (8 + header length).
    entry : SafetensorsEntry
    """

    file: FileIdentity
    data_start: int
    entry: SafetensorsEntry


class LazyStateDict(dict):
    """A state_dict of ``meta`` tensors (shapes and dtypes from the headers) whose data is read when needed.

    ``sources[name]`` says where each tensor's bytes are (:class:`TensorSource`).
    Every read first checks that the file is the one whose header was read
    (:meth:`FileIdentity.check`): a changed file is refused, never followed.
    """

    def __init__(self, tensors: dict[str, torch.Tensor] | None = None,
                 sources: dict[str, TensorSource] | None = None):
        super().__init__(tensors or {})
        self.sources: dict[str, TensorSource] = dict(sources or {})

    def files(self) -> list[FileIdentity]:
        """The files the tensors are in, each once."""
        return list(dict.fromkeys(s.file for s in self.sources.values()))

    def check_unchanged(self) -> None:
        """Raise :class:`~workbench.core.errors.CheckpointError` when a file changed since its header was read."""
        for file in self.files():
            file.check()

    def read(self, names: list[str] | None = None) -> dict[str, torch.Tensor]:
        """The tensors ``names`` (default all) read from their files into owned CPU memory, file by file.

        Raises
        ------
        CheckpointError
            A file changed since its header was read (checked on the open file
            before its first byte is read), or is truncated while it is read.
        """
        names = list(self) if names is None else list(names)
        by_file: dict[FileIdentity, list[str]] = {}
        for name in names:
            by_file.setdefault(self.sources[name].file, []).append(name)
        out: dict[str, torch.Tensor] = {}
        for file, keys in by_file.items():
            out.update(read_sources(file, [self.sources[k] for k in keys], keys))
        return out


def read_sources(file: FileIdentity, sources: list[TensorSource], names: list[str]) -> dict[str, torch.Tensor]:
    """The tensors ``sources`` of one file (named ``names``), read after the file's identity is checked.

    Raises
    ------
    CheckpointError
        The file changed since ``file`` was taken, or cannot be read.
    """
    path = Path(file.path)
    out: dict[str, torch.Tensor] = {}
    try:
        with open(path, "rb") as f:
            file.check(os.fstat(f.fileno()))
            for name, src in zip(names, sources):
                e = src.entry
                dtype = _torch_dtype(e.name, e.dtype, path)
                raw = torch.empty(e.end - e.begin, dtype=torch.uint8)
                _read_into(f, raw, src.data_start + e.begin, path)
                out[name] = raw.view(dtype).reshape(e.shape) if e.end > e.begin else torch.empty(e.shape, dtype=dtype)
    except FileNotFoundError:
        file.check()
        raise
    except OSError as exc:
        raise CheckpointError(f"cannot be read ({exc.strerror}). Check its permissions.", path) from exc
    return out


def read_safetensors_lazy(path: str | Path) -> tuple[LazyStateDict, dict[str, str]]:
    """A safetensors file's tensors as ``meta`` tensors with their sources: the header only is read.

    Returns
    -------
    (LazyStateDict, dict of str to str)

    Raises
    ------
    CheckpointError
        A header that fails validation, or a dtype torch has no type for.
    """
    path = Path(path)
    metadata, entries, header_len, size = _header(path)
    identity = FileIdentity.of(path)
    if identity.size != size:
        raise CheckpointError("changed size while it was read. Open it again once it is complete.", path)
    tensors, sources = LazyStateDict(), {}
    for e in entries:
        tensors[e.name] = torch.empty(e.shape, dtype=_torch_dtype(e.name, e.dtype, path), device="meta")
        sources[e.name] = TensorSource(identity, 8 + header_len, e)
    tensors.sources = sources
    return tensors, metadata


# --------------------------------------------------------------------------- sharded index


def read_json(path: Path) -> Any:
    """A JSON file of at most :data:`MAX_JSON_BYTES`, as Python data.

    Raises
    ------
    CheckpointError
        Not a regular file, too large, unreadable, or not JSON.
    """
    try:
        if not path.is_file():
            raise CheckpointError("is not a regular file.", path)
        with open(path, "rb") as f:
            data = f.read(MAX_JSON_BYTES + 1)
    except OSError as exc:
        raise CheckpointError(f"cannot be read ({exc.strerror}). Check its permissions.", path) from exc
    if len(data) > MAX_JSON_BYTES:
        raise CheckpointError(f"is larger than {MAX_JSON_BYTES // 2**20} MB; a model folder's JSON files are small.",
                              path)
    try:
        return json.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError) as exc:
        raise CheckpointError(f"is not valid UTF-8 JSON ({exc}). Save the folder again.", path) from exc


def _folder_file(folder: Path, name: Any, origin: Path) -> Path:
    """``folder / name`` for a plain file name read from an index (no path parts, a regular file inside)."""
    if not isinstance(name, str) or not name or name != Path(name).name or name in (".", ".."):
        raise CheckpointError(f"names a weight file {str(name)[:80]!r} that is not a plain file name of the folder.",
                              origin)
    path = folder / name
    if path.is_symlink() or not path.is_file():
        raise CheckpointError(f"lists {name}, which is missing from the folder (or is not a regular file). "
                              "Copy the whole folder again.", origin)
    return path


def index_files(index: Path) -> list[Path]:
    """The shard files a sharded index (``weight_map``) lists, in order, each once.

    Raises
    ------
    CheckpointError
        No ``weight_map``; a name that is not a plain file name of the index's folder; a missing shard.
    """
    data = read_json(index)
    weight_map = data.get("weight_map") if isinstance(data, dict) else None
    if not isinstance(weight_map, dict) or not weight_map:
        raise CheckpointError("has no weight_map (tensor name -> shard file). Save the folder again.", index)
    for key, name in weight_map.items():  # a list or a number as a shard name: refused before it is hashed
        if not isinstance(name, str):
            raise CheckpointError(f"maps tensor {str(key)[:80]!r} to a {type(name).__name__}, not a shard file "
                                  "name; weight_map must map tensor names to file names. Save the folder again.",
                                  index)
    return [_folder_file(index.parent, n, index) for n in dict.fromkeys(weight_map.values())]


def read_shards(files: list[Path], read_other=None, *,
                lazy: bool = False) -> tuple[dict[str, torch.Tensor], dict[str, str], str]:
    """The tensors of several weight files as one state_dict.

    Parameters
    ----------
    files : list of Path
        Safetensors shards (others, e.g. ``pytorch_model-*.bin``, through ``read_other``).
    read_other : callable, optional
        ``read_other(path) -> state_dict`` for a file that is not safetensors.
    lazy : bool
        Read the safetensors headers only: a :class:`LazyStateDict` of ``meta``
        tensors (every file must be safetensors). Default: copy every tensor
        into memory (:func:`read_safetensors`).

    Returns
    -------
    (state_dict, __metadata__, container)
        ``container`` ``"safetensors"``, or ``"zip"`` when a file was read by ``read_other``.

    Raises
    ------
    CheckpointError
        A damaged shard, or a tensor two shards hold.
    """
    state: dict[str, torch.Tensor] = LazyStateDict() if lazy else {}
    header: dict[str, str] = {}
    container = "safetensors"
    for file in files:
        if lazy:
            tensors, meta = read_safetensors_lazy(file)
            state.sources.update(tensors.sources)
            header.update(meta)
        elif file.suffix == ".safetensors" or read_other is None:
            tensors, meta, _ = read_safetensors(file)
            header.update(meta)
        else:
            container = "zip"
            tensors = read_other(file)
        twice = state.keys() & tensors.keys()
        if twice:
            raise CheckpointError(f"holds tensor {sorted(twice)[0]!r} that another shard holds too. "
                                  "Save the folder again.", file)
        state.update(tensors)
    return state, header, container


# --------------------------------------------------------------------------- the format


def match(path: Path, head: bytes) -> bool:
    """A safetensors file (header length then ``{``), or a ``*.safetensors.index.json`` file.

    ``head``: the file's first bytes (a :class:`~workbench.core.model.formats.sniff.Sniff`).
    """
    if isinstance(head, Sniff):
        if head.container == "safetensors":
            return True
    elif len(head) >= 9 and head[8:9] == b"{":
        return True
    return path.name.lower().endswith(INDEX_SUFFIX) and bytes(head).lstrip()[:1] == b"{"


def read(path: str | Path, *, trust: bool = False, head: bytes | None = None, **_: Any) -> Checkpoint:
    """Read a safetensors file, or all the shards an index lists, into CPU memory the model owns (no memory map).

    ``trust`` is unused: safetensors holds no code.

    Raises
    ------
    CheckpointError
        A header that fails :func:`safetensors_header`; a damaged index; no tensors.
    """
    path = Path(path)
    if path.name.lower().endswith(INDEX_SUFFIX):
        files = index_files(path)
        state, header, _ = read_shards(files)
        size = sum(f.stat().st_size for f in files)
    else:
        state, header, identity = read_safetensors(path)
        size = identity.size
    meta = CheckpointMetadata(format="safetensors", container="safetensors")
    safetensors_metadata(meta, header)
    apply_workbench_metadata(state, meta, header)  # edits and tied names a Workbench save wrote
    if not state:
        raise CheckpointError("holds no tensors. Save a model's state_dict into it.", path)
    meta.num_tensors, meta.total_params, meta.dtypes = tensor_stats(state)
    meta.file_size = size
    return Checkpoint(path=path, state_dict=state, metadata=meta)
