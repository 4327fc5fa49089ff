"""What the three captures share: a builder that drops plumbing nodes, module scopes, tensor shapes.

A capture walks its trace in execution order and tells :class:`GraphBuilder`
each step: a node to keep (an operation, a module call, an input) or one to drop
(a parameter, a constant, ``getattr``, ``getitem``, an assertion), naming the
steps it read. Edges into a dropped step are passed on to whoever reads it, so
the graph keeps only the dataflow and stays connected through the plumbing.
"""

from __future__ import annotations

import re
from collections.abc import Hashable, Iterable, Mapping
from typing import Any

from workbench.core.graph.model_graph import GraphNode, ModelGraph, call_path

__all__ = ["GraphBuilder", "tensor_specs", "type_name", "scope_from_stack"]

_CALL_SUFFIX = re.compile(r"@\d+$")


class GraphBuilder:
    """Collects the kept nodes of a trace and routes edges through the dropped ones.

    Parameters
    ----------
    root_type : str
        Class name of the model (``modules[""]``).

    Notes
    -----
    Steps are identified by any hashable ``key`` the capture chooses (an
    ``fx.Node``, a tensor's id); a step's *sources* are the kept nodes whose
    tensors reach it: itself when kept, the union of its inputs' sources when dropped.
    """

    def __init__(self, root_type: str):
        self.nodes: list[GraphNode] = []
        self.modules: dict[str, str] = {"": root_type}
        self._edges: dict[tuple[str, str], None] = {}
        self._sources: dict[Hashable, tuple[str, ...]] = {}
        self._taken: dict[str, int] = {}

    def unique(self, base: str) -> str:
        """``base``, or ``base_1``, ``base_2`` ... when that name is taken (every name is unique in a graph)."""
        base = base or "node"
        name, k = base, self._taken.get(base, 0)
        while name in self._taken:
            k += 1
            name = f"{base}_{k}"
        self._taken[base] = k
        self._taken.setdefault(name, 0)
        return name

    def keep(self, key: Hashable, node: GraphNode, inputs: Iterable[Hashable] = (),
             *, sources: Iterable[str] = ()) -> GraphNode:
        """Add ``node`` for step ``key``; returns it.

        Its edges come from every source of the steps ``inputs`` and from the node
        names ``sources``.
        """
        for src in (*self.sources(inputs), *sources):
            if src != node.name:
                self._edges.setdefault((src, node.name), None)
        self._sources[key] = (node.name,)
        self.nodes.append(node)
        return node

    def point(self, key: Hashable, name: str) -> None:
        """Whoever reads step ``key`` from now on reads node ``name`` (a tensor's latest maker)."""
        self._sources[key] = (name,)

    def drop(self, key: Hashable, inputs: Iterable[Hashable] = ()) -> None:
        """Leave step ``key`` out; whoever reads it reads the sources of ``inputs`` instead."""
        self._sources[key] = self.sources(inputs)

    def sources(self, keys: Iterable[Hashable]) -> tuple[str, ...]:
        """The kept nodes whose tensors reach the steps ``keys`` (unknown keys: none), in order, once each."""
        found: dict[str, None] = {}
        for key in keys:
            for name in self._sources.get(key, ()):
                found.setdefault(name, None)
        return tuple(found)

    def scope(self, stack: Mapping[str, Any] | None) -> tuple[tuple[str, ...], str, str]:
        """``(scope, module_path, module_type)`` from an ``nn_module_stack`` (see :func:`scope_from_stack`)."""
        scope = scope_from_stack(stack, self.modules)
        path = call_path(scope[-1]) if scope else ""
        return scope, path, self.modules.get(path, "")

    def build(self, method: str, inputs: Iterable[str], outputs: Iterable[Hashable]) -> ModelGraph:
        """The graph: kept nodes in order, their edges, the input names and the sources of ``outputs``."""
        return ModelGraph(self.nodes, list(self._edges), method, "", list(inputs), list(self.sources(outputs)),
                          self.modules)


def scope_from_stack(stack: Mapping[str, Any] | None, modules: dict[str, str]) -> tuple[str, ...]:
    """A node's scope from ``node.meta["nn_module_stack"]`` (torch.export and torch.fx write it).

    Parameters
    ----------
    stack : mapping of str to (str, type or str), optional
        Outermost first: key ``"L__self__layer1@1"`` / ``"layer1@1"`` (the call,
        ``@k`` from the second call on), value ``(qualified name, class or its
        dotted name)``. The model itself (qualified name ``""``) is skipped.
    modules : dict of str to str
        Filled with each module's class name by qualified name.

    Returns
    -------
    tuple of str
        E.g. ``("layer1", "layer1.0", "layer1.0.conv1")`` or ``("shared@1",)``.
    """
    scope = []
    for key, value in (stack or {}).items():
        path, kind = value[0], value[1]
        if not path:
            continue
        modules.setdefault(path, type_name(kind))
        suffix = _CALL_SUFFIX.search(key)
        scope.append(path + (suffix.group(0) if suffix else ""))
    return tuple(scope)


def type_name(kind: Any) -> str:
    """Class name of a class or of its dotted name: ``"Conv2d"`` for both ``Conv2d`` and ``"torch.nn...Conv2d"``."""
    if isinstance(kind, str):
        return kind.rsplit(".", 1)[-1]
    return getattr(kind, "__name__", str(kind))


def tensor_specs(value: Any) -> tuple[list[tuple[int, ...]], list[str]]:
    """``(shapes, dtypes)`` of every tensor in ``value``, depth first.

    Parameters
    ----------
    value : Tensor, FakeTensor, TensorMetadata, or tuples / lists / dicts of them
        A traced value; anything else (ints, None, SymInts) holds no tensor.

    Returns
    -------
    shapes : list of tuple of int
        A symbolic size that has no value yet is ``-1``.
    dtypes : list of str
        ``"float32"``, ``"int64"`` ...
    """
    shapes: list[tuple[int, ...]] = []
    dtypes: list[str] = []
    _collect(value, shapes, dtypes)
    return shapes, dtypes


def _collect(value: Any, shapes: list, dtypes: list) -> None:
    shape, dtype = getattr(value, "shape", None), getattr(value, "dtype", None)
    if shape is not None and dtype is not None and not isinstance(value, type):
        shapes.append(tuple(_int(d) for d in shape))
        dtypes.append(str(dtype).removeprefix("torch."))
    elif isinstance(value, Mapping):
        for v in value.values():
            _collect(v, shapes, dtypes)
    elif isinstance(value, (tuple, list)):
        for v in value:
            _collect(v, shapes, dtypes)


def _int(size: Any) -> int:
    try:
        return int(size)
    except Exception:  # noqa: BLE001 - an unbacked symbolic size has no value
        return -1
