"""The graph as an SVG drawing: boxes, labels and edges at the positions of a :class:`~.layout.Layout`.

Written here rather than through a drawing library: it is the product's own
picture (its colours, labels and tooltips are the window's), an SVG of boxes,
text and polylines is a few lines of XML, and the layout is already done
(graphviz would lay it out again and needs a system binary). Qt-free, so
``workbench graph --out g.svg`` and the core tests need no display.
"""

from __future__ import annotations

from xml.sax.saxutils import escape, quoteattr

from workbench.core.graph.layout import Layout
from workbench.core.graph.layout import layout as lay_out
from workbench.core.graph.model_graph import CALL_MODULE_OP, INPUT_OP, MODULE_OP, GraphNode, ModelGraph

__all__ = ["to_svg", "node_label", "FILL"]

#: Box fill by kind of node: an input, a module shown as a box, an opaque module call, an operation.
FILL = {INPUT_OP: "#d6ecff", MODULE_OP: "#e8e4f7", CALL_MODULE_OP: "#fff3cf", "op": "#ffffff"}
_STROKE = "#5b6275"
_EDGE = "#8a90a0"
_FONT = "font-family=\"DejaVu Sans, Helvetica, Arial, sans-serif\""
#: Most characters of a label line that fit in a box.
_FIT = 24


def node_label(node: GraphNode) -> tuple[str, str]:
    """The two lines drawn in a node's box: what it is, and where or what it carries.

    ``("conv2d", "layer1.0.conv1")`` for an operation, ``("layer1", "Sequential, 24 ops")``
    for a module box, ``("x", "1x3x224x224 float32")`` for an input.
    """
    if node.op == MODULE_OP:
        return (node.module_path.rsplit(".", 1)[-1] or node.module_type or "model",
                f"{node.module_type}, {node.count} op{'s' if node.count != 1 else ''}")
    if node.op == INPUT_OP:
        return node.name, _shape_text(node)
    if node.op == CALL_MODULE_OP:
        return node.module_path.rsplit(".", 1)[-1] or node.module_type, node.module_type
    return node.short_op, node.module_path or _shape_text(node)


def to_svg(graph: ModelGraph, layout: Layout | None = None) -> str:
    """An SVG document drawing ``graph``.

    Parameters
    ----------
    graph : ModelGraph
        Any graph; a grouped one (:meth:`ModelGraph.collapsed`) draws modules as boxes.
    layout : Layout, optional
        Its layout; default :func:`workbench.core.graph.layout.layout` of ``graph``.

    Returns
    -------
    str
        A standalone SVG 1.1 document, one scene unit per pixel. Each node is a
        ``<g class="node" id=...>`` with a ``<title>`` (op, module, output shapes)
        as its tooltip; each edge a ``<polyline class="edge">`` ending in an arrow.
    """
    where = layout if layout is not None else lay_out(graph)
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" version="1.1" width="{where.width:.0f}" '
           f'height="{where.height:.0f}" viewBox="0 0 {where.width:.1f} {where.height:.1f}">',
           '<defs><marker id="arrow" viewBox="0 0 10 10" refX="10" refY="5" markerWidth="7" markerHeight="7" '
           f'orient="auto"><path d="M0,0 L10,5 L0,10 z" fill="{_EDGE}"/></marker></defs>',
           f'<rect width="{where.width:.1f}" height="{where.height:.1f}" fill="#fafafa"/>']
    if graph.note:
        out.append(f"<desc>{escape(graph.note)}</desc>")
    out.append(f'<g class="edges" fill="none" stroke="{_EDGE}" stroke-width="1.2">')
    for line in where.edges:
        points = " ".join(f"{x:.1f},{y:.1f}" for x, y in line)
        out.append(f'<polyline class="edge" points="{points}" marker-end="url(#arrow)"/>')
    out.append("</g>")
    out.append(f'<g class="nodes" {_FONT} text-anchor="middle">')
    for node, (x, y), (w, h) in zip(graph.nodes, where.positions, where.sizes):
        out.append(_node(node, float(x), float(y), float(w), float(h)))
    out.append("</g></svg>")
    return "\n".join(out) + "\n"


def _node(node: GraphNode, x: float, y: float, w: float, h: float) -> str:
    title, sub = node_label(node)
    fill = FILL.get(node.op, FILL["op"])
    tip = f"{node.name}: {node.op}\nmodule: {node.module_path or '(model)'} ({node.module_type})"
    if node.shapes:
        tip += f"\nout: {_shape_text(node)}"
    return (f'<g class="node" id={quoteattr(node.name)}><title>{escape(tip)}</title>'
            f'<rect x="{x - w / 2:.1f}" y="{y - h / 2:.1f}" width="{w:.1f}" height="{h:.1f}" rx="5" '
            f'fill="{fill}" stroke="{_STROKE}"/>'
            f'<text x="{x:.1f}" y="{y - 3:.1f}" font-size="12" font-weight="bold">{escape(_fit(title, end=False))}</text>'
            f'<text x="{x:.1f}" y="{y + 12:.1f}" font-size="9" fill="#555b6b">{escape(_fit(sub))}</text></g>')


def _shape_text(node: GraphNode) -> str:
    if not node.shapes:
        return ""
    first = "x".join(str(d) for d in node.shapes[0]) or "scalar"
    more = f" +{len(node.shapes) - 1}" if len(node.shapes) > 1 else ""
    return f"{first} {node.dtypes[0] if node.dtypes else ''}{more}".strip()


def _fit(text: str, *, end: bool = True) -> str:
    """At most :data:`_FIT` characters: a qualified name keeps its end (``...0.self_attention``), a name its start."""
    if len(text) <= _FIT:
        return text
    return "\u2026" + text[-(_FIT - 1):] if end else text[:_FIT - 1] + "\u2026"
