"""Checkpoint figures: opening a 512 MB checkpoint, ranking all of torchvision.

``open_checkpoint_512mb_s``: a vgg11 state_dict (133 M float32 parameters, 531 MB,
about 506 MiB) from file to a loaded module with its summary tree, warm page
cache; median of 5. Target <= 0.5 s.

``detect_arch_s``: ranking every torchvision architecture against a resnet18
state_dict in a process that has not built any candidate yet (the per-process
signature cache is cleared before each repeat); median of 3. Target <= 5 s.
``detect_arch_warm_s`` is the same ranking with the cache filled.
"""

from __future__ import annotations

import statistics
import tempfile
import time
from pathlib import Path

import torch

from workbench.core.model.architectures import build_module, clear_signature_cache, detect_architecture, load_model
from workbench.core.model.checkpoint import read_checkpoint


def _median_time(fn, repeats: int) -> float:
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def _write_vgg11(path: Path) -> int:
    """Save a vgg11 state_dict of random float32 tensors; return its size in bytes."""
    gen = torch.Generator().manual_seed(0)
    meta = build_module("vgg11", device="meta").state_dict()
    sd = {k: torch.randn(v.shape, generator=gen) if v.is_floating_point() else torch.zeros(v.shape, dtype=v.dtype)
          for k, v in meta.items()}
    torch.save(sd, path)
    return path.stat().st_size


def _open_once(path: Path) -> None:
    ckpt = read_checkpoint(path)
    model, report = load_model(ckpt, "vgg11")
    assert report.ok
    try:
        from workbench.core.model.tree import build_summary
    except ImportError:  # summary.py belongs to another part of the issue
        return
    build_summary(model)


def bench_open(repeats: int = 5) -> float:
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "vgg11.pt"
        size = _write_vgg11(path)
        assert size > 500 * 2**20, size
        path.read_bytes()  # warm the page cache
        _open_once(path)
        return _median_time(lambda: _open_once(path), repeats)


def bench_detect(repeats: int = 3) -> tuple[float, float]:
    torch.manual_seed(0)
    sd = build_module("resnet18").state_dict()

    def cold() -> None:
        clear_signature_cache()
        assert detect_architecture(sd)[0].spec.name == "resnet18"

    cold_s = _median_time(cold, repeats)
    warm_s = _median_time(lambda: detect_architecture(sd), repeats)
    return cold_s, warm_s


def run() -> dict[str, float]:
    """Return ``{"open_checkpoint_512mb_s", "detect_arch_s", "detect_arch_warm_s"}`` in seconds."""
    open_s = bench_open()
    cold_s, warm_s = bench_detect()
    return {"open_checkpoint_512mb_s": open_s, "detect_arch_s": cold_s, "detect_arch_warm_s": warm_s}
