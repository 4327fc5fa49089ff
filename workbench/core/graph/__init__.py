"""The graph of a model: its dataflow, captured, grouped by modules and laid out in layers.

- :mod:`.model_graph`: :class:`GraphNode` and :class:`ModelGraph` (plain data, JSON
  round trip, :meth:`ModelGraph.collapsed`: modules as boxes).
- :mod:`.capture`: :func:`capture_graph` (``torch.export`` non-strict, falling back
  to ``torch.fx.symbolic_trace``, then to a forward-hook trace), with
  :mod:`.from_export`, :mod:`.from_fx`, :mod:`.from_hooks` (one per method) and
  :mod:`.building` (what they share).
- :mod:`.layout`: :func:`layout` (a layered Sugiyama layout by igraph).
- :mod:`.svg`: :func:`to_svg` (the graph as an SVG drawing).

Never imports Qt, nor anything of training or probes.
"""

from workbench.core.graph.capture import GraphCaptureError, capture_graph
from workbench.core.graph.model_graph import GraphNode, ModelGraph

__all__ = ["capture_graph", "ModelGraph", "GraphNode", "GraphCaptureError"]
