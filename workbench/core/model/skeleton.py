"""A model's structure as plain data, and a stand-in module built from it.

A window attached to a user's script (:mod:`workbench.core.attach`) shows the
script's model tree and its live frozen set without the script's code or
weights: :func:`describe_structure` lists every module (qualified name, class
name) and every parameter and buffer (shape, dtype, ``requires_grad``);
:func:`build_skeleton` makes an ``nn.Module`` tree of the same names, classes
(by name only) and shapes, its tensors on the ``meta`` device (no memory, no
values). It cannot run ``forward``.
"""

from __future__ import annotations

import re

import torch
from torch import nn

__all__ = ["describe_structure", "build_skeleton", "SkeletonError", "is_skeleton"]

#: Dtypes a description may name.
_DTYPES = {str(d).removeprefix("torch."): d for d in (
    torch.bool, torch.uint8, torch.int8, torch.int16, torch.int32, torch.int64,
    torch.float16, torch.bfloat16, torch.float32, torch.float64, torch.complex64)}
_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,99}$")
_PART = re.compile(r"^[A-Za-z0-9_\-]{1,200}$")


class SkeletonError(ValueError):
    """A structure description that cannot be built (a bad name, shape or dtype)."""


def describe_structure(model: nn.Module) -> dict:
    """``{"modules": [[name, class name], ...], "params": [[name, shape, dtype, requires_grad], ...],
    "buffers": [[name, shape, dtype], ...]}`` of ``model`` (root module first, named ``""``)."""
    modules = [[name, type(m).__name__] for name, m in model.named_modules()]
    params = [[n, list(p.shape), str(p.dtype).removeprefix("torch."), bool(p.requires_grad)]
              for n, p in model.named_parameters()]
    buffers = [[n, list(b.shape), str(b.dtype).removeprefix("torch.")] for n, b in model.named_buffers()]
    return {"modules": modules, "params": params, "buffers": buffers}


class _Skeleton(nn.Module):
    """Base of every stand-in module (see the module docstring)."""

    def forward(self, *args, **kwargs):  # noqa: D102
        raise RuntimeError(f"{type(self).__name__} is the structure of a model in another process; "
                           "it cannot run forward")


_CLASSES: dict[str, type] = {}


def _class(name: str) -> type:
    if not _NAME.match(name):
        name = "Module"
    cls = _CLASSES.get(name)
    if cls is None:
        cls = _CLASSES[name] = type(name, (_Skeleton,), {"__module__": __name__})
    return cls


def is_skeleton(model: nn.Module) -> bool:
    """True for a stand-in built by :func:`build_skeleton`."""
    return isinstance(model, _Skeleton)


def build_skeleton(structure: dict) -> nn.Module:
    """The stand-in module of :func:`describe_structure`'s output (tensors on ``meta``).

    Raises
    ------
    SkeletonError
        A name that is not a dotted path of identifiers, a parameter of an unlisted
        module, a bad shape, or a dtype that is not a plain number type.
    """
    try:
        modules = list(structure["modules"])
        params = list(structure.get("params") or [])
        buffers = list(structure.get("buffers") or [])
    except (KeyError, TypeError) as exc:
        raise SkeletonError(f"not a model structure: {exc}") from None
    try:
        return _build(modules, params, buffers)
    except (KeyError, RuntimeError, TypeError, ValueError) as exc:  # torch's own refusals: a reserved or repeated name
        if isinstance(exc, SkeletonError):
            raise
        raise SkeletonError(f"the structure cannot be built: {exc}") from None


def _build(modules: list, params: list, buffers: list) -> nn.Module:
    built: dict[str, nn.Module] = {}
    for entry in modules:
        name, cls_name = _pair(entry)
        if name in built:
            raise SkeletonError(f"module {name!r} is listed twice")
        module = _class(cls_name)()
        if name == "":
            built[""] = module
            continue
        parent, _, leaf = name.rpartition(".")
        if parent not in built or not _PART.match(leaf):
            raise SkeletonError(f"module {name!r} has no parent listed before it")
        built[parent].add_module(leaf, module)
        built[name] = module
    if "" not in built:
        raise SkeletonError("the structure has no root module")
    for entry in params:
        if not isinstance(entry, list) or len(entry) != 4:
            raise SkeletonError("bad parameter entry")
        name, shape, dtype, grad = entry
        owner, leaf = _owner(built, name)
        t = torch.empty(_shape(shape), dtype=_dtype(dtype), device="meta")
        owner.register_parameter(leaf, nn.Parameter(t, requires_grad=bool(grad) and t.is_floating_point()))
    for entry in buffers:
        if not isinstance(entry, list) or len(entry) != 3:
            raise SkeletonError("bad buffer entry")
        name, shape, dtype = entry
        owner, leaf = _owner(built, name)
        owner.register_buffer(leaf, torch.empty(_shape(shape), dtype=_dtype(dtype), device="meta"))
    return built[""]


def _pair(entry) -> tuple[str, str]:
    if not isinstance(entry, list) or len(entry) != 2 or not all(isinstance(v, str) for v in entry):
        raise SkeletonError("bad module entry")
    return entry[0], entry[1]


def _owner(built: dict, name) -> tuple[nn.Module, str]:
    if not isinstance(name, str):
        raise SkeletonError("bad tensor name")
    parent, _, leaf = name.rpartition(".")
    if parent not in built or not _PART.match(leaf) or "." in leaf:
        raise SkeletonError(f"tensor {name!r} belongs to no listed module")
    return built[parent], leaf


def _shape(shape) -> tuple[int, ...]:
    if not isinstance(shape, list) or not all(isinstance(d, int) and not isinstance(d, bool) and 0 <= d < 2**40
                                              for d in shape):
        raise SkeletonError(f"bad shape {shape!r}")
    return tuple(shape)


def _dtype(name) -> torch.dtype:
    if name not in _DTYPES:
        raise SkeletonError(f"dtype {name!r} refused")
    return _DTYPES[name]
