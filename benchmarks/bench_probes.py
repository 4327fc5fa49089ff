"""Cost of live probes during training (issue 5).

Figures:

``probe_throughput_ratio``
    Training samples per second of the workbench ``Trainer`` (``DigitsCNN`` on the
    digits, CPU, batch 64, Adam) with a :class:`~workbench.core.probe.callback.ProbeCallback`
    probing 10 modules at the default cadence (activations, gradient norms and
    update ratios; the cadence adapts to a 2 % time budget, starting at every 10th
    step), divided by the same run without probes.
    Runs are interleaved in ABBA order (probed, plain, plain, probed, ...), each timed end to end
    (``fit()``: training + the per-epoch validation), and the median of ``PAIRS``
    ratios is reported. Target >= 0.95.

    Timing: torch runs with one intra-op thread and the time is the process's CPU
    time (``time.process_time``), because the benchmark machine may be shared:
    wall-clock ratios of one-second runs swung from 0.05 to 22 under a load
    average of 6 on 2 cores, while CPU time only counts the work this process did.
    ``probe_throughput_ratio_wall`` gives the wall-clock median as well.
``probe_throughput_ratio_every_step``
    The same with activations, gradient norms and update ratios on every step.
``probe_batch_resnet18_ms``
    One probe batch (eval, no_grad) of resnet18 on a (8, 3, 224, 224) random batch with
    ``layer1`` and ``layer4`` probed; median of 3, ms (for reference: the bare forward is in
    ``resnet18_forward_ms``).
"""

from __future__ import annotations

import os
import statistics
import tempfile
import time

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")

import torch  # noqa: E402

from workbench.core.model.demo import DigitsCNN  # noqa: E402
from workbench.core.probe.activations import leaf_modules, probe_batch  # noqa: E402
from workbench.core.probe.callback import ProbeCallback  # noqa: E402
from workbench.core.train.config import DataConfig, TrainConfig  # noqa: E402

PAIRS = 7
EPOCHS = 3
BATCH = 64


def _run(callbacks_factory, run_dir: str, seed: int) -> tuple[float, float]:
    """One ``fit()``; returns samples per CPU second and per wall-clock second over the whole fit."""
    from workbench.core.train.trainer.loop import Trainer

    torch.manual_seed(seed)
    model = DigitsCNN()
    cfg = TrainConfig(
        data=DataConfig(dataset="digits", batch_size=BATCH), epochs=EPOCHS, device="cpu",
        seed=seed, run_dir=run_dir, checkpoint_every_epoch=False,
    )
    callbacks = callbacks_factory(model)
    trainer = Trainer(model, cfg, callbacks)
    c0, t0 = time.process_time(), time.perf_counter()
    reason = trainer.fit()
    cpu, wall = time.process_time() - c0, time.perf_counter() - t0
    if reason != "completed":
        raise RuntimeError(f"benchmark run ended with {reason!r}")
    return trainer.samples / cpu, trainer.samples / wall


def _probed(every: int | None):
    def factory(model):
        names = leaf_modules(model)[:10]
        assert len(names) == 10
        reports = []
        return [ProbeCallback(reports.extend, every=every, probed=names)]

    return factory


def _ratio(every: int | None, tmp: str) -> tuple[float, float]:
    """Median (CPU-time ratio, wall-clock ratio) over ``PAIRS`` interleaved pairs."""
    cpu, wall = [], []
    _run(lambda m: [], os.path.join(tmp, "warm"), 0)  # imports, allocator, data cache
    for i in range(PAIRS):
        # ABBA order: whichever side runs first in a pair (allocator, caches, clock) alternates
        sides = [("p", _probed(every)), ("n", lambda m: [])]
        got = {}
        for tag, factory in (sides if i % 2 == 0 else sides[::-1]):
            got[tag] = _run(factory, os.path.join(tmp, f"{tag}{every or 'auto'}_{i}"), i)
        probed, plain = got["p"], got["n"]
        cpu.append(probed[0] / plain[0])
        wall.append(probed[1] / plain[1])
    return statistics.median(cpu), statistics.median(wall)


def _resnet_probe_batch_ms() -> tuple[float, float]:
    import torchvision

    model = torchvision.models.resnet18(weights=None)
    x = torch.randn(8, 3, 224, 224)
    probe, bare = [], []
    for _ in range(3):
        t0 = time.perf_counter()
        probe_batch(model, x, ["layer1", "layer4"])
        probe.append((time.perf_counter() - t0) * 1000)
        t0 = time.perf_counter()
        with torch.no_grad():
            model.eval()(x)
        bare.append((time.perf_counter() - t0) * 1000)
    return statistics.median(probe), statistics.median(bare)


def run() -> dict[str, float]:
    """Figures of this benchmark (see the module docstring)."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        with tempfile.TemporaryDirectory() as tmp:
            default, default_wall = _ratio(None, tmp)
            every_step, every_step_wall = _ratio(1, tmp)
    finally:
        torch.set_num_threads(threads)
    probe_ms, bare_ms = _resnet_probe_batch_ms()
    return {
        "probe_throughput_ratio": default,
        "probe_throughput_ratio_every_step": every_step,
        "probe_throughput_ratio_wall": default_wall,
        "probe_throughput_ratio_every_step_wall": every_step_wall,
        "probe_batch_resnet18_ms": probe_ms,
        "resnet18_forward_ms": bare_ms,
    }


if __name__ == "__main__":
    for k, v in run().items():
        print(f"{k:40s} {v:.4g}")
