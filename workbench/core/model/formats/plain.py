"""What a file holds, as plain JSON-able Python values, bounded whatever it holds. Qt-free."""

from __future__ import annotations

from typing import Any, Mapping

import torch

__all__ = ["plain", "as_int", "as_float", "PLAIN_MAX_DEPTH", "PLAIN_MAX_VALUES", "PLAIN_MAX_TENSOR"]

#: How deep, and how many values in all, :func:`plain` converts; the rest reads ``"..."``.
PLAIN_MAX_DEPTH = 32
PLAIN_MAX_VALUES = 100_000
#: Tensors up to this many elements are shown as lists; larger ones as a summary.
PLAIN_MAX_TENSOR = 1000


def plain(value: Any) -> Any:
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
            return _tensor(v)
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


def _tensor(v: torch.Tensor) -> Any:
    try:
        if v.numel() == 1:
            return v.item()
        if v.numel() <= PLAIN_MAX_TENSOR:
            return v.tolist()
    except Exception:  # noqa: BLE001 - meta and other storage-less tensors
        pass
    return f"tensor({tuple(v.shape)}, {str(v.dtype).removeprefix('torch.')})"


def as_int(value: Any) -> int | None:
    """An int (a 1-element tensor, an integral float), else None (bools too)."""
    if isinstance(value, torch.Tensor) and value.numel() == 1:
        value = value.item()
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return None


def as_float(value: Any) -> float | None:
    """A float (a number or a 1-element tensor), else None (bools too)."""
    if isinstance(value, torch.Tensor) and value.numel() == 1:
        value = value.item()
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return float(value)
    return None
