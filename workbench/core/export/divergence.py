"""Find the first module whose exported output differs from the PyTorch model's.

The PyTorch side: a forward hook on every module records its output (the first
tensor of it, cloned: a later in-place op such as ResNet's ``out += identity``
must not change what was recorded) in the order the calls end, which is
execution order with children before their parent (:func:`record_module_outputs`).

The exported side: every node of the exported graph carries the module path it
came from (ONNX: the dynamo exporter's ``pkg.torch.onnx.name_scopes``;
``.pt2``: ``nn_module_stack``). One call of a module is a run of consecutive
nodes inside its scope, and its output is the last value the run makes that
something outside the run uses (:func:`module_outputs`). The exporter runs its
graph with those values as extra outputs; :func:`first_difference` compares
them call by call, in the PyTorch order, and names the first that differs
beyond the tolerance. Modules the exported graph has no value of (a Conv that
the ONNX optimizer folded into the BatchNorm after it) are listed as not
compared. Qt-free; the same idea as :mod:`workbench.core.train.trainer.nan_trace`.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

import torch
from torch import nn

from workbench.core.export.compare import diff_stats, flatten_outputs, tolerance

__all__ = ["ModuleCall", "ScopedNode", "ModuleDiff", "record_module_outputs", "module_outputs", "first_difference"]


@dataclass
class ModuleCall:
    """One call of a module in the PyTorch model, as a forward hook saw it.

    Attributes
    ----------
    path : str
        Qualified name (``"layer2.0.conv1"``).
    type : str
        Class name (``"Conv2d"``).
    call : int
        0 for the module's first call in the forward, 1 for the second (a ReLU used twice).
    output : Tensor
        The first tensor of its output, cloned, on the CPU.
    """

    path: str
    type: str
    call: int
    output: torch.Tensor


@dataclass
class ScopedNode:
    """One node of an exported graph: the modules it belongs to and the values it reads and makes.

    Attributes
    ----------
    paths : tuple of str
        Module paths, outermost first (``("layer1", "layer1.0", "layer1.0.bn1")``);
        empty for a node without scope (it neither starts nor ends a call).
    inputs, outputs : tuple of str
        Names of the values read and made.
    """

    paths: tuple[str, ...]
    inputs: tuple[str, ...]
    outputs: tuple[str, ...]


@dataclass
class ModuleDiff:
    """The first module whose exported output differs (plain data).

    Attributes
    ----------
    module : str
        Qualified name; the window selects it in the tree.
    type : str
    call : int
        Which call of it (0: the first).
    max_abs, max_rel : float
    atol, rtol : float
    not_compared : list of str
        Modules that ran between the last one that agreed and this one but have
        no value of their own in the exported graph (fused or folded away):
        the difference may start in them.
    compared : int
        How many module calls were compared before this one (and agreed).
    """

    module: str
    type: str
    call: int
    max_abs: float
    max_rel: float
    atol: float
    rtol: float
    not_compared: list = field(default_factory=list)
    compared: int = 0

    def line(self) -> str:
        """``"first module that differs: layer2.0.bn1 (BatchNorm2d): max abs 3.1e-02, ..."``."""
        call = f", call {self.call + 1}" if self.call else ""
        text = (f"first module that differs: {self.module} ({self.type}{call}): max abs {self.max_abs:.2e}, "
                f"max rel {self.max_rel:.2e} (atol {self.atol:.0e}, rtol {self.rtol:.0e})")
        if self.not_compared:
            text += f"; it may start in {', '.join(self.not_compared)} (no output of its own in the export)"
        return text

    def to_dict(self) -> dict:
        """The fields as a JSON-ready dict."""
        return asdict(self)


@contextlib.contextmanager
def _hooks(model: nn.Module, record: Callable[[str, nn.Module, Any], None]) -> Iterator[None]:
    handles = []
    try:
        for name, module in model.named_modules():
            if name:
                handles.append(module.register_forward_hook(
                    lambda mod, _inp, out, _name=name: record(_name, mod, out)))
        yield
    finally:
        for handle in handles:
            handle.remove()


def record_module_outputs(model: nn.Module, call: Callable[[nn.Module], Any]) -> list[ModuleCall]:
    """Run ``call(model)`` once with a forward hook on every submodule and return their outputs in call-end order.

    Parameters
    ----------
    model : nn.Module
        In the mode to compare (eval); nothing of it changes.
    call : callable
        ``call(model)`` runs the forward (e.g. ``ExampleInput.call``); run under ``torch.no_grad``.

    Returns
    -------
    list of ModuleCall
        Modules whose output holds no tensor are left out.
    """
    calls: list[ModuleCall] = []
    counts: dict[str, int] = {}

    def record(name: str, module: nn.Module, out: Any) -> None:
        tensors = flatten_outputs(out)
        if not tensors:
            return
        k = counts.get(name, 0)
        counts[name] = k + 1
        calls.append(ModuleCall(name, type(module).__name__, k, tensors[0][1].detach().to("cpu", copy=True)))

    with _hooks(model, record), torch.no_grad():
        call(model)
    return calls


def module_outputs(nodes: Sequence[ScopedNode], graph_outputs: Sequence[str] = ()) -> dict[tuple[str, int], str]:
    """The value each module call makes, from an exported graph's nodes in execution order.

    A call of module ``P`` is a maximal run of consecutive scoped nodes whose
    ``paths`` hold ``P`` (nodes without scope are skipped, not counted as a
    break); its output is the last value made in the run that a node outside
    the run reads or that is a graph output.

    Parameters
    ----------
    nodes : sequence of ScopedNode
        In execution (topological) order.
    graph_outputs : sequence of str
        Names of the graph's outputs.

    Returns
    -------
    dict
        ``(path, call) -> value name``; a call whose run makes no such value is left out.
    """
    runs: dict[str, list[list[int]]] = {}
    prev: frozenset[str] = frozenset()
    for i, node in enumerate(nodes):
        if not node.paths:
            continue
        for path in node.paths:
            if path in prev:
                runs[path][-1].append(i)
            else:
                runs.setdefault(path, []).append([i])
        prev = frozenset(node.paths)
    readers: dict[str, list[int]] = {}
    for i, node in enumerate(nodes):
        for name in node.inputs:
            readers.setdefault(name, []).append(i)
    final = set(graph_outputs)
    found: dict[tuple[str, int], str] = {}
    for path, calls in runs.items():
        for k, run in enumerate(calls):
            inside = set(run)
            for i in reversed(run):
                escaping = [v for v in nodes[i].outputs
                            if v and (v in final or any(r not in inside for r in readers.get(v, ())))]
                if escaping:
                    found[(path, k)] = escaping[-1]
                    break
    return found


def first_difference(calls: Sequence[ModuleCall], values: Mapping[tuple[str, int], Any],
                     dtype: str = "fp32") -> ModuleDiff | None:
    """The first module call (in ``calls``' order) whose exported value differs beyond the tolerance.

    Parameters
    ----------
    calls : sequence of ModuleCall
        From :func:`record_module_outputs`.
    values : mapping
        ``(path, call) -> tensor or numpy array``: the exported graph's value of
        that call (calls without one are not compared; a value whose shape
        differs is taken for a mapping mistake and not compared either).
    dtype : {"fp32", "fp16", "bf16"}
        Picks the tolerance (:func:`~workbench.core.export.compare.tolerance`).

    Returns
    -------
    ModuleDiff or None
        None when every compared call agrees.
    """
    atol, rtol = tolerance(dtype)
    pending: list[str] = []
    compared = 0
    for c in calls:
        got = values.get((c.path, c.call))
        if got is not None and not isinstance(got, torch.Tensor):
            got = torch.from_numpy(got)
        if got is None or tuple(got.shape) != tuple(c.output.shape):
            if c.path not in pending:
                pending.append(c.path)
            continue
        max_abs, max_rel, ok, _ = diff_stats(c.output, got, atol, rtol)
        if not ok:
            return ModuleDiff(c.path, c.type, c.call, max_abs, max_rel, atol, rtol, pending, compared)
        compared += 1
        pending = []
    return None
