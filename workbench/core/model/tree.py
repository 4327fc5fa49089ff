"""The module tree as data: parameters, buffers, output shapes, FLOPs, counts.

:func:`build_summary` turns an ``nn.Module`` into a tree of plain Python
:class:`ModuleNode` objects, one per entry of ``model.named_modules()`` (which
lists a module used at several places once, at its first qualified name).
The Qt tree model is a thin adapter over this tree: ``node.parent``,
``node.children`` and ``node.index_in_parent()`` (O(1)).

Counting rules
--------------
- A parameter (or buffer) object reachable under several names -- tied
  weights such as an embedding shared with the output layer -- is counted once,
  at its *first owner*: the first module in ``named_modules()`` order that holds
  it. Other holders list it in ``node.tied`` instead of ``node.params``.
  So ``root.total_params == sum(p.numel() for p in model.parameters())``.
- Subtree totals (``total_params``, ``trainable_params``, ``total_bytes``) are
  sums over the subtree of what the nodes own; they are computed bottom-up in
  one pass (no per-node recursion), so 20,000 modules take a few tens of ms.
- ``trainable_params`` reads ``requires_grad`` when built; call
  :func:`refresh_trainable` after freezing to update the whole tree in one pass.

FLOPs and output shapes
-----------------------
:func:`annotate_shapes_and_flops` runs one forward pass on an example input
(:mod:`workbench.core.model.example_input`: zeros of the typed shape, token ids
for an embedding model, or a real batch's input) under
``torch.no_grad()`` in eval mode (each module's own training flag is restored
afterwards), with a forward hook per module for output shapes and
:func:`workbench.core.model.flops.flop_counter` for FLOPs (PyTorch's
``FlopCounterMode``, 2 FLOPs per multiply-add, with attention's fused kernels
counted). ``node.flops`` is
*inclusive*: every FLOP counted while that module's ``forward`` was running
(its children and any functional ops it calls), as FlopCounterMode attributes
them; ``root.flops`` is FlopCounterMode's own ``get_total_flops()``.
"""

from __future__ import annotations

import gc
import io
from collections.abc import Iterator, Sequence

import torch
from torch import nn

from workbench.core import csv_cells
from workbench.core.errors import WorkbenchError
from workbench.core.model.example_input import ExampleInput, example_input, model_device_dtype
from workbench.core.model.flops import FLOPS_CONVENTION, flop_counter, macs
from workbench.core.formatting import (
    format_bytes,
    format_count,
    format_flops,
    format_int,
    format_shape,
    parse_shape,
)

__all__ = [
    "TensorInfo",
    "ModuleNode",
    "InputShapeError",
    "build_summary",
    "annotate_shapes_and_flops",
    "refresh_trainable",
    "train_state",
    "summary_rows",
    "to_markdown",
    "to_csv",
    "TRAIN_ALL",
    "TRAIN_PARTIAL",
    "TRAIN_NONE",
]

#: :func:`train_state` values; equal to ``Qt.CheckState`` Checked / PartiallyChecked / Unchecked.
TRAIN_ALL, TRAIN_PARTIAL, TRAIN_NONE = 2, 1, 0


_RANKS = {nn.Conv1d: (3, "(N, C, L)"), nn.Conv2d: (4, "(N, C, H, W)"), nn.Conv3d: (5, "(N, C, D, H, W)")}


def _expected_rank(model: nn.Module) -> tuple[int, str, str] | None:
    """``(rank, first layer type, layout)`` when the model starts with a convolution, else None."""
    for module in model.modules():
        for kind, (rank, layout) in _RANKS.items():
            if type(module) is kind:
                return rank, f"its first layer ({kind.__name__})", layout
        if isinstance(module, (nn.Linear, nn.Embedding)):
            return None
    return None


class InputShapeError(WorkbenchError):
    """The example input shape does not fit the model (the forward pass failed).

    Attributes
    ----------
    input_shape : tuple of int
        The shape that was tried.
    """

    def __init__(self, message: str, input_shape: tuple[int, ...]):
        self.input_shape = input_shape
        super().__init__(message)


def _dtype_name(dtype: torch.dtype) -> str:
    """``torch.float32`` -> ``"float32"``."""
    return str(dtype).rpartition(".")[2]


class TensorInfo:
    """One parameter or buffer of a module, read live from the tensor.

    ``shape``, ``dtype``, ``device`` and ``requires_grad`` are read from the live
    tensor each time (so a ``model.to("cuda")`` or a freeze shows at once);
    ``numel`` is fixed at build time.

    Attributes
    ----------
    name : str
        Qualified name, e.g. ``"layer1.0.conv1.weight"``.
    short_name : str
        Name inside its module, e.g. ``"weight"``.
    shape : tuple of int
    dtype : str
        ``"float32"``, ``"int64"``, ...
    device : str
        ``"cpu"``, ``"cuda:0"``, ``"meta"``, ...
    numel : int
        Number of elements.
    nbytes : int
        ``numel * element size``, in bytes.
    is_buffer : bool
        True for buffers (e.g. BatchNorm ``running_mean``).
    tensor : torch.Tensor
        The live ``nn.Parameter`` or buffer.
    requires_grad : bool
        Live ``tensor.requires_grad`` (always False for buffers).
    """

    __slots__ = ("_prefix", "short_name", "numel", "nbytes", "is_buffer", "tensor")

    def __init__(
        self, prefix: str, short_name: str, tensor: torch.Tensor, is_buffer: bool, numel: int, nbytes: int
    ):
        self._prefix = prefix
        self.short_name = short_name
        self.tensor = tensor
        self.is_buffer = is_buffer
        self.numel = numel
        self.nbytes = nbytes

    @classmethod
    def of(cls, name: str, tensor: torch.Tensor, is_buffer: bool = False) -> TensorInfo:
        """TensorInfo for ``tensor`` under qualified ``name`` (``"fc.weight"``)."""
        prefix, _, short = name.rpartition(".")
        n = tensor.numel()
        return cls(prefix, short, tensor, is_buffer, n, n * tensor.element_size())

    @property
    def name(self) -> str:
        """Qualified name (``"layer1.0.conv1.weight"``)."""
        return f"{self._prefix}.{self.short_name}" if self._prefix else self.short_name

    @property
    def shape(self) -> tuple[int, ...]:
        """Shape of the live tensor."""
        return tuple(self.tensor.shape)

    @property
    def dtype(self) -> str:
        """Dtype name without the ``torch.`` prefix (``"float32"``)."""
        return _dtype_name(self.tensor.dtype)

    @property
    def device(self) -> str:
        """Device of the live tensor (``"cpu"``, ``"cuda:0"``)."""
        return str(self.tensor.device)

    @property
    def requires_grad(self) -> bool:
        """Live ``requires_grad`` of the tensor."""
        return bool(self.tensor.requires_grad)

    def __repr__(self) -> str:
        kind = "buffer" if self.is_buffer else "param"
        return f"TensorInfo({self.name!r}, {kind}, shape={self.shape}, dtype={self.dtype})"


class ModuleNode:
    """One module of the tree (one entry of ``named_modules()``).

    Attributes
    ----------
    name : str
        Qualified name; ``""`` for the root.
    short_name : str
        Last path component (``"conv1"``); the class name for the root.
    type_name : str
        Class name (``"Conv2d"``).
    module : nn.Module
        The live module.
    parent : ModuleNode or None
    children : list of ModuleNode
        In registration order.
    depth : int
        0 for the root.
    params : list of TensorInfo
        Own parameters (``recurse=False``) that this module is the first owner of.
    buffers : list of TensorInfo
        Own buffers, first owner only.
    tied : list of tuple (str, TensorInfo)
        Own parameters/buffers first listed elsewhere: ``(short_name, info at first owner)``.
    total_params : int
        Parameters in the subtree (each counted once, at its first owner).
    trainable_params : int
        Of these, the ones with ``requires_grad``; see :func:`refresh_trainable`.
    total_bytes : int
        Bytes of parameters and buffers in the subtree.
    output_shape : tuple of int, str or None
        Output shape of the last forward in :func:`annotate_shapes_and_flops`
        (first tensor for tuple/list/dict outputs, described in a string when it
        is not a plain tensor); None when not annotated or the module did not run.
    flops : int or None
        Inclusive FLOPs of the module's forward (FlopCounterMode); None when
        not annotated or the module did not run.
    """

    __slots__ = (
        "name",
        "short_name",
        "type_name",
        "module",
        "parent",
        "children",
        "depth",
        "params",
        "buffers",
        "tied",
        "total_params",
        "trainable_params",
        "total_bytes",
        "output_shape",
        "flops",
        "_row",
        "_preorder",
        "_index",
    )

    def __init__(
        self,
        name: str,
        short_name: str,
        module: nn.Module,
        parent: ModuleNode | None,
        _attach: bool = True,
    ):
        self.name = name
        self.short_name = short_name
        self.type_name = type(module).__name__
        self.module = module
        self.parent = parent
        self.children: list[ModuleNode] = []
        self.depth = 0 if parent is None else parent.depth + 1
        self.params: list[TensorInfo] = []
        self.buffers: list[TensorInfo] = []
        self.tied: list[tuple[str, TensorInfo]] = []
        self.total_params = 0
        self.trainable_params = 0
        self.total_bytes = 0
        self.output_shape: tuple[int, ...] | str | None = None
        self.flops: int | None = None
        self._row = 0
        self._preorder: list[ModuleNode] | None = None
        self._index: dict[str, ModuleNode] | None = None
        if parent is not None and _attach:
            self._row = len(parent.children)
            parent.children.append(self)

    def index_in_parent(self) -> int:
        """Row of this node among its parent's children (0 for the root). O(1)."""
        return self._row

    def root(self) -> ModuleNode:
        """The root of the tree."""
        node = self
        while node.parent is not None:
            node = node.parent
        return node

    def walk(self) -> Iterator[ModuleNode]:
        """Yield this node and its descendants in pre-order (``named_modules()`` order)."""
        if self._preorder is not None:
            yield from self._preorder
            return
        stack = [self]
        while stack:
            node = stack.pop()
            yield node
            stack.extend(reversed(node.children))

    def find(self, name: str) -> ModuleNode | None:
        """Node by qualified name relative to this node (for the root: the qualified name).

        Parameters
        ----------
        name : str
            ``"layer1.0.conv1"``; ``""`` returns this node.

        Returns
        -------
        ModuleNode or None
            None when there is no such module. O(1) for the root's index.
        """
        root = self.root()
        full = name if not self.name else (f"{self.name}.{name}" if name else self.name)
        if root._index is not None:
            return root._index.get(full)
        for node in root.walk():
            if node.name == full:
                return node
        return None

    @property
    def own_params(self) -> int:
        """Parameters this module owns itself (first owner), not counting children."""
        return sum(t.numel for t in self.params)

    def __repr__(self) -> str:
        return (
            f"ModuleNode({self.name or self.short_name!r}, {self.type_name}, "
            f"params={self.total_params}, children={len(self.children)})"
        )


def build_summary(
    model: nn.Module,
    input_shape: Sequence[int] | str | None = None,
    device: str | torch.device | None = None,
) -> ModuleNode:
    """Build the module tree of ``model``.

    Parameters
    ----------
    model : nn.Module
        Any module; parameters may live on any device, ``meta`` included
        (shapes and counts work; FLOPs need real tensors).
    input_shape : sequence of int or str, optional
        Example input shape ``(N, C, H, W)`` (or ``"1,3,224,224"``); when given,
        :func:`annotate_shapes_and_flops` fills output shapes and FLOPs.
    device : str or torch.device, optional
        Device for the example input; default: the device of the model's
        first parameter or buffer (cpu when it has none).

    Returns
    -------
    ModuleNode
        The root node (``name == ""``).

    Raises
    ------
    InputShapeError
        When ``input_shape`` is given and the forward pass fails.
    """
    preorder: list[ModuleNode] = []
    index: dict[str, ModuleNode] = {}
    seen: dict[int, TensorInfo] = {}
    itemsize: dict[torch.dtype, int] = {}
    memo: set[int] = set()
    gc_was_enabled = gc.isenabled()
    gc.disable()  # tens of thousands of small cyclic objects: keep the collector out of the loop
    try:
        root = ModuleNode("", type(model).__name__, model, None)
        # Same order and de-duplication as named_modules(): pre-order, a module seen before is skipped.
        stack: list[tuple[ModuleNode, nn.Module]] = [(root, model)]
        while stack:
            node, module = stack.pop()
            mid = id(module)
            if mid in memo:
                continue
            memo.add(mid)
            name = node.name
            if node is not root:
                parent = node.parent
                node._row = len(parent.children)
                parent.children.append(node)
            index[name] = node
            preorder.append(node)
            total = trainable = nbytes = 0
            for short, p in module._parameters.items():
                if p is None:
                    continue
                info = seen.get(id(p))
                if info is not None:
                    node.tied.append((short, info))
                    continue
                n = p.numel()
                dt = p.dtype
                size = itemsize.get(dt)
                if size is None:
                    size = itemsize[dt] = p.element_size()
                info = TensorInfo(name, short, p, False, n, n * size)
                seen[id(p)] = info
                node.params.append(info)
                total += n
                nbytes += n * size
                if p.requires_grad:
                    trainable += n
            for short, b in module._buffers.items():
                if b is None:
                    continue
                info = seen.get(id(b))
                if info is not None:
                    node.tied.append((short, info))
                    continue
                info = TensorInfo.of(f"{name}.{short}" if name else short, b, True)
                seen[id(b)] = info
                node.buffers.append(info)
                nbytes += info.nbytes
            node.total_params = total
            node.trainable_params = trainable
            node.total_bytes = nbytes
            children = module._modules
            if children:
                prefix = name + "." if name else ""
                pending = []
                for short, child in children.items():
                    if child is None:
                        continue
                    pending.append((ModuleNode(prefix + short, short, child, node, False), child))
                pending.reverse()
                stack.extend(pending)
        # Bottom-up totals in one pass: reversed pre-order visits children before parents.
        for node in reversed(preorder):
            parent = node.parent
            if parent is not None:
                parent.total_params += node.total_params
                parent.trainable_params += node.trainable_params
                parent.total_bytes += node.total_bytes
    finally:
        if gc_was_enabled:
            gc.enable()
    root._preorder = preorder
    root._index = index
    if input_shape is not None:
        annotate_shapes_and_flops(root, input_shape, device)
    return root


def refresh_trainable(root: ModuleNode) -> None:
    """Recompute ``trainable_params`` of every node from live ``requires_grad``.

    One bottom-up pass over the tree (about 10 ms for 20,000 modules).

    Parameters
    ----------
    root : ModuleNode
        The root returned by :func:`build_summary` (any node works; only its
        subtree is refreshed, without updating its ancestors).
    """
    nodes = root._preorder if root._preorder is not None else list(root.walk())
    for node in nodes:
        own = 0
        for info in node.params:
            if info.tensor.requires_grad:
                own += info.numel
        node.trainable_params = own
    for node in reversed(nodes):
        if node is not root:
            node.parent.trainable_params += node.trainable_params


def train_state(node: ModuleNode) -> int | None:
    """Check state of the node's freeze checkbox.

    Parameters
    ----------
    node : ModuleNode

    Returns
    -------
    int or None
        ``2`` (``TRAIN_ALL``) every parameter in the subtree is trainable,
        ``1`` (``TRAIN_PARTIAL``) some are, ``0`` (``TRAIN_NONE``) none is --
        the values of ``Qt.CheckState``. ``None`` for a subtree without
        parameters (ReLU, pooling...): it has no checkbox. A module whose only
        parameters are tied to an earlier owner reports their state.
    """
    if node.total_params == 0:
        tied = [info for _, info in node.tied if not info.is_buffer]
        if not tied:
            return None
        flags = {info.tensor.requires_grad for info in tied}
        if len(flags) == 2:
            return TRAIN_PARTIAL
        return TRAIN_ALL if flags.pop() else TRAIN_NONE
    if node.trainable_params == node.total_params:
        return TRAIN_ALL
    if node.trainable_params == 0:
        return TRAIN_NONE
    return TRAIN_PARTIAL


def _describe_output(out) -> tuple[int, ...] | str:
    """Shape of a tensor output; for containers the first tensor's shape or a short description."""
    if isinstance(out, torch.Tensor):
        return tuple(out.shape)
    if isinstance(out, (tuple, list)):
        kind = type(out).__name__
        for item in out:
            if isinstance(item, torch.Tensor):
                if len(out) == 1:
                    return tuple(item.shape)
                return f"{kind} of {len(out)}: {format_shape(tuple(item.shape))}, ..."
        return f"{kind} of {len(out)}"
    if isinstance(out, dict):
        for key, item in out.items():
            if isinstance(item, torch.Tensor):
                return f"dict of {len(out)}: {key}={format_shape(tuple(item.shape))}, ..."
        return f"dict of {len(out)}"
    if out is None:
        return "None"
    return type(out).__name__


def annotate_shapes_and_flops(
    root: ModuleNode,
    input_shape: Sequence[int] | str | None = None,
    device: str | torch.device | None = None,
    *,
    label: str | None = None,
    example: ExampleInput | None = None,
) -> int:
    """Run one forward pass and fill ``output_shape`` and ``flops`` of every node.

    The model runs on ``example`` when given, else on the example input of
    :func:`workbench.core.model.example_input.example_input` for ``input_shape``:
    a zero tensor in the model's first floating dtype (float32 by default), or
    int64 token ids below ``num_embeddings`` for a model whose first layer is an
    ``nn.Embedding``. It runs under ``torch.no_grad()`` in eval mode; every
    module's training flag is restored afterwards and every hook removed, also
    when the forward fails.

    Parameters
    ----------
    root : ModuleNode
        Root from :func:`build_summary`.
    input_shape : sequence of int or str, optional
        ``(N, C, H, W)`` for images, ``(N, L)`` token ids, or ``"1,3,224,224"``;
        may be left out for an embedding model (ids ``(1, 16)``) or with ``example``.
    device : str or torch.device, optional
        Device of the input; default: the device of the model's parameters.
    label : str, optional
        Model name for error messages (e.g. ``"resnet18"``); default: class name.
    example : ExampleInput, optional
        What to call the model with (e.g. a real batch's input,
        :func:`~workbench.core.model.example_input.from_batch`); wins over ``input_shape``.

    Returns
    -------
    int
        Total FLOPs, equal to ``FlopCounterMode.get_total_flops()``
        (one multiply-add = 2 FLOPs).

    Raises
    ------
    InputShapeError
        When the forward pass fails (wrong input shape, wrong channel count...).
    ValueError
        Neither ``example`` nor ``input_shape`` for a model without hints, or a
        shape that is not positive integers.
    WorkbenchError
        Passed through unchanged when the model raises one (e.g. a weights-only
        tree, whose forward needs an architecture).
    """
    model = root.module
    dev = torch.device(device) if device is not None else model_device_dtype(model)[0]
    if example is None:
        shape = parse_shape(input_shape) if input_shape is not None else None
        example = example_input(model, shape, device=dev)
        what = f"input shape ({','.join(str(d) for d in example.shape)})"
    else:
        example = example.to(dev)
        shape = example.shape
        what = f"example input {example.describe()}"
    by_module: dict[int, ModuleNode] = {id(n.module): n for n in root.walk()}
    shapes: dict[int, object] = {}  # filled by the hooks; written to the nodes only on success

    def hook(module, _inputs, output):
        if id(module) in by_module:
            shapes[id(module)] = _describe_output(output)

    modes = [(m, m.training) for m in model.modules()]
    handles = [n.module.register_forward_hook(hook) for n in by_module.values()]
    try:
        model.eval()
        with torch.no_grad(), flop_counter() as counter:
            example.call(model)
    except WorkbenchError:
        raise
    except Exception as exc:  # any failure inside user/torchvision forward code
        name = label or root.type_name
        first_line = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        expected = _expected_rank(model)
        if expected is not None and len(shape) != expected[0]:  # say it in the user's terms, not torch's
            first_line = f"{expected[1]} takes {expected[0]} numbers {expected[2]}, got {len(shape)}"
        raise InputShapeError(
            f"{what} does not fit {name}: {first_line}; set the input shape the model expects",
            shape,
        ) from exc
    finally:
        for h in handles:
            h.remove()
        for m, was_training in modes:
            m.training = was_training

    total = int(counter.get_total_flops())
    counts = counter.get_flop_counts()
    names = _tracker_names(counter)
    for key, node in by_module.items():  # all or nothing: a failed forward left the nodes untouched
        node.output_shape = shapes.get(key)
        node.flops = None
        tracked = names.get(node.module) if names is not None else None
        if tracked is None:
            tracked = f"{root.type_name}.{node.name}" if node.name else root.type_name
        per_op = counts.get(tracked)
        if per_op is not None:
            node.flops = int(sum(per_op.values()))
        elif node.output_shape is not None:
            node.flops = 0  # ran, but counted nothing (ReLU, pooling, ...)
    root.flops = total
    return total


def _tracker_names(counter) -> dict | None:
    """The module -> name map FlopCounterMode's ModuleTracker used, when available.

    FlopCounterMode keys ``get_flop_counts()`` by ``"<RootClass>.<qualified name>"``
    as its ``ModuleTracker`` assigns them (for a module reachable under two names
    it is the *last* one). Reading the tracker's own map keeps shared modules
    right; without it the name is rebuilt from the qualified name.
    """
    tracker = getattr(counter, "mod_tracker", None)
    known = getattr(tracker, "_known_modules", None)
    if known is None:
        return None
    try:
        return dict(known.items())
    except Exception:  # pragma: no cover - private API changed shape
        return None


def summary_rows(root: ModuleNode, max_depth: int | None = None) -> list[dict]:
    """Flat rows in pre-order for tables and JSON / Markdown / CSV export.

    Parameters
    ----------
    root : ModuleNode
    max_depth : int, optional
        Leave out nodes deeper than this (root is depth 0).

    Returns
    -------
    list of dict
        Keys: ``name`` (qualified, ``""`` for the root), ``type``, ``depth``,
        ``output_shape`` (list of int, a string, or None), ``params``,
        ``trainable`` (subtree parameter counts), ``bytes`` (subtree params +
        buffers), ``flops`` (int or None; 2 per multiply-add) and ``macs``
        (multiply-adds, ``flops // 2``: torchvision's and many papers' "GFLOPS").
        All plain Python values.
    """
    rows = []
    base = root.depth
    for node in root.walk():
        depth = node.depth - base
        if max_depth is not None and depth > max_depth:
            continue
        shape = node.output_shape
        rows.append(
            {
                "name": node.name,
                "type": node.type_name,
                "depth": depth,
                "output_shape": list(shape) if isinstance(shape, tuple) else shape,
                "params": int(node.total_params),
                "trainable": int(node.trainable_params),
                "bytes": int(node.total_bytes),
                "flops": None if node.flops is None else int(node.flops),
                "macs": macs(node.flops),
            }
        )
    return rows


def to_markdown(root: ModuleNode, max_depth: int | None = None) -> str:
    """The summary as a GitHub Markdown table followed by totals.

    Parameters
    ----------
    root : ModuleNode
    max_depth : int, optional
        Leave out nodes deeper than this.

    Returns
    -------
    str
        Names indented by depth (``&nbsp;``), counts with thousands separators.
    """
    lines = [
        "| Name | Type | Output shape | Params | Trainable | FLOPs |",
        "|---|---|---|---:|---:|---:|",
    ]
    for row in summary_rows(root, max_depth):
        indent = "&nbsp;&nbsp;" * row["depth"]
        name = row["name"] or root.short_name
        shape = format_shape(row["output_shape"]).replace("|", "\\|")
        lines.append(
            f"| {indent}`{name}` | {row['type']} | {shape} | {format_int(row['params'])} | "
            f"{format_int(row['trainable'])} | {format_int(row['flops'])} |"
        )
    lines.append("")
    lines.append(f"- Total parameters: {format_int(root.total_params)} ({format_count(root.total_params)})")
    lines.append(f"- Trainable parameters: {format_int(root.trainable_params)}")
    lines.append(f"- Size (parameters and buffers): {format_bytes(root.total_bytes)}")
    if root.flops is not None:
        lines.append(f"- {FLOPS_CONVENTION}: {format_int(root.flops)} ({format_flops(root.flops)}); "
                     f"multiply-adds: {format_int(macs(root.flops))}")
    return "\n".join(lines) + "\n"


def to_csv(root: ModuleNode, max_depth: int | None = None) -> str:
    """The summary as CSV with plain integers (empty cell for "not measured").

    Columns: name, type, depth, output_shape (``"1x64x112x112"``), params,
    trainable, bytes, flops (2 per multiply-add), macs (multiply-adds).
    """
    out = io.StringIO()
    writer = csv_cells.writer(out, lineterminator="\n")
    cols = ["name", "type", "depth", "output_shape", "params", "trainable", "bytes", "flops", "macs"]
    writer.writerow(cols)
    for row in summary_rows(root, max_depth):
        shape = row["output_shape"]
        if isinstance(shape, list):
            shape = "x".join(str(d) for d in shape)
        writer.writerow(
            [
                row["name"],
                row["type"],
                row["depth"],
                "" if shape is None else shape,
                row["params"],
                row["trainable"],
                row["bytes"],
                "" if row["flops"] is None else row["flops"],
                "" if row["macs"] is None else row["macs"],
            ]
        )
    return out.getvalue()
