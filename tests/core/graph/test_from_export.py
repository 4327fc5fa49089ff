"""The torch.export capture (workbench.core.graph.from_export) called directly: aten operations under their
module scopes, parameters dropped, a ``no_grad`` block opened in place, and operation names without overloads."""

from __future__ import annotations

import operator

import torch
from torch import nn

from workbench.core.graph.capture import as_example
from workbench.core.graph.from_export import export_graph, graph_from_exported, op_name


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(32, 32)
        self.norm = nn.LayerNorm(32)

    def forward(self, x):
        return self.norm(torch.relu(self.fc(x)) + x)


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.block = Block()
        self.head = nn.Linear(32, 2)

    def forward(self, x):
        with torch.no_grad():
            x = x * 2
        return self.head(self.block(x))


def preds(graph, name):
    return [a for a, b in graph.edges if b == name]


def test_aten_operations_under_their_modules_with_parameters_dropped():
    g = export_graph(Net(), as_example(torch.zeros(4, 32)))
    assert g.method == "export" and g.inputs == ["x"]
    assert [n.op for n in g.nodes] == ["input", "aten.mul", "aten.linear", "aten.relu", "aten.add",
                                       "aten.layer_norm", "aten.linear"]
    linear, relu, add, norm, head = g.nodes[2:]
    assert (linear.module_path, linear.module_type, linear.scope) == ("block.fc", "Linear", ("block", "block.fc"))
    assert (add.module_path, add.module_type) == ("block", "Block")
    assert (head.module_path, head.shapes, head.dtypes) == ("head", [(4, 2)], ["float32"])
    assert preds(g, linear.name) == [g.nodes[1].name]  # the weights and bias are no nodes and no edges
    assert sorted(preds(g, add.name)) == sorted([relu.name, g.nodes[1].name])  # the residual
    assert g.outputs == [head.name]
    assert g.modules == {"": "Net", "block": "Block", "block.fc": "Linear", "block.norm": "LayerNorm",
                         "head": "Linear"}
    assert len({n.name for n in g.nodes}) == len(g.nodes)


def test_the_no_grad_block_is_opened_in_place():
    g = export_graph(Net(), as_example(torch.zeros(4, 32)))
    mul = g.nodes[1]
    assert mul.op == "aten.mul" and preds(g, mul.name) == ["x"] and mul.shapes == [(4, 32)]
    assert not any("wrap" in n.op for n in g.nodes)


def test_a_model_on_meta_and_an_exported_program_of_keyword_inputs():
    with torch.device("meta"):
        model = Net()
    g = export_graph(model, as_example({"x": torch.zeros(2, 32, device="meta")}))
    assert g.nodes[-1].shapes == [(2, 2)] and model.head.weight.is_meta
    program = torch.export.export(nn.Linear(32, 2), (torch.zeros(3, 32),), strict=False)
    direct = graph_from_exported(program, "Linear")
    assert [(n.op, n.module_type) for n in direct.nodes] == [("input", "Linear"), ("aten.linear", "Linear")]
    assert direct.note == "" and direct.modules == {"": "Linear"}


def test_operation_names_leave_out_the_overload():
    assert op_name(torch.ops.aten.conv2d.default) == "aten.conv2d"
    assert op_name(torch.ops.aten.add.Tensor) == "aten.add"
    assert op_name(operator.getitem) == "operator.getitem"
    assert op_name(torch.flatten) == "torch.flatten"
    assert op_name(torch._C._nn.linear) == "torch.nn.functional.linear"
    assert op_name("view") == "view"
    assert op_name(torch.ops.higher_order.wrap_with_set_grad_enabled) == "wrap_with_set_grad_enabled"
