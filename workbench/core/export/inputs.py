"""The inputs of an export: the example as the exporters take it, a batch of another size, a dtype.

Qt-free. An :class:`~workbench.core.model.example_input.ExampleInput` holds
``model(*args, **kwargs)``; here it gets a batch size (the first dimension of
its first tensor), a copy at another batch size (rows taken again in turn, so
token ids stay valid ids), the names the exporters give its tensors, and the
``dynamic_shapes`` that make its batch dimension dynamic in ``torch.export``.
"""

from __future__ import annotations

import inspect
from collections.abc import Mapping
from typing import Any

import torch
from torch import nn

from workbench.core.model.example_input import ExampleInput

__all__ = ["DTYPES", "batch_size", "with_batch", "cast_example", "dynamic_shapes", "named_tensors", "as_example"]

#: The dtypes an export can be made in, by their names on the command line.
DTYPES: dict[str, torch.dtype] = {"fp32": torch.float32, "fp16": torch.float16, "bf16": torch.bfloat16}


def as_example(example: Any) -> ExampleInput:
    """An :class:`ExampleInput` from one: a tensor (the one argument), a tuple or list (the arguments),
    a mapping (keyword arguments, e.g. ``{"input_ids": ids}``).

    Raises
    ------
    ValueError
        Anything else, or no tensor in it.
    """
    if isinstance(example, ExampleInput):
        out = example
    elif isinstance(example, torch.Tensor):
        out = ExampleInput((example,))
    elif isinstance(example, Mapping):
        out = ExampleInput((), dict(example))
    elif isinstance(example, (tuple, list)):
        out = ExampleInput(tuple(example))
    else:
        raise ValueError(f"the example must be a tensor, a tuple of arguments or a dict of keyword arguments, "
                         f"not {type(example).__name__}")
    if next(out.tensors(), None) is None:
        raise ValueError("the example holds no tensor")
    return out


def batch_size(example: ExampleInput) -> int:
    """The first dimension of the example's first tensor (1 for a 0-d tensor)."""
    first = next(example.tensors())
    return int(first.shape[0]) if first.dim() else 1


def _map(obj: Any, fn) -> Any:
    if isinstance(obj, torch.Tensor):
        return fn(obj)
    if isinstance(obj, Mapping):
        return {k: _map(v, fn) for k, v in obj.items()}
    if isinstance(obj, (tuple, list)):
        return type(obj)(_map(v, fn) for v in obj)
    return obj


def with_batch(example: ExampleInput, n: int) -> ExampleInput:
    """The example with batch size ``n``: the rows of every tensor whose first dimension is the batch, in turn.

    ``with_batch(x of 1 row, 3)`` repeats the row; ``with_batch(x of 4 rows, 2)`` takes the first two.
    """
    b = batch_size(example)
    index = torch.arange(n) % b

    def resize(t: torch.Tensor) -> torch.Tensor:
        return t.index_select(0, index.to(t.device)) if t.dim() and t.shape[0] == b else t

    return ExampleInput(_map(example.args, resize), _map(dict(example.kwargs), resize))


def cast_example(example: ExampleInput, dtype: torch.dtype) -> ExampleInput:
    """The example with every floating tensor in ``dtype`` (token ids and masks stay as they are)."""
    def cast(t: torch.Tensor) -> torch.Tensor:
        return t.to(dtype) if t.is_floating_point() else t

    return ExampleInput(_map(example.args, cast), _map(dict(example.kwargs), cast))


def _bound(model: nn.Module, example: ExampleInput) -> dict[str, Any]:
    """``forward``'s parameter names -> the example's values (``**kwargs`` ones under their own keys)."""
    try:
        bound = inspect.signature(model.forward).bind(*example.args, **example.kwargs)
    except (TypeError, ValueError):
        names = {f"input_{i}": a for i, a in enumerate(example.args)}
        return {**names, **example.kwargs}
    out: dict[str, Any] = {}
    params = inspect.signature(model.forward).parameters
    for name, value in bound.arguments.items():
        kind = params[name].kind
        if kind is inspect.Parameter.VAR_KEYWORD:
            out.update(value)
        elif kind is inspect.Parameter.VAR_POSITIONAL:
            out.update({f"{name}_{i}": v for i, v in enumerate(value)})
        else:
            out[name] = value
    return out


def named_tensors(model: nn.Module, example: ExampleInput) -> list[tuple[str, torch.Tensor]]:
    """Every input tensor with the name ``forward`` gives it, in order.

    ``x``, ``input_ids``; ``x_1`` for item 1 of a tuple argument; ``input_0`` when
    ``forward``'s signature cannot be read.
    """
    out: list[tuple[str, torch.Tensor]] = []

    def walk(name: str, value: Any) -> None:
        if isinstance(value, torch.Tensor):
            out.append((name, value))
        elif isinstance(value, Mapping):
            for k, v in value.items():
                walk(f"{name}_{k}", v)
        elif isinstance(value, (tuple, list)):
            for i, v in enumerate(value):
                walk(f"{name}_{i}", v)

    for name, value in _bound(model, example).items():
        walk(name, value)
    return out


def dynamic_shapes(model: nn.Module, example: ExampleInput, dim: Any) -> dict[str, Any] | tuple:
    """``dynamic_shapes`` for ``torch.export``: dimension 0 of every batch tensor is ``dim``.

    Keyed by ``forward``'s parameter names (one spec for a ``**kwargs`` parameter, a
    dict of its keys); a tuple in argument order when ``forward``'s signature cannot be read.
    """
    b = batch_size(example)

    def spec(value: Any) -> Any:
        if isinstance(value, torch.Tensor):
            return {0: dim} if value.dim() and value.shape[0] == b else None
        if isinstance(value, Mapping):
            return {k: spec(v) for k, v in value.items()}
        if isinstance(value, (tuple, list)):
            return type(value)(spec(v) for v in value)
        return None

    try:
        sig = inspect.signature(model.forward)
        bound = sig.bind(*example.args, **example.kwargs)
    except (TypeError, ValueError):
        return tuple(spec(a) for a in example.args)
    return {name: spec(value) for name, value in bound.arguments.items()}
