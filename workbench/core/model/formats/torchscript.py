"""The TorchScript format (``torch.jit.save``): a zip archive with ``constants.pkl`` / ``code/`` records.

Loading it runs code stored in the file: only with ``trust``. Qt-free.
"""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import Any

import torch

from workbench.core.errors import CheckpointError, TrustRequired
from workbench.core.model.checkpoint import Checkpoint, CheckpointMetadata
from workbench.core.model.formats.metadata import tensor_stats
from workbench.core.model.formats.sniff import FIX_HINT, Sniff, short, sniff

__all__ = ["match", "read"]


def match(path: Path, head: bytes) -> bool:
    """A zip archive holding ``constants.pkl`` or ``code/`` records (needs the sniff's record names)."""
    return isinstance(head, Sniff) and head.container == "torchscript"


def read(path: str | Path, *, trust: bool = False, head: Sniff | None = None, **_: Any) -> Checkpoint:
    """``torch.jit.load`` the archive to CPU; its module is the checkpoint's ``module``.

    Raises
    ------
    TrustRequired
        ``trust`` is False (``kind="torchscript"``); nothing from the file ran.
    CheckpointError
        A damaged archive; no tensors.
    """
    path = Path(path)
    head = head if isinstance(head, Sniff) else sniff(path)
    if not trust:
        err = TrustRequired(path, [], kind="torchscript")
        err.sniff = head
        raise err
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            module = torch.jit.load(str(path), map_location="cpu")
    except Exception as exc:
        raise CheckpointError(
            f"is a damaged TorchScript archive ({type(exc).__name__}: {short(exc)}). {FIX_HINT}", path) from exc
    state_dict = dict(module.state_dict())
    if not state_dict:
        raise CheckpointError("holds no tensors. Save a model's state_dict into it.", path)
    meta = CheckpointMetadata(format="torchscript", container="torchscript")
    meta.num_tensors, meta.total_params, meta.dtypes = tensor_stats(state_dict)
    meta.file_size = head.size
    return Checkpoint(path=path, state_dict=state_dict, metadata=meta, module=module)
