"""Training through the Qt worker vs a plain PyTorch loop; GUI latency; 1M-point redraw.

Figures (see issue 4):

``train_throughput_ratio``
    Training samples per second of the workbench ``Trainer`` driven by the real
    :class:`~workbench.ui.train.worker.TrainingWorker` on a QThread, with the live
    loss plot of a shown :class:`~workbench.ui.train.panel.TrainingPanel`
    drawing every metrics batch, divided by the same for a plain loop written the
    way the PyTorch tutorial writes it (``DataLoader`` over a ``TensorDataset``,
    ``loss.item()`` each step, a ``torch.no_grad()`` validation loop each epoch).
    Same model (``DigitsCNN``), same digits train/val split and normalization,
    device ``cpu``, batch size 64, Adam 1e-3, same epochs. Both sides are timed
    end to end (train + validation) and run interleaved; median ratio of
    ``PAIRS`` pairs. Target >= 0.90. Each side runs as a user runs it: the plain
    loop in a fresh Python process with torch's defaults (a script), the Qt run in
    this process set up as ``workbench`` sets itself up (the GUI thread computes
    single-threaded, the training thread gets every core: ``core.train.threads``).
``gui_latency_p99_ms``
    During the Qt runs, a 10 ms QTimer on the GUI thread records its real
    intervals; the 99th percentile over all pairs, ms. Target <= 20 ms.
``plot_redraw_1m_points_ms``
    ``setData`` of the raw and EMA loss curves (1,000,000 points each) plus a
    synchronous ``viewport().repaint()`` of the loss plot (``PlotWidget.repaint()``
    alone does not paint the QGraphicsView's viewport); median of 15, ms. Target <= 20 ms.
"""

from __future__ import annotations

import os
import statistics
import time

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")

import numpy as np  # noqa: E402
import torch  # noqa: E402
from torch import nn  # noqa: E402
from torch.utils.data import DataLoader, TensorDataset  # noqa: E402

from workbench.core.model.demo import DigitsCNN  # noqa: E402
from workbench.core.train.config import DataConfig  # noqa: E402

PAIRS = 9
EPOCHS = 3
BATCH = 64


def _digits_tensors():
    """The same train / val tensors the workbench data module builds for ``digits``."""
    from workbench.core.train.data import build_datasets

    train_ds, val_ds, _ = build_datasets(DataConfig(dataset="digits", batch_size=BATCH))
    return train_ds.tensors, val_ds.tensors


def plain_loop(epochs: int = EPOCHS, seed: int = 0) -> float:
    """The PyTorch-tutorial loop; returns training samples per second (train + val time)."""
    (xt, yt), (xv, yv) = _digits_tensors()
    torch.manual_seed(seed)
    train_loader = DataLoader(TensorDataset(xt, yt), batch_size=BATCH, shuffle=True)
    test_loader = DataLoader(TensorDataset(xv, yv), batch_size=BATCH)
    model = DigitsCNN()
    loss_fn = nn.CrossEntropyLoss()
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
    t0 = time.perf_counter()
    seen = 0
    for _ in range(epochs):
        model.train()
        for batch, (X, y) in enumerate(train_loader):
            pred = model(X)
            loss = loss_fn(pred, y)
            loss.backward()
            optimizer.step()
            optimizer.zero_grad()
            running = loss.item()  # the tutorial logs loss.item() each step
            seen += len(X)
        model.eval()
        test_loss, correct = 0.0, 0
        with torch.no_grad():
            for X, y in test_loader:
                pred = model(X)
                test_loss += loss_fn(pred, y).item()
                correct += (pred.argmax(1) == y).type(torch.float).sum().item()
    del running
    return seen / (time.perf_counter() - t0)


def _make_host():
    """A window holding the real Training panel on a Session (the panel never sees the window)."""
    from PySide6.QtWidgets import QMainWindow

    from workbench.ui.prompts import Prompts
    from workbench.ui.session import Session
    from workbench.ui.train.panel import TrainingPanel

    win = QMainWindow()
    session = Session(win)
    session.set_model(DigitsCNN(), None, None, (1, 1, 8, 8))
    panel = TrainingPanel(session, Prompts(win), win)
    win.setCentralWidget(panel)
    win.resize(1100, 800)
    win.show()
    return win, panel


def qt_run(app, panel, run_dir: str, epochs: int = EPOCHS, seed: int = 0) -> tuple[float, list[float]]:
    """One run started with the panel's own Start path (real worker, QThread, plots drawing).

    Returns (training samples per second, GUI timer intervals in ms). The time is the
    trainer's own clock from the start of ``fit()``'s loop to the last epoch's end
    (train + validation + per-epoch checkpoints), so data building is excluded on both sides.
    """
    from PySide6.QtCore import QElapsedTimer, QEventLoop, QTimer

    panel.session.set_model(DigitsCNN(), None, None, (1, 1, 8, 8))
    s = panel.settings
    s.dataset_combo.setCurrentIndex(s.dataset_combo.findData("digits"))
    s.device_combo.setCurrentIndex(max(0, s.device_combo.findData("cpu")))
    s.epochs_spin.setValue(epochs)
    s.batch_spin.setValue(BATCH)
    s.seed_spin.setValue(seed)
    s.run_dir_edit.setText(run_dir)

    intervals: list[float] = []
    clock = QElapsedTimer()
    timer = QTimer()
    timer.setInterval(10)
    timer.setTimerType(timer.timerType().PreciseTimer)

    def tick():
        intervals.append(clock.nsecsElapsed() / 1e6)
        clock.restart()

    timer.timeout.connect(tick)
    loop = QEventLoop()

    def on_running(running: bool) -> None:
        if not running:
            loop.quit()

    panel.runningChanged.connect(on_running)
    clock.start()
    timer.start()
    if not panel.start():
        raise RuntimeError("the panel did not start")
    loop.exec()  # a real GUI event loop while the run goes on
    timer.stop()
    panel.runningChanged.disconnect(on_running)
    if panel.last_reason() != "completed":
        raise RuntimeError(f"benchmark run ended with {panel.last_reason()}")
    trainer = panel._last_trainer
    hist = trainer.history
    fit_time = hist[-1]["time"]
    return trainer.samples / fit_time, intervals[1:]


def redraw_1m(panel, repeats: int = 15) -> float:
    """Median ms of setData + repaint() of the loss plot holding 1,000,000 points."""
    plots = panel.plots
    plots.clear()
    n = 1_000_000
    step = np.arange(n, dtype=np.float64)
    rng = np.random.default_rng(0)
    plots.add_steps(step, 2.0 * np.exp(-step / 3e5) + 0.1 * rng.random(n), lr=np.full(n, 1e-3))
    plots.refresh(force=True)
    plots.loss_plot.viewport().repaint()
    times = []
    for _ in range(repeats):
        t = time.perf_counter()
        plots.loss_curve.setData(plots.steps["step"], plots.steps["loss"])
        plots.ema_curve.setData(plots.steps["step"], plots.steps["ema"])
        plots.loss_plot.viewport().repaint()  # the QGraphicsView's viewport is where the plot paints
        times.append((time.perf_counter() - t) * 1e3)
    return statistics.median(times)


def plain_loop_process(epochs: int = EPOCHS) -> float:
    """:func:`plain_loop` in a fresh Python process (after a 1-epoch warm-up); samples/s."""
    import subprocess
    import sys
    from pathlib import Path

    code = (
        "from benchmarks.bench_training import plain_loop\n"
        f"plain_loop(1)\nprint(plain_loop({epochs}))\n"
    )
    root = Path(__file__).resolve().parents[1]
    out = subprocess.run([sys.executable, "-c", code], cwd=root, capture_output=True, text=True, check=True)
    return float(out.stdout.strip().splitlines()[-1])


def run() -> dict[str, float]:
    """Run the three measurements; see the module docstring."""
    import tempfile

    from PySide6.QtWidgets import QApplication

    from workbench.core.train.threads import reserve_cores_for_workers

    reserve_cores_for_workers()  # as ui.app.main does, before any computation on this thread
    # the panel remembers the settings of each run started: keep the user's own settings untouched
    os.environ.setdefault("WORKBENCH_SETTINGS_DIR", tempfile.mkdtemp(prefix="workbench-bench-settings-"))

    app = QApplication.instance() or QApplication([])
    win, panel = _make_host()
    app.processEvents()
    ratios, lat = [], []
    with tempfile.TemporaryDirectory() as tmp:
        qt_run(app, panel, os.path.join(tmp, "warm"), epochs=1)
        for i in range(PAIRS):
            if i % 2 == 0:
                a = plain_loop_process()
                b, iv = qt_run(app, panel, os.path.join(tmp, f"r{i}"))
            else:
                b, iv = qt_run(app, panel, os.path.join(tmp, f"r{i}"))
                a = plain_loop_process()
            ratios.append(b / a)
            lat.extend(iv)
            print(f"    pair {i}: plain {a:,.0f} samples/s, qt {b:,.0f} samples/s, ratio {b / a:.3f}, "
                  f"gui p99 {np.percentile(iv, 99):.1f} ms", flush=True)
    redraw = redraw_1m(panel)
    win.close()
    return {
        "train_throughput_ratio": statistics.median(ratios),
        "gui_latency_p99_ms": float(np.percentile(lat, 99)),
        "plot_redraw_1m_points_ms": redraw,
    }


if __name__ == "__main__":
    for k, v in run().items():
        print(f"{k:32s} {v:.4g}")
