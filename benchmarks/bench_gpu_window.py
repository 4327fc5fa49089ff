"""On CUDA: training started from the real window vs a plain loop (issue 9's GPU figure).

Figures (CUDA only; without a CUDA device this module returns no figures):

``gpu_train_throughput_ratio``
    Samples per second of a run started with the real
    :class:`~workbench.ui.train.panel.TrainingPanel`'s Start (training process
    started ahead, live plots drawing) over a plain loop in a fresh Python
    process. Both: torchvision ``resnet18(num_classes=10)``, ``FAKE_SIZE``
    random 3x32x32 images held on the device, batch 256, bf16 autocast, Adam
    1e-3, ``EPOCHS`` epochs timed end to end (train + validation on the same
    split). The plain loop is what a careful engineer writes: data on the
    device, batches by a device ``randperm``, no warm-up epoch outside the
    clock (the window's clock also starts at its first step), the loss read every 50 steps (no
    host-device sync per step). Median of ``PAIRS`` interleaved pairs.
    Target >= 0.97.
``gpu_gui_latency_p99_ms``
    99th percentile of a 10 ms QTimer's real intervals on the GUI thread during
    the window runs, ms. Target <= 15 ms.
``gpu_samples_per_s_plain`` / ``gpu_samples_per_s_window``
    The medians of both sides, samples/s.
"""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")

PAIRS = 5
EPOCHS = 3
BATCH = 256
FAKE_SIZE = 40_000


def _config(run_dir: str):
    from workbench.core.train.config import DataConfig, TrainConfig

    data = DataConfig(dataset="fake", fake_shape=[3, 32, 32], fake_size=FAKE_SIZE, num_classes=10,
                      batch_size=BATCH)
    return TrainConfig(data=data, epochs=EPOCHS, device="cuda:0", lr=1e-3, amp=True, amp_dtype="bfloat16",
                       run_dir=run_dir, tensorboard=False)


def plain_loop() -> float:
    """The plain loop (see the module docstring); samples/s over train + validation."""
    import torch
    import torchvision

    from workbench.core.train.data.datasets import build_datasets

    train_ds, val_ds, _ = build_datasets(_config(tempfile.mkdtemp()).data)
    (xt, yt), (xv, yv) = [t.cuda() for t in train_ds.tensors], [t.cuda() for t in val_ds.tensors]
    torch.manual_seed(0)
    model = torchvision.models.resnet18(num_classes=10).cuda()
    opt = torch.optim.Adam(model.parameters(), 1e-3)
    loss_fn = torch.nn.CrossEntropyLoss()

    def epoch(n_epochs: int) -> float:
        torch.cuda.synchronize()
        t0, seen = time.perf_counter(), 0
        for _ in range(n_epochs):
            model.train()
            order = torch.randperm(len(xt), device="cuda")
            for i, start in enumerate(range(0, len(xt), BATCH)):
                idx = order[start:start + BATCH]
                with torch.autocast("cuda", torch.bfloat16):
                    loss = loss_fn(model(xt[idx]).float(), yt[idx])
                loss.backward()
                opt.step()
                opt.zero_grad(set_to_none=True)
                if i % 50 == 0:
                    loss.item()
                seen += len(idx)
            model.eval()
            with torch.no_grad(), torch.autocast("cuda", torch.bfloat16):
                correct = sum((model(xv[s:s + BATCH]).argmax(1) == yv[s:s + BATCH]).sum()
                              for s in range(0, len(xv), BATCH))
            float(correct)
        torch.cuda.synchronize()
        return seen / (time.perf_counter() - t0)

    return epoch(EPOCHS)  # no warm-up epoch: the window side's clock includes its first epoch too


def _plain_process() -> float:
    out = subprocess.run([sys.executable, "-m", "benchmarks.bench_gpu_window", "--plain"], capture_output=True,
                         text=True, cwd=Path(__file__).resolve().parent.parent, check=True)
    return float(out.stdout.strip().splitlines()[-1])


def _window_run(panel, run_dir: str) -> tuple[float, list[float]]:
    import torchvision

    from benchmarks.bench_training import run_with_gui_timer

    panel.session.set_model(torchvision.models.resnet18(num_classes=10), None, None, (1, 3, 32, 32))
    panel.settings.set_config(_config(run_dir))
    intervals, _ = run_with_gui_timer(panel)
    stats = panel.view.last_run_stats()
    panel.run.wait_for_training_process()
    return stats["samples"] / stats["time"], intervals


def run() -> dict[str, float]:
    """Run the measurements on CUDA; no figures without a CUDA device."""
    import numpy as np
    import torch

    if not torch.cuda.is_available():
        print("    no CUDA device: gpu_ window figures skipped", flush=True)
        return {}
    from PySide6.QtWidgets import QApplication, QMainWindow

    from workbench.core.train.launch.in_thread import reserve_cores_for_workers
    from workbench.ui.prompts import Prompts
    from workbench.ui.session import Session
    from workbench.core.gc_freeze import freeze_startup_objects
    from workbench.ui.threading import collect_garbage_on_gui_thread
    from workbench.ui.train.panel import TrainingPanel

    reserve_cores_for_workers()
    os.environ.setdefault("WORKBENCH_SETTINGS_DIR", tempfile.mkdtemp(prefix="workbench-bench-settings-"))
    os.environ["WORKBENCH_START_AHEAD"] = "1"
    app = QApplication.instance() or QApplication([])
    collect_garbage_on_gui_thread()
    win = QMainWindow()
    session = Session(win)
    panel = TrainingPanel(session, Prompts(win), win)
    win.setCentralWidget(panel)
    win.resize(1100, 800)
    win.show()
    app.processEvents()
    freeze_startup_objects()  # as ui.app.main does once its window is built
    ratios, plain, window, lat = [], [], [], []
    with tempfile.TemporaryDirectory() as tmp:
        _window_run(panel, os.path.join(tmp, "warm"))  # the first run warms the process started ahead
        for i in range(PAIRS):
            if i % 2 == 0:
                a = _plain_process()
                b, iv = _window_run(panel, os.path.join(tmp, f"r{i}"))
            else:
                b, iv = _window_run(panel, os.path.join(tmp, f"r{i}"))
                a = _plain_process()
            ratios.append(b / a)
            plain.append(a)
            window.append(b)
            lat.extend(iv)
            print(f"    gpu pair {i}: plain {a:,.0f}, window {b:,.0f} samples/s, ratio {b / a:.3f}, "
                  f"gui p99 {np.percentile(iv, 99):.1f} ms", flush=True)
    panel.shutdown(ask=False)
    win.close()
    return {
        "gpu_train_throughput_ratio": statistics.median(ratios),
        "gpu_train_throughput_ratio_min": min(ratios),
        "gpu_train_throughput_ratio_max": max(ratios),
        "gpu_samples_per_s_plain": statistics.median(plain),
        "gpu_samples_per_s_window": statistics.median(window),
        "gpu_gui_latency_p99_ms": float(np.percentile(lat, 99)),
    }


if __name__ == "__main__":
    if sys.argv[1:] == ["--plain"]:
        print(plain_loop(), flush=True)
    else:
        for k, v in run().items():
            print(f"{k:32s} {v:.4g}")
