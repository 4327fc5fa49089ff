"""The ``torch.save`` format: zip archives and legacy (pre-1.6) pickles.

A state_dict, a training dict (``model_state_dict``, optimizer, epoch...), a
Lightning ``.ckpt`` or a pickled ``nn.Module``; an FSDP run's sharded ``last.pt``
gets its model from the ``last.dcp/`` folder beside it (:mod:`.sharded`). Loaded with
``weights_only=True`` (:mod:`~workbench.core.model.formats.pickle_safety`);
a digest stored by Workbench is checked (:mod:`~workbench.core.model.formats.intact`).
Qt-free.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Mapping

from workbench.core.errors import CheckpointError
from workbench.core.model.checkpoint import Checkpoint
from workbench.core.model.formats.classify import classify
from workbench.core.model.formats.intact import verified
from workbench.core.model.formats.metadata import metadata_from_raw, tensor_stats
from workbench.core.model.formats.pickle_safety import load_pickled
from workbench.core.model.formats.sharded import read_sharded
from workbench.core.model.formats.sniff import FIX_HINT, PICKLE_PROTO, ZIP_MAGIC, Sniff, short, sniff

__all__ = ["match", "read"]


def match(path: Path, head: bytes) -> bool:
    """A zip archive that is no TorchScript archive, or a pickle (``0x80``)."""
    if isinstance(head, Sniff):
        return head.container in ("zip", "legacy_pickle")
    return bytes(head).startswith(ZIP_MAGIC) or bytes(head)[:1] == bytes([PICKLE_PROTO])


def read(path: str | Path, *, trust: bool = False, head: Sniff | None = None, mmap: bool = True,
         **_: Any) -> Checkpoint:
    """Read a ``torch.save`` file to CPU.

    Parameters
    ----------
    path : str or Path
    trust : bool
        Unpickle globals weights-only loading refuses (runs the file's code).
    head : Sniff, optional
        The sniff already made (else the file is sniffed here).
    mmap : bool
        Memory-map a zip archive: a 1 GB file opens in milliseconds.

    Returns
    -------
    Checkpoint
        ``metadata.verified`` says whether a stored digest was checked.

    Raises
    ------
    TrustRequired
        Weights-only loading refuses the file's globals and ``trust`` is False.
    CheckpointCorrupt
        A stored digest does not match.
    CheckpointError
        Damaged data; a dict without a state_dict; no tensors.
    """
    path = Path(path)
    head = head if isinstance(head, Sniff) else sniff(path)
    obj, ok = verified(path, load_pickled(head, trust=trust, mmap=mmap))
    if isinstance(obj, Mapping) and obj.get("sharded"):  # an FSDP run's last.pt: its model is in last.dcp/
        return read_sharded(path, obj, ok, head)
    try:
        fmt, key, state_dict, module = classify(path, obj)
        raw = dict(obj) if isinstance(obj, Mapping) and fmt != "state_dict" else None
        meta = metadata_from_raw(fmt, head.container, key, raw)
    except CheckpointError:
        raise
    except Exception as exc:  # noqa: BLE001 - the readers above are total; this keeps the promise if one is not
        raise CheckpointError(f"holds data Workbench cannot interpret ({type(exc).__name__}: {short(exc)}). "
                              f"{FIX_HINT}", path) from exc
    if not state_dict:
        raise CheckpointError("holds no tensors. Save a model's state_dict into it.", path)
    meta.num_tensors, meta.total_params, meta.dtypes = tensor_stats(state_dict)
    meta.file_size = head.size
    meta.verified = ok
    return Checkpoint(path=path, state_dict=state_dict, metadata=meta, raw=raw, module=module)
