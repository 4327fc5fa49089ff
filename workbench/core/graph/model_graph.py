"""The graph of a model as plain data: :class:`GraphNode`, :class:`ModelGraph`, its JSON and its grouped views.

A node is one operation (``aten.conv2d``, ``torch.cat``), one opaque module call
(``call_module``), an input of the model (``input``) or, in a grouped view, one
module shown as a box (``module``). Every node knows the module calls it happened
in (:attr:`GraphNode.scope`), so the graph nests by the module hierarchy and a view
can show any module as one box (:meth:`ModelGraph.collapsed`).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

__all__ = ["GraphNode", "ModelGraph", "JSON_FORMAT", "JSON_VERSION", "call_path", "module_depth"]

#: ``"format"`` of :meth:`ModelGraph.to_json`'s document.
JSON_FORMAT = "workbench.graph"
#: ``"version"`` of the document; :meth:`ModelGraph.from_json` reads this one.
JSON_VERSION = 1

#: ``op`` of a model's input.
INPUT_OP = "input"
#: ``op`` of a module shown as one box in a grouped view.
MODULE_OP = "module"
#: ``op`` of a module call the capture could not see into (``torch.fx`` leaves, the hook trace).
CALL_MODULE_OP = "call_module"


def call_path(call: str) -> str:
    """The module's qualified name of a scope entry: ``"layer1.0"`` for ``"layer1.0"``, ``"shared"`` for ``"shared@1"``."""
    at = call.rfind("@")
    return call if at < 0 or not call[at + 1:].isdigit() else call[:at]


def module_depth(path: str) -> int:
    """Depth of a module's qualified name: 0 for the model itself (``""``), 1 for ``"layer1"``, 2 for ``"layer1.0"``."""
    return 0 if not path else path.count(".") + 1


@dataclass
class GraphNode:
    """One node of a model's graph.

    Attributes
    ----------
    name : str
        Unique in its graph: ``"conv2d_1"``, ``"x"``, a box's call ``"layer1"`` / ``"shared@1"``.
    op : str
        What it does: the operation without overload (``"aten.conv2d"``, ``"aten.add_"``,
        ``"torch.flatten"``, ``"operator.add"``, ``"Tensor.view"``), ``"call_module"`` for a
        module call the capture could not see into, ``"input"`` for an input of the
        model, ``"module"`` for a module shown as one box.
    module_path : str
        Qualified name of the innermost module it happened in (``"layer1.0.bn2"``);
        ``""`` for the model itself. A box's own module.
    module_type : str
        Class name of that module (``"BatchNorm2d"``).
    shapes : list of tuple of int
        Shape of each tensor output, e.g. ``[(1, 64, 56, 56)]``; what its edges carry.
    dtypes : list of str
        dtype of each tensor output (``"float32"``), same order as ``shapes``.
    scope : tuple of str
        The module calls it happened in, outermost first, without the model itself:
        ``("layer1", "layer1.0", "layer1.0.bn2")``. The k-th call (k >= 1) of a module
        called more than once carries ``"@k"`` (``"shared@1"``); :func:`call_path` drops it.
    count : int
        How many operation nodes it stands for: 1, or a box's number of members.
    """

    name: str
    op: str
    module_path: str = ""
    module_type: str = ""
    shapes: list[tuple[int, ...]] = field(default_factory=list)
    dtypes: list[str] = field(default_factory=list)
    scope: tuple[str, ...] = ()
    count: int = 1

    @property
    def short_op(self) -> str:
        """The operation's own name for a label: ``"conv2d"``, ``"add_"``, ``"cat"``, ``"iadd"``, ``"call_module"``."""
        last = self.op.rsplit(".", 1)[-1]
        return last[2:-2] if len(last) > 4 and last.startswith("__") and last.endswith("__") else last

    def to_dict(self) -> dict[str, Any]:
        """Plain data: lists and strings only."""
        return {"name": self.name, "op": self.op, "module_path": self.module_path, "module_type": self.module_type,
                "shapes": [list(s) for s in self.shapes], "dtypes": list(self.dtypes), "scope": list(self.scope),
                "count": self.count}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> GraphNode:
        """The node :meth:`to_dict` wrote.

        Raises
        ------
        ValueError
            A field of the wrong type or a missing ``name`` / ``op``.
        """
        try:
            return cls(name=_text(data["name"]), op=_text(data["op"]), module_path=_text(data.get("module_path", "")),
                       module_type=_text(data.get("module_type", "")),
                       shapes=[tuple(int(d) for d in s) for s in data.get("shapes", [])],
                       dtypes=[_text(d) for d in data.get("dtypes", [])],
                       scope=tuple(_text(s) for s in data.get("scope", [])), count=int(data.get("count", 1)))
        except (KeyError, TypeError, ValueError) as exc:
            raise ValueError(f"not a graph node: {exc}") from None


@dataclass
class ModelGraph:
    """The dataflow of one call of a model: operations and module calls, and the tensors between them.

    Attributes
    ----------
    nodes : list of GraphNode
        In execution order (a topological order: every edge goes forward in it).
    edges : list of (str, str)
        ``(src_name, dst_name)``: a tensor ``src`` made is an input of ``dst``; the
        tensor's shapes are ``src``'s :attr:`GraphNode.shapes`. No duplicates.
    method : str
        How it was captured: ``"export"`` (``torch.export``, aten operations),
        ``"fx"`` (``torch.fx.symbolic_trace``: torch functions, ``torch.nn`` layers as
        module calls) or ``"hooks"`` (forward hooks on a real run: module calls and
        the torch functions between them).
    note : str
        Why a fallback was used (each failed method's reason); ``""`` when the first one worked.
    inputs, outputs : list of str
        Names of the input nodes, and of the nodes whose tensors the model returns.
    modules : dict of str to str
        Class name of every module a node's scope names, by qualified name; ``""``
        is the model itself.
    """

    nodes: list[GraphNode] = field(default_factory=list)
    edges: list[tuple[str, str]] = field(default_factory=list)
    method: str = ""
    note: str = ""
    inputs: list[str] = field(default_factory=list)
    outputs: list[str] = field(default_factory=list)
    modules: dict[str, str] = field(default_factory=dict)

    def node(self, name: str) -> GraphNode:
        """The node called ``name``.

        Raises
        ------
        KeyError
            No node has that name.
        """
        key = (id(self.nodes), len(self.nodes))
        cached = self.__dict__.get("_index")
        if cached is None or cached[0] != key:
            cached = self.__dict__["_index"] = (key, {n.name: n for n in self.nodes})
        return cached[1][name]

    def module_paths(self) -> list[str]:
        """Every module a node happened in, by qualified name, ``""`` (the model) first, in order of first use."""
        seen = {"": None}
        for n in self.nodes:
            for call in n.scope:
                seen.setdefault(call_path(call), None)
        return list(seen)

    def expand_depth(self, levels: int) -> set[str]:
        """The modules to expand to open ``levels`` levels: ``{""}`` for 1 (the top-level modules as boxes).

        Parameters
        ----------
        levels : int
            0: the whole model is one box; 1: its children are boxes; large: every operation.
        """
        return {p for p in self.module_paths() if module_depth(p) < levels}

    def collapsed(self, expanded: Iterable[str]) -> ModelGraph:
        """The graph with every module that is not expanded drawn as one box.

        A node goes into the box of the outermost call in its scope whose module is
        not in ``expanded`` (``""``, the model itself, must be in it for anything
        to show inside); each call of a module called twice is its own box (the
        dataflow stays acyclic). Edges between the members of different boxes
        become one edge between the boxes; edges inside a box disappear. Inputs
        are never boxed. Linear in nodes + edges (10,000 nodes: a few ms).

        Parameters
        ----------
        expanded : iterable of str
            Qualified names of the modules shown open; ``{""}``: the top-level
            modules as boxes; :meth:`module_paths`: every operation.

        Returns
        -------
        ModelGraph
            Same ``method``, ``note`` and ``modules``; box nodes have ``op="module"``,
            ``name`` the call (``"layer1"``, ``"shared@1"``), ``count`` their members
            and ``shapes`` those of the tensors leaving the box.
        """
        expanded = set(expanded)
        box_of: dict[str, str] = {}
        boxes: dict[str, GraphNode] = {}
        out_nodes: list[GraphNode] = []
        for n in self.nodes:
            box = None if n.op == INPUT_OP else self._box(n, expanded)
            if box is None:
                box_of[n.name] = n.name
                out_nodes.append(n)
                continue
            name, depth = box
            box_of[n.name] = name
            node = boxes.get(name)
            if node is None:
                path = call_path(name)
                node = boxes[name] = GraphNode(name, MODULE_OP, path, self.modules.get(path, ""), [], [],
                                               n.scope[:depth], 0)
                out_nodes.append(node)
            node.count += n.count
        edges: dict[tuple[str, str], None] = {}
        for src, dst in self.edges:
            a, b = box_of[src], box_of[dst]
            if a != b:
                edges.setdefault((a, b), None)
                if a in boxes:
                    _add_shapes(boxes[a], self.node(src))
        for name in self.outputs:  # a box that holds an output leaves it through its shapes too
            if box_of[name] in boxes:
                _add_shapes(boxes[box_of[name]], self.node(name))
        return ModelGraph(out_nodes, list(edges), self.method, self.note, list(self.inputs),
                          list(dict.fromkeys(box_of[n] for n in self.outputs)), dict(self.modules))

    def _box(self, n: GraphNode, expanded: set[str]) -> tuple[str, int] | None:
        """``(box name, scope depth of the box)`` holding ``n``, or None when ``n`` shows itself."""
        if "" not in expanded:
            return "", 0
        for depth, call in enumerate(n.scope):
            if call_path(call) not in expanded:
                return call, depth + 1
        return None

    def to_json(self, indent: int | None = None) -> str:
        """The graph as a JSON document (plain data; no pickle).

        ``{"format": "workbench.graph", "version": 1, "method", "note", "inputs",
        "outputs", "modules", "nodes": [GraphNode.to_dict()...], "edges": [[src, dst]...]}``.
        """
        return json.dumps({"format": JSON_FORMAT, "version": JSON_VERSION, "method": self.method,
                           "note": self.note, "inputs": self.inputs, "outputs": self.outputs,
                           "modules": self.modules, "nodes": [n.to_dict() for n in self.nodes],
                           "edges": [list(e) for e in self.edges]}, indent=indent)

    @classmethod
    def from_json(cls, text: str | bytes) -> ModelGraph:
        """The graph :meth:`to_json` wrote.

        Raises
        ------
        ValueError
            Not JSON, another format or version, a malformed node, duplicate node
            names, or an edge, input or output naming no node.
        """
        try:
            doc = json.loads(text)
        except json.JSONDecodeError as exc:
            raise ValueError(f"not a graph document: {exc}") from None
        if not isinstance(doc, dict) or doc.get("format") != JSON_FORMAT:
            raise ValueError(f"not a graph document: 'format' is not {JSON_FORMAT!r}")
        if doc.get("version") != JSON_VERSION:
            raise ValueError(f"graph document version {doc.get('version')!r}; this Workbench reads {JSON_VERSION}")
        nodes = [GraphNode.from_dict(n) for n in _list(doc, "nodes")]
        names = {n.name for n in nodes}
        if len(names) != len(nodes):
            raise ValueError("graph document: two nodes have the same name")
        edges = []
        for edge in _list(doc, "edges"):
            if not isinstance(edge, list) or len(edge) != 2 or not all(isinstance(e, str) for e in edge) \
                    or not set(edge) <= names:
                raise ValueError(f"graph document: edge {edge!r} does not join two nodes")
            edges.append((edge[0], edge[1]))
        inputs, outputs = _list(doc, "inputs"), _list(doc, "outputs")
        if not all(isinstance(n, str) for n in inputs + outputs) or not set(inputs) <= names \
                or not set(outputs) <= names:
            raise ValueError("graph document: an input or output names no node")
        modules = doc.get("modules", {})
        if not isinstance(modules, dict) or not all(isinstance(v, str) for v in modules.values()):
            raise ValueError("graph document: 'modules' is not a mapping of names to class names")
        return cls(nodes, edges, _text(doc.get("method", "")), _text(doc.get("note", "")), inputs, outputs,
                   dict(modules))


def _add_shapes(box: GraphNode, member: GraphNode) -> None:
    for shape, dtype in zip(member.shapes, member.dtypes):
        if shape not in box.shapes:
            box.shapes.append(shape)
            box.dtypes.append(dtype)


def _text(value: Any) -> str:
    if not isinstance(value, str):
        raise ValueError(f"{value!r} is not a string")
    return value


def _list(doc: dict, key: str) -> list:
    value = doc.get(key, [])
    if not isinstance(value, list):
        raise ValueError(f"graph document: {key!r} is not a list")
    return value
