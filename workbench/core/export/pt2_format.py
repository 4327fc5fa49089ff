"""``.pt2``: ``torch.export.export`` saved with ``torch.export.save``, loaded back, and its module scopes.

Qt-free. Loading a ``.pt2`` runs no pickled code of the user's (it is a
serialized graph), so the check loads it as a deployment would.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch
from torch import nn

from workbench.core.export.divergence import ScopedNode, module_outputs
from workbench.core.export.inputs import dynamic_shapes
from workbench.core.export.quiet import first_line, quiet, where
from workbench.core.export.report import ExportError
from workbench.core.model.example_input import ExampleInput

__all__ = ["export_pt2", "load_pt2", "pt2_module_values"]


def export_pt2(model: nn.Module, example: ExampleInput, path: Path, *, dynamic_batch: bool = True) -> None:
    """``torch.export.export(model, example)`` saved at ``path`` (``torch.export.save``).

    Raises
    ------
    ExportError
        ``torch.export`` refused the model (data-dependent control flow, an
        unsupported op): one line with the model's class and the reason.
    """
    shapes = dynamic_shapes(model, example, torch.export.Dim("batch")) if dynamic_batch else None
    try:
        with quiet():
            program = torch.export.export(model, tuple(example.args), dict(example.kwargs), dynamic_shapes=shapes)
    except Exception as exc:  # noqa: BLE001 - torch.export's refusals are many types: one line
        at = f" (at {where(exc)})" if where(exc) else ""
        raise ExportError(f"torch.export cannot export {type(model).__name__}{at}: {first_line(exc)}") from exc
    torch.export.save(program, str(path))


def load_pt2(path: Path) -> torch.export.ExportedProgram:
    """``torch.export.load(path)``.

    Raises
    ------
    ExportError
        The file cannot be loaded (the message names it).
    """
    try:
        return torch.export.load(str(path))
    except Exception as exc:  # noqa: BLE001 - a damaged archive raises many types
        raise ExportError(f"{path.name}: torch.export.load cannot load it: {first_line(exc)}") from exc


def _paths(node: torch.fx.Node) -> tuple[str, ...]:
    stack = node.meta.get("nn_module_stack") or {}
    out = []
    for path, _type in stack.values():
        path = str(path).removeprefix("L['self'].")
        if path and path not in out:
            out.append(path)
    return tuple(out)


def _flat_inputs(program: torch.export.ExportedProgram, example: ExampleInput) -> list[Any]:
    """The example's tensors in the order of the program's placeholders (its ``in_spec``)."""
    from torch.utils import _pytree

    kwargs = dict(example.kwargs)
    spec = program.call_spec.in_spec
    children = list(spec.children()) if spec is not None and hasattr(spec, "children") else []
    if len(children) == 2 and children[1].context:
        kwargs = {k: kwargs[k] for k in children[1].context if k in kwargs}
    return _pytree.tree_leaves((tuple(example.args), kwargs))


def pt2_module_values(program: torch.export.ExportedProgram,
                      example: ExampleInput) -> dict[tuple[str, int], torch.Tensor]:
    """The value of each module call in the exported program on ``example``: ``(path, call) -> tensor``.

    Scopes from each node's ``nn_module_stack``
    (:func:`~workbench.core.export.divergence.module_outputs`); the values from
    running the program's module node by node (``torch.fx.Interpreter``),
    cloned when made (an in-place op later in the graph must not change them).
    """
    module = program.module()
    graph_nodes = [n for n in module.graph.nodes if n.op not in ("placeholder", "get_attr", "output")]
    nodes = [ScopedNode(_paths(n), tuple(a.name for a in n.all_input_nodes), (n.name,)) for n in graph_nodes]
    output_node = next(n for n in module.graph.nodes if n.op == "output")
    wanted = module_outputs(nodes, [a.name for a in output_node.all_input_nodes])
    names = set(wanted.values())
    values: dict[str, torch.Tensor] = {}

    class _Recorder(torch.fx.Interpreter):
        def run_node(self, n: torch.fx.Node) -> Any:
            result = super().run_node(n)
            if n.name in names and isinstance(result, torch.Tensor):
                values[n.name] = result.detach().clone()
            return result

    flat = _flat_inputs(program, example)
    with torch.no_grad():
        _Recorder(module).run(*flat)
    return {key: values[name] for key, name in wanted.items() if name in values}
