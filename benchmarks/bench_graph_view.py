"""Drawing the graph of a model in the Graph dock (issue 29), headless (``QT_QPA_PLATFORM=offscreen``).

- ``graph_pan_frame_ms``: one frame of panning (scroll 40 px, repaint the
  1280x800 viewport) over the ~10,000-operation graph of ``bench_graph.big_vit``
  fully expanded, at 100 % zoom (labels and edge shapes drawn); median of 40
  frames. Target <= 33 ms. ``graph_pan_frame_fit_ms``: the same with the whole
  graph fitted in view (labels hidden by the level of detail).
- ``graph_overlay_update_ms``: recolouring 500 module boxes (``GraphScene.set_colors``)
  and repainting the viewport; median of 30. Target <= 16 ms.
- ``graph_scene_build_10k_s``: building the scene's items for the 10k graph (reported).
"""

from __future__ import annotations

import statistics
import time

from benchmarks.bench_graph import LAYERS_10K, big_vit

FRAMES = 40


def _frames(view, n: int) -> float:
    bar = view.horizontalScrollBar()
    vbar = view.verticalScrollBar()
    times = []
    for i in range(n):
        t0 = time.perf_counter()
        bar.setValue(bar.value() + (40 if i % 2 == 0 else -40))
        vbar.setValue(vbar.value() + 40)
        view.viewport().repaint()
        times.append(time.perf_counter() - t0)
    return statistics.median(times) * 1e3


def run() -> dict[str, float]:
    """The figures above."""
    import torch
    from PySide6.QtGui import QColor
    from PySide6.QtWidgets import QApplication

    from workbench.core.graph import capture_graph
    from workbench.core.graph.layout import layout
    from workbench.ui.graph.graph_scene import GraphScene, GraphView

    app = QApplication.instance() or QApplication([])
    big = capture_graph(big_vit(), torch.zeros(1, 3, 224, 224, device="meta"))
    full = big.collapsed(big.module_paths())
    lay = layout(full)
    scene = GraphScene()
    view = GraphView(scene)
    view.resize(1280, 800)
    view.show()
    app.processEvents()
    t0 = time.perf_counter()
    scene.show_graph(full, lay, set())
    build = time.perf_counter() - t0
    view.resetTransform()
    view.centerOn(lay.width / 2, lay.height / 3)
    view.zoom_by(1.0)
    app.processEvents()
    pan = _frames(view, FRAMES)
    view.fit(scene.itemsBoundingRect())
    app.processEvents()
    pan_fit = _frames(view, FRAMES)

    opened = {"", "encoder", "encoder.layers", *{f"encoder.layers.encoder_layer_{i}" for i in range(100)}}
    boxes = big.collapsed(opened)
    scene.show_graph(boxes, layout(boxes), opened)
    view.fit(scene.itemsBoundingRect())
    app.processEvents()
    paths = sorted({n.module_path for n in boxes.nodes if n.op == "module"})[:500]
    assert len(paths) == 500, len(paths)
    times = []
    for i in range(30):
        colors = {p: QColor.fromHsvF((j * 0.618 + i * 0.1) % 1.0, 0.6, 0.9) for j, p in enumerate(paths)}
        t0 = time.perf_counter()
        scene.set_colors(colors)
        view.viewport().repaint()
        times.append(time.perf_counter() - t0)
    view.close()
    return {"graph_pan_frame_ms": pan, "graph_pan_frame_fit_ms": pan_fit,
            "graph_overlay_update_ms": statistics.median(times) * 1e3, "graph_scene_build_10k_s": build,
            "graph_view_10k_nodes": float(len(full.nodes)), "graph_view_layers": float(LAYERS_10K)}


if __name__ == "__main__":
    for k, v in run().items():
        print(f"{k}: {v:.4g}")
