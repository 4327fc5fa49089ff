"""Capture by running the model once with forward hooks: for models neither torch.export nor torch.fx can trace.

A ``forward`` that branches on a tensor's value (``if x.sum() > 0:``) has no graph
without values, so this capture runs the model for real on the example input
(under ``torch.no_grad()``; the caller puts it in eval mode, so BatchNorm's
running statistics do not move): this one run reads the weights and computes.
Forward pre- and post-hooks on every module keep the stack of module calls;
each call of a leaf module (one without children) is one ``call_module`` node;
the torch functions and tensor methods called between them (``x + y``,
``torch.cat``, ``x.view``) are recorded by a ``TorchFunctionMode``. Edges follow
tensor identity: a node reads the tensors earlier nodes made (an in-place
operation makes its tensor anew). Only the branch taken is in the graph.
"""

from __future__ import annotations

import inspect
from typing import Any

import torch
from torch import nn
from torch.overrides import TorchFunctionMode

from workbench.core.graph.building import GraphBuilder, tensor_specs
from workbench.core.graph.model_graph import CALL_MODULE_OP, INPUT_OP, GraphNode, ModelGraph, call_path
from workbench.core.model.example_input import ExampleInput, tensors_in

__all__ = ["hooks_graph"]


def hooks_graph(model: nn.Module, example: ExampleInput) -> ModelGraph:
    """The graph of one real call ``model(*example.args, **example.kwargs)``, recorded by hooks.

    Parameters
    ----------
    model : nn.Module
        Its weights must hold values (not on ``meta``); run under ``torch.no_grad()``,
        every hook removed afterwards, even when ``forward`` raises.
    example : ExampleInput
        Tensors on the model's device.

    Returns
    -------
    ModelGraph
        ``method="hooks"``; ``op`` is ``"call_module"`` for a leaf module's call,
        ``"torch.cat"`` / ``"Tensor.add"`` ... for a function between them.

    Raises
    ------
    ValueError
        The model's weights are on the ``meta`` device (nothing to run).
    Exception
        Whatever the model's ``forward`` raises on the example.
    """
    if any(t.is_meta for t in model.parameters()):
        raise ValueError("the hook trace runs the model, and its weights are on the meta device (no values)")
    trace = _Trace(model)
    inputs = trace.add_inputs(model, example)
    with torch.no_grad(), trace.hooked():
        output = example.call(model)
    return trace.builder.build("hooks", inputs, [id(t) for t in tensors_in(output)])


class _Trace:
    """The hooks' and the function mode's shared state: the call stack and each tensor's maker."""

    def __init__(self, model: nn.Module):
        self.builder = GraphBuilder(type(model).__name__)
        self.names = {id(m): name for name, m in model.named_modules()}
        self.leaves = {id(m) for m in model.modules() if next(m.children(), None) is None}
        self.model = model
        self.stack: list[str] = []  # the calls in progress, as scope entries ("layer1", "shared@1")
        self.leaf_depth = 0  # > 0 inside a leaf module's call: its own functions are not recorded
        self.calls: dict[str, int] = {}
        self.reads: list[tuple[str, ...]] = []  # per leaf call in progress: the nodes its inputs came from
        self.alive: list[torch.Tensor] = []  # tensors seen, kept so that their ids stay theirs

    def add_inputs(self, model: nn.Module, example: ExampleInput) -> list[str]:
        """One input node per tensor of the example, named after ``forward``'s parameters."""
        try:
            named = inspect.signature(model.forward).bind(*example.args, **example.kwargs).arguments
        except (TypeError, ValueError):
            named = {f"input_{i}": a for i, a in enumerate(example.args)} | dict(example.kwargs)
        names = []
        for arg, value in named.items():
            tensors = list(tensors_in(value))
            for i, t in enumerate(tensors):
                shapes, dtypes = tensor_specs(t)
                name = self.builder.unique(arg if len(tensors) == 1 else f"{arg}_{i}")
                self._link((), GraphNode(name, INPUT_OP, "", self.builder.modules[""], shapes, dtypes), t)
                names.append(name)
        return names

    def hooked(self) -> _Hooked:
        return _Hooked(self)

    def on_call(self, module: nn.Module, args: tuple, kwargs: dict) -> None:
        path = self.names.get(id(module))
        if path is None:
            return
        if path:
            k = self.calls.get(path, 0)
            self.calls[path] = k + 1
            self.stack.append(path + (f"@{k}" if k else ""))
            self.builder.modules.setdefault(path, type(module).__name__)
        if id(module) in self.leaves:
            if self.leaf_depth == 0:
                self.reads.append(self.builder.sources(id(t) for t in tensors_in((args, kwargs))))
            self.leaf_depth += 1

    def on_return(self, module: nn.Module, output: Any) -> None:
        path = self.names.get(id(module))
        if path is None:
            return
        if id(module) in self.leaves:
            self.leaf_depth -= 1
            if self.leaf_depth == 0:
                reads = self.reads.pop()
                shapes, dtypes = tensor_specs(output)
                node = GraphNode(self.builder.unique((path or "call").replace(".", "_")), CALL_MODULE_OP, path,
                                 type(module).__name__, shapes, dtypes, tuple(self.stack))
                self._link(reads, node, output)
        if path:
            self.stack.pop()

    def on_function(self, func: Any, args: tuple, kwargs: dict, output: Any) -> None:
        if self.leaf_depth or next(tensors_in(output), None) is None:
            return  # inside a leaf's own forward, or no tensor made (sizes, dtypes, bools)
        shapes, dtypes = tensor_specs(output)
        reads = self.builder.sources(id(t) for t in tensors_in((args, kwargs)))
        op = _function_name(func)
        path = call_path(self.stack[-1]) if self.stack else ""
        node = GraphNode(self.builder.unique(op.rsplit(".", 1)[-1].strip("_") or "op"), op, path,
                         self.builder.modules.get(path, ""), shapes, dtypes, tuple(self.stack))
        self._link(reads, node, output)

    def _link(self, reads: tuple[str, ...], node: GraphNode, output: Any) -> None:
        """Keep ``node`` with edges from the nodes it read; it becomes the maker of every tensor in ``output``."""
        self.builder.keep(("node", node.name), node, sources=reads)
        for t in tensors_in(output):
            self._made(t, node)

    def _made(self, tensor: torch.Tensor, node: GraphNode) -> None:
        self.alive.append(tensor)
        self.builder.point(id(tensor), node.name)


class _Hooked:
    """Context manager: hooks on every module and the function mode, all removed on exit."""

    def __init__(self, trace: _Trace):
        self.trace = trace
        self.handles: list[Any] = []
        self.mode = _FunctionMode(trace)

    def __enter__(self) -> _Hooked:
        trace = self.trace
        for module in trace.model.modules():
            self.handles.append(module.register_forward_pre_hook(
                lambda m, args, kwargs: trace.on_call(m, args, kwargs), with_kwargs=True))
            self.handles.append(module.register_forward_hook(
                lambda m, args, output: trace.on_return(m, output), always_call=True))
        self.mode.__enter__()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.mode.__exit__(*exc)
        for handle in self.handles:
            handle.remove()


class _FunctionMode(TorchFunctionMode):
    """Records every torch function / tensor method that returns a tensor, outside leaf modules."""

    def __init__(self, trace: _Trace):
        super().__init__()
        self.trace = trace

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        output = func(*args, **kwargs)
        self.trace.on_function(func, args, kwargs, output)
        return output


def _function_name(func: Any) -> str:
    """``"torch.cat"``, ``"torch.nn.functional.relu"``, ``"Tensor.add"``, ``"Tensor.__getitem__"``."""
    name = getattr(func, "__name__", None) or str(func)
    qualname = getattr(func, "__qualname__", "") or ""
    module = getattr(func, "__module__", None) or ""
    if "Tensor" in qualname.split(".")[0] or not module:
        return f"Tensor.{name}"
    module = {"torch._C._nn": "torch.nn.functional", "torch._C._VariableFunctions": "torch",
              "torch.functional": "torch"}.get(module, module)
    return f"{module}.{name}"
