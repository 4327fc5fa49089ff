"""What a loaded ``torch.save`` object is: a state_dict, a training dict, a Lightning checkpoint, a module. Qt-free."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Mapping

from torch import nn
import torch

from workbench.core.errors import CheckpointError
from workbench.core.model.prefixes import copy_metadata

__all__ = ["STATE_DICT_KEYS", "classify", "is_tensor_dict"]

#: Keys under which training scripts store the model's state_dict, in order of preference.
STATE_DICT_KEYS = ("model_state_dict", "state_dict", "model", "net", "model_state", "ema", "weights")


def is_tensor_dict(obj: Any) -> bool:
    """A non-empty mapping of str to tensors."""
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
        if is_tensor_dict(value) or isinstance(value, nn.Module):
            return key, value
    best = None
    for key, value in obj.items():
        if isinstance(key, str) and is_tensor_dict(value) and (best is None or len(value) > len(best[1])):
            best = (key, value)
    return best


def _is_lightning(obj: Mapping) -> bool:
    marks = ("pytorch-lightning_version", "global_step", "optimizer_states", "lr_schedulers", "callbacks")
    return "state_dict" in obj and any(m in obj for m in marks)


def classify(path: Path, obj: Any) -> tuple[str, str | None, dict, nn.Module | None]:
    """What ``torch.load`` returned for ``path``.

    Returns
    -------
    (format, state_dict_key, state_dict, module)
        ``format`` ``"pickled_module" | "state_dict" | "training_dict" | "lightning"``;
        the state_dict is a new dict with the loaded one's ``_metadata`` (module versions).

    Raises
    ------
    CheckpointError
        A dict without a state_dict of tensors, or something that is no dict nor module.
    """
    if isinstance(obj, nn.Module):
        return "pickled_module", None, obj.state_dict(), obj
    if is_tensor_dict(obj):
        return "state_dict", None, copy_metadata(dict(obj), obj), None
    if isinstance(obj, Mapping) and all(isinstance(k, str) for k in obj):
        fmt = "lightning" if _is_lightning(obj) else "training_dict"
        found = _find_state_dict(dict(obj))
        if found is not None:
            key, value = found
            if isinstance(value, nn.Module):
                return fmt, key, value.state_dict(), value
            return fmt, key, copy_metadata(dict(value), value), None
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
