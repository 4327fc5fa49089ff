"""The SVG drawing of a graph: every node and edge, labels, tooltips, escaping."""

from __future__ import annotations

import xml.etree.ElementTree as ET

import pytest

from workbench.core.graph import GraphNode, ModelGraph
from workbench.core.graph.svg import node_label, to_svg

SVG = "{http://www.w3.org/2000/svg}"


def test_svg_draws_every_node_and_edge(resnet18_graph):
    view = resnet18_graph.collapsed({"", "layer1"})
    root = ET.fromstring(to_svg(view))
    assert root.tag == f"{SVG}svg" and float(root.get("width")) > 0
    groups = root.findall(f".//{SVG}g[@class='node']")
    assert [g.get("id") for g in groups] == [n.name for n in view.nodes]
    assert len(root.findall(f".//{SVG}polyline[@class='edge']")) == len(view.edges)
    texts = ["".join(t.itertext()) for t in groups[view.nodes.index(view.node("layer1.0"))].iter(f"{SVG}text")]
    assert texts == ["0", "BasicBlock, 7 ops"]
    tip = groups[0].find(f"{SVG}title").text
    assert "input" in tip and "1x3x224x224 float32" in tip


@pytest.mark.parametrize("node, label", [
    (GraphNode("conv2d", "aten.conv2d", "layer1.0.conv1", "Conv2d"), ("conv2d", "layer1.0.conv1")),
    (GraphNode("x", "input", shapes=[(1, 16)], dtypes=["int64"]), ("x", "1x16 int64")),
    (GraphNode("fc", "call_module", "head.fc", "Linear"), ("fc", "Linear")),
    (GraphNode("add", "Tensor.__add__", "block"), ("add", "block")),
    (GraphNode("enc", "module", "encoder.layers.encoder_layer_11.self_attention", "MultiheadAttention", count=30),
     ("self_attention", "MultiheadAttention, 30 ops")),
])
def test_node_labels(node, label):
    assert node_label(node) == label


def test_svg_escapes_names():
    g = ModelGraph([GraphNode("a<&>", "input", shapes=[(1,)], dtypes=["float32"]),
                    GraphNode('b"', "aten.relu", "m<1>")], [("a<&>", 'b"')], note="a & b")
    root = ET.fromstring(to_svg(g))
    assert [e.get("id") for e in root.findall(f".//{SVG}g[@class='node']")] == ["a<&>", 'b"']
