"""Capture with ``torch.export`` (non-strict): aten operations, each under its ``nn_module_stack``.

Export runs the model's Python ``forward`` with fake tensors (parameters and
buffers included), so it computes nothing and reads no weight; a model on the
``meta`` device works too. The graph keeps the aten operations and the model's
inputs; parameters, buffers and constants (placeholders), ``getattr`` and
``getitem`` and the shape assertions are dropped, their edges passed through.
Higher-order operators that wrap a subgraph (``with torch.no_grad():`` inside
``forward`` becomes ``wrap_with_set_grad_enabled``) are opened in place.
"""

from __future__ import annotations

import contextlib
import io
import operator
import sys
from collections.abc import Iterator, Sequence
from typing import Any

import torch
from torch import nn

from workbench.core.graph.building import GraphBuilder, tensor_specs
from workbench.core.graph.model_graph import INPUT_OP, GraphNode, ModelGraph
from workbench.core.model.example_input import ExampleInput

__all__ = ["export_graph", "graph_from_exported", "op_name"]


def export_graph(model: nn.Module, example: ExampleInput) -> ModelGraph:
    """The graph of ``model(*example.args, **example.kwargs)`` by ``torch.export.export(strict=False)``.

    Parameters
    ----------
    model : nn.Module
        Left unchanged; on any device, ``meta`` included.
    example : ExampleInput
        Tensors on the model's device.

    Returns
    -------
    ModelGraph
        ``method="export"``; ``op`` of every node an aten operation (``"aten.conv2d"``).

    Raises
    ------
    Exception
        Whatever ``torch.export`` raises for a model it cannot trace (data-dependent
        control flow, unsupported Python); :func:`~workbench.core.graph.capture.capture_graph`
        falls back on it.
    """
    config = getattr(torch.fx, "config", None)
    had = getattr(config, "do_not_emit_stack_traces", None)
    if had is not None:
        # Recording each node's Python stack trace is ~25% of resnet50's export time and the
        # graph does not show source lines. A process-wide flag: restored at once.
        config.do_not_emit_stack_traces = True
    try:
        with _without_partial_graph():
            program = torch.export.export(model, tuple(example.args), dict(example.kwargs), strict=False)
    finally:
        if had is not None:
            config.do_not_emit_stack_traces = had
    return graph_from_exported(program, type(model).__name__)


@contextlib.contextmanager
def _without_partial_graph() -> Iterator[None]:
    """Keep ``torch.export``'s dump of the partial graph it traced before failing off stderr.

    Export prints it to ``sys.stderr`` when it gives up; for a capture that falls
    back that is pages of noise. Everything else written to stderr meanwhile
    (another thread's output, torch's warnings) is written there afterwards.
    """
    buffer = io.StringIO()
    partial = None
    try:
        with contextlib.redirect_stderr(buffer):
            yield
    except Exception as exc:
        partial = getattr(exc, "partial_fx_graph", None)
        raise
    finally:
        text = buffer.getvalue()
        if partial is not None:
            text = text.replace(f"{partial}\n", "")
        if text:
            sys.stderr.write(text)


def graph_from_exported(program: torch.export.ExportedProgram, root_type: str) -> ModelGraph:
    """The dataflow graph of an ``ExportedProgram``.

    Parameters
    ----------
    program : torch.export.ExportedProgram
        What ``torch.export.export`` returned.
    root_type : str
        Class name of the exported model (``modules[""]``, the type of top-level operations).

    Returns
    -------
    ModelGraph
        ``method="export"``, ``note=""``.
    """
    builder = GraphBuilder(root_type)
    user_inputs = set(program.graph_signature.user_inputs)
    inputs: list[str] = []
    outputs: list[Any] = []
    for node in program.graph.nodes:
        if node.op == "placeholder":
            shapes, dtypes = tensor_specs(node.meta.get("val"))
            if node.name in user_inputs and shapes:
                name = builder.unique(node.name)
                builder.keep(node, GraphNode(name, INPUT_OP, "", root_type, shapes, dtypes))
                inputs.append(name)
            else:  # a parameter, buffer or constant: plumbing
                builder.drop(node)
        elif node.op == "output":
            outputs = list(node.all_input_nodes)
        else:
            _step(builder, program.graph_module, node)
    return builder.build("export", inputs, outputs)


def _step(builder: GraphBuilder, owner: torch.fx.GraphModule, node: torch.fx.Node) -> None:
    """One ``call_function`` / ``get_attr`` node of an exported graph (or of a subgraph inside it)."""
    if node.op != "call_function":
        builder.drop(node)  # get_attr: a subgraph or a constant
        return
    sub, operands = _subgraph(owner, node)
    if sub is not None:
        _inline(builder, sub, node, operands)
        return
    shapes, dtypes = tensor_specs(node.meta.get("val"))
    if node.target is operator.getitem or not shapes:  # unpacking, assertions, sizes: no tensor of its own
        builder.drop(node, node.all_input_nodes)
        return
    scope, path, kind = builder.scope(node.meta.get("nn_module_stack"))
    builder.keep(node, GraphNode(builder.unique(node.name), op_name(node.target), path, kind, shapes, dtypes, scope),
                 node.all_input_nodes)


def _subgraph(owner: torch.fx.GraphModule, node: torch.fx.Node) -> tuple[Any, Sequence[Any]]:
    """``(GraphModule, its operands)`` of a higher-order operator wrapping a subgraph, else ``(None, ())``."""
    if not isinstance(node.target, torch._ops.HigherOrderOperator):
        return None, ()
    for i, arg in enumerate(node.args):
        if isinstance(arg, torch.fx.Node) and arg.op == "get_attr":
            sub = getattr(owner, str(arg.target), None)
            if isinstance(sub, torch.fx.GraphModule):
                return sub, node.args[i + 1:]
    return None, ()


def _inline(builder: GraphBuilder, sub: torch.fx.GraphModule, node: torch.fx.Node, operands: Sequence[Any]) -> None:
    """Open a wrapped subgraph in place: its placeholders read ``operands``, ``node`` reads its outputs."""
    placeholders = [n for n in sub.graph.nodes if n.op == "placeholder"]
    for ph, operand in zip(placeholders, operands):
        builder.drop(ph, [operand] if isinstance(operand, torch.fx.Node) else [])
    for inner in sub.graph.nodes:
        if inner.op == "output":
            builder.drop(node, inner.all_input_nodes)
        elif inner.op != "placeholder":
            _step(builder, sub, inner)


def op_name(target: Any) -> str:
    """The operation's name without overload, as a node's ``op``.

    ``"aten.conv2d"`` for ``aten.conv2d.default``, a higher-order operator's own
    name, ``"operator.add"`` / ``"torch.flatten"`` for a Python callable.
    """
    if isinstance(target, torch._ops.OpOverload):
        return str(target.overloadpacket)
    if isinstance(target, torch._ops.HigherOrderOperator):
        return target.name()
    if isinstance(target, str):
        return target
    module = getattr(target, "__module__", None) or ""
    module = {"_operator": "operator", "torch._C._nn": "torch.nn.functional",
              "torch._C._VariableFunctions": "torch"}.get(module, module)
    name = getattr(target, "__name__", None) or str(target)
    return f"{module}.{name}" if module else name
