"""Capture with ``torch.fx.symbolic_trace``: torch functions and methods, ``torch.nn`` layers as module calls.

Symbolic tracing runs ``forward`` on proxies, so it reads no weight; the shapes
come from running the traced graph once under ``FakeTensorMode`` (fake tensors:
no computation, no weight read). ``torch.nn``'s own layers are fx's leaves and
show as ``call_module`` nodes; everything else is traced through.
"""

from __future__ import annotations

import inspect
from typing import Any

import torch
from torch import nn

from workbench.core.graph.building import GraphBuilder, tensor_specs
from workbench.core.graph.from_export import op_name
from workbench.core.graph.model_graph import CALL_MODULE_OP, INPUT_OP, GraphNode, ModelGraph
from workbench.core.model.example_input import ExampleInput

__all__ = ["fx_graph"]


def fx_graph(model: nn.Module, example: ExampleInput) -> ModelGraph:
    """The graph of ``model(*example.args, **example.kwargs)`` by ``torch.fx.symbolic_trace``.

    Parameters
    ----------
    model : nn.Module
        Left unchanged.
    example : ExampleInput
        Tensors on the model's device; ``forward``'s arguments not given keep
        their defaults (fx specializes on them).

    Returns
    -------
    ModelGraph
        ``method="fx"``; ``op`` is ``"call_module"`` for a ``torch.nn`` layer,
        ``"torch.flatten"`` / ``"operator.add"`` for a function, ``"Tensor.view"`` for a method.

    Raises
    ------
    Exception
        Whatever ``torch.fx`` raises for a model it cannot trace (``TraceError`` for
        control flow on a tensor); ``TypeError`` for a ``forward`` taking ``*args``.
    """
    values = _arguments(model, example)
    concrete = {k: v for k, v in values.items() if not isinstance(v, torch.Tensor)}
    traced = torch.fx.symbolic_trace(model, concrete_args=concrete or None)
    specs = _shapes(traced, values)
    builder = GraphBuilder(type(model).__name__)
    inputs: list[str] = []
    outputs: list[Any] = []
    for node in traced.graph.nodes:
        if node.op == "output":
            outputs = list(node.all_input_nodes)
            continue
        shapes, dtypes = specs.get(node, ([], []))
        if node.op == "get_attr" or not shapes:  # a parameter, a constant, a size, a concrete argument
            builder.drop(node, node.all_input_nodes)
            continue
        if node.op == "placeholder":
            name = builder.unique(node.name)
            builder.keep(node, GraphNode(name, INPUT_OP, "", builder.modules[""], shapes, dtypes))
            inputs.append(name)
            continue
        scope, path, kind = builder.scope(node.meta.get("nn_module_stack"))
        if node.op == "call_module":
            op = CALL_MODULE_OP
            path = str(node.target)
            kind = builder.modules.setdefault(path, type(traced.get_submodule(path)).__name__)
        elif node.op == "call_method":
            op = f"Tensor.{node.target}"
        else:
            op = op_name(node.target)
        builder.keep(node, GraphNode(builder.unique(node.name), op, path, kind, shapes, dtypes, scope),
                     node.all_input_nodes)
    return builder.build("fx", inputs, outputs)


def _arguments(model: nn.Module, example: ExampleInput) -> dict[str, Any]:
    """``forward``'s arguments by name: the example's, then each other one's default."""
    signature = inspect.signature(model.forward)
    if any(p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD) for p in signature.parameters.values()):
        raise TypeError(f"{type(model).__name__}.forward takes *args or **kwargs, which torch.fx cannot trace")
    bound = signature.bind(*example.args, **example.kwargs)
    bound.apply_defaults()
    return dict(bound.arguments)


class _ShapeRecorder(torch.fx.Interpreter):
    """Runs a traced graph (under fake tensors) and keeps each node's ``(shapes, dtypes)``, not its value."""

    def __init__(self, module: torch.fx.GraphModule):
        super().__init__(module)
        self.specs: dict[torch.fx.Node, tuple[list, list]] = {}

    def run_node(self, n: torch.fx.Node) -> Any:
        result = super().run_node(n)
        self.specs[n] = tensor_specs(result)
        return result


def _shapes(traced: torch.fx.GraphModule, values: dict[str, Any]) -> dict[torch.fx.Node, tuple[list, list]]:
    """Every node's output shapes: the graph run once on fake copies of the inputs.

    ``values`` are ``forward``'s arguments in signature order (:func:`_arguments`),
    which is the order of the graph's placeholders.

    ``FakeTensorMode(allow_non_fake_inputs=True)`` turns the real parameters into
    fake ones as the operations meet them: their values are never read.
    """
    from torch._subclasses.fake_tensor import FakeTensorMode

    mode = FakeTensorMode(allow_non_fake_inputs=True)
    recorder = _ShapeRecorder(traced)
    with mode:  # by position: fx renames a concrete argument's placeholder (``scale`` -> ``scale_1``)
        args = [mode.from_tensor(v) if isinstance(v, torch.Tensor) else v for v in values.values()]
        recorder.run(*args)
    return recorder.specs
