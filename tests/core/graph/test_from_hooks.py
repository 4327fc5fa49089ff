"""The forward-hook capture (workbench.core.graph.from_hooks) called directly: one real run, leaf modules as calls,
the functions between them recorded, every hook removed afterwards, even when ``forward`` raises."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from workbench.core.graph.capture import as_example
from workbench.core.graph.from_hooks import hooks_graph


class Gate(nn.Module):
    """A branch on a value (no tracer follows it) around a shared layer called twice."""

    def __init__(self):
        super().__init__()
        self.shared = nn.Linear(32, 32)
        self.block = nn.Sequential(nn.Linear(32, 2), nn.ReLU())

    def forward(self, x, mask=None):
        h = self.shared(x)
        if h.mean() > -1e9:
            h = self.shared(h) + x
        return torch.cat([self.block(h), mask], dim=1) if mask is not None else self.block(h)


def hook_count(model: nn.Module) -> int:
    return sum(len(m._forward_hooks) + len(m._forward_pre_hooks) for m in model.modules())


def preds(graph, name):
    return [a for a, b in graph.edges if b == name]


def test_leaf_calls_and_the_functions_between_them_with_their_edges():
    model = Gate()
    g = hooks_graph(model, as_example(torch.ones(4, 32)))
    calls = [(n.name, n.module_path, n.scope) for n in g.nodes if n.op == "call_module"]
    assert calls == [("shared", "shared", ("shared",)), ("shared_1", "shared", ("shared@1",)),
                     ("block_0", "block.0", ("block", "block.0")), ("block_1", "block.1", ("block", "block.1"))]
    assert [n.op for n in g.nodes if n.op.startswith("Tensor.")] == ["Tensor.mean", "Tensor.gt", "Tensor.add"]
    assert preds(g, "mean") == ["shared"] and preds(g, "gt") == ["mean"]  # the branch's own test
    assert sorted(preds(g, "add")) == ["shared_1", "x"] and preds(g, "block_0") == ["add"]
    assert g.node("block_1").shapes == [(4, 2)] and g.outputs == ["block_1"] and g.inputs == ["x"]
    assert g.modules == {"": "Gate", "shared": "Linear", "block": "Sequential", "block.0": "Linear",
                         "block.1": "ReLU"}
    assert hook_count(model) == 0


def test_every_tensor_argument_is_an_input_named_after_its_parameter():
    g = hooks_graph(Gate(), as_example({"x": torch.ones(2, 32), "mask": torch.zeros(2, 3)}))
    assert g.inputs == ["x", "mask"]
    cat = next(n for n in g.nodes if n.op == "torch.cat")
    assert sorted(preds(g, cat.name)) == ["block_1", "mask"] and cat.shapes == [(2, 5)]


def test_weights_on_meta_are_refused_and_a_failing_forward_leaves_no_hook():
    with torch.device("meta"):
        on_meta = Gate()
    with pytest.raises(ValueError, match="its weights are on the meta device"):
        hooks_graph(on_meta, as_example(torch.ones(1, 32)))
    model = Gate()
    with pytest.raises(RuntimeError):
        hooks_graph(model, as_example(torch.ones(1, 7)))  # 7 features for a Linear(32, ...)
    assert hook_count(model) == 0
    assert hooks_graph(model, as_example(torch.ones(1, 32))).node("block_1").shapes == [(1, 2)]  # no state left


def test_the_run_computes_nothing_that_needs_a_gradient():
    model = Gate()
    seen = []
    model.block.register_forward_hook(lambda m, a, out: seen.append(out.requires_grad))
    hooks_graph(model, as_example(torch.ones(1, 32)))
    assert seen == [False]
