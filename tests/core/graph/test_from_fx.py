"""The torch.fx capture (workbench.core.graph.from_fx) called directly: layers as module calls, functions and
methods by name, shapes from a fake-tensor run, a model on ``meta`` traced, and what fx cannot trace refused."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from workbench.core.graph.capture import as_example
from workbench.core.graph.from_fx import fx_graph


class Small(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(32, 16)
        self.head = nn.Linear(16, 2)

    def forward(self, x):
        h = torch.relu(self.fc(x)).view(x.shape[0], 4, 4)
        return self.head(h.flatten(1) * 2.0)


class Scaled(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(32, 2)

    def forward(self, x, scale: float = 2.0):
        return self.fc(x) * scale


class Options(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(32, 2)

    def forward(self, x, options=None, mask=None):
        return self.fc(x) * options.scale


def preds(graph, name):
    return [a for a, b in graph.edges if b == name]


def test_layers_functions_and_methods_in_order_with_their_shapes():
    g = fx_graph(Small(), as_example(torch.zeros(3, 32)))
    assert g.method == "fx" and g.inputs == ["x"] and g.outputs == ["head"]
    assert [(n.name, n.op) for n in g.nodes] == [("x", "input"), ("fc", "call_module"), ("relu", "torch.relu"),
                                                 ("view", "Tensor.view"), ("flatten", "Tensor.flatten"),
                                                 ("mul", "operator.mul"), ("head", "call_module")]
    assert g.node("view").shapes == [(3, 4, 4)] and g.node("head").shapes == [(3, 2)]
    assert (g.node("fc").module_path, g.node("fc").module_type) == ("fc", "Linear")
    assert g.modules == {"": "Small", "fc": "Linear", "head": "Linear"}
    assert preds(g, "view") == ["relu", "x"]  # x.shape[0]: getattr and getitem dropped, their edge passed on
    assert preds(g, "fc") == ["x"] and preds(g, "head") == ["mul"]


def test_a_model_on_meta_is_traced_without_values():
    with torch.device("meta"):
        model = Small()
    g = fx_graph(model, as_example(torch.zeros(5, 32, device="meta")))
    assert g.node("head").shapes == [(5, 2)] and g.node("head").dtypes == ["float32"]
    assert model.fc.weight.is_meta


def test_an_argument_that_is_not_a_tensor_is_concrete_and_leaves_no_node():
    class Settings:
        scale = 3.0

    g = fx_graph(Options(), as_example((torch.zeros(3, 32), Settings())))
    assert [(n.name, n.op) for n in g.nodes] == [("x", "input"), ("fc", "call_module"), ("mul", "operator.mul")]
    assert g.edges == [("x", "fc"), ("fc", "mul")] and g.node("mul").shapes == [(3, 2)]


@pytest.mark.parametrize("args", [(torch.zeros(3, 32),), (torch.zeros(3, 32), 0.5)])
def test_a_number_argument_given_or_at_its_default_is_concrete_too(args):
    g = fx_graph(Scaled(), as_example(args))
    assert g.node("mul").shapes == [(3, 2)]


def test_a_forward_taking_star_args_is_refused_by_name():
    class Star(nn.Module):
        def forward(self, *xs):
            return xs[0]

    with pytest.raises(TypeError, match=r"^Star.forward takes \*args or \*\*kwargs, which torch.fx cannot trace$"):
        fx_graph(Star(), as_example(torch.zeros(1)))


def test_control_flow_on_a_value_is_a_trace_error():
    class Branch(nn.Module):
        def forward(self, x):
            return x if x.sum() > 0 else -x

    with pytest.raises(torch.fx.proxy.TraceError):
        fx_graph(Branch(), as_example(torch.ones(2)))
