"""Integrity: a checkpoint's digest checked on every read, and the newest intact checkpoint of its folder.

A checkpoint Workbench wrote carries a digest of its tensors
(:mod:`workbench.core.digest`); every read checks it and a mismatch, or a
malformed digest entry, raises :class:`~workbench.core.errors.CheckpointCorrupt`
naming the newest checkpoint of the same model in the same folder that verifies
(:func:`newest_intact`). Files without a digest (older Workbench files, foreign
checkpoints) open as before. Qt-free.
"""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path
from typing import Any, Mapping

from workbench.core.digest import DIGEST_KEY, DigestCheck, check_digest
from workbench.core.errors import CheckpointCorrupt, CheckpointError
from workbench.core.model.formats.classify import classify
from workbench.core.model.formats.pickle_safety import torch_load
from workbench.core.model.formats.plain import plain
from workbench.core.model.formats.sniff import detect_container, short

__all__ = ["CHECKPOINT_SUFFIXES", "MAX_INTACT_CANDIDATES", "verified", "verify_checkpoint", "model_signature",
           "newest_intact"]

#: Suffixes of the files :func:`newest_intact` considers in a checkpoint's folder.
CHECKPOINT_SUFFIXES = (".pt", ".pth", ".ckpt", ".bin", ".tar")
#: How many other checkpoints of a folder :func:`newest_intact` verifies at most, newest first.
MAX_INTACT_CANDIDATES = 16


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
        return torch_load(path, weights_only=True, mmap=container == "zip")
    except Exception as exc:  # torch raises many types for damaged or refused files
        raise CheckpointError(f"cannot be read ({type(exc).__name__}: {short(exc)})", path) from exc


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
    obj = _load_weights(Path(path))
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
        _, _, state_dict, _ = classify(Path("checkpoint"), obj)
        arch = obj.get("arch") if isinstance(obj, Mapping) else None
        arch_text = json.dumps(plain(arch), sort_keys=True, default=str)
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


def verified(path: Path, obj: Any) -> tuple[Any, bool | None]:
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
