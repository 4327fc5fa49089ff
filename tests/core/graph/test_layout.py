"""The layered layout (igraph's Sugiyama)."""

from __future__ import annotations

import numpy as np

from workbench.core.graph import GraphNode, ModelGraph
from workbench.core.graph.layout import NODE_HEIGHT, layers, layout


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
