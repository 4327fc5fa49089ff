"""ModelGraph's grouped views (modules as boxes) and its JSON round trip."""

from __future__ import annotations

import json

import pytest

from workbench.core.graph import GraphNode, ModelGraph

TOP = ["x", "conv1", "bn1", "relu", "maxpool", "layer1", "layer2", "layer3", "layer4", "avgpool", "flatten", "fc"]


def test_resnet18_collapsed_to_its_top_level_modules_in_order(resnet18_graph):
    top = resnet18_graph.collapsed({""})
    assert [n.name for n in top.nodes] == TOP
    assert top.edges == list(zip(TOP, TOP[1:]))  # a chain: the skips are inside the layers
    assert top.node("layer1").op == "module" and top.node("layer1").module_type == "Sequential"
    assert top.node("layer2").shapes == [(1, 128, 28, 28)]  # what leaves the box
    assert top.node("flatten").op == "aten.flatten"  # an operation of the model's own forward stays itself
    assert top.outputs == ["fc"] and top.inputs == ["x"]
    assert sum(n.count for n in top.nodes) == len(resnet18_graph.nodes)
    assert top.node("layer1").count == 14  # 2 blocks x (2 conv + 2 bn + 2 relu + add)
    assert top.method == resnet18_graph.method and top.modules == resnet18_graph.modules


def test_expanding_one_module_shows_its_children_and_the_skip_connections(resnet18_graph):
    view = resnet18_graph.collapsed({"", "layer1", "layer1.0"})
    names = [n.name for n in view.nodes]
    assert names[names.index("maxpool") + 1:names.index("layer1.1")] == [
        "layer1.0.conv1", "layer1.0.bn1", "layer1.0.relu", "layer1.0.conv2", "layer1.0.bn2", "add_",
        "layer1.0.relu@1"]
    assert ("maxpool", "add_") in view.edges and ("layer1.0.bn2", "add_") in view.edges  # the skip
    assert ("layer1.0.relu@1", "layer1.1") in view.edges and ("layer1.1", "layer2") in view.edges
    assert view.node("layer1.0.relu@1").module_path == "layer1.0.relu"  # ReLU is called twice per block


def test_fully_expanded_is_the_graph_itself_and_nothing_expanded_is_one_box(resnet18_graph):
    g = resnet18_graph
    assert g.collapsed(g.module_paths()) == g
    assert g.collapsed(g.expand_depth(99)) == g
    one = g.collapsed(set())
    assert [(n.name, n.op) for n in one.nodes] == [("x", "input"), ("", "module")]
    assert one.edges == [("x", "")] and one.node("").module_type == "ResNet"
    assert g.expand_depth(1) == {""} and g.expand_depth(0) == set()
    assert g.expand_depth(2) == {"", "conv1", "bn1", "relu", "maxpool", "layer1", "layer2", "layer3", "layer4",
                                 "avgpool", "fc"}


def test_a_10k_node_graph_collapses():
    """A synthetic 10,000-node graph of 100 blocks, grouped per block and per layer of blocks."""
    nodes, edges = [GraphNode("x", "input", shapes=[(1, 4)], dtypes=["float32"])], []
    for i in range(10_000 - 1):
        block, layer = f"blocks.{i // 100}", f"blocks.{i // 100}.ops.{i % 100 // 10}"
        nodes.append(GraphNode(f"op{i}", "aten.add", layer, "Linear", [(1, 4)], ["float32"],
                               ("blocks", block, layer)))
        edges.append((nodes[-2].name, nodes[-1].name))
    g = ModelGraph(nodes, edges, "export", "", ["x"], [nodes[-1].name], {"": "Net", "blocks": "ModuleList"})
    per_block = g.collapsed({"", "blocks"})
    assert len(per_block.nodes) == 101 and per_block.edges[:2] == [("x", "blocks.0"), ("blocks.0", "blocks.1")]
    assert per_block.node("blocks.7").count == 100
    assert len(g.collapsed({"", "blocks", "blocks.3"}).nodes) == 1 + 99 + 10


def test_json_round_trip_is_exact_and_plain_data(resnet18_graph, vit_graph):
    for g in (resnet18_graph, vit_graph, resnet18_graph.collapsed({""})):
        text = g.to_json()
        doc = json.loads(text)
        assert doc["format"] == "workbench.graph" and doc["version"] == 1 and doc["method"] == "export"
        assert doc["nodes"][1]["shapes"] and isinstance(doc["nodes"][1]["shapes"][0], list)
        back = ModelGraph.from_json(text)
        assert back == g
        assert back.node(g.nodes[5].name).scope == g.nodes[5].scope  # tuples again


@pytest.mark.parametrize("change, message", [
    (lambda d: d.update(format="other"), "format"),
    (lambda d: d.update(version=99), "version 99"),
    (lambda d: d["edges"].append(["x", "nowhere"]), "does not join"),
    (lambda d: d["nodes"].append(dict(d["nodes"][0])), "same name"),
    (lambda d: d["nodes"][0].update(shapes=[["a"]]), "not a graph node"),
    (lambda d: d.update(outputs=["nowhere"]), "names no node"),
])
def test_from_json_refuses_a_malformed_document(resnet18_graph, change, message):
    doc = json.loads(resnet18_graph.to_json())
    change(doc)
    with pytest.raises(ValueError, match=message):
        ModelGraph.from_json(json.dumps(doc))
    with pytest.raises(ValueError, match="not a graph document"):
        ModelGraph.from_json("{not json")
