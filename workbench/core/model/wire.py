"""Models and states as bytes, for the window and its training process.

The window and its training process exchange models and states as bytes (never
as tensors: multiprocessing would share those through file descriptors, which
ties the window's memory to a child that may die). Serialized with
``torch.save``, read back through the one ``torch.load``
(:func:`workbench.core.model.formats.pickle_safety.torch_load`). Qt-free.
"""

from __future__ import annotations

import io
import warnings
import zipfile
from typing import Any

import torch
from torch import nn

from workbench.core.errors import CheckpointError, TrustRequired
from workbench.core.model.formats.pickle_safety import torch_load
from workbench.core.model.formats.sniff import short

__all__ = ["to_bytes", "tensors_from_bytes", "module_from_bytes"]


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
        return torch_load(data, weights_only=True)
    except Exception as exc:  # torch raises many types for refused or damaged data
        raise CheckpointError(f"could not be read ({type(exc).__name__}: {short(exc)})",
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
        if _is_torchscript_bytes(data):
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                return torch.jit.load(io.BytesIO(data), map_location="cpu")
        return torch_load(data, weights_only=False)
    except Exception as exc:
        raise CheckpointError(f"could not be rebuilt ({type(exc).__name__}: {short(exc)})",
                              "model sent to the training process") from exc


def _is_torchscript_bytes(data: bytes) -> bool:
    try:
        with zipfile.ZipFile(io.BytesIO(data)) as z:
            return any(n.endswith(("/constants.pkl", "/code/")) or "/code/" in n for n in z.namelist())
    except zipfile.BadZipFile:
        return False
