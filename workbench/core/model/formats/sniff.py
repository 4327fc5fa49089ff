"""What a file is, from its first bytes: one open, never the suffix.

* ``PK\\x03\\x04`` (zip): a ``torch.save`` archive (state_dict, training dict,
  Lightning ``.ckpt``, pickled ``nn.Module``) or a TorchScript archive (it has
  ``constants.pkl`` / ``code/`` records);
* an 8-byte little-endian header length followed by ``{``: safetensors
  (https://github.com/huggingface/safetensors#format);
* ``0x80`` (the pickle PROTO opcode): the legacy, pre-1.6 ``torch.save`` format.

:func:`sniff` reads the head and, for a zip, its list of records through the
same open file: the formats' ``match`` functions then decide from the
:class:`Sniff` without touching the file again. Qt-free.
"""

from __future__ import annotations

import struct
import zipfile
from pathlib import Path

from workbench.core.errors import CheckpointError

__all__ = ["Sniff", "sniff", "detect_container", "check_file", "short", "ZIP_MAGIC", "PICKLE_PROTO",
           "HEAD_BYTES", "FIX_HINT", "MAX_SAFETENSORS_HEADER"]

ZIP_MAGIC = b"PK\x03\x04"
PICKLE_PROTO = 0x80
#: How many bytes of a file :func:`sniff` reads.
HEAD_BYTES = 16
#: Largest safetensors JSON header we accept (the library's own limit is 100 MB).
MAX_SAFETENSORS_HEADER = 100 * 1024 * 1024

FIX_HINT = "Check that the file was copied completely, or save it again with torch.save."


class Sniff(bytes):
    """A file's first bytes (``bytes``: what a format's ``match(path, head)`` gets), with what else the sniff saw.

    Attributes
    ----------
    path : Path
    size : int
        The file's size in bytes (0 for a folder).
    zip_names : tuple of str
        The records of a zip archive (empty for anything else).
    is_dir : bool
    container : str or None
        ``"zip"``, ``"torchscript"``, ``"safetensors"``, ``"legacy_pickle"`` or None (none of them).
    """

    path: Path
    size: int
    zip_names: tuple[str, ...]
    is_dir: bool
    container: str | None

    def __new__(cls, path: Path, head: bytes = b"", size: int = 0, zip_names: tuple[str, ...] = (),
                is_dir: bool = False) -> "Sniff":
        self = super().__new__(cls, head)
        self.path, self.size, self.zip_names, self.is_dir = Path(path), size, tuple(zip_names), is_dir
        self.container = _container(bytes(self), size, self.zip_names)
        return self

    @property
    def head(self) -> bytes:
        """The first :data:`HEAD_BYTES` bytes as plain bytes."""
        return bytes(self)


def _container(head: bytes, size: int, zip_names: tuple[str, ...]) -> str | None:
    """What the first bytes (and a zip's record names) say the file is."""
    if head.startswith(ZIP_MAGIC):
        return "torchscript" if any(n.endswith("/constants.pkl") or "/code/" in n for n in zip_names) else "zip"
    if len(head) >= 9:
        (n,) = struct.unpack("<Q", head[:8])
        if 2 <= n <= min(size - 8, MAX_SAFETENSORS_HEADER) and head[8:9] == b"{":
            return "safetensors"
    if head[:1] == bytes([PICKLE_PROTO]):
        return "legacy_pickle"
    return None


def short(exc: BaseException, limit: int = 300) -> str:
    """An exception's message on one line, at most ``limit`` characters."""
    text = " ".join(str(exc).split())
    return text if len(text) <= limit else text[: limit - 3] + "..."


def check_file(path: Path) -> int:
    """The size of ``path`` in bytes.

    Raises
    ------
    CheckpointError
        Missing, a directory, unreadable or empty.
    """
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
        raise CheckpointError("the file is empty (0 bytes). It was probably not written completely; save it again.",
                              path)
    return size


def sniff(path: str | Path) -> Sniff:
    """Read a file's first bytes (and a zip's record names) in one open.

    Parameters
    ----------
    path : str or Path
        A file, or a folder (then nothing is read: ``is_dir`` True).

    Returns
    -------
    Sniff

    Raises
    ------
    CheckpointError
        Missing, empty or unreadable file; a damaged zip archive.
    """
    path = Path(path)
    if path.is_dir():
        return Sniff(path, is_dir=True)
    size = check_file(path)
    try:
        with open(path, "rb") as f:
            head = f.read(HEAD_BYTES)
            names: tuple[str, ...] = ()
            if head.startswith(ZIP_MAGIC):
                names = _zip_names(f, path)
    except OSError as exc:
        raise CheckpointError(f"cannot be read ({exc.strerror}). Check its permissions.", path) from exc
    return Sniff(path, head, size, names)


def _zip_names(f, path: Path) -> tuple[str, ...]:
    try:
        f.seek(0)
        with zipfile.ZipFile(f) as zf:
            return tuple(zf.namelist())
    except Exception as exc:  # BadZipFile, EOFError, NotImplementedError (bad version field), ...
        raise CheckpointError(f"is a damaged or truncated zip archive ({exc}). {FIX_HINT}", path) from exc


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
    check_file(path)
    container = sniff(path).container
    if container is None:
        raise CheckpointError(
            "is not a PyTorch checkpoint: it is neither a torch.save zip archive, a legacy "
            "pickle nor a safetensors file. Choose a .pt/.pth/.ckpt/.bin/.safetensors file.",
            path,
        )
    return container
