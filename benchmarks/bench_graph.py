"""Graph of a model figures: capture (torch.export on fake tensors), grouping and the layered layout.

- ``graph_capture_resnet50_s``: ``capture_graph`` of torchvision resnet50 (real
  weights on the CPU, input ``(1, 3, 224, 224)``), the default method (torch.export
  non-strict), median of warm repeats. Target <= 1 s.
- ``graph_capture_resnet50_first_s``: the first capture in a fresh process (torch.export's
  own imports and caches warm up on it).
- ``graph_capture_resnet50_fx_s``: the same with ``method="fx"``, for comparison.
- ``graph_layout_resnet50_s``: ``layout`` of resnet50's fully expanded graph
  (every aten operation). Target <= 0.3 s.
- ``graph_layout_10k_nodes_s``: ``layout`` of a ~10,000-operation graph: a ViT-L
  geometry (hidden 1024, MLP 4096, 16 heads) with ``LAYERS_10K`` encoder layers,
  built on ``meta`` and captured by torch.export (``graph_10k_nodes``: its node
  count). Target <= 3 s.
- ``graph_collapse_10k_s``: ``ModelGraph.collapsed`` of that graph to its top-level
  modules, plus to every encoder layer as a box (what a click on expand costs).

Each figure is the median of ``REPEATS`` runs (seconds).
"""

from __future__ import annotations

import statistics
import time

REPEATS = 5
#: Encoder layers of the 10k graph: 35 operations each, plus 11 around them.
LAYERS_10K = 286


def _median(fn, repeats: int = REPEATS) -> float:
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def big_vit():
    """A ViT-L-wide VisionTransformer of :data:`LAYERS_10K` encoder layers on ``meta``: ~10,000 operations."""
    import torch
    from torchvision.models.vision_transformer import VisionTransformer

    with torch.device("meta"):
        return VisionTransformer(image_size=224, patch_size=16, num_layers=LAYERS_10K, num_heads=16,
                                 hidden_dim=1024, mlp_dim=4096)


def run() -> dict[str, float]:
    """Median seconds of the figures above, and the 10k graph's node count."""
    import torch
    import torchvision

    from workbench.core.graph import capture_graph
    from workbench.core.graph.layout import layout

    torch.manual_seed(0)
    r50 = torchvision.models.resnet50()
    x = torch.zeros(1, 3, 224, 224)
    t0 = time.perf_counter()
    graph = capture_graph(r50, x)
    first = time.perf_counter() - t0
    assert graph.method == "export", graph.note
    capture = _median(lambda: capture_graph(r50, x))
    capture_fx = _median(lambda: capture_graph(r50, x, method="fx"))
    layout_r50 = _median(lambda: layout(graph))

    big = capture_graph(big_vit(), torch.zeros(1, 3, 224, 224, device="meta"))
    layers = {f"encoder.layers.encoder_layer_{i}" for i in range(LAYERS_10K)}
    layout_big = _median(lambda: layout(big), 3)
    collapse_big = _median(lambda: (big.collapsed({""}), big.collapsed({"", "encoder", "encoder.layers"})))
    assert len(big.collapsed({"", "encoder", "encoder.layers"}).nodes) >= len(layers)
    return {
        "graph_capture_resnet50_s": capture,
        "graph_capture_resnet50_first_s": first,
        "graph_capture_resnet50_fx_s": capture_fx,
        "graph_layout_resnet50_s": layout_r50,
        "graph_layout_10k_nodes_s": layout_big,
        "graph_10k_nodes": float(len(big.nodes)),
        "graph_collapse_10k_s": collapse_big,
    }


if __name__ == "__main__":
    for key, value in run().items():
        print(f"{key:34s} {value:.4f}")
