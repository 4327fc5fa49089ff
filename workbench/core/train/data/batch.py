"""Batches of any structure: a tensor, a tuple or list, or a dict of tensors (the Hugging Face convention).

Workbench's own datasets yield ``(input, target)`` pairs; a user's dataset may
yield anything ``default_collate`` or its own ``collate_fn`` makes. These helpers
move such a batch to a device, count its samples and say what it holds, so a
message can name the shape or dtype that does not fit.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Iterator

import torch

__all__ = ["move", "batch_size", "describe", "tensors", "split_xy", "INPUT_KEYS", "TARGET_KEYS"]

#: Dict keys read as the input and the target of an ``(input, target)`` task, in order of preference.
INPUT_KEYS = ("x", "input", "inputs", "features", "image", "images", "pixel_values", "input_ids")
TARGET_KEYS = ("y", "target", "targets", "label", "labels")


def move(batch: Any, device: torch.device, non_blocking: bool = False,
         memory_format: torch.memory_format | None = None) -> Any:
    """``batch`` with every tensor on ``device`` (4-D ``(N, C, H, W)`` tensors in ``memory_format``).

    Tuples, lists and dicts are rebuilt with the same keys and order (a named tuple
    stays one); anything else is returned as it is.
    """
    if isinstance(batch, torch.Tensor):
        if memory_format is not None and batch.dim() == 4 and batch.is_floating_point():
            return batch.to(device, non_blocking=non_blocking, memory_format=memory_format)
        return batch.to(device, non_blocking=non_blocking)
    if isinstance(batch, Mapping):  # dict, or a mapping such as Hugging Face's BatchEncoding: a plain dict back
        return {k: move(v, device, non_blocking, memory_format) for k, v in batch.items()}
    if isinstance(batch, tuple) and hasattr(batch, "_fields"):  # a named tuple
        return type(batch)(*(move(v, device, non_blocking, memory_format) for v in batch))
    if isinstance(batch, (tuple, list)):
        return type(batch)(move(v, device, non_blocking, memory_format) for v in batch)
    return batch


def tensors(batch: Any) -> Iterator[torch.Tensor]:
    """Every tensor in ``batch``, depth first, in order."""
    if isinstance(batch, torch.Tensor):
        yield batch
    elif isinstance(batch, Mapping):
        for v in batch.values():
            yield from tensors(v)
    elif isinstance(batch, (tuple, list)):
        for v in batch:
            yield from tensors(v)


def batch_size(batch: Any) -> int:
    """Samples in ``batch``: the first dimension of its first tensor with one (0 when it holds none)."""
    for t in tensors(batch):
        if t.dim() > 0:
            return int(t.shape[0])
    return 0


def describe(batch: Any, depth: int = 0) -> str:
    """Shapes and dtypes of ``batch``: ``"((64, 1, 8, 8) float32, (64,) int64)"``, ``"{input_ids: (8, 16) int64}"``."""
    if isinstance(batch, torch.Tensor):
        return f"{tuple(batch.shape)} {str(batch.dtype).removeprefix('torch.')}"
    if depth > 3:
        return "..."
    if isinstance(batch, Mapping):
        return "{" + ", ".join(f"{k}: {describe(v, depth + 1)}" for k, v in batch.items()) + "}"
    if isinstance(batch, (tuple, list)):
        return "(" + ", ".join(describe(v, depth + 1) for v in batch) + ")"
    return type(batch).__name__


def split_xy(batch: Any, task: str) -> tuple[Any, Any]:
    """The ``(input, target)`` of a batch for a task that calls ``model(input)`` and ``loss(output, target)``.

    A tuple or list gives its first two items; a dict (any mapping) gives its first key of
    :data:`INPUT_KEYS` and of :data:`TARGET_KEYS`.

    Raises
    ------
    ValueError
        The batch holds no input/target pair; the message says what it holds and
        what to give instead (a training step, or the ``model_loss`` task).
    """
    if isinstance(batch, (tuple, list)) and len(batch) >= 2:
        return batch[0], batch[1]
    if isinstance(batch, Mapping):
        x = next((batch[k] for k in INPUT_KEYS if k in batch), None)
        y = next((batch[k] for k in TARGET_KEYS if k in batch), None)
        if x is not None and y is not None:
            return x, y
    raise ValueError(f"the {task} task takes (input, target) batches, and this batch is {describe(batch)}: "
                     "yield (input, target) pairs, use the model_loss task for a model that computes its own "
                     "loss, or give a training step ([task] step = \"file.py:training_step\")")
