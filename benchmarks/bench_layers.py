"""Every layer over time (issue 12): the cost of layer statistics, the heatmap redraw, the NaN trace.

Figures:

``probe_all_layers_throughput_ratio``
    torchvision ``resnet18(num_classes=10)`` on ``FAKE_SIZE`` fake 3x32x32
    images, CPU, batch 64, Adam 1e-3, one epoch: samples/s with a default
    :class:`~workbench.core.probe.callback.ProbeCallback` (layer statistics of
    every leaf module, grad norms, update ratios, adaptive cadence) over the
    same run without it; the core ``Trainer`` in this process, interleaved,
    median of ``PAIRS`` pairs. Target >= 0.97.
``probe_all_layers_measurements``
    Layer snapshots the probed runs produced (median).
``heatmap_redraw_ms``
    A :class:`~workbench.ui.probe.layer_heatmap_view.LayerHeatmapView` holding
    500 layers x 2,000 measurements: ``refresh()`` (order, matrix, setImage,
    ticks) plus a synchronous repaint of the plot's viewport; median of 15, ms.
    Target <= 20 ms.
``heatmap_history_mb``
    Memory of that history (its ``nbytes``), MB.
``nan_trace_s``
    :func:`~workbench.core.train.trainer.nan_trace.trace_nonfinite` on resnet18, batch
    64 of 3x224x224, CPU, with ``layer3.1.bn2``'s weight set to Inf; median of
    3, s (it runs once per failure).
"""

from __future__ import annotations

import os
import statistics
import tempfile
import time

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")

PAIRS = 3
FAKE_SIZE = 3200


def _run(probed: bool) -> tuple[float, int]:
    import torch
    import torchvision

    from workbench.core.probe.callback import ProbeCallback
    from workbench.core.train.config import DataConfig, TrainConfig
    from workbench.core.train.trainer.loop import Trainer

    torch.manual_seed(0)
    reports: list = []
    callbacks = [ProbeCallback(reports.extend)] if probed else []
    data = DataConfig(dataset="fake", fake_shape=[3, 32, 32], fake_size=FAKE_SIZE, batch_size=64)
    cfg = TrainConfig(data=data, epochs=1, lr=1e-3, run_dir=tempfile.mkdtemp(prefix="bench-layers-"),
                      tensorboard=False, checkpoint_every_epoch=False)
    trainer = Trainer(torchvision.models.resnet18(num_classes=10), cfg, callbacks)
    if trainer.fit() != "completed":
        raise RuntimeError(f"bench run ended: {trainer.error}")
    h = trainer.history[-1]
    return h["samples_per_s"], sum(r.layers is not None for r in reports)


def throughput() -> dict[str, float]:
    """Interleaved probed / plain pairs."""
    ratios, counts = [], []
    _run(False)  # warm-up: allocator, kernels
    for i in range(PAIRS):
        if i % 2 == 0:
            plain, _ = _run(False)
            probed, n = _run(True)
        else:
            probed, n = _run(True)
            plain, _ = _run(False)
        ratios.append(probed / plain)
        counts.append(n)
        print(f"    layers pair {i}: probed {probed:,.0f}, plain {plain:,.0f} samples/s, ratio {probed / plain:.3f}, "
              f"{n} layer snapshots", flush=True)
    return {"probe_all_layers_throughput_ratio": statistics.median(ratios),
            "probe_all_layers_throughput_ratio_min": min(ratios),
            "probe_all_layers_throughput_ratio_max": max(ratios),
            "probe_all_layers_measurements": float(statistics.median(counts))}


def heatmap_redraw() -> dict[str, float]:
    """500 layers x 2,000 measurements: refresh + repaint."""
    import numpy as np
    from PySide6.QtWidgets import QApplication

    from workbench.core.probe.layer_history import LayerHistory
    from workbench.core.probe.layer_stats import QUANTITIES, LayerSnapshot
    from workbench.ui.probe.layer_heatmap_view import LayerHeatmapView

    app = QApplication.instance() or QApplication([])
    names = tuple(f"block{i // 10}.layer{i % 10}" for i in range(500))
    types = tuple("Conv2d" for _ in names)
    history = LayerHistory(recent=1024, older=1024)
    rng = np.random.default_rng(0)
    for step in range(2000):
        history.add(LayerSnapshot(step, names, types, rng.random((500, len(QUANTITIES)), dtype=np.float32)))
    view = LayerHeatmapView(history)
    view.resize(900, 700)
    view.show()
    view.set_quantity("grad_norm")
    app.processEvents()
    times = []
    for _ in range(15):
        t = time.perf_counter()
        view.refresh()
        view.plot.viewport().repaint()
        times.append((time.perf_counter() - t) * 1e3)
    view.close()
    return {"heatmap_redraw_ms": statistics.median(times), "heatmap_history_mb": history.nbytes / 1e6,
            "heatmap_columns": float(len(history))}


def nan_trace() -> dict[str, float]:
    """Trace an Inf in layer3.1.bn2 of resnet18 (batch 64, 224x224, CPU)."""
    import torch
    import torchvision

    from workbench.core.train.trainer.nan_trace import trace_nonfinite

    torch.manual_seed(0)
    model = torchvision.models.resnet18(num_classes=10)
    with torch.no_grad():
        model.layer3[1].bn2.weight.fill_(float("inf"))
    x, y = torch.randn(64, 3, 224, 224), torch.randint(0, 10, (64,))
    times = []
    for _ in range(3):
        t = time.perf_counter()
        trace = trace_nonfinite(model, (x, y), lambda m, b: torch.nn.functional.cross_entropy(m(b[0]), b[1]), step=1)
        times.append(time.perf_counter() - t)
    assert trace.module == "layer3.1.bn2", trace
    return {"nan_trace_s": statistics.median(times)}


def run() -> dict[str, float]:
    """All figures of this module."""
    figures = heatmap_redraw()
    figures.update(nan_trace())
    figures.update(throughput())
    return figures


if __name__ == "__main__":
    for k, v in run().items():
        print(f"{k:40s} {v:.4g}")
