"""What the captures share (workbench.core.graph.building): unique names, edges routed through dropped steps,
scopes from an ``nn_module_stack``, and the shapes and dtypes of traced values."""

from __future__ import annotations

import torch
from torch import nn
from torch._subclasses.fake_tensor import FakeTensorMode

from workbench.core.graph.building import GraphBuilder, scope_from_stack, tensor_specs, type_name
from workbench.core.graph.model_graph import GraphNode


def test_names_are_made_unique_with_a_counter():
    b = GraphBuilder("Net")
    assert [b.unique(n) for n in ("conv", "conv", "conv_1", "conv", "", "")] == \
        ["conv", "conv_1", "conv_1_1", "conv_2", "node", "node_1"]


def test_edges_into_a_dropped_step_go_to_whoever_reads_it():
    """x -> (getattr: dropped) -> linear; a parameter (dropped, no inputs) adds no edge."""
    b = GraphBuilder("Net")
    b.keep("x", GraphNode("x", "input", shapes=[(2, 32)]))
    b.drop("weight")  # a parameter: no source
    b.drop("view", ["x"])  # plumbing that reads x
    b.keep("linear", GraphNode("linear", "aten.linear"), ["view", "weight"])
    b.keep("relu", GraphNode("relu", "aten.relu"), ["linear", "linear", "unknown"])
    b.drop("pair", ["relu", "x"])
    graph = b.build("export", ["x"], ["pair"])
    assert [n.name for n in graph.nodes] == ["x", "linear", "relu"]
    assert graph.edges == [("x", "linear"), ("linear", "relu")]  # once each, no self-loop, unknown keys ignored
    assert (graph.method, graph.inputs, graph.outputs, graph.modules) == ("export", ["x"], ["relu", "x"],
                                                                          {"": "Net"})
    assert b.sources(["pair", "view"]) == ("relu", "x")


def test_a_tensor_made_anew_points_its_readers_at_its_latest_maker():
    b = GraphBuilder("Net")
    b.keep("a", GraphNode("a", "input"))
    b.keep("b", GraphNode("b", "Tensor.add_"), ["a"], sources=["a"])
    b.point("a", "b")  # an in-place op: the tensor "a" is now b's
    b.keep("c", GraphNode("c", "torch.relu"), ["a"])
    assert b.build("hooks", ["a"], ["c"]).edges == [("a", "b"), ("b", "c")]


def test_the_scope_of_a_node_skips_the_model_and_marks_a_second_call():
    modules: dict[str, str] = {"": "Net"}
    stack = {"L__self__": ("", "Net"), "L__self__layer1": ("layer1", nn.Sequential),
             "L__self__layer1_0@1": ("layer1.0", "torch.nn.modules.conv.Conv2d")}
    assert scope_from_stack(stack, modules) == ("layer1", "layer1.0@1")
    assert modules == {"": "Net", "layer1": "Sequential", "layer1.0": "Conv2d"}
    assert scope_from_stack(None, modules) == ()
    b = GraphBuilder("Net")
    assert b.scope(stack) == (("layer1", "layer1.0@1"), "layer1.0", "Conv2d")
    assert b.scope({}) == ((), "", "Net")


def test_type_names_of_classes_and_dotted_names():
    assert type_name(nn.Conv2d) == type_name("torch.nn.modules.conv.Conv2d") == "Conv2d"
    assert type_name("Linear") == "Linear"


def test_tensor_specs_of_nested_real_fake_and_meta_values():
    value = {"logits": torch.zeros(2, 10), "rest": (torch.ones(3, dtype=torch.int64), None, 4, [torch.empty(0)])}
    assert tensor_specs(value) == ([(2, 10), (3,), (0,)], ["float32", "int64", "float32"])
    with FakeTensorMode() as mode:
        fake = mode.from_tensor(torch.zeros(1, 3, 32, 32, dtype=torch.float16))
    assert tensor_specs(fake) == ([(1, 3, 32, 32)], ["float16"])
    assert tensor_specs(torch.empty(5, 2, device="meta", dtype=torch.bfloat16)) == ([(5, 2)], ["bfloat16"])
    assert tensor_specs(torch.Tensor) == ([], [])  # a class has a shape attribute, not a shape
    assert tensor_specs((1, "a", None)) == ([], [])
