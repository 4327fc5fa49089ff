"""Read every checkpoint form people have, safely, and strip wrapper key prefixes.

The format is found from the file's content, never from its suffix:

* ``PK\\x03\\x04`` (zip): a ``torch.save`` archive (state_dict, training dict,
  Lightning ``.ckpt``, pickled ``nn.Module``) or a TorchScript archive (it has
  ``constants.pkl`` / ``code/`` records);
* an 8-byte little-endian header length followed by ``{``: safetensors
  (https://github.com/huggingface/safetensors#format);
* ``0x80`` (the pickle PROTO opcode): the legacy, pre-1.6 ``torch.save`` format.

Integrity: a checkpoint Workbench wrote carries a digest of its tensors
(:mod:`workbench.core.digest`); every read checks it and a mismatch, or a
malformed digest entry, raises :class:`~workbench.core.errors.CheckpointCorrupt`
naming the newest checkpoint of the same model in the same folder that verifies
(:func:`newest_intact`). Files without a digest (older Workbench files, foreign
checkpoints) open as before. Whatever a file holds, reading it raises nothing but
:class:`~workbench.core.errors.CheckpointError` subclasses; metadata that cannot
be read (an optimizer entry of the wrong type) is left empty. A safetensors header
is validated in time linear in its length before the library maps the file
(:func:`safetensors_header`). Opening a checkpoint also removes the temporary
files that interrupted saves left in its folder
(:func:`workbench.core.files.remove_stale_temps`).

Safety: ``torch.load`` always runs with ``weights_only=True``. A file that needs
more (a pickled module, custom classes, TorchScript) raises
:class:`~workbench.core.errors.TrustRequired` listing the globals it would import,
and is loaded with ``weights_only=False`` / ``torch.jit.load`` only when the caller
passes ``trust=True``. Every other failure raises
:class:`~workbench.core.errors.CheckpointError` naming the file, what is wrong and
what to do.
"""

from __future__ import annotations

import io
import json
import os
import pickletools
import re
import stat
import struct
import warnings
import zipfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, Mapping

import torch
from torch import nn

from workbench.core.digest import DIGEST_KEY, DigestCheck, check_digest
from workbench.core.errors import CheckpointCorrupt, CheckpointError, TrustRequired
from workbench.core.files import remove_stale_temps

ZIP_MAGIC = b"PK\x03\x04"
PICKLE_PROTO = 0x80
#: Largest safetensors JSON header we accept (the library's own limit is 100 MB).
MAX_SAFETENSORS_HEADER = 100 * 1024 * 1024
#: Most tensors a safetensors header may describe (the largest published models hold a few thousand).
MAX_SAFETENSORS_TENSORS = 200_000
#: Suffixes of the files :func:`newest_intact` considers in a checkpoint's folder.
CHECKPOINT_SUFFIXES = (".pt", ".pth", ".ckpt", ".bin", ".tar")
#: How many other checkpoints of a folder :func:`newest_intact` verifies at most, newest first.
MAX_INTACT_CANDIDATES = 16

#: Keys under which training scripts store the model's state_dict, in order of preference.
STATE_DICT_KEYS = ("model_state_dict", "state_dict", "model", "net", "model_state", "ema", "weights")
#: Keys under which training scripts store an optimizer's state_dict.
OPTIMIZER_KEYS = ("optimizer_state_dict", "optimizer", "optim", "optimizer_state")
#: Prefixes added by wrappers that never belong to an architecture's own keys:
#: ``module.`` (nn.DataParallel / DistributedDataParallel), ``_orig_mod.`` (torch.compile).
ALWAYS_STRIPPED = ("module.", "_orig_mod.")
#: Wrapper prefixes stripped only when that makes the keys match the architecture.
WRAPPER_PREFIXES = ("model.", "net.", "backbone.", "network.", "encoder.", "student.", "teacher.")

FIX_HINT = "Check that the file was copied completely, or save it again with torch.save."


@dataclass
class CheckpointMetadata:
    """What a checkpoint file says about itself.

    Attributes
    ----------
    format : str
        ``"state_dict" | "training_dict" | "lightning" | "safetensors" | "torchscript" |
        "pickled_module"``.
    container : str
        ``"zip" | "legacy_pickle" | "safetensors" | "torchscript"``.
    state_dict_key : str or None
        Key of the state_dict inside a training dict (``"model_state_dict"``, ...);
        None for a raw state_dict.
    epoch, global_step : int or None
        Training progress stored in the file (``global_step`` also reads ``step``).
    loss : float or None
        The stored loss value.
    optimizer_class : str or None
        ``"SGD"``, ``"AdamW"``...: stored by Workbench, else inferred from the
        ``param_groups`` keys (Adam and AdamW share keys; ``decoupled_weight_decay``
        tells them apart).
    optimizer_hparams : dict
        ``param_groups[0]`` without ``"params"``, as plain Python values.
    num_tensors : int
        Number of entries of the state_dict.
    total_params : int
        Sum of ``numel`` over unique tensors (tied tensors counted once).
    dtypes : dict of str to int
        dtype name (``"float32"``) -> number of tensors.
    file_size : int
        Size of the file in bytes.
    arch : dict or None
        The ``"arch"`` entry written by Workbench (``{"name": ..., "kwargs": {...}}``).
        ``kwargs`` is what the file holds: not always a dict (``[1, 2]`` in a
        damaged file), which :meth:`ArchSpec.from_file` refuses.
    frozen : list of str
        The ``"frozen"`` entry written by Workbench (qualified parameter names).
    edits : list of dict
        The ``"edits"`` entry written by Workbench: the structural edits its
        weights were saved with (``{"op": "add_lora", ...}``), replayed on open.
    extra : dict
        Anything else worth showing: safetensors ``__metadata__``, Lightning
        ``hyper_parameters``, other scalar entries of a training dict.
    verified : bool or None
        True when the file carried a digest of its tensors and every tensor
        matched it; None when it carries none (or one this version cannot check).
    """

    format: str
    container: str
    state_dict_key: str | None = None
    epoch: int | None = None
    global_step: int | None = None
    loss: float | None = None
    optimizer_class: str | None = None
    optimizer_hparams: dict = field(default_factory=dict)
    num_tensors: int = 0
    total_params: int = 0
    dtypes: dict[str, int] = field(default_factory=dict)
    file_size: int = 0
    arch: dict | None = None
    frozen: list[str] = field(default_factory=list)
    edits: list[dict] = field(default_factory=list)
    extra: dict = field(default_factory=dict)
    verified: bool | None = None


@dataclass
class Checkpoint:
    """A checkpoint read from disk.

    Attributes
    ----------
    path : Path
        The file.
    state_dict : dict of str to torch.Tensor
        The model's tensors, on CPU (memory-mapped for zip files), prefixes not yet stripped.
    metadata : CheckpointMetadata
        Format, progress, optimizer, counts.
    raw : dict or None
        The whole loaded dict (optimizer_state_dict, scheduler_state_dict, rng_state...)
        without its digest entry; None for safetensors, TorchScript and pickled modules.
    module : nn.Module or None
        The model itself for ``pickled_module`` / ``torchscript`` (trusted loads only).
    """

    path: Path
    state_dict: dict[str, torch.Tensor]
    metadata: CheckpointMetadata
    raw: dict | None = None
    module: nn.Module | None = None


# --------------------------------------------------------------------------- detection


def _check_file(path: Path) -> int:
    """Return the size of ``path`` in bytes, or raise CheckpointError if it is not a readable file."""
    if not path.exists():
        raise CheckpointError("file not found. Check the path and try again.", path)
    if path.is_dir():
        raise CheckpointError("is a directory, not a checkpoint file (nor a model folder with config.json). "
                              "Choose the .pt/.pth/.ckpt/.safetensors file inside it.", path)
    try:
        size = path.stat().st_size
    except OSError as exc:
        raise CheckpointError(f"cannot be read ({exc.strerror}). Check its permissions.", path) from exc
    if size == 0:
        raise CheckpointError("the file is empty (0 bytes). It was probably not written completely; save it again.", path)
    return size


def _read_head(path: Path, n: int = 16) -> bytes:
    try:
        with open(path, "rb") as f:
            return f.read(n)
    except OSError as exc:
        raise CheckpointError(f"cannot be read ({exc.strerror}). Check its permissions.", path) from exc


def _looks_like_safetensors(path: Path, head: bytes, size: int) -> bool:
    if len(head) < 9:
        return False
    (n,) = struct.unpack("<Q", head[:8])
    return 2 <= n <= min(size - 8, MAX_SAFETENSORS_HEADER) and head[8:9] == b"{"


def _zip_names(path: Path) -> list[str]:
    try:
        with zipfile.ZipFile(path) as zf:
            return zf.namelist()
    except Exception as exc:  # BadZipFile, EOFError, NotImplementedError (bad version field), ...
        raise CheckpointError(
            f"is a damaged or truncated zip archive ({exc}). {FIX_HINT}", path
        ) from exc


def detect_container(path: str | Path) -> str:
    """Find a checkpoint's container from its first bytes (never its suffix).

    Parameters
    ----------
    path : str or Path
        The file.

    Returns
    -------
    str
        ``"zip"`` (``torch.save`` archive), ``"torchscript"`` (zip holding
        ``constants.pkl`` or ``code/``), ``"safetensors"`` or ``"legacy_pickle"``.

    Raises
    ------
    CheckpointError
        Missing file, directory, empty file, damaged zip, or content that is none
        of the above.
    """
    path = Path(path)
    size = _check_file(path)
    head = _read_head(path)
    if head.startswith(ZIP_MAGIC):
        names = _zip_names(path)
        if any(n.endswith("/constants.pkl") or "/code/" in n for n in names):
            return "torchscript"
        return "zip"
    if _looks_like_safetensors(path, head, size):
        return "safetensors"
    if head[:1] == bytes([PICKLE_PROTO]):
        return "legacy_pickle"
    raise CheckpointError(
        "is not a PyTorch checkpoint: it is neither a torch.save zip archive, a legacy "
        "pickle nor a safetensors file. Choose a .pt/.pth/.ckpt/.bin/.safetensors file.",
        path,
    )


# --------------------------------------------------------------------------- safety


def pickle_globals(data: bytes) -> list[str]:
    """List the globals a pickle would import, by scanning its opcodes (never unpickling).

    ``torch.serialization.get_unsafe_globals_in_checkpoint`` only reads zip
    archives; legacy (pre-1.6) ``torch.save`` files are a sequence of pickles, so
    this walks them with :mod:`pickletools` instead. Scanning opcodes runs no code,
    which is the whole point: ``pickle.load`` would call ``__reduce__`` results
    such as ``os.system`` before we could look at them.

    Parameters
    ----------
    data : bytes
        One or more concatenated pickles.

    Returns
    -------
    list of str
        Sorted ``"module.qualname"`` strings from GLOBAL / STACK_GLOBAL opcodes
        (STACK_GLOBAL names are resolved from the two preceding string opcodes).
        Scanning stops quietly at the first undecodable byte.
    """
    found: set[str] = set()
    stream = io.BytesIO(data)
    while stream.tell() < len(data):
        start = stream.tell()
        strings: list[str] = []
        try:
            for op, arg, _ in pickletools.genops(stream):
                if op.name == "GLOBAL":
                    found.add(str(arg).replace(" ", "."))
                elif op.name == "STACK_GLOBAL" and len(strings) >= 2:
                    found.add(f"{strings[-2]}.{strings[-1]}")
                elif isinstance(arg, str):
                    strings.append(arg)
        except Exception:  # a damaged pickle: report what was found so far
            break
        if stream.tell() == start:
            break
    return sorted(found)


def _safe_global_names() -> set[str]:
    from torch import _weights_only_unpickler as wou

    return set(wou._get_allowed_globals()) | set(wou._get_user_allowed_globals())


def unsafe_globals(path: str | Path) -> list[str]:
    """List the globals in a ``torch.save`` file that weights-only loading refuses.

    Parameters
    ----------
    path : str or Path
        A zip (``torch.save``) or legacy-pickle checkpoint.

    Returns
    -------
    list of str
        Sorted ``"module.qualname"`` strings, from
        ``torch.serialization.get_unsafe_globals_in_checkpoint`` for zip files and
        from :func:`pickle_globals` for legacy files. Nothing is unpickled.

    Raises
    ------
    CheckpointError
        The file is damaged or is not a pickle-based checkpoint.
    """
    path = Path(path)
    container = detect_container(path)
    try:
        if container == "zip":
            return sorted(torch.serialization.get_unsafe_globals_in_checkpoint(path))
        if container == "legacy_pickle":
            safe = _safe_global_names()
            return [g for g in pickle_globals(path.read_bytes()) if g not in safe]
    except CheckpointError:
        raise
    except Exception as exc:
        raise CheckpointError(f"its pickle data is damaged ({type(exc).__name__}: {exc}). {FIX_HINT}", path) from exc
    raise CheckpointError(f"is a {container} file, which holds no pickle globals.", path)


# --------------------------------------------------------------------------- loading


def _torch_load(path: Path, container: str, *, weights_only: bool, mmap: bool) -> Any:
    use_mmap = mmap and container == "zip"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        if path.name.lower().endswith(".safetensors"):
            # torch.load hands any *path* ending in .safetensors to the safetensors library
            # (suffix, not content); a file object keeps the content-based decision ours.
            with open(path, "rb") as f:
                return torch.load(f, map_location="cpu", weights_only=weights_only)
        return torch.load(path, map_location="cpu", weights_only=weights_only, mmap=use_mmap)


def _load_pickled(path: Path, container: str, *, trust: bool, mmap: bool) -> Any:
    """``torch.load`` with weights_only=True; on refusal list the globals and ask for trust."""
    try:
        return _torch_load(path, container, weights_only=True, mmap=mmap)
    except Exception as exc:  # torch raises many types for damaged files
        first = exc
    try:
        globals_ = unsafe_globals(path)
    except CheckpointError:
        globals_ = []
    if not globals_:
        raise CheckpointError(
            f"cannot be read: {type(first).__name__}: {_short(first)}. The file is damaged or "
            f"truncated. {FIX_HINT}",
            path,
        ) from first
    if not trust:
        raise TrustRequired(path, globals_, kind="pickle") from first
    try:
        return _torch_load(path, container, weights_only=False, mmap=mmap)
    except Exception as exc:
        raise CheckpointError(
            f"could not be loaded even with trust: {type(exc).__name__}: {_short(exc)}. "
            "The classes it needs must be importable (install or add the code that defined them).",
            path,
        ) from exc


def _short(exc: BaseException, limit: int = 300) -> str:
    text = " ".join(str(exc).split())
    return text if len(text) <= limit else text[: limit - 3] + "..."


# --------------------------------------------------------------------------- safetensors header

#: Bits per element of each safetensors dtype (the Rust crate's ``Dtype::bitsize``,
#: https://github.com/huggingface/safetensors/blob/main/safetensors/src/tensor.rs).
SAFETENSORS_DTYPE_BITS = {
    "BOOL": 8, "U8": 8, "I8": 8, "F8_E5M2": 8, "F8_E4M3": 8, "F8_E4M3FNUZ": 8, "F8_E5M2FNUZ": 8,
    "F8_E8M0": 8, "E8M0": 8, "F4": 4, "F6_E2M3": 6, "F6_E3M2": 6,
    "I16": 16, "U16": 16, "F16": 16, "BF16": 16, "I32": 32, "U32": 32, "F32": 32,
    "I64": 64, "U64": 64, "F64": 64, "C64": 64,
}
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


def _bad_safetensors(path: Path, reason: str) -> CheckpointError:
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
        raise _bad_safetensors(path, "its header is not a JSON object")
    i = _JSON_SPACE.match(text, i + 1).end()
    pairs: list[tuple[str, Any]] = []
    tensors = 0
    if text[i:i + 1] == "}":
        _check_end(text, i + 1, path)
        return pairs
    while True:
        if text[i:i + 1] != '"':
            raise _bad_safetensors(path, f"its header is not valid JSON (expected a name at character {i})")
        key, i = json.decoder.scanstring(text, i + 1)
        i = _JSON_SPACE.match(text, i).end()
        if text[i:i + 1] != ":":
            raise _bad_safetensors(path, f"its header is not valid JSON (expected ':' at character {i})")
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
            raise _bad_safetensors(path, f"its header is not valid JSON (expected ',' or '}}' at character {i})")
    _check_end(text, i, path)
    return pairs


def _check_end(text: str, i: int, path: Path) -> None:
    if text[i:].strip():
        raise _bad_safetensors(path, "its header has data after the JSON object (only space padding is allowed)")


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
        raise _bad_safetensors(path, f"tensor {name!r} of {numel} {dtype} elements does not fill whole bytes")
    return bits // 8


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def _entry(name: str, info: Any, data_len: int, path: Path) -> SafetensorsEntry:
    """Validate one tensor description (dtype, shape, offsets inside the data section, byte length)."""
    if not isinstance(info, dict) or not {"dtype", "shape", "data_offsets"} <= info.keys():
        raise _bad_safetensors(path, f"tensor {name!r} lacks dtype, shape or data_offsets")
    dtype, shape, offsets = info["dtype"], info["shape"], info["data_offsets"]
    if dtype not in SAFETENSORS_DTYPE_BITS:
        raise _bad_safetensors(path, f"tensor {name!r} has unknown dtype {str(dtype)[:40]!r}")
    if not isinstance(shape, list) or not all(_is_int(d) for d in shape):
        raise _bad_safetensors(path, f"tensor {name!r} has a shape that is not a list of non-negative integers")
    if not (isinstance(offsets, list) and len(offsets) == 2 and all(_is_int(o) for o in offsets)):
        raise _bad_safetensors(path, f"tensor {name!r} has data_offsets that are not two non-negative integers")
    begin, end = offsets
    if not begin <= end <= data_len:
        raise _bad_safetensors(path, f"tensor {name!r} lies outside the file (bytes {begin}-{end} of {data_len})")
    expected = _nbytes(name, dtype, tuple(shape), data_len, path)
    if end - begin != expected:
        raise _bad_safetensors(path, f"tensor {name!r} has {end - begin} bytes but shape {tuple(shape)[:8]} of "
                                     f"{dtype} needs {expected if expected <= data_len else 'more than the file'}")
    return SafetensorsEntry(name, dtype, tuple(shape), begin, end)


def _check_overlaps(entries: list[SafetensorsEntry], path: Path) -> None:
    """Refuse two tensors sharing bytes (sorted by offset; Timsort is linear on the usual sorted header)."""
    previous: SafetensorsEntry | None = None
    for e in sorted((e for e in entries if e.end > e.begin), key=lambda e: e.begin):
        if previous is not None and e.begin < previous.end:
            raise _bad_safetensors(path, f"tensors {previous.name!r} and {e.name!r} overlap")
        previous = e


def safetensors_header(path: str | Path) -> tuple[dict[str, str], list[SafetensorsEntry]]:
    """Read and validate a safetensors header in time linear in its length.

    Format: https://github.com/huggingface/safetensors#format -- an 8-byte
    little-endian header length N, N bytes of UTF-8 JSON (space-padded), then the
    data section. Checked: N within the file and at most
    :data:`MAX_SAFETENSORS_HEADER`; at most :data:`MAX_SAFETENSORS_TENSORS`
    tensors (refused as soon as one more is read); each tensor's dtype is known,
    its shape non-negative integers, ``shape x itemsize`` equals its byte length,
    its offsets lie inside the data section, and no two tensors overlap;
    ``__metadata__`` maps str to str.

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
    path = Path(path)
    try:
        with open(path, "rb") as f:
            size = os.fstat(f.fileno()).st_size
            head = f.read(8)
            (n,) = struct.unpack("<Q", head) if len(head) == 8 else (0,)
            if not 2 <= n <= min(MAX_SAFETENSORS_HEADER, size - 8):
                raise _bad_safetensors(path, f"its header length {n} does not fit the file ({size} bytes)")
            raw = f.read(n)
    except OSError as exc:
        raise CheckpointError(f"cannot be read ({exc.strerror}). Check its permissions.", path) from exc
    try:
        pairs = _header_pairs(raw.decode("utf-8"), path)
    except (UnicodeDecodeError, ValueError, RecursionError) as exc:
        raise _bad_safetensors(path, f"its header is not valid UTF-8 JSON ({_short(exc, 120)})") from exc
    data_len = size - 8 - n
    metadata: dict[str, str] = {}
    entries: list[SafetensorsEntry] = []
    names: set[str] = set()
    for name, info in pairs:
        if name == "__metadata__":
            if not (isinstance(info, dict) and all(isinstance(v, str) for v in info.values())):
                raise _bad_safetensors(path, "its __metadata__ is not a map of strings")
            metadata = info
            continue
        if name in names:
            raise _bad_safetensors(path, f"its header names tensor {name!r} twice")
        names.add(name)
        entries.append(_entry(name, info, data_len, path))
    _check_overlaps(entries, path)
    return metadata, entries


def _read_safetensors(path: Path) -> tuple[dict[str, torch.Tensor], dict]:
    safetensors_header(path)  # refuse a bad or oversized header before the library maps the file
    from safetensors import safe_open

    try:
        tensors: dict[str, torch.Tensor] = {}
        with safe_open(str(path), framework="pt", device="cpu") as f:
            meta = dict(f.metadata() or {})
            for key in f.keys():
                tensors[key] = f.get_tensor(key)
        return tensors, meta
    except Exception as exc:  # SafetensorError, OSError, ...
        raise CheckpointError(
            f"is not a valid safetensors file ({type(exc).__name__}: {_short(exc)}). {_SAFETENSORS_FIX}",
            path,
        ) from exc


def _read_torchscript(path: Path, trust: bool) -> nn.Module:
    if not trust:
        raise TrustRequired(path, [], kind="torchscript")
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return torch.jit.load(str(path), map_location="cpu")
    except Exception as exc:
        raise CheckpointError(
            f"is a damaged TorchScript archive ({type(exc).__name__}: {_short(exc)}). {FIX_HINT}",
            path,
        ) from exc


def _is_tensor_dict(obj: Any) -> bool:
    return (
        isinstance(obj, Mapping)
        and len(obj) > 0
        and all(isinstance(k, str) for k in obj)
        and all(isinstance(v, torch.Tensor) for v in obj.values())
    )


def _find_state_dict(obj: dict) -> tuple[str, Any] | None:
    """The (key, value) of a training dict that holds the model: known keys first, else the largest tensor dict."""
    for key in STATE_DICT_KEYS:
        value = obj.get(key)
        if _is_tensor_dict(value) or isinstance(value, nn.Module):
            return key, value
    best = None
    for key, value in obj.items():
        if isinstance(key, str) and _is_tensor_dict(value) and (best is None or len(value) > len(best[1])):
            best = (key, value)
    return best


def _is_lightning(obj: Mapping) -> bool:
    marks = ("pytorch-lightning_version", "global_step", "optimizer_states", "lr_schedulers", "callbacks")
    return "state_dict" in obj and any(m in obj for m in marks)


def _classify(path: Path, obj: Any) -> tuple[str, str | None, dict, nn.Module | None]:
    """Return (format, state_dict_key, state_dict, module) for a loaded object."""
    if isinstance(obj, nn.Module):
        return "pickled_module", None, obj.state_dict(), obj
    if _is_tensor_dict(obj):
        return "state_dict", None, dict(obj), None
    if isinstance(obj, Mapping) and all(isinstance(k, str) for k in obj):
        fmt = "lightning" if _is_lightning(obj) else "training_dict"
        found = _find_state_dict(dict(obj))
        if found is not None:
            key, value = found
            if isinstance(value, nn.Module):
                return fmt, key, value.state_dict(), value
            return fmt, key, dict(value), None
        keys = ", ".join(repr(k) for k in list(obj)[:12])
        raise CheckpointError(
            f"holds a dict without any state_dict of tensors (top-level keys: {keys}). "
            f"Save the model's state_dict under one of {', '.join(STATE_DICT_KEYS)}.",
            path,
        )
    raise CheckpointError(
        f"holds a {type(obj).__name__}, not a state_dict or a training checkpoint dict. "
        "Save model.state_dict() (or a dict containing it) with torch.save.",
        path,
    )


# --------------------------------------------------------------------------- metadata


#: How deep, and how many values in all, :func:`_plain` converts; the rest reads ``"..."``.
PLAIN_MAX_DEPTH = 32
PLAIN_MAX_VALUES = 100_000
#: Tensors up to this many elements are shown as lists; larger ones as a summary.
PLAIN_MAX_TENSOR = 1000


def _plain(value: Any) -> Any:
    """Tensors, tuples and nested containers as plain JSON-able Python values.

    Bounded, whatever a file holds: containers deeper than :data:`PLAIN_MAX_DEPTH`,
    values past the first :data:`PLAIN_MAX_VALUES` (a container shared many times
    counts each time) and ``"..."`` stand for the rest; a tensor of more than
    :data:`PLAIN_MAX_TENSOR` elements becomes ``"tensor(shape, dtype)"``. Never raises.
    """
    budget = [PLAIN_MAX_VALUES]

    def conv(v: Any, depth: int) -> Any:
        budget[0] -= 1
        if budget[0] < 0 or depth > PLAIN_MAX_DEPTH:
            return "..."
        if isinstance(v, torch.Tensor):
            try:
                if v.numel() == 1:
                    return v.item()
                if v.numel() <= PLAIN_MAX_TENSOR:
                    return v.tolist()
            except Exception:  # noqa: BLE001 - meta and other storage-less tensors
                pass
            return f"tensor({tuple(v.shape)}, {str(v.dtype).removeprefix('torch.')})"
        if isinstance(v, Mapping):
            return {str(k): conv(x, depth + 1) for k, x in v.items()}
        if isinstance(v, (list, tuple)):
            return [conv(x, depth + 1) for x in v]
        if isinstance(v, (str, int, float, bool)) or v is None:
            return v
        try:
            return repr(v)[:200]
        except Exception:  # noqa: BLE001
            return type(v).__name__

    return conv(value, 0)


def _as_int(value: Any) -> int | None:
    if isinstance(value, torch.Tensor) and value.numel() == 1:
        value = value.item()
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return None


def _as_float(value: Any) -> float | None:
    if isinstance(value, torch.Tensor) and value.numel() == 1:
        value = value.item()
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return float(value)
    return None


def _optimizer_state(raw: Mapping) -> Mapping | None:
    for key in OPTIMIZER_KEYS:
        value = raw.get(key)
        if isinstance(value, Mapping) and "param_groups" in value:
            return value
    states = raw.get("optimizer_states")  # Lightning: a list, one per optimizer
    if isinstance(states, (list, tuple)) and states and isinstance(states[0], Mapping):
        return states[0]
    return None


def guess_optimizer_class(group_keys: Iterable[str], group: Mapping | None = None) -> str | None:
    """Name the ``torch.optim`` class whose constructor arguments match a param group's keys.

    Parameters
    ----------
    group_keys : iterable of str
        Keys of ``param_groups[0]`` (``"params"`` is ignored).
    group : mapping, optional
        The group itself; ``decoupled_weight_decay`` in it tells AdamW from Adam.

    Returns
    -------
    str or None
        The class name with the best Jaccard overlap of keys (at least 0.6), or None.
    """
    import inspect

    keys = set(group_keys) - {"params", "initial_lr", "param_names"}
    if not keys:
        return None
    best, best_score = None, 0.6
    for name in dir(torch.optim):
        cls = getattr(torch.optim, name)
        if not (isinstance(cls, type) and issubclass(cls, torch.optim.Optimizer)) or cls is torch.optim.Optimizer:
            continue
        try:
            args = set(inspect.signature(cls.__init__).parameters) - {"self", "params"}
        except (TypeError, ValueError):
            continue
        score = len(keys & args) / len(keys | args) if args else 0.0
        if score > best_score or (score == best_score and best is not None and name < best):
            best, best_score = name, score
    decoupled = group.get("decoupled_weight_decay") if isinstance(group, Mapping) else None
    if best in ("Adam", "AdamW") and isinstance(decoupled, (bool, int)):
        best = "AdamW" if decoupled else "Adam"
    return best


def _optimizer_info(raw: Mapping) -> tuple[str | None, dict]:
    """The optimizer's class and ``param_groups[0]`` hyper-parameters; ``(None, {})`` when they cannot be read."""
    state = _optimizer_state(raw)
    if state is None:
        return None, {}
    groups = state.get("param_groups")
    group = groups[0] if isinstance(groups, (list, tuple)) and groups and isinstance(groups[0], Mapping) else {}
    hparams = {k: _plain(v) for k, v in group.items() if isinstance(k, str) and k not in ("params", "param_names")}
    name = raw.get("optimizer_class")
    if not isinstance(name, str):
        name = guess_optimizer_class([k for k in group if isinstance(k, str)], group) if group else None
    return name, hparams


def tensor_stats(state_dict: Mapping[str, torch.Tensor]) -> tuple[int, int, dict[str, int]]:
    """Count a state_dict's tensors.

    Returns
    -------
    (num_tensors, total_params, dtypes)
        ``total_params`` is the sum of ``numel`` over unique tensors (same storage,
        offset, shape and stride count once); ``dtypes`` maps ``"float32"`` -> count.
    """
    seen: set[tuple] = set()
    total = 0
    dtypes: dict[str, int] = {}
    for t in state_dict.values():
        name = str(t.dtype).removeprefix("torch.")
        dtypes[name] = dtypes.get(name, 0) + 1
        try:
            ident = (t.untyped_storage().data_ptr(), t.storage_offset(), tuple(t.shape), t.stride(), t.dtype)
        except (RuntimeError, NotImplementedError):  # meta / exotic tensors
            ident = (id(t),)
        if t.numel() and ident in seen:
            continue
        seen.add(ident)
        total += t.numel()
    return len(state_dict), total, dtypes


def _scalar_extras(raw: Mapping, used: set[str]) -> dict:
    out = {}
    for key, value in raw.items():
        if key in used or not isinstance(key, str):
            continue
        if isinstance(value, (str, int, float, bool)) or (isinstance(value, torch.Tensor) and value.numel() == 1):
            out[key] = _plain(value)
    return out


def _arch_entry(arch: Any) -> dict | None:
    """A file's ``arch`` entry as ``{"name": str, "kwargs": ...}``; None when it names no architecture.

    A plain string is timm's convention (its ``train.py`` saves ``"arch": "efficientnet_b0"``):
    timm's model of that name when timm has one (``timm/efficientnet_b0``, not
    torchvision's model of the same name), else the name as it is, without kwargs.

    ``kwargs`` is kept as the file gives it (a dict copied, anything else as it
    is, None as ``{}``): :meth:`ArchSpec.from_file` then refuses kwargs that are
    not a table of plain values with an ArchitectureError naming the file.
    """
    if isinstance(arch, str) and arch.strip():
        from workbench.core import contrib

        name = arch.strip()
        timm_name = contrib.TIMM_PREFIX + name
        return {"name": timm_name if contrib.is_registered("architecture", timm_name) else name, "kwargs": {}}
    if not (isinstance(arch, Mapping) and isinstance(arch.get("name"), str)):
        return None
    kwargs = arch.get("kwargs")
    return {"name": arch["name"], "kwargs": {} if kwargs is None else dict(kwargs) if isinstance(kwargs, Mapping)
            else kwargs}


def _metadata_from_raw(fmt: str, container: str, key: str | None, raw: Mapping | None) -> CheckpointMetadata:
    meta = CheckpointMetadata(format=fmt, container=container, state_dict_key=key)
    if raw is None:
        return meta
    meta.epoch = _as_int(raw.get("epoch"))
    meta.global_step = _as_int(raw.get("global_step", raw.get("step")))
    meta.loss = _as_float(raw.get("loss"))
    meta.optimizer_class, meta.optimizer_hparams = _optimizer_info(raw)
    meta.arch = _arch_entry(raw.get("arch"))
    frozen = raw.get("frozen")
    if isinstance(frozen, (list, tuple)):
        meta.frozen = [str(n) for n in frozen]
    if isinstance(raw.get("edits"), (list, tuple)):  # plain data; apply_edits checks every entry before use
        meta.edits = [_plain(dict(e)) for e in raw["edits"] if isinstance(e, Mapping)]
    for lightning_key in ("hyper_parameters", "lr_schedulers"):
        if isinstance(raw.get(lightning_key), (Mapping, list, tuple)):
            meta.extra[lightning_key] = _plain(raw[lightning_key])
    used = {"epoch", "global_step", "step", "loss", "optimizer_class", key or ""}
    meta.extra.update(_scalar_extras(raw, used))
    return meta


def _safetensors_metadata(meta: CheckpointMetadata, header: dict) -> None:
    meta.extra["__metadata__"] = dict(header)
    for field_name in ("arch", "frozen"):  # Workbench-style entries stored as JSON strings
        if field_name in header:
            try:
                value = json.loads(header[field_name])
            except (TypeError, ValueError, RecursionError):
                continue
            if field_name == "arch":
                meta.arch = _arch_entry(value)
            elif field_name == "frozen" and isinstance(value, list):
                meta.frozen = [str(v) for v in value]
    for field_name, conv in (("epoch", _as_int), ("global_step", _as_int), ("loss", _as_float)):
        text = header.get(field_name)
        if text is not None:
            try:
                setattr(meta, field_name, conv(float(text)))
            except (TypeError, ValueError):
                pass


# --------------------------------------------------------------------------- integrity


def _load_weights(path: Path) -> Any:
    """``torch.load(weights_only=True)`` of a pickle-based checkpoint, memory-mapped; None for other containers.

    Raises
    ------
    CheckpointError
        The file cannot be read at all (missing, damaged, or it needs trust).
    """
    container = detect_container(path)
    if container not in ("zip", "legacy_pickle"):
        return None
    try:
        return _torch_load(path, container, weights_only=True, mmap=True)
    except Exception as exc:  # torch raises many types for damaged or refused files
        raise CheckpointError(f"cannot be read ({type(exc).__name__}: {_short(exc)})", path) from exc


def verify_checkpoint(path: str | Path) -> DigestCheck:
    """Check a checkpoint file's tensors against the digest stored in it.

    Reads with ``weights_only=True`` (memory-mapped); nothing from the file runs.

    Parameters
    ----------
    path : str or Path

    Returns
    -------
    DigestCheck
        ``status`` ``"ok"``, ``"mismatch"`` (with the tensors that differ),
        ``"malformed"`` (an unreadable digest entry), ``"absent"`` (no digest, or
        not a ``torch.save`` dict) or ``"unknown"``.

    Raises
    ------
    CheckpointError
        The file cannot be read at all (missing, damaged, or it needs trust).
    """
    path = Path(path)
    obj = _load_weights(path)
    return DigestCheck("absent") if obj is None else check_digest(obj)


def _candidates(path: Path) -> list[Path]:
    """Other regular checkpoint files of ``path``'s folder, newest first (links and specials skipped)."""
    found: list[tuple[int, str, Path]] = []
    try:
        entries = list(os.scandir(path.parent))
    except OSError:
        return []
    for entry in entries:
        if entry.name == path.name or entry.name.startswith(".") or \
                not entry.name.lower().endswith(CHECKPOINT_SUFFIXES):
            continue
        try:
            st = entry.stat(follow_symlinks=False)
        except OSError:
            continue
        if stat.S_ISREG(st.st_mode):
            found.append((st.st_mtime_ns, entry.name, Path(entry.path)))
    return [p for _, _, p in sorted(found, key=lambda t: (-t[0], t[1]))]


def model_signature(obj: Any) -> tuple[str, frozenset] | None:
    """What makes two loaded checkpoints checkpoints of one model: its ``arch`` entry, its tensors' names and shapes.

    Parameters
    ----------
    obj : Any
        What ``torch.load`` returned (a digest entry in it is ignored).

    Returns
    -------
    (str, frozenset) or None
        The ``arch`` entry as canonical JSON (``"null"`` when there is none) and
        the set of ``(key, shape)`` of the state_dict; None when ``obj`` holds no
        state_dict. Never raises.
    """
    try:
        if isinstance(obj, Mapping):
            obj = {k: v for k, v in obj.items() if not (isinstance(k, str) and k == DIGEST_KEY)}
        _, _, state_dict, _ = _classify(Path("checkpoint"), obj)
        arch = obj.get("arch") if isinstance(obj, Mapping) else None
        arch_text = json.dumps(_plain(arch), sort_keys=True, default=str)
        return arch_text, frozenset((str(k), tuple(v.shape)) for k, v in state_dict.items())
    except Exception:  # noqa: BLE001 - content of a file: anything unexpected means "no model signature"
        return None


def newest_intact(path: str | Path, like: Any = None) -> Path | None:
    """The newest other checkpoint of the same model in ``path``'s folder whose digest verifies.

    Candidates are the folder's regular files ending in :data:`CHECKPOINT_SUFFIXES`,
    newest modification time first (``best.pt``, an earlier epoch's file,
    ``init.pt``); at most :data:`MAX_INTACT_CANDIDATES` are read. Only a
    checkpoint of the same model is named: its ``arch`` entry, state_dict keys and
    shapes equal the corrupt file's (:func:`model_signature`), so a folder of
    downloads never offers another model. A file without a digest is never named:
    it cannot be shown intact. A candidate that cannot be read or checked, for
    whatever reason, is passed over.

    Parameters
    ----------
    path : str or Path
        The corrupt checkpoint.
    like : Any, optional
        What ``torch.load`` returned for ``path`` (read again when not given).

    Returns
    -------
    Path or None
        None also when ``path`` itself cannot be read, or holds no state_dict
        (then no other file can be shown to be the same model).
    """
    path = Path(path)
    try:
        signature = model_signature(_load_weights(path) if like is None else like)
    except Exception:  # noqa: BLE001 - a search: an unreadable file names nothing
        return None
    if signature is None:
        return None
    for candidate in _candidates(path)[:MAX_INTACT_CANDIDATES]:
        try:
            obj = _load_weights(candidate)
            if obj is not None and model_signature(obj) == signature and check_digest(obj).ok:
                return candidate
        except Exception:  # noqa: BLE001 - a search: one bad file never stops it
            continue
    return None


def _verified(path: Path, obj: Any) -> tuple[Any, bool | None]:
    """Check a loaded object's digest; return it without the digest entry and whether it verified.

    Raises
    ------
    CheckpointCorrupt
        A tensor's bytes differ from the digest, or the digest entry is malformed
        (``detail`` ``"malformed digest: ..."``); ``.intact`` names
        :func:`newest_intact` and ``.tensors`` lists the tensors that differ
        (``["<digest entry>"]`` for a malformed one).
    """
    check = check_digest(obj)
    if check.status == "absent":
        return obj, None
    if check.status in ("mismatch", "malformed"):
        detail = "digest mismatch" if check.status == "mismatch" else f"malformed digest: {check.reason}"
        err = CheckpointCorrupt(path, newest_intact(path, like=obj), detail=detail)
        err.tensors = check.bad
        raise err
    return {k: v for k, v in obj.items() if not (isinstance(k, str) and k == DIGEST_KEY)}, \
        (True if check.ok else None)


# --------------------------------------------------------------------------- read_checkpoint


def read_checkpoint(path: str | Path, *, trust: bool = False, mmap: bool = True) -> Checkpoint:
    """Read any supported checkpoint file to CPU.

    Parameters
    ----------
    path : str or Path
        The file. Its format is found from its content (see :func:`detect_container`).
        A model folder is read by :func:`workbench.core.model.hf_folder.read_folder_checkpoint`
        (``open_model`` routes folders there).
    trust : bool
        Allow loading that runs code from the file: full pickles (``weights_only=False``)
        and TorchScript (``torch.jit.load``). Default False.
    mmap : bool
        Memory-map zip archives (``torch.load(mmap=True)``): a 1 GB file opens in
        milliseconds and pages are read on first use. Default True.

    Returns
    -------
    Checkpoint
        Its ``state_dict`` keys keep their prefixes; see :func:`strip_prefixes`.
        ``metadata.verified`` says whether a stored digest was checked. Reading
        every byte to check it costs ~40 ms for 531 MB in the page cache; a file
        not yet cached is read from disk once here instead of page by page later.

    Raises
    ------
    TrustRequired
        The file is TorchScript, or a pickle needing globals that weights-only loading
        refuses (listed in ``.globals``), and ``trust`` is False. Nothing from the file ran.
    CheckpointCorrupt
        The file carries a digest of its tensors and a tensor no longer matches it;
        the message names the newest intact checkpoint of the folder (:func:`newest_intact`).
    CheckpointError
        Missing, empty, truncated, damaged or unrecognised file; a dict without a
        state_dict; a safetensors header that fails :func:`safetensors_header`.
    """
    path = Path(path)
    container = detect_container(path)
    remove_stale_temps(path.parent)
    size = path.stat().st_size
    verified: bool | None = None
    raw: dict | None = None
    module: nn.Module | None = None
    if container == "safetensors":
        state_dict, header = _read_safetensors(path)
        meta = CheckpointMetadata(format="safetensors", container=container)
        _safetensors_metadata(meta, header)
    elif container == "torchscript":
        module = _read_torchscript(path, trust)
        state_dict = dict(module.state_dict())
        meta = CheckpointMetadata(format="torchscript", container=container)
    else:
        obj, verified = _verified(path, _load_pickled(path, container, trust=trust, mmap=mmap))
        try:
            fmt, key, state_dict, module = _classify(path, obj)
            raw = dict(obj) if isinstance(obj, Mapping) and fmt != "state_dict" else None
            meta = _metadata_from_raw(fmt, container, key, raw)
        except CheckpointError:
            raise
        except Exception as exc:  # noqa: BLE001 - the readers above are total; this keeps the promise if one is not
            raise CheckpointError(f"holds data Workbench cannot interpret ({type(exc).__name__}: {_short(exc)}). "
                                  f"{FIX_HINT}", path) from exc
    if not state_dict:
        raise CheckpointError("holds no tensors. Save a model's state_dict into it.", path)
    meta.num_tensors, meta.total_params, meta.dtypes = tensor_stats(state_dict)
    meta.file_size = size
    meta.verified = verified
    return Checkpoint(path=path, state_dict=state_dict, metadata=meta, raw=raw, module=module)


# --------------------------------------------------------------------------- prefixes


def _strip_component(keys: Iterable[str], component: str) -> dict[str, str]:
    """Map each key to the key without the module path component ``component`` (anywhere)."""
    out = {}
    for key in keys:
        parts = key.split(".")
        out[key] = ".".join([p for p in parts[:-1] if p != component] + parts[-1:])
    return out


def _strip_leading(keys: Iterable[str], prefix: str) -> dict[str, str]:
    return {k: k[len(prefix):] if k.startswith(prefix) else k for k in keys}


def _apply(state_dict: Mapping, mapping: dict[str, str]) -> dict | None:
    """Rename keys; None if two keys would collide."""
    new = {mapping[k]: v for k, v in state_dict.items()}
    return new if len(new) == len(state_dict) else None


def common_leading(keys: list[str], depth: int = 1) -> list[str]:
    """Leading prefixes of up to ``depth`` path components shared by at least half of the keys.

    Most frequent first, e.g. ``["model.", "model.net."]``.
    """
    counts: dict[str, int] = {}
    for k in keys:
        parts = k.split(".")[:-1]
        for n in range(1, min(depth, len(parts)) + 1):
            prefix = ".".join(parts[:n]) + "."
            counts[prefix] = counts.get(prefix, 0) + 1
    half = max(1, len(keys) // 2)
    return [p for p, c in sorted(counts.items(), key=lambda kv: (-kv[1], kv[0])) if c >= half]


def strip_prefixes(
    state_dict: Mapping[str, torch.Tensor], reference_keys: Iterable[str] | None = None
) -> tuple[dict[str, torch.Tensor], list[str]]:
    """Remove wrapper prefixes from state_dict keys.

    ``module.`` (``nn.DataParallel`` / DDP) and ``_orig_mod.`` (``torch.compile``)
    are removed wherever they occur as a path component, also nested
    (``module._orig_mod.``), unless ``reference_keys`` use them. A leading wrapper
    prefix (``model.`` as in Lightning, ``net.``, ``backbone.``, or any first
    component shared by at least half of the keys) is removed only when
    ``reference_keys`` are given and more keys match them afterwards.

    Parameters
    ----------
    state_dict : mapping of str to Tensor
        The checkpoint's tensors.
    reference_keys : iterable of str, optional
        The target module's ``state_dict()`` keys.

    Returns
    -------
    (dict, list of str)
        The renamed dict (same tensor objects) and the stripped prefixes in order,
        e.g. ``["module.", "model."]``.
    """
    ref = set(reference_keys) if reference_keys is not None else None
    current = dict(state_dict)
    stripped: list[str] = []

    def score(d: Mapping) -> int:
        return len(ref.intersection(d)) if ref is not None else 0

    for prefix in ALWAYS_STRIPPED:
        comp = prefix[:-1]
        if ref is not None and any(comp in k.split(".")[:-1] for k in ref):
            continue
        if any(comp in k.split(".")[:-1] for k in current):
            new = _apply(current, _strip_component(current, comp))
            if new is not None:
                current = new
                stripped.append(prefix)
    if ref is None:
        return current, stripped
    # A leading wrapper, possibly nested ("model.net."): keep the strip that matches most keys.
    best, best_prefix, best_dict = score(current), None, current
    options = dict.fromkeys([*WRAPPER_PREFIXES, *common_leading(list(current), depth=3)])
    for prefix in options:
        if not any(k.startswith(prefix) for k in current):
            continue
        new = _apply(current, _strip_leading(current, prefix))
        if new is not None and score(new) > best:
            best, best_prefix, best_dict = score(new), prefix, new
    if best_prefix is not None:
        stripped += [p + "." for p in best_prefix[:-1].split(".")]
    return best_dict, stripped


# --------------------------------------------------------------------------- in-memory transfer
# The window and its training process exchange models and states as bytes (never as
# tensors: multiprocessing would share those through file descriptors, which ties the
# window's memory to a child that may die). Serialized with torch.save, read back here,
# the one module that calls torch.load.


def to_bytes(obj: Any) -> bytes:
    """``torch.save(obj)`` into memory; ScriptModules through ``torch.jit.save``.

    Parameters
    ----------
    obj : state_dict, nested containers of tensors, nn.Module or ScriptModule

    Returns
    -------
    bytes
        A zip archive (``torch.save``'s format); read it back with :func:`tensors_from_bytes`
        (weights only) or :func:`module_from_bytes` (trusted code).

    Raises
    ------
    pickle.PicklingError, AttributeError, TypeError
        ``obj`` holds something that cannot be pickled (a lambda, a local class).
    """
    buf = io.BytesIO()
    if isinstance(obj, torch.jit.ScriptModule):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # torch.jit.save's deprecation notice: the user's model is TorchScript
            torch.jit.save(obj, buf)
    else:
        torch.save(obj, buf)
    return buf.getvalue()


def tensors_from_bytes(data: bytes) -> Any:
    """Read :func:`to_bytes` output that holds only tensors and plain data (``weights_only=True``).

    Raises
    ------
    CheckpointError
        The bytes hold more than tensors and plain data, or are damaged.
    """
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return torch.load(io.BytesIO(data), map_location="cpu", weights_only=True)
    except Exception as exc:  # torch raises many types for refused or damaged data
        raise CheckpointError(f"could not be read ({type(exc).__name__}: {_short(exc)})",
                              "state from the training process") from exc


def module_from_bytes(data: bytes, *, trust: bool) -> nn.Module:
    """Rebuild a module written by :func:`to_bytes` (pickled module or TorchScript archive).

    Runs the pickle's code: pass ``trust=True`` only for bytes this program wrote
    from a module the user already opened (and trusted, for pickled or
    TorchScript files) in the window. The classes the pickle names must be importable.

    Raises
    ------
    TrustRequired
        ``trust`` is False.
    CheckpointError
        The module cannot be rebuilt (a class that is not importable here).
    """
    if not trust:
        raise TrustRequired("model sent to the training process", [], kind="pickle")
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            if _is_torchscript_bytes(data):
                return torch.jit.load(io.BytesIO(data), map_location="cpu")
            return torch.load(io.BytesIO(data), map_location="cpu", weights_only=False)
    except Exception as exc:
        raise CheckpointError(f"could not be rebuilt ({type(exc).__name__}: {_short(exc)})",
                              "model sent to the training process") from exc


def _is_torchscript_bytes(data: bytes) -> bool:
    try:
        with zipfile.ZipFile(io.BytesIO(data)) as z:
            return any(n.endswith(("/constants.pkl", "/code/")) or "/code/" in n for n in z.namelist())
    except zipfile.BadZipFile:
        return False
