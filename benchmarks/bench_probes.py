"""Cost of live probes during training (issue 5).

Figures:

``probe_throughput_ratio``
    Training samples per second of the workbench ``Trainer`` (``DigitsCNN`` on the
    digits, CPU, batch 64, Adam) with a :class:`~workbench.core.probe_callback.ProbeCallback`
    probing 10 modules at the default cadence (activations, gradient norms and
    update ratios every 10th step), divided by the same run without probes.
    Runs are interleaved (probed, plain, probed, plain, ...), each timed end to end
    (``fit()``: training + the per-epoch validation), and the median of ``PAIRS``
    ratios is reported. Target >= 0.95.
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

from workbench.core.config import DataConfig, TrainConfig  # noqa: E402
from workbench.core.demo_model import DigitsCNN  # noqa: E402
from workbench.core.probe_callback import ProbeCallback  # noqa: E402
from workbench.core.probes import leaf_modules, probe_batch  # noqa: E402

PAIRS = 5
EPOCHS = 4
BATCH = 64


def _run(callbacks_factory, run_dir: str, seed: int) -> float:
    """One ``fit()``; returns training samples per second over the whole fit."""
    from workbench.core.training import Trainer

    torch.manual_seed(seed)
    model = DigitsCNN()
    cfg = TrainConfig(
        data=DataConfig(dataset="digits", batch_size=BATCH), epochs=EPOCHS, device="cpu",
        seed=seed, run_dir=run_dir, checkpoint_every_epoch=False,
    )
    callbacks = callbacks_factory(model)
    trainer = Trainer(model, cfg, callbacks)
    t0 = time.perf_counter()
    reason = trainer.fit()
    elapsed = time.perf_counter() - t0
    if reason != "completed":
        raise RuntimeError(f"benchmark run ended with {reason!r}")
    return trainer.samples / elapsed


def _probed(every: int):
    def factory(model):
        names = leaf_modules(model)[:10]
        assert len(names) == 10
        reports = []
        return [ProbeCallback(reports.extend, every=every, grad_every=every, probed=names)]

    return factory


def _ratio(every: int, tmp: str) -> float:
    ratios = []
    _run(lambda m: [], os.path.join(tmp, "warm"), 0)  # imports, allocator, data cache
    for i in range(PAIRS):
        probed = _run(_probed(every), os.path.join(tmp, f"p{every}_{i}"), i)
        plain = _run(lambda m: [], os.path.join(tmp, f"n{every}_{i}"), i)
        ratios.append(probed / plain)
    return statistics.median(ratios)


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
    with tempfile.TemporaryDirectory() as tmp:
        default = _ratio(10, tmp)
        every_step = _ratio(1, tmp)
    probe_ms, bare_ms = _resnet_probe_batch_ms()
    return {
        "probe_throughput_ratio": default,
        "probe_throughput_ratio_every_step": every_step,
        "probe_batch_resnet18_ms": probe_ms,
        "resnet18_forward_ms": bare_ms,
    }


if __name__ == "__main__":
    for k, v in run().items():
        print(f"{k:40s} {v:.4g}")
