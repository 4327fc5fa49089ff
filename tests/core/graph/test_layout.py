"""The layered layout (igraph's Sugiyama) and the SVG drawing made from it."""

from __future__ import annotations

import xml.etree.ElementTree as ET

import numpy as np
import pytest

from workbench.core.graph import GraphNode, ModelGraph
from workbench.core.graph.layout import NODE_HEIGHT, layers, layout
from workbench.core.graph.svg import node_label, to_svg

SVG = "{http://www.w3.org/2000/svg}"


def _check(graph: ModelGraph) -> None:
    lay = layout(graph)
    n = len(graph.nodes)
    assert lay.names == [node.name for node in graph.nodes]
    assert lay.positions.shape == (n, 2) and np.isfinite(lay.positions).all() and (lay.positions >= 0).all()
    assert lay.sizes.shape == (n, 2) and lay.layers.shape == (n,)
    assert len(lay.edges) == len(graph.edges)
    for (src, dst), line in zip(graph.edges, lay.edges):
        (xs, ys), (xd, yd) = lay.position(src), lay.position(dst)
        assert ys < yd, (src, dst)  # layered: a source above its destination
        assert lay.layers[lay.names.index(src)] < lay.layers[lay.names.index(dst)]
        assert line.shape[1] == 2 and np.isfinite(line).all()
        assert np.allclose(line[0], (xs, ys + NODE_HEIGHT / 2)) and np.allclose(line[-1], (xd, yd - NODE_HEIGHT / 2))
        assert (np.diff(line[:, 1]) >= 0).all()  # the polyline only goes down
    for layer in np.unique(lay.layers):  # boxes of one layer do not overlap
        xs = np.sort(lay.positions[lay.layers == layer, 0])
        assert (np.diff(xs) >= lay.sizes[0, 0]).all()
    assert lay.width >= lay.positions[:, 0].max() and lay.height >= lay.positions[:, 1].max()


def test_resnet18_expanded_and_collapsed(resnet18_graph):
    _check(resnet18_graph)
    _check(resnet18_graph.collapsed({""}))
    lay = layout(resnet18_graph)
    bn2 = next(n.name for n in resnet18_graph.nodes if n.module_path == "layer1.0.bn2")
    add, bn2 = lay.position("add_"), lay.position(bn2)  # layer1.0's add and its bn2
    skip = lay.edges[resnet18_graph.edges.index(("max_pool2d", "add_"))]
    assert len(skip) > 2 and add[1] > bn2[1]  # the skip connection bends around the block


def test_vit_b_16_every_node_placed(vit_graph):
    _check(vit_graph)


def test_layers_put_a_constant_just_above_its_reader():
    nodes = [GraphNode("x", "input"), GraphNode("a", "aten.relu"), GraphNode("b", "aten.relu"),
             GraphNode("token", "aten.expand"), GraphNode("cat", "aten.cat")]
    g = ModelGraph(nodes, [("x", "a"), ("a", "b"), ("token", "cat"), ("b", "cat")])
    assert layers(g).tolist() == [0, 1, 2, 2, 3]
    _check(g)
    empty = layout(ModelGraph())
    assert empty.positions.shape == (0, 2) and empty.edges == []


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
