"""Pickle safety: the one ``torch.load``, and the globals a pickle would import.

``torch.load`` always runs with ``weights_only=True`` first. A file that needs
more (a pickled module, custom classes) raises
:class:`~workbench.core.errors.TrustRequired` listing the globals it would
import, and is loaded with ``weights_only=False`` only when the caller passes
``trust=True``. Scanning a pickle for its globals runs none of its code.
Every ``torch.load`` of Workbench is :func:`torch_load` (``tests/test_layout.py``
holds the project to it). Qt-free.
"""

from __future__ import annotations

import io
import pickletools
import warnings
from pathlib import Path
from typing import Any

import torch

from workbench.core.errors import CheckpointError, TrustRequired
from workbench.core.model.formats.sniff import FIX_HINT, Sniff, detect_container, short

__all__ = ["torch_load", "load_pickled", "pickle_globals", "unsafe_globals"]


def torch_load(source: str | Path | bytes, *, weights_only: bool = True, mmap: bool = False) -> Any:
    """``torch.load`` to CPU, warnings off: Workbench's only call of it.

    Parameters
    ----------
    source : str, Path or bytes
        A file (its content decides the format, never its suffix) or bytes in memory.
    weights_only : bool
        Refuse anything but tensors and plain data (default True). False runs
        the pickle's code: only for a file or bytes the user trusts.
    mmap : bool
        Memory-map a zip archive (``torch.load(mmap=True)``): pages are read on first use.

    Raises
    ------
    Exception
        Whatever ``torch.load`` raises for refused or damaged data.
    """
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        if isinstance(source, (bytes, bytearray)):
            return torch.load(io.BytesIO(source), map_location="cpu", weights_only=weights_only)
        path = Path(source)
        if path.name.lower().endswith(".safetensors"):
            # torch.load hands any *path* ending in .safetensors to the safetensors library
            # (suffix, not content); a file object keeps the content-based decision ours.
            with open(path, "rb") as f:
                return torch.load(f, map_location="cpu", weights_only=weights_only)
        return torch.load(path, map_location="cpu", weights_only=weights_only, mmap=mmap)


def load_pickled(head: Sniff, *, trust: bool, mmap: bool) -> Any:
    """``torch.load`` with weights_only=True; on refusal list the globals and ask for trust.

    Parameters
    ----------
    head : Sniff
        The file, sniffed (container ``"zip"`` or ``"legacy_pickle"``); one carried by a
        ``TrustRequired`` of this function (``refused``) skips the weights-only attempt.
    trust : bool
        Load with ``weights_only=False`` when weights-only loading refuses the file.
    mmap : bool
        Memory-map a zip archive.

    Raises
    ------
    TrustRequired
        Weights-only loading refuses the file's globals (in ``.globals``) and
        ``trust`` is False; ``.sniff`` is ``head``, so the trusted read needs no sniff again.
    CheckpointError
        Damaged or truncated data; or, with trust, classes that cannot be imported.
    """
    path, container = head.path, head.container
    use_mmap = mmap and container == "zip"
    if not (trust and getattr(head, "refused", False)):  # the answer to our own question skips to the full load
        try:
            return torch_load(path, weights_only=True, mmap=use_mmap)
        except Exception as exc:  # torch raises many types for damaged files
            first = exc
        globals_ = _globals_or_damaged(path, container, first)
        if not trust:
            raise _trust_required(head, globals_) from first
    try:
        return torch_load(path, weights_only=False, mmap=use_mmap)
    except Exception as exc:
        raise CheckpointError(
            f"could not be loaded even with trust: {type(exc).__name__}: {short(exc)}. "
            "The classes it needs must be importable (install or add the code that defined them).",
            path,
        ) from exc


def _globals_or_damaged(path: Path, container: str | None, first: Exception) -> list[str]:
    """The globals weights-only loading refused; none means the file is damaged (raised as such)."""
    try:
        globals_ = _unsafe(path, container)
    except CheckpointError:
        globals_ = []
    if not globals_:
        raise CheckpointError(
            f"cannot be read: {type(first).__name__}: {short(first)}. The file is damaged or "
            f"truncated. {FIX_HINT}",
            path,
        ) from first
    return globals_


def _trust_required(head: Sniff, globals_: list[str]) -> TrustRequired:
    err = TrustRequired(head.path, globals_, kind="pickle")
    head.refused = True  # weights-only loading refused it: a trusted read goes straight to the full load
    err.sniff = head  # the trusted read starts from it: no second sniff
    return err


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


def _unsafe(path: Path, container: str | None) -> list[str]:
    try:
        if container == "zip":
            return sorted(torch.serialization.get_unsafe_globals_in_checkpoint(path))
        if container == "legacy_pickle":
            safe = _safe_global_names()
            return [g for g in pickle_globals(path.read_bytes()) if g not in safe]
    except Exception as exc:
        raise CheckpointError(f"its pickle data is damaged ({type(exc).__name__}: {exc}). {FIX_HINT}", path) from exc
    raise CheckpointError(f"is a {container} file, which holds no pickle globals.", path)


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
    return _unsafe(path, detect_container(path))
